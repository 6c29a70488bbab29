"""A saturated rubric tightened, and does the run keep learning? `rlkit rubric tighten` between two phases of training.

1. **Phase 1**: `rlkit fit` to saturation, one run (seed ``--phase1-seed``, default the first of ``--seeds``).
   ``--preset real`` (default): `experiment=smollm2_arithmetic` (SmolLM2-135M-Instruct, LoRA, rubric
   chat_arithmetic; ``--experiment`` names another SmolLM2 preset, e.g. ``smollm2_definitions`` with
   ``-- judge.params.judges.llm=rule``, its rules alone), ``--steps`` 40, every completion logged every step
   (``log_samples.every=1``, ``rows=16``: what tighten reads from) and a checkpoint at the end. ``--rubric FILE``
   gives the real preset's phase 1 another rubric, which the unchanged arm keeps:
   ``benchmarks/chat_arithmetic_length.yaml`` is the preset's with `stops`'s regex written as a one-line regex and a
   40-character ``length`` check, scoring the same (checked on 800 logged SmolLM2 completions), so tighten has a
   level to raise. ``--preset tiny``: the reward-hacking benchmark's v2 run, taken from
   ``benchmarks/reward_hacking.py`` by import (its data, its `rlkit sft` warm start, its `fit` with rubric v2,
   monitors and golden set), ``--steps`` 150 as there; ``--tiny-rubric v1`` takes its hackable v1 run instead (the
   template saturates clarity at its top, and tighten writes a check; on the v2 run, saturated by doing what v2
   asks, it proposes nothing).
2. `rlkit rubric tighten PHASE1 --out tighten/proposal.yaml`, with its audit (exit 0 pass, 1 fail: recorded, the run
   goes on either way), then `rlkit rubric diff ORIGINAL PROPOSAL`. Where tighten writes nothing (no dimension
   saturated, or no rule makes a saturated one harder) the script says so and stops, exit 1: that is the finding.
3. **Phase 2**: two arms per seed in ``--seeds``, ``--more`` steps each (default 20), from the same phase-1 policy:
   "tightened" trains on the proposal, "unchanged" on the original rubric.

   *How a run is continued on another rubric.* ``ckpt_path=<phase 1>/checkpoints/last.ckpt`` with ``rubric.path=``
   the proposal is refused (``rlkit: error: ckpt_path: the checkpoint was trained with rubric ... v2.0 (hash ...),
   this run uses ... v3.0``): an exact resume keeps the rubric by design. The supported way is a warm start,
   ``model.name_or_path=<phase 1>/policy`` (under LoRA the adapter is merged into its base once, in the rlkit cache,
   and a fresh adapter trains on top), and both arms use it so they differ only in the rubric: each starts at step 0
   with a fresh optimiser, learning-rate schedule and data order (seeded by the arm's seed).

4. **What is read**, per arm and seed: the zero-advantage group share (``advantages/frac_zero_groups``) and the
   reward's std (``reward/std``) averaged over the continued steps, beside phase 1's last 10 steps (does the tightened
   rubric give the groups a signal again?); the held-out answers (greedy, the run's held-out split) at the start
   (step 0 of the tightened arm: the phase-1 policy) and at each arm's end, all scored with `rlkit score` under BOTH
   rubrics, per dimension and reward, with the phase-1 run's judge, aggregator, weights and experiment overrides.

**Verdict rule.** The *tightened dimensions* are those the proposal adds or changes (`rlkit rubric diff`). A seed's
gain of an arm is the mean, over the tightened dimensions, of the held-out end minus start under the proposal, each
dimension scaled to [0, 1] by its range. The spread is the larger of the two arms' ranges (max − min) of the gain
over seeds. "keeps learning" when the tightened arm's median gain is above 0 and above the unchanged arm's by more
than the spread, and the tightened arm's median held-out reward under the original rubric falls by no more than
0.05 from the start; "does not keep learning" otherwise; "undecided" with one seed (no spread to compare against).
Exit 0 only for "keeps learning" with the audit passed.

A proposal that changes only anchors and descriptions changes nothing the rule judge reads (it reads checks): the two
arms then get the same rewards and the script says so before training them. Usage:

    python benchmarks/tighten_continue.py [--preset real [--rubric FILE]|tiny [--tiny-rubric v1|v2]]
                                          [--seeds 1 2 3] [--steps N] [--more 20] [--phase1-seed S] [--out DIR]
                                          [--proposal FILE]
                                          [-- optim.lr=1e-4 ...]

With ``--out`` every run folder is kept (phase 2 under ``after-<phase-1 run>/``), and a run that finished there (its
``summary.json``) is read, not run again: give each preset and step count its own ``--out`` (the tiny preset's v1 and
v2 runs may share one, and its warm start).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import reward_hacking as rh  # noqa: E402  (the tiny preset is its v2 run, reused rather than copied)
from notes_claims import set_aside  # noqa: E402  (a run folder moved aside, never overwritten)

from rlkit.runs.signals import WINDOW as SIGNAL_WINDOW  # noqa: E402 (phase 1's last steps: tighten's window)

PRESETS = ("real", "tiny")
ARMS = ("tightened", "unchanged")
DEFAULT_STEPS = {"real": 40, "tiny": 150}     # real_model.py's 40 steps saturate; reward_hacking.py's 150 steps
REAL_EXPERIMENT = "smollm2_arithmetic"
REAL = ["logger=csv"]  # after experiment=<--experiment>
# tighten reads the last 10 steps' logged completions: log every step, every completion (4 prompts x G = 4)
REAL_SAMPLES = ["log_samples.every=1", "log_samples.rows=16"]
TINY = [f"max_completion_length={rh.MAX_LEN}", "logger=csv", "torch_threads=1"]
REWARD_FALL_LIMIT = 0.05
ZERO_ADV, REWARD_STD = "advantages/frac_zero_groups", "reward/std"
STOPPED = 1


@dataclass
class Signal:
    """A run's learning signal, averaged over steps: the zero-advantage group share and the reward's std."""

    zero_adv: float
    reward_std: float


@dataclass
class SeedResult:
    """One seed of phase 2: each arm's signal, and the held-out means per rubric ("original", "proposal"), per
    answer set ("start", "tightened", "unchanged"), per dimension plus "reward"."""

    seed: int
    signal: dict[str, Signal]
    scores: dict[str, dict[str, dict[str, float]]]
    seconds: dict[str, float] = field(default_factory=dict)


def rlkit(args: list[str], log: Path | None = None) -> tuple[int, str, float]:
    """Run an rlkit command: its exit status, stdout and wall time; its output kept in ``log``."""
    started = time.monotonic()
    proc = subprocess.run(["rlkit", *args], capture_output=True, text=True, env={**os.environ, "COLUMNS": "160"})
    if log is not None:
        log.write_text(f"$ rlkit {' '.join(args)}\n{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    return proc.returncode, proc.stdout, time.monotonic() - started


UNSCORED_EXIT = 3  # `rlkit score`: a dimension scored on none of the completions (the file is written all the same)


def must(args: list[str], log: Path | None = None) -> tuple[str, float]:
    """An rlkit command that has to succeed: exits with its stderr's tail when it fails."""
    code, out, seconds = rlkit(args, log)
    if code != 0:
        sys.exit(f"rlkit {' '.join(args)} failed (exit {code}); its output: {log}")
    return out, seconds


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def read_signal(run_dir: Path, last: int | None = None) -> Signal:
    """Mean zero-advantage share and reward std over the run's training steps (its ``last`` ones if given)."""
    rows = [r["metrics"] for r in read_rows(run_dir / "metrics.jsonl") if REWARD_STD in r["metrics"]]
    rows = rows[-last:] if last else rows
    zero = [m[ZERO_ADV] for m in rows if ZERO_ADV in m]  # none under a preference objective: no advantages
    return Signal(statistics.fmean(zero) if zero else float("nan"), statistics.fmean(m[REWARD_STD] for m in rows))


