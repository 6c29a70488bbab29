"""Does the tiny policy learn to use a tool? Runs `rlkit fit experiment=calculator` (multi-turn episodes with a
calculator tool, two-digit products the policy cannot work out alone) over seeds, and a control with learning rate 0.

Prints, per run: the training episodes' tool-call validity (`rewards/tool_use/mean`: a call that ran without an
error) and correctness over the first and last 10% of steps, the tool error rate (`episode/tool_error_rate`), the
held-out (greedy) tool use and correctness before and after, and the wall time; then a markdown table and the
medians. Exits 0 when the learning runs' median training tool-call validity and correctness both rise, their median
held-out correctness rises, and the control's held-out changes stay under 0.02 in size (issue 22's benchmark; the
held-out tool use of the default warm start is already 1.000 greedy, so it cannot rise). Usage:

    python benchmarks/tool_learning.py [--seeds 1 2 3] [--steps 150] [-- advantage=turn_return ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CONTROL_DRIFT_LIMIT = 0.02


@dataclass
class Run:
    label: str
    seed: int
    train: dict[str, tuple[float, float]]  # metric -> (first 10%, last 10%)
    held: dict[str, tuple[float, float]]   # dimension -> (start, end)
    seconds: float

    def change(self, dimension: str) -> float:
        start, end = self.held[dimension]
        return end - start


TRAIN_METRICS = ("rewards/tool_use/mean", "rewards/correctness/mean", "episode/tool_error_rate", "episode/turns")


def read_run(run_dir: Path) -> tuple[dict[str, tuple[float, float]], dict[str, tuple[float, float]]]:
    rows = [json.loads(line)["metrics"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "reward/mean" in r]
    k = max(1, len(steps) // 10)
    train = {}
    for name in TRAIN_METRICS:
        values = [r.get(name, 0.0) for r in steps]
        train[name] = (statistics.mean(values[:k]), statistics.mean(values[-k:]))
    held = {}
    for dim in ("tool_use", "correctness"):
        values = [r[f"heldout/{dim}"] for r in rows if f"heldout/{dim}" in r]
        held[dim] = (values[0], values[-1])
    return train, held


def run(seed: int, steps: int, lr: float | None, root: Path, extra: list[str]) -> Run:
    run_dir = root / f"seed{seed}-lr{lr}"
    cmd = ["rlkit", "fit", "experiment=calculator", "logger=none", f"seed={seed}", f"trainer.max_steps={steps}",
           f"hydra.run.dir={run_dir}", *extra]
    if lr is not None:
        cmd.append(f"optim.lr={lr}")
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    seconds = time.monotonic() - started
    train, held = read_run(run_dir)
    result = Run("control lr=0" if lr == 0 else "RL", seed, train, held, seconds)
    print(f"{result.label:>13} seed {seed}: tool use {train['rewards/tool_use/mean'][0]:.3f} -> "
          f"{train['rewards/tool_use/mean'][1]:.3f}, correctness {train['rewards/correctness/mean'][0]:.3f} -> "
          f"{train['rewards/correctness/mean'][1]:.3f}, tool errors {train['episode/tool_error_rate'][0]:.3f} -> "
          f"{train['episode/tool_error_rate'][1]:.3f} (training, first -> last 10%); held-out tool use "
          f"{held['tool_use'][0]:.3f} -> {held['tool_use'][1]:.3f}, correctness {held['correctness'][0]:.3f} -> "
          f"{held['correctness'][1]:.3f}; {seconds:.0f} s", flush=True)
    return result


def table(runs: list[Run]) -> str:
    lines = ["| run | seed | training tool use | training correctness | tool error rate | held-out tool use | "
             "held-out correctness | wall time |", "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        t, h = r.train, r.held
        lines.append(
            f"| {r.label} | {r.seed} | {t['rewards/tool_use/mean'][0]:.3f} → {t['rewards/tool_use/mean'][1]:.3f} | "
            f"{t['rewards/correctness/mean'][0]:.3f} → {t['rewards/correctness/mean'][1]:.3f} | "
            f"{t['episode/tool_error_rate'][0]:.3f} → {t['episode/tool_error_rate'][1]:.3f} | "
            f"{h['tool_use'][0]:.3f} → {h['tool_use'][1]:.3f} ({r.change('tool_use'):+.3f}) | "
            f"{h['correctness'][0]:.3f} → {h['correctness'][1]:.3f} ({r.change('correctness'):+.3f}) | "
            f"{r.seconds:.0f} s |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("overrides", nargs="*", help="extra `rlkit fit` overrides, e.g. advantage=turn_return")
    args = parser.parse_args()
    if args.overrides:
        print(f"overrides: {' '.join(args.overrides)}")
    with tempfile.TemporaryDirectory() as tmp:
        learning = [run(s, args.steps, None, Path(tmp), args.overrides) for s in args.seeds]
        controls = [run(s, args.steps, 0.0, Path(tmp), args.overrides) for s in args.seeds]
    print()
    print(table(learning + controls))
    print()
    ok = True
    for dim in ("tool_use", "correctness"):
        rl = statistics.median(r.change(dim) for r in learning)
        control = statistics.median(r.change(dim) for r in controls)
        print(f"median held-out {dim} change, RL: {rl:+.3f}, control: {control:+.3f}")
        ok &= abs(control) < CONTROL_DRIFT_LIMIT and (rl > 0 or dim == "tool_use")
    for name in ("rewards/tool_use/mean", "rewards/correctness/mean"):
        rl = statistics.median(r.train[name][1] - r.train[name][0] for r in learning)
        control = statistics.median(r.train[name][1] - r.train[name][0] for r in controls)
        print(f"median training {name} gain (last - first 10%), RL: {rl:+.3f}, control: {control:+.3f}")
        ok &= rl > 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
