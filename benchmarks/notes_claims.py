"""The design notes' quantitative claims, each put to a real model: SmolLM2-135M-Instruct under LoRA on the chat
arithmetic task (``experiment=smollm2_arithmetic``: "What is a + b? Reply with only the number.", rubric
``chat_arithmetic``: bare_number 1, correctness 2, stops 1; 4 prompts a step, 40 steps, lr 2e-4, no KL).

Each claim is a small experiment of real ``rlkit fit`` runs, one run folder per cell and seed under ``--out``
(``<out>/<cell>-s<steps>/seed<N>``); a folder whose run finished (``summary.json``, which fit writes last) is read,
never run again, so a long benchmark can be continued across sessions and re-read with ``--read-finished`` (runs
nothing; a cell not yet run shows as such). Each finished run's figures are also kept as one line of ``--records``
(default ``benchmarks/notes_claims_runs.jsonl``, committed): a machine whose run folders are gone reads a seed from
there instead of training it again, and the tables in benchmarks/README.md are re-printed from that file alone. A
folder left by an interrupted run is moved aside (``seed<N>.unfinished-<k>``), never overwritten. Claims share cells
where they are the same run (the preset is the 3-dimension arm, G = 4 and correctness weight 2; GRPO at G = 8 is the
group-size arm and GDPO's opponent), and every claim is read against one control, the preset at ``optim.lr=0``
(greedy held-out answers of an unchanged policy: what moves there is not learning).

The figure each table reports is the change of greedy held-out correctness (the run's 32 held-out sums, start →
end; one sum is 0.031) as the mean over seeds with a 95% t-interval (mean ± t·sd/√n; none with one seed), or the
metric the claim is about; ``s/step`` is the mean ``time/step`` (one rollout step, its updates included), ``wall s``
the run's own wall time (summary.json: loading, evaluations and checkpoint included). Verdicts: *reproduced* when
the arms differ as the note says with intervals that do not overlap, *not* when the means go the other way (or are
equal), *partly* in between; *undecided* with one seed.

Claims (note §; what the note says; what is run here and why it is smaller than the note):

* ``group_size`` (000 §4.3): G = 2 makes group normalisation unstable, 16 is costly, 8 balances. G = 2 / 4 / 8 at
  equal prompts a step (4), so G = 8 samples twice G = 4's completions and costs about twice the step time; the
  table gives the spread over seeds, the zero-advantage group share and the seconds a step beside the change.
* ``clip`` (000 §4.3): widening the clip from 0.2 to 0.3 smooths a noisy rubric. The rubric is made noisy with an
  existing option, ``rubric.dropout=0.5`` (each dimension of each group left out of its reward with probability
  0.5, the weighted sum renormalised over the kept ones: seeded, rlkit/reward/dropout.py); the noise is measured
  on the runs' own samples as the share of within-group pairs the full rubric orders that a dropout draw orders
  otherwise. The clip binds only off-policy, so every clip cell runs ``objective.params.num_iterations=2`` (with
  one iteration the ratio is 1 and 0.2 and 0.3 train identically; ``trainer.max_steps`` counts optimiser steps, so
  these cells run 2 × ``--steps`` of them: the same rollouts as the others); cells: noisy at 0.2, noisy at 0.3, and
  the clean rubric at 0.2 (the noise's own cost). The note's noise is a model judge's; this is the smallest noise that
  needs no judge model (a model judge costs minutes a step on 2 cores: benchmarks/README.md, judged_model.py).
* ``rubric_size`` (000 §7): a 7-dimension rubric judged less consistently and trained worse than 3 dimensions.
  ``benchmarks/notes_claims_7dim.yaml`` (the preset's three dimensions and four plausible additions, each weight 1)
  against the preset's ``chat_arithmetic``. The rule judge scores a completion the same every time, so the judge-
  consistency half cannot be measured here (it needs a model judge); the table gives the training half and the
  attribution the note blames: the within-group correlation of the advantage with correctness.
* ``weight`` (004 §1.3): raising the correctness weight lowered correctness under GRPO. The note gives no numbers;
  correctness weight 1 against 3 (``++weights.params.weights={correctness:W}``), the preset's 2 beside them, and
  ``aggregator=lexicographic`` (correctness first by the rubric's priorities, whatever the weights): not in the
  note, and not in the verdict; the remedy the docs name for conflicting dimensions, read against the bare-number
  basin that a smaller correctness share leads into.
* ``gdpo`` (004 §5.1): GRPO keeps format (~97%) while correctness falls 62% → 58%; the note's GDPO reaches 69% at
  format ~93%. ``experiment=[smollm2_arithmetic,gdpo_note]`` (group_dpo, win-rate soft labels, G = 8, lr 0.4×)
  against GRPO at G = 8 (the same completions a step: the note's "same sampling budget"); format is read as
  bare_number and stops. 40 steps, not the note's 20k.
* ``scale`` (004 §2.1): r1 at group std 0.01, r2 at 0.2, "whatever w1" GRPO's advantage follows r2. Computed, not
  trained, with tests/plugins/test_scale_imbalance.py's functions on 2,000 groups of 8; the table is printed.

Usage (a cell is ~5 min a seed on 2 idle cores at 40 steps; the G = 8, 2-iteration and gdpo_note cells about
twice that: about 80 min a seed for every claim; a smoke of one seed and one step took 23 min on a loaded machine,
benchmarks/README.md):

    python benchmarks/notes_claims.py [--claims all | group_size clip rubric_size weight gdpo scale] [--seeds 3]
        [--steps 40] [--every 10] [--out outputs/notes_claims] [--plot notes_claims.png] [--read-finished]
        [--jobs 2]                                                     # two runs at a time, lowest seed first
    python benchmarks/notes_claims.py --claims scale                  # the computed table alone, seconds
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import itertools
import json
import math
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASE = ["experiment=smollm2_arithmetic"]
DIMENSIONS = ("bare_number", "correctness", "stops")
DROPOUT = 0.5
# every completion of a step logged (4 prompts × at most 8), for the per-group measurements read from samples.jsonl
SAMPLE_ROWS = 64
# the preset rubric's weights (conf/rubric_files/chat_arithmetic.yaml), for the dropout-noise measurement
PRESET_WEIGHTS = {"bare_number": 1.0, "correctness": 2.0, "stops": 1.0}


@dataclass(frozen=True)
class Cell:
    """One arm: its label in the tables and the `rlkit fit` overrides that make it."""

    label: str
    overrides: tuple[str, ...]
    # optimiser steps a rollout (objective.params.num_iterations): trainer.max_steps counts optimiser steps, so a cell
    # of 2 runs 2 × --steps of them to sample as many rollouts as the others
    iterations: int = 1


CELLS = {
    "control": Cell("preset at optim.lr=0 (control)", ("optim.lr=0",)),
    "preset": Cell("preset (G=4, 3 dims, correctness weight 2, clip 0.2, GRPO)", ()),
    "g2": Cell("G=2", ("num_generations=2",)),
    "g8": Cell("G=8", ("num_generations=8",)),
    "clean_clip02": Cell("clean rubric, clip 0.2", ("objective.params.num_iterations=2",), 2),
    "noisy_clip02": Cell(f"rubric.dropout={DROPOUT}, clip 0.2",
                         ("objective.params.num_iterations=2", f"rubric.dropout={DROPOUT}"), 2),
    "noisy_clip03": Cell(f"rubric.dropout={DROPOUT}, clip 0.3",
                         ("objective.params.num_iterations=2", f"rubric.dropout={DROPOUT}",
                          "objective.params.epsilon=0.3"), 2),
    "rubric7": Cell("7 dimensions", (f"rubric.path={HERE / 'notes_claims_7dim.yaml'}",)),
    "w1": Cell("correctness weight 1", ("++weights.params.weights={correctness:1}",)),
    "w3": Cell("correctness weight 3", ("++weights.params.weights={correctness:3}",)),
    # correctness first whatever the weights: the rubric's priorities (correctness 1, bare_number 2, stops 3) ranked
    # within each group; not a claim of the notes' but the remedy the docs name for conflicting dimensions, read
    # against the bare-number basin where correctness's share of the reward falls
    "lexicographic": Cell("correctness first (aggregator=lexicographic)", ("aggregator=lexicographic",)),
    "gdpo_note": Cell("experiment=gdpo_note (G=8)", ("experiment=[smollm2_arithmetic,gdpo_note]",)),
}


@dataclass(frozen=True)
class Claim:
    note: str        # where in the notes
    says: str        # the note's figure
    cells: tuple[str, ...]


CLAIMS = {
    "group_size": Claim("000 §4.3", "G=2 unstable, 16 costly, 8 balances", ("g2", "preset", "g8")),
    "clip": Claim("000 §4.3", "clip 0.3 instead of 0.2 smooths a noisy rubric",
                  ("clean_clip02", "noisy_clip02", "noisy_clip03")),
    "rubric_size": Claim("000 §7", "7 dimensions: worse judge consistency and worse training than 3",
                         ("preset", "rubric7")),
    "weight": Claim("004 §1.3", "a larger correctness weight lowered correctness under GRPO",
                    ("w1", "preset", "w3", "lexicographic")),
    "gdpo": Claim("004 §5.1", "GRPO: format ~97%, correctness 62% → 58%; GDPO: 69%, format ~93%", ("g8", "gdpo_note")),
    "scale": Claim("004 §2.1", "r1 std 0.01, r2 std 0.2: whatever w1, GRPO's advantage follows r2", ()),
}

# two-sided 95% t quantiles by degrees of freedom
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


# ---------------------------------------------------------------------------------------------------------- runs
def run_dir(out: Path, cell: str, steps: int, seed: int) -> Path:
    return out / f"{cell}-s{steps}" / f"seed{seed}"


def finished(path: Path) -> bool:
    """The run trained to its end: ``summary.json`` (which fit writes last) whose ``interrupted`` entry is null (a
    stopped run writes its summary too, naming the step it stopped after, and is set aside like any unfinished one)."""
    summary = path / "summary.json"
    return summary.is_file() and not json.loads(summary.read_text()).get("interrupted")


def set_aside(path: Path, why: str = "unfinished") -> Path:
    """A run's folder that is not to be read (by default an interrupted one), moved to the first free
    ``<name>.<why>-<k>`` (nothing is overwritten)."""
    for k in itertools.count(1):
        target = path.with_name(f"{path.name}.{why}-{k}")
        if not target.exists():
            path.rename(target)
            return target
    raise AssertionError("unreachable")


def train(cell: str, seed: int, steps: int, every: int, out: Path) -> Path:
    path = run_dir(out, cell, steps, seed)
    if finished(path):
        return path
    if path.exists():
        print(f"  {path} did not finish: moved to {set_aside(path)}", flush=True)
    path.parent.mkdir(parents=True, exist_ok=True)
    overrides, k = list(CELLS[cell].overrides), CELLS[cell].iterations
    base = [] if any(o.startswith("experiment=") for o in overrides) else BASE
    cmd = ["rlkit", "fit", *base, *overrides, "logger=none", f"seed={seed}", f"trainer.max_steps={steps * k}",
           f"heldout_every={every * k}", "log_samples.every=1",
           f"log_samples.rows={SAMPLE_ROWS}", f"checkpoint_every={steps * k}", f"hydra.run.dir={path}"]
    started = time.monotonic()
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    print(f"  {cell} seed {seed}: {time.monotonic() - started:.0f} s", flush=True)
    return path


# ------------------------------------------------------------------------------------------------------- reading
def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def groups_of(samples: list[dict]) -> list[tuple[int, list[dict]]]:
    """(step, the group's rows) in batch order: fit logs a step's first completion of every prompt, then the second,
    … (rlkit/train/callbacks.py ``sampled``), so a group's rows are gathered by (step, record, prompt)."""
    groups: dict[tuple, list[dict]] = {}
    for s in samples:
        groups.setdefault((s["step"], s["record"].get("id"), json.dumps(s["prompt"])), []).append(s)
    return [(key[0], rows) for key, rows in groups.items()]


def pearson(xs: list[float], ys: list[float]) -> float | None:
    if len(xs) < 3:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True))
    sxx, syy = sum((x - mx) ** 2 for x in xs), sum((y - my) ** 2 for y in ys)
    return sxy / math.sqrt(sxx * syy) if sxx > 0 and syy > 0 else None


