"""Advantage collapse under three rewards, as the multi-reward note describes it, on a warm-started policy.

The note (design-notes/004, §2 and §5.1) reports a run with three rewards (format, correctness, conciseness) in
which GRPO on the summed reward drives format to ~97% while correctness falls from 62% to 58%, and the group-
preference variant (objective=group_dpo here) reaches 69% correctness with format ~93%. This script builds a task
where the note's mechanisms are present and measurable, then runs each method from the same warm start:

* **format** (easy, saturates): the answer is a number followed by a full stop ("17."). The warm start writes
  the stop on ``--format-share`` of its demonstrations, so sampled format starts well below 1 and is one token
  to learn: it saturates early, and its group std falls to 0 (the note's §2.2), while correctness keeps a std
  near 0.5 (§2.1's scale imbalance, visible in ``rewards/<dim>/std``).
* **correctness** (hard): the number is the sum.
* **conciseness**, two versions (``--tasks``): ``digits``, the answer has at most one digit, which conflicts with
  correctness on prompts whose sum has two (§2.3) and agrees on the others; and ``length``, at most two characters
  in all, which on those prompts also pulls against format ("17" against "17."), and does so within a group as
  soon as format varies there. The runs' ``dimension_conflict_rate`` counts the conflict within groups, which is
  what a group-relative method sees.

Prompts are every ``a+b=`` with operands 0..12 (169, a third with a one-digit sum), split into training and
held-out prompts by rlkit's prompt-hash split. The warm start is ``rlkit sft`` on the training prompts' answers,
then each method trains ``--steps`` steps from it (batch 8 prompts × 8 completions: the same sample budget).

Methods: ``grpo`` (weighted sum 1/2/1, group z-score), ``gdpo`` (each reward z-scored in its group, then summed),
``rank`` (rank advantages of the weighted sum), ``grpo_lex`` (GRPO on the lexicographic aggregator's reward: the
control that tells the ordering's effect from the preference objective's), ``group_dpo_lex`` (objective=group_dpo
with the lexicographic aggregator: correctness, then format, then conciseness) and ``group_dpo_auto``
(objective=group_dpo on the weighted sum with its auto-lexicographic switch, per prompt). Prints per method the
final training-batch mean of each reward (last 10% of steps) and greedy held-out correctness at the end, each as a
median over seeds with a 95% bootstrap interval; the step at which format saturates (its 10-step moving mean
first reaches 0.95); the share of groups with no learning signal (zero-advantage groups; for group_dpo, groups
whose completions all tie); the conflict rate; and each reward's in-batch std early and late. Curves go to
``--plots``. Usage:

    python benchmarks/advantage_collapse.py [--seeds 1 2 3 4 5] [--steps 300] [--jobs 2] [--probe]
        [--tasks digits length] [--methods grpo gdpo rank grpo_lex group_dpo_lex group_dpo_auto] [--plots benchmarks/]

``--probe`` builds the warm start and prints the diagnostics the task was chosen from (per-dimension mean and
std in the first steps of a short GRPO run) without running the comparison.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

DIMENSIONS = ("format", "correctness", "conciseness")

RUBRIC = """\
name: collapse-three-rewards-{task}
version: "1"
description: Sums answered with a number and a full stop; one-digit answers preferred.
dimensions:
  - name: format
    description: Easy; the answer is a number followed by a full stop and nothing else.
    type: binary
    weight: 1.0
    priority: 2
    checks: [{type: regex, pattern: '^\\s*-?\\d+\\.\\s*$'}]
  - name: correctness
    description: Hard; the first number in the answer is the sum.
    type: binary
    weight: 2.0
    priority: 1
    checks: [{type: match, field: reference, mode: numeric, extract: '^\\s*(-?\\d+)'}]
  - name: conciseness
    description: {conciseness}
    type: binary
    weight: 1.0
    priority: 3
    checks: [{check}]
