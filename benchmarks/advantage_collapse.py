"""Advantage collapse: GRPO on a summed reward vs GDPO's per-dimension normalisation vs rank advantages vs
group preference pairs (objective=group_dpo).

The task: the default arithmetic prompts scored by a two-dimension rubric, one easy binary reward that the
tiny policy saturates within a few steps (a short answer) and one hard binary reward (the answer is a bare
number and nothing else). Each method trains on the same seeds with the same sample budget. Prints, per
method, medians over seeds of: the final mean of each reward (last 10% of steps), the first step at which
the hard reward's 5-step moving average reaches 0.5, the share of zero-advantage groups, and the number
of distinct advantage values per group. Usage:

    python benchmarks/advantage_collapse.py [--seeds 1 2 3] [--steps 80]
        [--methods grpo gdpo rank reinforce_pp pass_at_k opo group_dpo]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

RUBRIC = """\
name: collapse-demo
version: "1"
dimensions:
  - name: short
    description: Easy; saturates quickly.
    type: binary
    weight: 1.0
    checks: [{type: length, max: 12, unit: chars}]
  - name: bare_number
    description: Hard; the answer is a number and nothing else.
    type: binary
    weight: 1.0
    checks: [{type: regex, pattern: '^\\s*-?\\d+\\s*$'}]
"""


def run(method: str, seed: int, steps: int, root: Path, rubric: Path) -> dict[str, float]:
    run_dir = root / f"{method}-{seed}"
    choice = "objective=group_dpo" if method == "group_dpo" else f"advantage={method}"
    # model=tiny_random: the figures recorded here were measured from random weights
    cmd = [sys.executable, "-m", "rlkit", "fit", "logger=csv", "model=tiny_random", f"seed={seed}",
           f"trainer.max_steps={steps}", choice, f"rubric.path={rubric}", "log_samples.every=0",
           f"hydra.run.dir={run_dir}"]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{method} seed {seed} failed:\n{done.stderr[-3000:]}")
    (metrics,) = run_dir.glob("csv/version_0/metrics.csv")
    with metrics.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("reward/mean")]
    tail = rows[-max(1, len(rows) // 10):]
    hard = [float(r["rewards/bare_number/mean"]) for r in rows]
    reached = next((i + 1 for i in range(len(hard)) if i >= 4 and statistics.mean(hard[i - 4:i + 1]) >= 0.5), None)
    def mean_of(key: str) -> float:  # the preference objective has pairs, not advantages
        values = [float(r[key]) for r in rows if r.get(key)]
        return statistics.mean(values) if values else float("nan")

    return {
        "short": statistics.mean(float(r["rewards/short/mean"]) for r in tail),
        "bare_number": statistics.mean(float(r["rewards/bare_number/mean"]) for r in tail),
        "reached": float("inf") if reached is None else float(reached),
        "zero_adv_groups": mean_of("advantages/frac_zero_groups"),
        "distinct_adv": mean_of("advantages/distinct_per_group"),
        "pairs": mean_of("pairs/used"),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=80)
    parser.add_argument("--methods", nargs="+",
                        default=["grpo", "gdpo", "rank", "reinforce_pp", "pass_at_k", "opo", "group_dpo"])
    args = parser.parse_args()
    results: dict[str, list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rubric = Path(tmp) / "collapse.yaml"
        rubric.write_text(RUBRIC)
        for method in args.methods:
            results[method] = [run(method, seed, args.steps, Path(tmp), rubric) for seed in args.seeds]
            print(f"done: {method}", file=sys.stderr, flush=True)
    print(f"{len(args.seeds)} seeds × {args.steps} steps, batch 8 prompts × 8 completions; medians over seeds")
    header = f"{'method':<8}{'short (easy)':>14}{'bare_number':>13}{'steps to 0.5':>14}{'zero-adv groups':>17}"
    print(header + f"{'distinct adv/group':>20}{'pairs/step':>12}")
    for method, runs in results.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        reached = "not reached" if med["reached"] == float("inf") else f"{med['reached']:.0f}"
        print(f"{method:<8}{med['short']:>14.3f}{med['bare_number']:>13.3f}{reached:>14}"
              f"{med['zero_adv_groups']:>17.3f}{med['distinct_adv']:>20.2f}{med['pairs']:>12.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