def heldout_answers(run_dir: Path, tag: str, first: bool) -> list[dict]:
    """The run's held-out answers of its first (or last) evaluation, as `rlkit score` records tagged ``tag``."""
    rows = read_rows(run_dir / "heldout_samples.jsonl")
    step = (min if first else max)(r["step"] for r in rows)
    # the record's fields (a check's `field:`, e.g. the definitions task's `forms`) where the run kept them
    return [{**r.get("record", {}), **({"reference": r["reference"]} if "reference" in r else {}), "id": f"{tag}-{i}",
             "prompt": r["prompt"], "completion": r["completion"], "answers": tag}
            for i, r in enumerate(r for r in rows if r["step"] == step)]


def heldout_change(run_dir: Path) -> str:
    """The run's own held-out means (``heldout/<dimension>``), first → last evaluation."""
    rows = [r["metrics"] for r in read_rows(run_dir / "metrics.jsonl")]
    keys = dict.fromkeys(k for m in rows for k in m if k.startswith("heldout/"))
    # a dimension no judge scored (NaN, written null) has no figure to show
    series = {k.removeprefix("heldout/"): [m[k] for m in rows if m.get(k) is not None] for k in keys}
    return ", ".join(f"{k} {v[0]:.3f} → {v[-1]:.3f}" for k, v in series.items() if v)


