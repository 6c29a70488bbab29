"""Does spending samples on informative groups pay for itself? `rlkit fit` on the warm-started default policy with
`sampling.filter=none` (every group trains, today's loop), `sampling.filter=zero_spread` (groups whose rewards all
agree are dropped and more prompts sampled until the batch is full or max_rounds is spent) and `sampler=pass_rate`
(prompts solved twice in a row sit out), over seeds.

Per run: informative groups per step (groups whose rewards differ, the only ones GRPO learns from), completions
generated and judged per informative group (an extra round's prompts included), held-out correctness (greedy, every
`--every` steps: `heldout_every`) and the steps and training seconds (the sum of `time/step`, evaluations left out)
until it first reaches `--target`. Prints a table and the medians, writes a plot of held-out correctness and
informative groups against steps. Usage:

    python benchmarks/sample_efficiency.py [--seeds 1 2 3] [--steps 60] [--every 10] [--target 0.5]
        [--plot benchmarks/sample_efficiency.png]
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

CONFIGS = {
    "filter=none": ["sampling.filter=none"],
    "filter=zero_spread": ["sampling.filter=zero_spread"],
    "sampler=pass_rate": ["sampler=pass_rate"],
}
BATCH_SIZE, NUM_GENERATIONS = 8, 8


@dataclass
class Run:
    config: str
    seed: int
    informative: float          # informative groups per step (mean)
    completions_per_informative: float
    heldout: list[tuple[int, float]]  # (step, held-out correctness)
    step_seconds: list[float]   # time/step of each training step
    seconds: float              # the whole command

    def reached(self, target: float) -> tuple[int | None, float | None]:
        """The first evaluated step at which held-out correctness is at least ``target``, and the training seconds
        spent until then."""
        for step, value in self.heldout:
            if value >= target:
                return step, sum(self.step_seconds[:step])
        return None, None


def run(config: str, seed: int, steps: int, every: int, root: Path) -> Run:
    run_dir = root / f"{config.replace('=', '-')}-seed{seed}"
    cmd = ["rlkit", "fit", "logger=none", f"seed={seed}", f"trainer.max_steps={steps}", f"heldout_every={every}",
           f"batch_size={BATCH_SIZE}", f"num_generations={NUM_GENERATIONS}", f"hydra.run.dir={run_dir}",
           *CONFIGS[config]]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    seconds = time.monotonic() - started
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps_rows = [r["metrics"] for r in rows if "reward/mean" in r["metrics"]]
    informative = [BATCH_SIZE * (1.0 - r["frac_zero_std_groups"]) for r in steps_rows]
    generated = [(BATCH_SIZE + r.get("sampling/extra_prompts", 0.0)) * NUM_GENERATIONS for r in steps_rows]
    held: dict[int, float] = {}
    for r in rows:  # a step evaluated twice (the last one, by heldout_every and at the end) keeps the later value
        if "heldout/correctness" in r["metrics"]:
            held[r["step"]] = r["metrics"]["heldout/correctness"]
    result = Run(config, seed, statistics.mean(informative), sum(generated) / max(sum(informative), 1e-9),
                 sorted(held.items()), [r["time/step"] for r in steps_rows], seconds)
    print(f"{config:>18} seed {seed}: informative groups/step {result.informative:.2f} of {BATCH_SIZE}, completions "
          f"per informative group {result.completions_per_informative:.1f}, held-out correctness "
          + " ".join(f"{s}:{v:.3f}" for s, v in result.heldout) + f"; {seconds:.0f} s", flush=True)
    return result


def fmt(value: float | None, spec: str) -> str:
    return "not reached" if value is None else format(value, spec)


def table(runs: list[Run], target: float) -> str:
    lines = [f"| config | seed | informative groups / step | completions per informative group | held-out correctness, "
             f"start → end | steps to {target:g} | training s to {target:g} | wall time |",
             "|---|---|---|---|---|---|---|---|"]
    for r in runs:
        step, secs = r.reached(target)
        lines.append(f"| {r.config} | {r.seed} | {r.informative:.2f} | {r.completions_per_informative:.1f} | "
                     f"{r.heldout[0][1]:.3f} → {r.heldout[-1][1]:.3f} | {fmt(step, 'd')} | {fmt(secs, '.1f')} | "
                     f"{r.seconds:.0f} s |")
    return "\n".join(lines)


def plot(runs: list[Run], path: Path) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10, 4))
    held, informative = figure.add_subplot(1, 2, 1), figure.add_subplot(1, 2, 2)
    for config in CONFIGS:
        mine = [r for r in runs if r.config == config]
        steps = [s for s, _ in mine[0].heldout]
        held.plot(steps, [statistics.median(dict(r.heldout)[s] for r in mine) for s in steps], marker="o",
                  label=config)
        informative.bar([list(CONFIGS).index(config)], [statistics.median(r.informative for r in mine)],
                        label=config)
    held.set(xlabel="step", ylabel="held-out correctness (median of seeds)", title="Learning")
    informative.set(xticks=range(len(CONFIGS)), xticklabels=list(CONFIGS), ylabel=f"of {BATCH_SIZE}",
                    title="Informative groups per step (median)")
    held.legend()
    figure.tight_layout()
    FigureCanvasAgg(figure).print_png(str(path))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--target", type=float, default=0.5)
    parser.add_argument("--plot", type=Path, default=Path(__file__).with_name("sample_efficiency.png"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        runs = [run(config, seed, args.steps, args.every, Path(tmp)) for config in CONFIGS for seed in args.seeds]
    print()
    print(table(runs, args.target))
    print()
    for config in CONFIGS:
        mine = [r for r in runs if r.config == config]
        reached = [r.reached(args.target) for r in mine]
        hit = [s for s, _ in reached if s is not None]
        print(f"{config:>18}: median informative groups/step {statistics.median(r.informative for r in mine):.2f}, "
              f"completions per informative group {statistics.median(r.completions_per_informative for r in mine):.1f}"
              f", held-out end {statistics.median(r.heldout[-1][1] for r in mine):.3f}, reached {args.target:g} in "
              f"{len(hit)}/{len(mine)} runs (median step {statistics.median(hit) if hit else float('nan'):g}, training "
              f"s {statistics.median(t for _, t in reached if t is not None) if hit else float('nan'):.1f})")
    plot(runs, args.plot)
    print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