"""

# Two conciseness rewards, from what the diagnostics of the first showed (see benchmarks/README.md): `digits`
# conflicts with correctness across prompts but rarely within a group (a policy that knows the sum's length writes
# it), so its in-group conflict rate stays near 0.02; `length` also counts the full stop, so on every prompt whose
# sum has two digits it pulls against format inside the group, the conflict GRPO's summed reward has to settle.
CONCISENESS = {
    "digits": ("The answer has at most one digit (against correctness where the sum has two).",
               "{type: regex, pattern: '^\\D*\\d?\\D*$'}"),
    "length": ("The answer is at most two characters (against format where the sum has two digits).",
               "{type: length, max: 2, unit: chars}"),
}

METHODS = {
    "grpo": ["advantage=grpo"],
    "gdpo": ["advantage=gdpo"],
    "rank": ["advantage=rank"],
    # the control that separates the ordering from the objective: GRPO's advantages of the lexicographic reward
    "grpo_lex": ["advantage=grpo", "aggregator=lexicographic"],
    "group_dpo_lex": ["objective=group_dpo", "aggregator=lexicographic",
                      "objective.params.auto_lexicographic=false"],
    "group_dpo_auto": ["objective=group_dpo", "objective.params.conflict_scope=prompt"],
}


def write_task(root: Path, format_share: float) -> tuple[Path, Path]:
    """The prompt file and the warm start's demonstrations (the stop on ``format_share`` of them)."""
    draw = random.Random(0)
    pairs = [(a, b) for a in range(13) for b in range(13)]
    draw.shuffle(pairs)
    records = [{"id": f"sum-{a}-{b}", "prompt": f"{a}+{b}=", "reference": str(a + b)} for a, b in pairs]
    prompts, demos = root / "prompts.jsonl", root / "demos.jsonl"
    prompts.write_text("".join(json.dumps(r) + "\n" for r in records))
    demos.write_text("".join(json.dumps({**r, "completion": r["reference"] + ("." if draw.random() < format_share
                                                                             else "")}) + "\n" for r in records))
    return prompts, demos


def write_rubric(root: Path, task: str) -> Path:
    description, check = CONCISENESS[task]
    rubric = root / f"rubric-{task}.yaml"
    rubric.write_text(RUBRIC.replace("{task}", task).replace("{conciseness}", description).replace("{check}", check))
    return rubric


