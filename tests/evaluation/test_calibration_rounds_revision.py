"""benchmarks/calibration_rounds.py's mechanical rubric revision: the most frequent direction of disagreement, its most
typical line as a labelled anchor example at its human level, the over-given level's anchor tightened once, written
as a new rubric version that loads; and a split by prompt that never puts a prompt on both sides."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from rlkit.core.rubric import load_rubric

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import calibration_rounds as cr  # noqa: E402

RUBRIC = REPO / "conf" / "rubric_files" / "chat_arithmetic.yaml"
BOUNDS = {"bare_number": (0.0, 1.0), "correctness": (0.0, 1.0), "stops": (0.0, 1.0)}


def line(completion: str, human: dict[str, int], judge: dict[str, float], ident: str) -> dict:
    return {"id": ident, "prompt": "What is 3 + 4? Reply with only the number.", "completion": completion,
            "human": human, "judge": judge}


LINES = [
    # the judge calls three replies with words around the number bare (0 → 1), two of them alike
    line("The answer is 7.", {"bare_number": 0, "correctness": 1, "stops": 1},
         {"bare_number": 0.9, "correctness": 1.0, "stops": 1.0}, "a"),
    line("The answer is 12.", {"bare_number": 0, "correctness": 0, "stops": 1},
         {"bare_number": 0.6, "correctness": 0.0, "stops": 1.0}, "b"),
    line("Seven, as everyone knows from school", {"bare_number": 0, "correctness": 1, "stops": 1},
         {"bare_number": 0.8, "correctness": 1.0, "stops": 0.2}, "c"),
    # and one the other way round: a bare number it calls prose
    line("7", {"bare_number": 1, "correctness": 1, "stops": 1},
         {"bare_number": 0.1, "correctness": 1.0, "stops": 1.0}, "d"),
]


def test_revision_adds_the_most_typical_disagreement_at_its_human_level_and_tightens_the_over_given_level(tmp_path):
    data = yaml.safe_load(RUBRIC.read_text())
    changes = cr.revise(data, BOUNDS, LINES)
    bare, correctness, stops = data["dimensions"]
    # 0 → 1 three times beats 1 → 0 once; of the three, "The answer is N." is the typical one, and the larger miss of
    # the two alike ("a", 0.9 against "b"'s 0.6)
    assert bare["anchors"][0]["positive"] == ["The answer is 7."]
    assert "negative" not in bare["anchors"][1]  # a negative example is of its own level (docs/rubrics.md), not of j
    assert bare["anchors"][1]["text"] == "Only the number. " + cr.TIGHTEN.format(h="0", j="1")
    assert correctness == yaml.safe_load(RUBRIC.read_text())["dimensions"][1]  # no disagreement: unchanged
    assert "correctness: no disagreement" in changes[1]
    # stops: the judge under-gives once (1 → 0): the example goes on 1, the tightening on 0
    assert stops["anchors"][1]["positive"][-1] == "Seven, as everyone knows from school"
    assert cr.TIGHTEN.format(h="1", j="0") in stops["anchors"][0]["text"]

    new = cr.write_version(data, changes, 1, tmp_path / "v1.1.yaml")
    rubric = load_rubric(new)  # the changelog entry's hash matches the content
    assert rubric.version == "1.1"
    assert "Calibration round 1" in data["changelog"][-1]["note"]

    # the next round: an example is never added twice, the sentence is said once
    again = cr.revise(data, BOUNDS, LINES)
    assert data["dimensions"][0]["anchors"][0]["positive"] == ["The answer is 7.", "The answer is 12."]
    assert data["dimensions"][0]["anchors"][1]["text"].count("Strictly") == 1
    assert "each already an example" in again[2]


def test_split_keeps_each_prompt_on_one_side(tmp_path):
    calibration, heldout, n_cal, n_held = cr.split_labels(REPO / "conf" / "calibration" /
                                                          "chat_arithmetic_labels.jsonl", 0.5, 0, 1, tmp_path)
    sides = [{json.loads(x)["prompt"] for x in path.read_text().splitlines()} for path in (calibration, heldout)]
    assert n_cal + n_held == 264 and n_cal > 50 and n_held > 50
    assert not sides[0] & sides[1]
