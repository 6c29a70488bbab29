"""Does the default run teach what a user most wants to see a reward teach, being right? Runs `rlkit fit` over
seeds, and a control with learning rate 0.

The default policy is the warm-started tiny policy (`model=tiny`: supervised steps on the arithmetic task, cached,
then RL at a fine-tuning rate). Prints, per run, the mean training reward over the first and last 10% of steps, the
held-out correctness (greedy, before and after training) with its change, and the run's wall time; then a markdown
start/end table and the medians, and plots held-out correctness (greedy, every 10 steps: ``heldout_every``, which
restores the random state, so training is as without it) and the training batch's correctness over steps, RL
against the control, to ``--plot``. Exits 0 when the median held-out correctness change of the learning runs is at
least +0.10 and the control's is under 0.02 in size (issue 26's targets). Usage:

    python benchmarks/default_learning.py [--seeds 1 2 3] [--steps 60] [--plot PNG] [-- objective=group_dpo ...]
    python benchmarks/default_learning.py -- model=tiny_random      # from random weights (correctness barely moves)
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HELDOUT_GAIN_TARGET = 0.10
CONTROL_DRIFT_LIMIT = 0.02


@dataclass
class Run:
    label: str
    seed: int
    reward_first: float
    reward_last: float
    held_start: float
    held_end: float
    seconds: float
    heldout_curve: list[tuple[int, float]]  # (step, greedy held-out correctness)
    train_curve: list[float]                 # the training batch's mean correctness, one per step

    @property
    def held_change(self) -> float:
        return self.held_end - self.held_start


def heldout_curve(run_dir: Path, dimension: str = "correctness") -> list[tuple[int, float]]:
    """Held-out ``dimension`` at each evaluation (before training, every ``heldout_every`` steps, after), from the
    run's metrics.jsonl."""
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["metrics"][f"heldout/{dimension}"]) for r in rows if f"heldout/{dimension}" in r["metrics"]]


def run(seed: int, steps: int, lr: float | None, root: Path, extra: list[str]) -> Run:
    run_dir = root / f"seed{seed}-lr{lr}"
    cmd = ["rlkit", "fit", "logger=csv", f"seed={seed}", f"trainer.max_steps={steps}", f"hydra.run.dir={run_dir}",
           "heldout_every=10", *extra]
    if lr is not None:
        cmd.append(f"optim.lr={lr}")
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    seconds = time.monotonic() - started
    (metrics,) = run_dir.glob("csv/version_0/metrics.csv")
    with metrics.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("reward/mean")]
    rewards = [float(r["reward/mean"]) for r in rows]
    k = max(1, len(rewards) // 10)
    curve = heldout_curve(run_dir)
    start, end = curve[0][1], curve[-1][1]
    result = Run("control lr=0" if lr == 0 else "RL", seed, statistics.mean(rewards[:k]),
                 statistics.mean(rewards[-k:]), start, end, seconds, curve,
                 [float(r["rewards/correctness/mean"]) for r in rows])
    print(f"{result.label:>13} seed {seed}: training reward first 10% {result.reward_first:.3f}  last 10% "
          f"{result.reward_last:.3f}  held-out correctness {start:.3f} -> {end:.3f} ({result.held_change:+.3f})  "
          f"{seconds:.0f} s", flush=True)
    return result


def table(runs: list[Run]) -> str:
    """The start/end table as benchmarks/README.md shows it."""
    lines = ["| run | seed | training reward, first → last 10% | held-out correctness, start → end | wall time |",
             "|---|---|---|---|---|"]
    lines += [f"| {r.label} | {r.seed} | {r.reward_first:.3f} → {r.reward_last:.3f} | {r.held_start:.3f} → "
              f"{r.held_end:.3f} ({r.held_change:+.3f}) | {r.seconds:.0f} s |" for r in runs]
    return "\n".join(lines)


def plot(learning: list[Run], controls: list[Run], path: Path) -> None:
    """Held-out and training correctness over steps, median over seeds, RL against the control."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (held_ax, train_ax) = plt.subplots(1, 2, figsize=(10, 3.6))
    for runs, colour in ((learning, "tab:blue"), (controls, "tab:grey")):
        label = runs[0].label
        steps = [step for step, _ in runs[0].heldout_curve]
        held_ax.plot(steps, [statistics.median(r.heldout_curve[i][1] for r in runs) for i in range(len(steps))],
                     marker="o", color=colour, label=label)
        per_step = [statistics.median(values) for values in zip(*(r.train_curve for r in runs), strict=True)]
        smooth = [statistics.mean(per_step[max(0, i - 4):i + 1]) for i in range(len(per_step))]
        train_ax.plot(range(1, len(smooth) + 1), smooth, color=colour, label=label)
    held_ax.set(title="held-out correctness (greedy)", xlabel="step")
    train_ax.set(title="training-batch correctness (5-step mean)", xlabel="step")
    held_ax.legend()
    fig.suptitle(f"Default policy, median over seeds {' '.join(str(r.seed) for r in learning)}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--plot", type=Path, default=Path(__file__).with_name("default_learning.png"))
    parser.add_argument("overrides", nargs="*", help="extra `rlkit fit` overrides, e.g. objective=group_dpo")
    args = parser.parse_args()
    if args.overrides:
        print(f"overrides: {' '.join(args.overrides)}")
    with tempfile.TemporaryDirectory() as tmp:
        learning = [run(s, args.steps, None, Path(tmp), args.overrides) for s in args.seeds]
        controls = [run(s, args.steps, 0.0, Path(tmp), args.overrides) for s in args.seeds]
    held = statistics.median(r.held_change for r in learning)
    control = statistics.median(r.held_change for r in controls)
    print()
    print(table(learning + controls))
    print()
    print(f"median training-reward gain, RL: {statistics.median(r.reward_last - r.reward_first for r in learning):+.3f}"
          f", control: {statistics.median(r.reward_last - r.reward_first for r in controls):+.3f}")
    print(f"median held-out correctness change, RL:      {held:+.3f}  (target >= +{HELDOUT_GAIN_TARGET:.2f})")
    print(f"median held-out correctness change, control: {control:+.3f}  (target |change| < {CONTROL_DRIFT_LIMIT})")
    plot(learning, controls, args.plot)
    print(f"plot: {args.plot}")
    return 0 if held >= HELDOUT_GAIN_TARGET and abs(control) < CONTROL_DRIFT_LIMIT else 1


if __name__ == "__main__":
    sys.exit(main())