def read_scored(path: Path) -> dict[str, dict[str, float]]:
    """`rlkit score`'s output: per answer set (the records' ``answers`` tag) the mean of each dimension and of the
    reward; a completion left unscored on a dimension is left out of that mean and counted in ``unscored/<dim>``."""
    by_tag: dict[str, list[dict]] = {}
    for row in read_rows(path):
        by_tag.setdefault(row["answers"], []).append(row)
    out = {}
    for tag, rows in by_tag.items():
        means = {}
        for dim in rows[0]["scores"]:
            values = [r["scores"][dim] for r in rows if r["scores"].get(dim) is not None]
            means[dim] = statistics.fmean(values) if values else float("nan")
            if len(values) < len(rows):
                means[f"unscored/{dim}"] = float(len(rows) - len(values))
        rewards = [r["reward"] for r in rows if r.get("reward") is not None]
        means["reward"] = statistics.fmean(rewards) if rewards else float("nan")
        out[tag] = means
    return out


def gain(result: SeedResult, arm: str, dims: list[str], ranges: dict[str, tuple[float, float]]) -> float:
    """The arm's held-out end minus start under the proposal, mean over ``dims``, each scaled to [0, 1]."""
    scores = result.scores["proposal"]
    return statistics.fmean((scores[arm][d] - scores["start"][d]) / (ranges[d][1] - ranges[d][0]) for d in dims)


def reward_change(result: SeedResult, arm: str = "tightened") -> float:
    """The arm's held-out reward under the original rubric, end minus start."""
    original = result.scores["original"]
    return original[arm]["reward"] - original["start"]["reward"]


def verdict(results: list[SeedResult], dims: list[str], ranges: dict[str, tuple[float, float]]) -> tuple[str, str]:
    """The module docstring's rule: the verdict and the figures it read."""
    tight = [gain(r, "tightened", dims, ranges) for r in results]
    same = [gain(r, "unchanged", dims, ranges) for r in results]
    fall = statistics.median(reward_change(r) for r in results)
    spread = max(max(tight) - min(tight), max(same) - min(same))
    t, u = statistics.median(tight), statistics.median(same)
    figures = (f"tightened dimensions ({', '.join(dims)}) held-out gain, median of {len(results)} seeds: tightened "
               f"{t:+.3f}, unchanged {u:+.3f} (difference {t - u:+.3f}, seeds' spread {spread:.3f}); original "
               f"rubric's held-out reward in the tightened arm {fall:+.3f} (limit -{REWARD_FALL_LIMIT})")
    if len(results) < 2:
        return "undecided (one seed: no spread to compare against)", figures
    keeps = t > 0 and t - u > spread and fall >= -REWARD_FALL_LIMIT
    return ("keeps learning" if keeps else "does not keep learning"), figures


def tightened_dimensions(original: Path, proposal: Path) -> tuple[list[str], bool]:
    """The dimensions the proposal adds or changes, and whether every change is to anchors or descriptions only
    (nothing the rule judge reads)."""
    from rlkit.core.rubric import load_rubric
    from rlkit.core.rubric_diff import diff_rubrics

    diff = diff_rubrics(load_rubric(original), load_rubric(proposal))
    names = [*diff.added, *(c.name for c in diff.changed)]
    return names, diff.text_only


def ranges_of(*rubrics: Path) -> dict[str, tuple[float, float]]:
    from rlkit.core.rubric import load_rubric

    return {d.name: (d.low, d.high) for path in rubrics for d in load_rubric(path).dimensions}