def advantage_follows_correctness(samples: list[dict]) -> float | None:
    """Pearson's r of each completion's advantage with its correctness less its group's mean: how much of the
    advantage is about being right (the attribution 000 §7 says blurs with more dimensions)."""
    adv, dev = [], []
    for _, rows in groups_of(samples):
        if "advantage" not in rows[0] or "correctness" not in rows[0]:
            continue
        mean = statistics.fmean(r["correctness"] for r in rows)
        adv += [r["advantage"] for r in rows]
        dev += [r["correctness"] - mean for r in rows]
    return pearson(adv, dev)


def dropout_disagreement(samples: list[dict], seed: int, p: float = DROPOUT) -> float | None:
    """The share of within-group pairs the full rubric orders (weighted sum of the preset's weights) that the
    rubric-dropout reward orders otherwise (reversed or tied), over the run's own samples. The drops are drawn with
    rlkit's own ``rubric_dropout`` for each step's groups."""
    import torch

    from rlkit.reward.dropout import rubric_dropout

    names = list(PRESET_WEIGHTS)
    weights = torch.tensor([PRESET_WEIGHTS[n] for n in names])
    by_step: dict[int, list[list[dict]]] = {}
    for step, rows in groups_of(samples):
        by_step.setdefault(step, []).append(rows)
    ordered = changed = 0
    for step, groups in by_step.items():
        if len({len(g) for g in groups}) != 1:
            continue
        scores = torch.tensor([[[r[n] for n in names] for r in g] for g in groups], dtype=torch.float32)
        _, kept = rubric_dropout(scores, weights, p, seed, step)
        full = (scores * weights).sum(-1) / weights.sum()
        kw = weights * kept.float()  # [B, D]
        noisy = (scores * kw.unsqueeze(1)).sum(-1) / kw.sum(-1, keepdim=True)
        for b in range(scores.shape[0]):
            for i, j in itertools.combinations(range(scores.shape[1]), 2):
                a = float(full[b, i] - full[b, j])
                if a == 0:
                    continue
                ordered += 1
                changed += float(noisy[b, i] - noisy[b, j]) * a <= 0
    return changed / ordered if ordered else None


