"""Does the default run learn? Runs `rlkit fit` over seeds, and a control with learning rate 0.

Prints, per run, the mean training reward over the first and last 10% of steps and the gain, and the held-out
correctness (greedy, before and after training) with its change; then the medians of the learning runs and of the
controls. Usage:

    python benchmarks/default_learning.py [--seeds 1 2 3] [--steps 60] [-- objective=group_dpo ...]
    python benchmarks/default_learning.py -- experiment=warm_start      # RL from the warm-started tiny policy
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def heldout_change(run_dir: Path, dimension: str = "correctness") -> tuple[float, float]:
    """Held-out ``dimension`` before and after training, from the run's metrics.jsonl."""
    rows = [json.loads(line)["metrics"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    held = [r[f"heldout/{dimension}"] for r in rows if f"heldout/{dimension}" in r]
    return held[0], held[-1]


def run(seed: int, steps: int, lr: float | None, root: Path, extra: list[str]) -> tuple[float, float]:
    run_dir = root / f"seed{seed}-lr{lr}"
    cmd = ["rlkit", "fit", "logger=csv", f"seed={seed}", f"trainer.max_steps={steps}", f"hydra.run.dir={run_dir}",
           *extra]
    if lr is not None:
        cmd.append(f"optim.lr={lr}")
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    (metrics,) = run_dir.glob("csv/version_0/metrics.csv")
    with metrics.open() as fh:
        rewards = [float(r["reward/mean"]) for r in csv.DictReader(fh) if r.get("reward/mean")]
    k = max(1, len(rewards) // 10)
    first, last = statistics.mean(rewards[:k]), statistics.mean(rewards[-k:])
    label = "control lr=0" if lr == 0 else "default"
    start, end = heldout_change(run_dir)
    print(f"{label:>13} seed {seed}: first 10% {first:.3f}  last 10% {last:.3f}  gain {last - first:+.3f}  "
          f"held-out correctness {start:.3f} -> {end:.3f} ({end - start:+.3f})", flush=True)
    return last - first, end - start


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("overrides", nargs="*", help="extra `rlkit fit` overrides, e.g. objective=group_dpo")
    args = parser.parse_args()
    if args.overrides:
        print(f"overrides: {' '.join(args.overrides)}")
    with tempfile.TemporaryDirectory() as tmp:
        learning = [run(s, args.steps, None, Path(tmp), args.overrides) for s in args.seeds]
        controls = [run(s, args.steps, 0.0, Path(tmp), args.overrides) for s in args.seeds]
    gains, held = [g for g, _ in learning], [h for _, h in learning]
    control_gains, control_held = [g for g, _ in controls], [h for _, h in controls]
    print(f"median gain, default:      {statistics.median(gains):+.3f}  (target >= 0.2)")
    print(f"median gain, control lr=0: {statistics.median(control_gains):+.3f}  (target < 0.05)")
    print(f"median held-out correctness change, default:      {statistics.median(held):+.3f}")
    print(f"median held-out correctness change, control lr=0: {statistics.median(control_held):+.3f}")
    return 0 if statistics.median(gains) >= 0.2 and statistics.median(control_gains) < 0.05 else 1


if __name__ == "__main__":
    sys.exit(main())