def phase1(preset: str, seed: int, steps: int, out: Path, extra: list[str], tiny_rubric: str = "v2",
           rubric: Path | None = None, experiment: str = REAL_EXPERIMENT) -> tuple[Path, float]:
    """The saturated run and its wall time (NaN when an earlier invocation's finished run is read again)."""
    if preset == "tiny":
        root = out / "phase1"
        root.mkdir(parents=True, exist_ok=True)
        golden, demos = rh.make_data(root, rh.TEMPLATE_SHARE)
        policy = root / "sft" / "policy"
        if not policy.is_dir():
            policy = rh.warm_start(root, demos)
        run = rh.fit(tiny_rubric, seed, policy, golden, root, steps, 10, [f"checkpoint_every={steps}", *extra],
                     reuse=True)
        return run.run_dir, run.seconds
    run_dir = out / "phase1" / f"seed{seed}"
    if (run_dir / "summary.json").is_file():
        return run_dir, float("nan")
    own = [f"rubric.path={rubric.resolve()}"] if rubric else []
    _, seconds = must(["fit", f"experiment={experiment}", *REAL, *REAL_SAMPLES, *own, f"seed={seed}",
                       f"trainer.max_steps={steps}", f"checkpoint_every={steps}", f"hydra.run.dir={run_dir}",
                       *extra], out / "phase1.log")
    return run_dir, seconds


def took(seconds: float) -> str:
    """A run's wall time, or that it was read again (an earlier invocation's finished run: NaN seconds)."""
    return "read again" if math.isnan(seconds) else f"{seconds:.0f} s"


def tighten(run_dir: Path, out: Path) -> tuple[Path | None, str]:
    """`rlkit rubric tighten` with its audit: the proposal (None when it wrote none) and the audit's verdict."""
    proposal = out / "tighten" / "proposal.yaml"
    proposal.parent.mkdir(parents=True, exist_ok=True)
    proposal.unlink(missing_ok=True)  # an earlier invocation's: only this one's proposal counts
    code, stdout, seconds = rlkit(["rubric", "tighten", str(run_dir), "--out", str(proposal)],
                                  out / "tighten" / "tighten.log")
    print(f"$ rlkit rubric tighten {run_dir} --out {proposal}  ({seconds:.0f} s, exit {code})")
    print(stdout, flush=True)
    if code not in (0, 1):  # bad input, not a finding: the command's own `rlkit: error:` line
        sys.exit(f"rlkit rubric tighten {run_dir} failed (exit {code}); its output: {out / 'tighten' / 'tighten.log'}")
    if not proposal.is_file():
        return None, "none"
    # the audit's verdict as its audit.json keeps it (the console wraps the line), its first sentence
    audit = proposal.parent / f"{proposal.stem}.audit" / "audit.json"
    said = json.loads(audit.read_text()).get("verdict", "").split(";")[0] if audit.is_file() else ""
    return proposal, ("pass" if code == 0 else "fail") + (f" ({said})" if said else "")


def arm(preset: str, name: str, seed: int, policy: Path, rubric: Path, more: int, out: Path, extra: list[str],
        experiment: str = REAL_EXPERIMENT) -> tuple[Path, float]:
    from rlkit.core.digest import file_sha256

    run_dir = out / f"{name}-seed{seed}"
    # the rubric an arm trained on, beside it: a finished arm is read again only under the same rubric (a proposal
    # rewritten by a later tighten, or another --rubric, trains it again; the old folder is moved aside)
    trained_on, digest = out / f"{name}-seed{seed}.rubric.sha256", file_sha256(rubric)
    if (run_dir / "summary.json").is_file():
        if trained_on.is_file() and trained_on.read_text().strip() == digest:
            return run_dir, float("nan")
        # another version of the rubric, or one an earlier version of this script did not record: trained again
        stale = set_aside(run_dir, "stale")
        print(f"{run_dir} was not trained on this version of {rubric} (or did not record it): moved to {stale}",
              flush=True)
    elif run_dir.exists():  # a fit stopped part way: its folder's leftovers would mix into the new run's
        print(f"{run_dir} did not finish: moved to {set_aside(run_dir, 'unfinished')}", flush=True)
    base = [f"experiment={experiment}", *REAL] if preset == "real" else TINY
    _, seconds = must(["fit", *base, f"model.name_or_path={policy}", f"rubric.path={rubric}", f"seed={seed}",
                       f"trainer.max_steps={more}", f"hydra.run.dir={run_dir}", *extra], out / f"{name}-seed{seed}.log")
    trained_on.write_text(digest + "\n")
    return run_dir, seconds