@dataclass
class Result:
    seed: int
    start: dict[str, float]
    end: dict[str, float]
    wall: float
    step_s: float | None
    zero_adv: float | None
    clip: float | None
    attribution: float | None
    noise: float | None
    curve: list[tuple[int, float]]

    def change(self, dim: str = "correctness") -> float:
        return self.end[dim] - self.start[dim]


def run_cells(cells: list[str], seeds: list[int], steps: int, every: int, out: Path, records_path: Path, *,
              jobs: int = 1, train_missing: bool = True,
              train_run: Callable[[str, int, int, int, Path], Path] = train) -> dict[tuple[str, int], Result]:
    """(cell, seed) → its result: read from the records, else from a finished folder, else trained (unless
    ``train_missing`` is off), ``jobs`` runs at a time, lowest seed first so every claim gets its next seed before any
    gets a third; each run's record is kept the moment it finishes, so an interrupted benchmark loses only the runs
    under way."""
    records = read_records(records_path)
    results: dict[tuple[str, int], Result] = {}
    missing = []
    for seed, cell in itertools.product(seeds, cells):
        if (cell, steps, seed) in records:
            results[(cell, seed)] = records[(cell, steps, seed)]
        else:
            missing.append((cell, seed))
    keeping, failed_once = threading.Lock(), threading.Event()

    def finish(cell: str, seed: int) -> None:
        if failed_once.is_set():  # queued behind a failure or an interrupt: not started
            return
        try:
            path = run_dir(out, cell, steps, seed)
            if train_missing and not finished(path):
                train_run(cell, seed, steps, every, out)
            if finished(path):
                overrides = " ".join(CELLS[cell].overrides)
                result = read_run(path, seed, noisy=f"rubric.dropout={DROPOUT}" in overrides,
                                  advantages="gdpo_note" not in overrides, iterations=CELLS[cell].iterations)
                with keeping:
                    keep_record(records_path, cell, steps, result)
                    results[(cell, seed)] = result
        except BaseException:
            failed_once.set()
            raise

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        futures = [pool.submit(finish, cell, seed) for cell, seed in missing]
        try:
            wait(futures, return_when=FIRST_EXCEPTION)
            for future in futures:
                if future.done():
                    future.result()  # the first failed run's error: its command and stderr
        finally:
            # after a failure or a Ctrl-C nothing new starts and the runs under way finish; after success, a no-op
            failed_once.set()
            pool.shutdown(wait=True, cancel_futures=True)
    return results


