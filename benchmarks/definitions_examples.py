"""What a definitions run's examples say, beside what `uses_word` scores: a reading of held-out answers.

`experiment=smollm2_definitions`'s `uses_word` passes an answer where a form of the word occurs after its first
sentence. SmolLM2 saturates it with a scaffold, "An example sentence using "busy" is: ...", which names the word
whether or not the example uses it, and `rlkit rubric tighten` proposes a check against the scaffold's word
(benchmarks/README.md). This script reads the held-out answers of `tighten_continue.py`'s arms, at their start and
end, and counts per arm:

* **scaffolded**: the answer introduces its example as one ("example sentence", "for example", "example of");
* **names the word**: a form occurs after the first sentence only as a mention: quoted on its own (`"busy"`) or
  after "using" / "with the word" / "of" / "for";
* **the example uses it**: a form still occurs after the first sentence with those mentions taken out.

A reading, not a judge: rules over the text, written for this task's answers (rlkit's choice of phrases, from the
answers read in the continued runs); it tells whether a rise in `uses_word` under a proposal is examples that use
the word or the same scaffold said another way.

    python benchmarks/definitions_examples.py /work/tc/defs   # tighten_continue.py's --out
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path

# the first sentence's end, as learner_definition.yaml's uses_word extract reads it: . ! or ? (and what sticks to it)
# then space, or a line break
_FIRST_SENTENCE = re.compile(r"[.!?]\S*\s+|\n")
_SCAFFOLD = re.compile(r"\bexample\s+(?:sentence|of)\b|\bfor\s+example\b|\bexample\s*:", re.IGNORECASE)
_QUOTES = "\"'“”‘’"


def _mentions(forms: Sequence[str]) -> re.Pattern[str]:
    words = "|".join(re.escape(f) for f in sorted(forms, key=len, reverse=True))
    quoted = rf"[{_QUOTES}]\s*(?:{words})\s*[{_QUOTES}]"
    introduced = rf"\b(?:using|with\s+the\s+word|with|of|for|the\s+word)\s+[{_QUOTES}]?(?:{words})\b[{_QUOTES}]?"
    return re.compile(rf"{quoted}|{introduced}", re.IGNORECASE)


def read_answer(answer: str, forms: Sequence[str]) -> dict[str, bool]:
    """The three readings of one answer (see the module docstring)."""
    parts = _FIRST_SENTENCE.split(answer.strip(), maxsplit=1)
    rest = parts[1] if len(parts) == 2 else ""

    def has_form(text: str) -> bool:
        return any(re.search(rf"\b{re.escape(f)}\b", text, re.IGNORECASE) for f in forms)

    used = has_form(_mentions(forms).sub(" ", rest)) if forms else False
    return {"scaffolded": bool(_SCAFFOLD.search(answer)), "names_the_word": has_form(rest) and not used,
            "example_uses_it": used}


def shares(rows: Sequence[dict]) -> dict[str, float]:
    readings = [read_answer(r["completion"], (r.get("record") or {}).get("forms") or []) for r in rows]
    return {k: sum(x[k] for x in readings) / len(readings) for k in readings[0]} if readings else {}


def arm_rows(run_dir: Path) -> tuple[list[dict], list[dict]]:
    """The arm's held-out answers at its first and its last held-out step."""
    path = run_dir / "heldout_samples.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    steps = sorted({r["step"] for r in rows})
    if not steps:
        raise SystemExit(f"{path}: no held-out answers")
    return [r for r in rows if r["step"] == steps[0]], [r for r in rows if r["step"] == steps[-1]]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="tighten_continue.py's --out")
    args = parser.parse_args(argv)
    arms = sorted(p for p in args.out.glob("after-seed*/*-seed*") if p.is_dir() and "." not in p.name
                  and (p / "summary.json").is_file())
    if not arms:
        print(f"no finished arm under {args.out}", file=sys.stderr)
        return 1
    print("| arm | held-out answers | scaffolded, start → end | names the word only | the example uses it |")
    print("|---|--:|---|---|---|")
    for run_dir in arms:
        first, last = arm_rows(run_dir)
        start, end = shares(first), shares(last)
        cells = [f"{start[k]:.3f} → {end[k]:.3f}" for k in ("scaffolded", "names_the_word", "example_uses_it")]
        print(f"| {run_dir.name} | {len(last)} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