def score_heldout(seed: int, runs: dict[str, Path], rubrics: dict[str, Path], judging: list[str], out: Path
                  ) -> dict[str, dict[str, dict[str, float]]]:
    """The start's and each arm's final held-out answers scored under each rubric."""
    from rlkit.core.digest import file_sha256

    records = out / f"heldout-seed{seed}.jsonl"
    answers = [*heldout_answers(runs["tightened"], "start", first=True),
               *(a for name in ARMS for a in heldout_answers(runs[name], name, first=False))]
    records.write_text("".join(json.dumps(a) + "\n" for a in answers))
    scores = {}
    answered = file_sha256(records)[:12]
    for label, rubric in rubrics.items():
        # named by what it scored: answers of arms trained again, or a rewritten proposal, are scored again
        scored = out / f"heldout-seed{seed}-{label}-{answered}-{file_sha256(rubric)[:12]}.scored.jsonl"
        if not scored.is_file():
            log = out / f"score-seed{seed}-{label}.log"
            args = ["score", f"data.path={records}", f"rubric.path={rubric}", f"score.output={scored}", *judging]
            code, _, _ = rlkit(args, log)
            if code == UNSCORED_EXIT and scored.is_file():
                # the run's judge leaves dimensions unscored by design (judge.params.judges.llm=rule: the model's
                # dimensions): the file has the others, and those are left out of the means, counted as unscored
                said = next((line for line in log.read_text().splitlines() if "rlkit: error:" in line), "")
                print(f"rlkit score ({label}, seed {seed}): {said.removeprefix('rlkit: error: ')}; read without them",
                      flush=True)
            elif code != 0:
                sys.exit(f"rlkit {' '.join(args)} failed (exit {code}); its output: {log}")
        scores[label] = read_scored(scored)
    return scores


