"""What each policy-gradient option changes on the default task, and what it costs: GRPO's token-level loss (`dapo`)
against the per-prompt normalisation (`prompt_mean`), GSPO's sequence-level ratio, CISPO's clipped importance
weight, the entropy bonus and training on the top 20% of tokens by entropy, over seeds, on the warm-started default
policy.

Every configuration runs with ``objective.params.num_iterations=2`` (two optimiser steps per rollout): with one, the
policy that trains is the one that sampled, every ratio is 1, and GSPO, CISPO and the PPO clip all give the same
gradient as plain GRPO, so there would be nothing to compare. Prints per run the held-out correctness (greedy,
before and after training, `heldout_every=10`), the mean entropy of the first and last 10% of steps and the median
seconds a step (`time/step`); then a table per configuration (medians over seeds) for benchmarks/README.md. Usage:

    python benchmarks/objectives.py [--seeds 1 2 3] [--steps 60] [--configs dapo prompt_mean ...] [-- overrides]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from default_learning import heldout_curve  # noqa: E402 - a sibling script, not a package

PG = "objective.params."
CONFIGS: dict[str, list[str]] = {
    "dapo": [f"{PG}loss_type=dapo"],
    "prompt_mean": [f"{PG}loss_type=prompt_mean"],
    # GSPO's paper clips the sequence ratio at 3e-4 / 4e-4 (TRL's GSPO recipe), with the per-sequence mean loss
    "gspo": [f"{PG}loss_type=grpo", f"{PG}importance_sampling_level=sequence", f"{PG}epsilon=3e-4",
             f"{PG}epsilon_high=4e-4"],
    # MiniMax-M1 caps the weight at 1 + epsilon_high; TRL's CISPO recipe epsilon_high=5.0 is 4.0 here
    "cispo": [f"{PG}loss_type=cispo", f"{PG}epsilon_high=4.0"],
    "dapo+entropy": [f"{PG}loss_type=dapo", f"{PG}entropy_coef=0.01"],
    # the 80/20 paper's top 20% of tokens by entropy
    "dapo+top20%": [f"{PG}loss_type=dapo", f"{PG}top_entropy_quantile=0.2"],
}


@dataclass
class Result:
    config: str
    seed: int
    held_start: float
    held_end: float
    entropy_first: float
    entropy_last: float
    step_seconds: float
    wall_seconds: float

    @property
    def held_change(self) -> float:
        return self.held_end - self.held_start


def run(config: str, seed: int, steps: int, root: Path, extra: list[str]) -> Result:
    run_dir = root / f"{config}-seed{seed}"
    cmd = ["rlkit", "fit", "logger=csv", f"seed={seed}", f"trainer.max_steps={steps}", f"hydra.run.dir={run_dir}",
           "heldout_every=10", f"{PG}num_iterations=2", *CONFIGS[config], *extra]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    wall = time.monotonic() - started
    (metrics,) = run_dir.glob("csv/version_0/metrics.csv")
    with metrics.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("entropy")]
    entropy = [float(r["entropy"]) for r in rows]
    k = max(1, len(entropy) // 10)
    curve = heldout_curve(run_dir)
    result = Result(config, seed, curve[0][1], curve[-1][1], statistics.mean(entropy[:k]),
                    statistics.mean(entropy[-k:]), statistics.median(float(r["time/step"]) for r in rows), wall)
    print(f"{config:>13} seed {seed}: held-out correctness {result.held_start:.3f} -> {result.held_end:.3f} "
          f"({result.held_change:+.3f})  entropy {result.entropy_first:.3f} -> {result.entropy_last:.3f}  "
          f"{result.step_seconds:.2f} s/step  {wall:.0f} s", flush=True)
    return result


def table(results: list[Result], configs: list[str]) -> str:
    lines = ["| configuration | held-out correctness, start → end (median change; per seed) | entropy, first → last "
             "10% of steps (median) | s/step (median) |", "|---|---|---|--:|"]
    for config in configs:
        mine = [r for r in results if r.config == config]
        changes = ", ".join(f"{r.held_change:+.3f}" for r in mine)
        lines.append(
            f"| {config} | {statistics.median(r.held_start for r in mine):.3f} → "
            f"{statistics.median(r.held_end for r in mine):.3f} "
            f"({statistics.median(r.held_change for r in mine):+.3f}; {changes}) | "
            f"{statistics.median(r.entropy_first for r in mine):.3f} → "
            f"{statistics.median(r.entropy_last for r in mine):.3f} | "
            f"{statistics.median(r.step_seconds for r in mine):.2f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("overrides", nargs="*", help="extra `rlkit fit` overrides")
    args = parser.parse_args()
    results: list[Result] = []
    with tempfile.TemporaryDirectory() as tmp:
        for seed in args.seeds:  # configurations alternate within a seed, so a slow spell of the machine hits all
            results += [run(c, seed, args.steps, Path(tmp), args.overrides) for c in args.configs]
    print()
    print(table(results, args.configs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