# ------------------------------------------------------------------------------------------------------- records
def read_records(path: Path) -> dict[tuple[str, int, int], Result]:
    """(cell, steps, seed) → the kept figures of a finished run; a line for a cell this script no longer has (or
    whose overrides changed since) is left out, so an edited cell is trained again rather than read stale."""
    records: dict[tuple[str, int, int], Result] = {}
    for n, line in enumerate(path.read_text().splitlines() if path.is_file() else [], 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            cell, steps, overrides, result = row["cell"], row["steps"], row["overrides"], row["result"]
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise SystemExit(f"{path}:{n}: not a notes_claims record ({e})") from e
        if cell in CELLS and portable(CELLS[cell].overrides) == portable(overrides):
            result["curve"] = [tuple(point) for point in result["curve"]]
            records[(cell, steps, result["seed"])] = Result(**result)
    return records


def portable(overrides: tuple[str, ...] | list[str]) -> list[str]:
    """Overrides as a record keeps them: a file of this folder named from ``benchmarks/``, so a record written from
    one checkout (or an older record with its absolute path) matches the cell in any other."""
    return [re.sub(r"=\S*/benchmarks/", "=benchmarks/", o) for o in overrides]


def keep_record(path: Path, cell: str, steps: int, result: Result) -> None:
    row = {"cell": cell, "steps": steps, "overrides": portable(CELLS[cell].overrides), "commit": source_commit(),
           "result": dataclasses.asdict(result)}
    with path.open("a") as f:
        f.write(json.dumps(row) + "\n")


def source_commit() -> str | None:
    done = subprocess.run(["git", "-C", str(HERE), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or None


def mean_of(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if key in r and r[key] is not None and math.isfinite(r[key])]
    return statistics.fmean(values) if values else None


def read_run(path: Path, seed: int, noisy: bool, advantages: bool, iterations: int) -> Result:
    """One finished run; ``advantages``: its objective learns from advantages (group_dpo's samples carry another
    per-completion signal in that column, so the attribution is left out there)."""
    summary = json.loads((path / "summary.json").read_text())
    rows = read_jsonl(path / "metrics.jsonl")
    train_rows = [r["metrics"] for r in rows if "reward/mean" in r["metrics"]]
    zero = [r.get("advantages/frac_zero_groups", r.get("frac_zero_std_groups")) for r in train_rows]
    samples = read_jsonl(path / "samples.jsonl")
    # held-out rows at rollouts, not optimiser steps; a step evaluated twice (the last) is read once
    curve = sorted({r["step"] // iterations: r["metrics"]["heldout/correctness"] for r in rows
                    if "heldout/correctness" in r["metrics"]}.items())
    return Result(seed, summary["start"], summary["end"], summary.get("wall_time_s", float("nan")),
                  mean_of(train_rows, "time/step"),
                  statistics.fmean(z for z in zero if z is not None) if any(z is not None for z in zero) else None,
                  mean_of(train_rows, "clip_ratio"), advantage_follows_correctness(samples) if advantages else None,
                  dropout_disagreement(samples, seed) if noisy else None, curve)


# --------------------------------------------------------------------------------------------------------- stats
def interval(values: list[float]) -> tuple[float, float, float] | None:
    """(mean, low, high) of the 95% t-interval; None with fewer than two values."""
    if len(values) < 2:
        return None
    mean = statistics.fmean(values)
    half = T95.get(len(values) - 1, 1.96) * statistics.stdev(values) / math.sqrt(len(values))
    return mean, mean - half, mean + half


def cell_text(values: list[float]) -> str:
    if not values:
        return "not yet run"
    ci = interval(values)
    if ci is None:
        return f"{values[0]:+.3f} (1 seed, no interval)"
    return f"{ci[0]:+.3f} [{ci[1]:+.3f}, {ci[2]:+.3f}]"


def opt(value: float | None, fmt: str = ".3f") -> str:
    return "–" if value is None else format(value, fmt)


def mean_opt(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.fmean(present) if present else None


def direction(better: list[float], worse: list[float]) -> str:
    """Whether ``better``'s correctness change is above ``worse``'s as a claim says: reproduced / not / partly."""
    if not better or not worse:
        return "not yet run"
    if len(better) < 2 or len(worse) < 2:
        return "undecided (1 seed)"
    hi, lo = interval(better), interval(worse)
    assert hi is not None and lo is not None
    if hi[0] <= lo[0]:
        return "not reproduced"
    return "reproduced" if hi[1] > lo[2] else "partly (the mean goes the note's way, the intervals overlap)"


# ------------------------------------------------------------------------------------------------------- tables
def table(claim: str, results: dict[str, list[Result]], control: list[Result]) -> str:
    spec = CLAIMS[claim]
    lines = [f"\n## {claim} ({spec.note}): the note: {spec.says}",
             "| arm | seeds | held-out correctness change, mean [95% CI] | seed sd | bare_number end | stops end | "
             "zero-adv. groups | clip ratio | adv.~correctness r | dropout pair disagreement | s/step | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in (*spec.cells, "control"):
        runs = control if name == "control" else results.get(name, [])
        label = CELLS[name].label
        if not runs:
            lines.append(f"| {label} | 0 | not yet run |" + " |" * 9)
            continue
        changes = [r.change() for r in runs]
        sd = statistics.stdev(changes) if len(changes) > 1 else None
        lines.append(" | ".join([
            f"| {label}", str(len(runs)), cell_text(changes), opt(sd),
            opt(statistics.fmean(r.end["bare_number"] for r in runs)),
            opt(statistics.fmean(r.end["stops"] for r in runs)),
            opt(mean_opt([r.zero_adv for r in runs])), opt(mean_opt([r.clip for r in runs])),
            opt(mean_opt([r.attribution for r in runs]), "+.2f"), opt(mean_opt([r.noise for r in runs])),
            opt(mean_opt([r.step_s for r in runs]), ".0f"), f"{statistics.fmean(r.wall for r in runs):.0f} |"]))
    lines.append(f"verdict: {verdict(claim, results)}")
    return "\n".join(lines)


def verdict(claim: str, results: dict[str, list[Result]]) -> str:
    ch = {name: [r.change() for r in runs] for name, runs in results.items()}
    if claim == "group_size":
        base = direction(ch.get("g8", []), ch.get("g2", []))
        if len(ch.get("g2", [])) > 1 and len(ch.get("g8", [])) > 1:
            sd2, sd8 = statistics.stdev(ch["g2"]), statistics.stdev(ch["g8"])
            spread = f"; seed spread G=2 {sd2:.3f} against G=8 {sd8:.3f}"
            if base.startswith("not reproduced") and sd2 >= 2 * sd8 and sd2 > 0:
                base = "partly (G=2 spreads more over seeds, but its mean is not below G=8's)"
            return base + spread
        return base
    if claim == "clip":
        return direction(ch.get("noisy_clip03", []), ch.get("noisy_clip02", [])) + (
            " (and read the clip ratio: a clip that never binds cannot smooth anything)")
    if claim == "rubric_size":
        return direction(ch.get("preset", []), ch.get("rubric7", [])) + (
            "; judge consistency not measured (the rule judge scores a completion the same every time)")
    if claim == "weight":
        return direction(ch.get("w1", []), ch.get("w3", []))
    if claim == "gdpo":
        v = direction(ch.get("gdpo_note", []), ch.get("g8", []))
        gd, gr = results.get("gdpo_note", []), results.get("g8", [])
        if gd and gr:
            fmt = {d: (statistics.fmean(r.end[d] for r in gd), statistics.fmean(r.end[d] for r in gr))
                   for d in ("bare_number", "stops")}
            v += "; format end (gdpo_note / GRPO): " + ", ".join(f"{d} {a:.3f} / {b:.3f}" for d, (a, b) in fmt.items())
        return v
    raise KeyError(claim)


def scale_table() -> str:
    """004 §2.1 computed with the scale-imbalance test's own functions (2,000 groups of 8, seed 0)."""
    import torch

    from rlkit_plugins.advantages.gdpo import gdpo_advantages
    from rlkit_plugins.advantages.grpo import group_normalized_advantages

    path = HERE.parent / "tests" / "plugins" / "test_scale_imbalance.py"
    spec = importlib.util.spec_from_file_location("notes_claims_scale_test", path)
    assert spec is not None and spec.loader is not None
    test = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(test)
    gen = torch.Generator().manual_seed(0)  # the test's fixture, drawn the same way
    r1 = 0.98 + test.S1 * torch.randn(test.GROUPS, test.G, generator=gen, dtype=torch.float64)
    r2 = 0.5 + test.S2 * torch.randn(test.GROUPS, test.G, generator=gen, dtype=torch.float64)
    lines = [f"\n## scale (004 §2.1): the note: {CLAIMS['scale'].says}",
             f"computed on {test.GROUPS} groups of {test.G}, r1 ~ N(0.98, {test.S1}), r2 ~ N(0.5, {test.S2}), w2 = 1; "
             "correlation of the advantage with each reward's deviation from its group mean",
             "| estimator | w1 | corr with r1 | corr with r2 | by hand, r1 (w1·s1 / hypot(w1·s1, s2)) |",
             "|---|---|---|---|---|"]
    for w1 in (1.0, 2.0, 5.0, 10.0, 20.0, 50.0):
        adv = group_normalized_advantages((w1 * r1 + r2).float())
        lines.append(f"| grpo | {w1:g} | {test.within_group_correlation(adv, r1):.2f} | "
                     f"{test.within_group_correlation(adv, r2):.2f} | {test.expected_share(w1):.2f} |")
    for w1 in (1.0, 5.0):
        adv = gdpo_advantages(torch.stack([r1, r2], dim=-1).float(), torch.tensor([w1, 1.0]))
        lines.append(f"| gdpo | {w1:g} | {test.within_group_correlation(adv, r1):.2f} | "
                     f"{test.within_group_correlation(adv, r2):.2f} | "
                     f"{w1 / math.hypot(w1, 1.0):.2f} (w1 / hypot(w1, w2)) |")
    lines.append("verdict: partly: GRPO's advantage follows r2 while w1·s1 is small beside s2 (to w1 ≈ 5), not "
                 "\"whatever w1\": at w1 = s2/s1 = 20 both count alike; advantage=gdpo gives each reward its weight's "
                 "share whatever its std")
    return "\n".join(lines)


def plot(by_cell: dict[str, list[Result]], claims: list[str], path: Path) -> None:
    """Held-out correctness over steps, mean over seeds, one panel per trained claim."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trained = [c for c in claims if CLAIMS[c].cells]
    fig, axes = plt.subplots(1, len(trained), figsize=(4 * len(trained), 3.4), squeeze=False)
    for ax, claim in zip(axes[0], trained, strict=True):
        for name in (*CLAIMS[claim].cells, "control"):
            runs = by_cell.get(name, [])
            if not runs:
                continue
            steps = [s for s, _ in runs[0].curve]
            points = [statistics.fmean(r.curve[i][1] for r in runs if len(r.curve) > i) for i in range(len(steps))]
            ax.plot(steps, points, marker="o", label=CELLS[name].label[:32],
                    color="grey" if name == "control" else None)
        ax.set(title=f"{claim} ({CLAIMS[claim].note})", xlabel="rollout step", ylabel="held-out correctness",
               ylim=(0, 1))
        ax.legend(fontsize=6)
    fig.suptitle("SmolLM2-135M-Instruct, experiment=smollm2_arithmetic: the design notes' claims, mean over seeds",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--claims", nargs="+", default=["all"], choices=["all", *CLAIMS])
    parser.add_argument("--seeds", type=int, default=3, help="seeds 1..N (default 3)")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=10, help="held-out evaluation every N steps (at most --steps)")
    parser.add_argument("--out", type=Path, default=Path("outputs/notes_claims"))
    parser.add_argument("--plot", type=Path, help="a PNG of the held-out correctness curves")
    parser.add_argument("--jobs", type=int, default=1,
                        help="runs trained at once (each its own `rlkit fit`, which picks its torch threads by the "
                             "load at its start, rlkit/train/threads.py, as the committed records did; 2 on 2 "
                             "cores kept both busy)")
    parser.add_argument("--read-finished", action="store_true",
                        help="run nothing: read the finished cells under --out and --records and print the tables")
    parser.add_argument("--records", type=Path, default=HERE / "notes_claims_runs.jsonl",
                        help="one line of figures per finished run, read before training (default %(default)s)")
    args = parser.parse_args()
    claims = list(CLAIMS) if "all" in args.claims else args.claims
    seeds = list(range(1, args.seeds + 1))
    every = max(1, min(args.every, args.steps))
    cells = list(dict.fromkeys(c for claim in claims for c in CLAIMS[claim].cells))
    if cells:
        cells.append("control")
    print(f"SmolLM2-135M-Instruct, experiment=smollm2_arithmetic, {args.steps} steps, seeds {seeds}, held-out every "
          f"{every}; cells: {', '.join(cells) or 'none'}; runs under {args.out}")
    if args.steps < 40 or len(seeds) < 3:
        print("smaller than the benchmark (40 steps, 3 seeds): a smoke of the code path, not a result")
    started = time.monotonic()
    results = run_cells(cells, seeds, args.steps, every, args.out, args.records, jobs=args.jobs,
                        train_missing=not args.read_finished)
    by_cell: dict[str, list[Result]] = {}
    for (cell, _seed), result in sorted(results.items(), key=lambda item: (cells.index(item[0][0]), item[0][1])):
        by_cell.setdefault(cell, []).append(result)
    control = by_cell.get("control", [])
    for claim in claims:
        print(scale_table() if claim == "scale" else table(claim, by_cell, control))
    if args.plot and any(CLAIMS[c].cells for c in claims):
        plot(by_cell, claims, args.plot)
        print(f"\nplot: {args.plot}")
    print(f"\nwall time {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