def rlkit(args: list[str], what: str) -> None:
    done = subprocess.run([sys.executable, "-m", "rlkit", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")


def finished(run_dir: Path, reuse: bool) -> bool:
    """Whether ``--reuse`` may take this run's results as they are (it ended: fit writes summary.json last)."""
    return reuse and (run_dir / "summary.json").is_file()


def warm_start(root: Path, demos: Path, steps: int, reuse: bool = False) -> Path:
    """``rlkit sft`` from random weights on the training prompts' demonstrations (the held-out ones are split off
    by the same prompt hash as in the RL runs)."""
    run_dir = root / "sft"
    if finished(run_dir, reuse):
        return run_dir / "policy"
    rlkit(["sft", "model=tiny_random", f"data.path={demos}", f"trainer.max_steps={steps}", "batch_size=64",
           "optim.lr=3e-3", "torch_threads=1", "logger=none", "seed=0", "log_samples.every=0",
           f"hydra.run.dir={run_dir}"], "the warm start")
    return run_dir / "policy"


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """One dict per training step (held-out rows kept apart under their own step)."""
    by_step: dict[int, dict[str, float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        by_step.setdefault(row["step"], {}).update(row["metrics"])
    return [by_step[k] for k in sorted(by_step)]


def train(method: str, seed: int, steps: int, root: Path, policy: Path, prompts: Path, rubric: Path,
          reuse: bool = False) -> Path:
    run_dir = root / f"{method}-{seed}"  # root: the task's folder
    if finished(run_dir, reuse):
        return run_dir
    rlkit(["fit", f"model.name_or_path={policy}", f"data.path={prompts}", f"rubric.path={rubric}", *METHODS[method],
           f"seed={seed}", f"trainer.max_steps={steps}", "torch_threads=1", "logger=none", "log_samples.every=0",
           f"checkpoint_every={steps}", f"hydra.run.dir={run_dir}"], f"{method} seed {seed}")
    return run_dir


def moving_mean(values: list[float], width: int) -> list[float]:
    return [statistics.mean(values[max(0, i - width + 1):i + 1]) for i in range(len(values))]


def no_signal_share(row: dict[str, float]) -> float | None:
    """Groups that taught nothing this step: zero advantages or, on the preference path (which logs no
    advantages), groups whose completions all tie on the aggregated reward and so give no pair."""
    return row.get("advantages/frac_zero_groups", row.get("frac_zero_std_groups"))


def summarise(run_dir: Path) -> dict[str, object]:
    rows = read_metrics(run_dir)
    train_rows = [r for r in rows if "reward/mean" in r]
    tail = train_rows[-max(1, len(train_rows) // 10):]
    curves = {d: [r[f"rewards/{d}/mean"] for r in train_rows] for d in DIMENSIONS}
    fmt = moving_mean(curves["format"], 10)
    saturated = next((i + 1 for i, v in enumerate(fmt) if i >= 9 and v >= 0.95), None)
    heldout = [r["heldout/correctness"] for r in rows if "heldout/correctness" in r]
    no_signal = [no_signal_share(r) for r in train_rows]
    return {
        **{d: statistics.mean(r[f"rewards/{d}/mean"] for r in tail) for d in DIMENSIONS},
        "heldout_start": heldout[0], "heldout_end": heldout[-1],
        "saturated_at": saturated,
        "no_signal": statistics.mean(v for v in no_signal if v is not None),
        "conflict": statistics.mean(r["dimension_conflict_rate"] for r in train_rows),
        "curves": {**curves, "no_signal": [v if v is not None else float("nan") for v in no_signal],
                   "conflict": [r["dimension_conflict_rate"] for r in train_rows],
                   **{f"{d}_std": [r[f"rewards/{d}/std"] for r in train_rows] for d in DIMENSIONS}},
    }


def bootstrap_ci(values: list[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the median, resampling seeds with replacement."""
    draw = random.Random(seed)
    medians = sorted(statistics.median(draw.choices(values, k=len(values))) for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]


def cell(values: list[float]) -> str:
    low, high = bootstrap_ci(values)
    return f"{statistics.median(values):.3f} [{low:.3f}, {high:.3f}]"


def plot(results: dict[str, list[dict[str, object]]], path: Path, task: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("correctness", "correctness (train batch)"), ("format", "format"), ("conciseness", "conciseness"),
              ("no_signal", "groups without signal"), ("format_std", "format std in batch"),
              ("conflict", "dimension conflict rate")]
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, (key, title) in zip(axes.flat, panels, strict=True):
        for method, runs in results.items():
            curves = [r["curves"][key] for r in runs]  # type: ignore[index]
            median = [statistics.median(step) for step in zip(*curves, strict=True)]
            ax.plot(moving_mean(median, 10), label=method, linewidth=1.2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"Three rewards from a warm start, conciseness = {task}: median over seeds, 10-step moving mean",
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def probe(root: Path, policy: Path, prompts: Path, rubric: Path) -> None:
    run_dir = train("grpo", 1, 20, root, policy, prompts, rubric)
    rows = [r for r in read_metrics(run_dir) if "reward/mean" in r]
    heldout = [r["heldout/correctness"] for r in read_metrics(run_dir) if "heldout/correctness" in r]
    print(f"warm start, held-out greedy correctness {heldout[0]:.3f}; first 5 steps of grpo (train batch):")
    print(f"{'dimension':<13}{'mean':>8}{'std':>8}{'saturated groups':>18}")
    for d in DIMENSIONS:
        first = rows[:5]
        print(f"{d:<13}{statistics.mean(r[f'rewards/{d}/mean'] for r in first):>8.3f}"
              f"{statistics.mean(r[f'rewards/{d}/std'] for r in first):>8.3f}"
              f"{statistics.mean(r[f'rewards/{d}/saturated_groups'] for r in first):>18.3f}")
    print(f"conflict rate {statistics.mean(r['dimension_conflict_rate'] for r in rows[:5]):.3f}")


def report(task: str, results: dict[str, list[dict[str, object]]]) -> None:
    print(f"\ntask {task}: conciseness = {CONCISENESS[task][0]}")
    print(f"{'method':<16}" + "".join(f"{d:>24}" for d in DIMENSIONS) + f"{'held-out correct':>24}"
          f"{'format sat. step':>18}{'no-signal groups':>18}{'conflict':>10}")
    for method, runs in results.items():
        sat = [r["saturated_at"] for r in runs]
        reached = [s for s in sat if s is not None]
        sat_text = (f"{statistics.median(reached):.0f}" if reached else "never") + (
            f" ({len(reached)}/{len(sat)})" if len(reached) < len(sat) else "")
        print(f"{method:<16}" + "".join(f"{cell([r[d] for r in runs]):>24}" for d in DIMENSIONS)  # type: ignore[misc]
              + f"{cell([r['heldout_end'] for r in runs]):>24}{sat_text:>18}"  # type: ignore[misc]
              + f"{statistics.median(r['no_signal'] for r in runs):>18.3f}"  # type: ignore[misc]
              + f"{statistics.median(r['conflict'] for r in runs):>10.3f}")  # type: ignore[misc]
    first_method, first = next(iter(results.items()))
    print(f"held-out greedy correctness of the warm start: {statistics.median(r['heldout_start'] for r in first):.3f}")
    # the diagnostics the task is judged by: each reward's in-batch std early and late (the first method's runs)
    stds = {d: [r["curves"][f"{d}_std"] for r in first] for d in DIMENSIONS}  # type: ignore[index]
    print(f"{first_method} per-dimension std, first 20 → last 20 steps (median over seeds): " + ", ".join(
        f"{d} {statistics.median(statistics.mean(c[:20]) for c in curves):.2f} → "
        f"{statistics.median(statistics.mean(c[-20:]) for c in curves):.2f}" for d, curves in stds.items()))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--tasks", nargs="+", default=list(CONCISENESS), choices=list(CONCISENESS))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--sft-steps", type=int, default=300)
    parser.add_argument("--format-share", type=float, default=0.2)
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (each on one torch thread)")
    parser.add_argument("--plots", type=Path, default=Path(__file__).parent,
                        help="folder for advantage_collapse_<task>.png")
    parser.add_argument("--probe", action="store_true")
    parser.add_argument("--workdir", type=Path, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true",
                        help="with --workdir: take the runs that finished there as they are (resume, or re-plot)")
    args = parser.parse_args()
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        root = args.workdir or Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        prompts, demos = write_task(root, args.format_share)
        policy = warm_start(root, demos, args.sft_steps, args.reuse)
        if args.probe:
            for task in args.tasks:
                probe(root / task, policy, prompts, write_rubric(root, task))
            return 0
        # each task's rubric is written once, before any run reads it (not by every job, while others read it)
        rubrics = {task: write_rubric(root, task) for task in args.tasks}
        jobs = [(t, m, s) for t in args.tasks for m in args.methods for s in args.seeds]
        with ThreadPoolExecutor(args.jobs) as pool:
            dirs = list(pool.map(lambda job: train(job[1], job[2], args.steps, root / job[0], policy, prompts,
                                                   rubrics[job[0]], args.reuse), jobs))
        results: dict[str, dict[str, list[dict[str, object]]]] = {t: {m: [] for m in args.methods}
                                                                  for t in args.tasks}
        for (task, method, _), run_dir in zip(jobs, dirs, strict=True):
            results[task][method].append(summarise(run_dir))
    print(f"{len(args.seeds)} seeds ({' '.join(map(str, args.seeds))}) × {args.steps} steps, batch 8 prompts × 8 "
          f"completions, warm start {args.sft_steps} SFT steps (format on {args.format_share:.0%} of demos); "
          f"train-batch means over the last 10% of steps; median [95% bootstrap interval] over seeds")
    for task, by_method in results.items():
        report(task, by_method)
        plot(by_method, args.plots / f"advantage_collapse_{task}.png", task)
    print(f"\nplots: {args.plots}/advantage_collapse_<task>.png; wall time {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