def report(results: list[SeedResult], before: Signal, dims: list[str], rubrics: dict[str, Path]) -> None:
    print(f"\nphase 1, last {SIGNAL_WINDOW} steps: zero-advantage group share {before.zero_adv:.2f}, reward std "
          f"{before.reward_std:.3f}")
    print("| seed | arm | zero-advantage share | reward std | " + " | ".join(
        f"held-out {label} {d}" for label in rubrics for d in [*next(iter(results)).scores[label]["start"]]
        if not d.startswith("unscored/")) + " | wall time |")
    for r in results:
        for name in ARMS:
            cells = " | ".join(f"{r.scores[label]['start'][d]:.3f} → {r.scores[label][name][d]:.3f}"
                               for label in rubrics for d in r.scores[label]["start"] if not d.startswith("unscored/"))
            print(f"| {r.seed} | {name} | {r.signal[name].zero_adv:.2f} | {r.signal[name].reward_std:.3f} | {cells} | "
                  f"{took(r.seconds.get(name, float('nan')))} |")
    for d in dims:
        for name in ARMS:
            ends = ", ".join(f"{r.scores['proposal'][name][d]:.3f}" for r in results)
            print(f"tightened dimension {d}, {name}: start {results[0].scores['proposal']['start'][d]:.3f} -> end "
                  f"{ends} (seeds {' '.join(str(r.seed) for r in results)})")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", choices=PRESETS, default="real")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--tiny-rubric", choices=tuple(rh.RUBRICS), default="v2",
                        help="with --preset tiny: phase 1's reward-hacking rubric (v1: the hackable one)")
    parser.add_argument("--experiment", default=REAL_EXPERIMENT,
                        help="with --preset real: the experiment preset every run composes (a SmolLM2 one)")
    parser.add_argument("--rubric", type=Path, default=None,
                        help="with --preset real: phase 1's rubric in place of the preset's (the unchanged arm's too)")
    parser.add_argument("--proposal", type=Path, default=None,
                        help="continue on this rubric instead of running tighten (an earlier tighten's proposal, or "
                             "one written by hand; not audited here)")
    parser.add_argument("--steps", type=int, default=None, help="phase 1's steps (real: 40, tiny: 150)")
    parser.add_argument("--more", type=int, default=20, help="each arm's continued steps")
    parser.add_argument("--phase1-seed", type=int, default=None, help="the saturated run's seed (the first of --seeds)")
    parser.add_argument("--out", type=Path, default=None, help="keep the runs here (default: a temporary folder)")
    parser.add_argument("overrides", nargs="*", help="extra `rlkit fit` overrides for every run, e.g. optim.lr=1e-4")
    args = parser.parse_args()
    if (args.rubric or args.experiment != REAL_EXPERIMENT) and args.preset != "real":
        parser.error("--rubric and --experiment are --preset real's; the tiny preset's rubric is --tiny-rubric")
    if args.proposal is not None and not args.proposal.is_file():
        parser.error(f"--proposal: no such file: {args.proposal}")
    steps = args.steps or DEFAULT_STEPS[args.preset]
    p1_seed = args.seeds[0] if args.phase1_seed is None else args.phase1_seed
    started = time.monotonic()
    print(f"load average at start: {' '.join(f'{x:.1f}' for x in os.getloadavg())} on {os.cpu_count()} cores",
          flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        run_dir, seconds = phase1(args.preset, p1_seed, steps, out, args.overrides, args.tiny_rubric, args.rubric,
                                  args.experiment)
        before = read_signal(run_dir, SIGNAL_WINDOW)
        print(f"phase 1 ({args.preset}, seed {p1_seed}, {steps} steps, {took(seconds)}): {run_dir}; held-out "
              f"{heldout_change(run_dir)}", flush=True)
        from rlkit.core.rubric import load_rubric
        from rlkit.evaluation.rubric_tightening import judging_overrides, read_by_rules, run_judge, run_rubric

        original = Path(str(run_rubric(run_dir, None).source))
        work = out / f"after-{run_dir.name}"  # phase 2 of this phase-1 run (the tiny presets share one --out)
        if args.proposal is not None:
            proposal, audit = args.proposal.resolve(), "not run (--proposal)"
        else:
            proposal, audit = tighten(run_dir, work)
        if proposal is None:
            print(f"FINDING: `rlkit rubric tighten` proposed no rubric for this run (see above); nothing to continue "
                  f"with. Phase 1's last {SIGNAL_WINDOW} steps: zero-advantage share {before.zero_adv:.2f}")
            return STOPPED
        print(f"audit of the proposal: {audit}")
        print(f"$ rlkit rubric diff {original} {proposal}")
        print(rlkit(["rubric", "diff", str(original), str(proposal)])[1], flush=True)
        dims, text_only = tightened_dimensions(original, proposal)
        judge = run_judge(run_dir)
        if text_only and read_by_rules(load_rubric(original), dims, judge):
            print(f"note: the proposal changes only anchors or descriptions of {', '.join(dims)}; the run's judge "
                  f"({judge}) scores them by rules, which read checks, never anchors, so both arms get the same "
                  "rewards (the tightened arm is the unchanged one's twin)", flush=True)
        rubrics = {"original": original, "proposal": proposal}
        judging = judging_overrides(run_dir)
        results = []
        for seed in args.seeds:
            runs, times = {}, {}
            for name in ARMS:
                runs[name], times[name] = arm(args.preset, name, seed, run_dir / "policy",
                                              proposal if name == "tightened" else original, args.more, work,
                                              args.overrides, args.experiment)
                print(f"{name} seed {seed}: {args.more} steps from {run_dir / 'policy'} ({took(times[name])})",
                      flush=True)
            results.append(SeedResult(seed, {n: read_signal(runs[n]) for n in ARMS},
                                      score_heldout(seed, runs, rubrics, judging, work), times))
        report(results, before, dims, rubrics)
    label, figures = verdict(results, dims, ranges_of(original, proposal))
    print(f"\n{figures}")
    print(f"load average at end: {' '.join(f'{x:.1f}' for x in os.getloadavg())}; total wall time "
          f"{time.monotonic() - started:.0f} s")
    print(f"verdict: {label}; audit {audit}")
    return 0 if label == "keeps learning" and audit.startswith("pass") else 1


if __name__ == "__main__":
    sys.exit(main())
