"""benchmarks/calibration_rounds.py's mechanical rubric revision: the most frequent direction of disagreement, its most
typical line as a labelled anchor example at its human level (a negative one where the judge over-gives, a positive
one where it under-gives), the judge's level's anchor tightened once, written as a new rubric version that loads; and
a split by prompt that never puts a prompt on both sides."""

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
    # the two alike ("a", 0.9 against "b"'s 0.6). Over-given (1 > 0): a negative example of level 0, an answer of that
    # level that may look better (docs/rubrics.md), after the shipped ones
    shipped = yaml.safe_load(RUBRIC.read_text())["dimensions"]
    assert bare["anchors"][0]["negative"] == [*shipped[0]["anchors"][0]["negative"], "The answer is 7."]
    assert "positive" not in bare["anchors"][0]
    assert "negative" not in bare["anchors"][1]  # never on the judge's level j
    assert bare["anchors"][1]["text"] == "Only the number. " + cr.TIGHTEN.format(h="0", j="1")
    assert correctness == shipped[1]  # no disagreement: unchanged
    assert "correctness: no disagreement" in changes[1]
    # stops: the judge under-gives once (0 < 1): a positive example on 1, the tightening on 0
    assert stops["anchors"][1]["positive"] == [*shipped[2]["anchors"][1]["positive"],
                                                "Seven, as everyone knows from school"]
    assert stops["anchors"][1].get("negative", []) == shipped[2]["anchors"][1].get("negative", [])
    assert cr.TIGHTEN.format(h="1", j="0") in stops["anchors"][0]["text"]

    new = cr.write_version(data, changes, 1, tmp_path / "v1.1.yaml")
    rubric = load_rubric(new)  # the changelog entry's hash matches the content
    assert rubric.version == "1.1"
    assert "Calibration round 1" in data["changelog"][-1]["note"]

    # the next round: an example is never added twice, the sentence is said once
    again = cr.revise(data, BOUNDS, LINES)
    assert data["dimensions"][0]["anchors"][0]["negative"][-2:] == ["The answer is 7.", "The answer is 12."]
    assert data["dimensions"][0]["anchors"][1]["text"].count("Strictly") == 1
    assert "each already an example" in again[2]



def test_over_given_majority_is_a_negative_example_and_under_given_a_positive_one_at_the_human_level(tmp_path):
    # a small rubric of its own: a 1-3 scale the judge over-gives on, a binary dimension it under-gives on
    data = {"name": "tiny", "version": "2.0", "dimensions": [
        {"name": "tone", "range": [1, 3], "anchors": {1: "Rude", 2: "Plain", 3: {"text": "Warm", "positive": ["Hi!"]}}},
        {"name": "detail", "type": "binary", "anchors": {0: "Bare", 1: "Explained"}},
    ]}
    lines = [
        # tone: 3 → 1 twice (a polite-sounding reply that people still found rude), 2 → 1 once
        {"id": "p", "completion": "Thank you so much, but no.", "human": {"tone": 1, "detail": 1},
         "judge": {"tone": 2.9, "detail": 0.1}},
        {"id": "q", "completion": "Thank you so much, but never.", "human": {"tone": 1, "detail": 1},
         "judge": {"tone": 3.0, "detail": 0.2}},
        {"id": "r", "completion": "Fine.", "human": {"tone": 1, "detail": 0}, "judge": {"tone": 2.1, "detail": 0.0}},
    ]
    changes = cr.revise(data, {"tone": (1.0, 3.0), "detail": (0.0, 1.0)}, lines)
    tone, detail = (d["anchors"] for d in data["dimensions"])
    # over-given (3 > 1): a negative example of the human level 1, never a positive one, nothing on 3's examples
    assert tone[1]["negative"] == ["Thank you so much, but never."]  # the larger miss of the two alike
    assert "positive" not in tone[1]
    assert tone[3]["positive"] == ["Hi!"] and "negative" not in tone[3]
    assert tone[3]["text"] == "Warm. " + cr.TIGHTEN.format(h="1", j="3")
    assert "added as a negative example on 1" in changes[0]
    # under-given (0 < 1): a positive example of the human level 1 (of the two alike, the larger miss: "p", 0.1)
    assert detail[1]["positive"] == ["Thank you so much, but no."]
    assert "negative" not in detail[1]
    assert "added as a positive example on 1" in changes[1]

    rubric = load_rubric(cr.write_version(data, changes, 1, tmp_path / "tiny-v2.1.yaml"))  # its hash checked too
    assert rubric.version == "2.1"
    tone_anchors = rubric.dimensions[0].anchors
    assert tone_anchors[1.0].negative == ["Thank you so much, but never."] and tone_anchors[1.0].positive == []
    assert rubric.dimensions[1].anchors[1.0].positive == detail[1]["positive"]

def test_split_keeps_each_prompt_on_one_side(tmp_path):
    calibration, heldout, n_cal, n_held = cr.split_labels(REPO / "conf" / "calibration" /
                                                          "chat_arithmetic_labels.jsonl", 0.5, 0, 1, tmp_path)
    sides = [{json.loads(x)["prompt"] for x in path.read_text().splitlines()} for path in (calibration, heldout)]
    assert n_cal + n_held == 264 and n_cal > 50 and n_held > 50
    assert not sides[0] & sides[1]


def test_a_finished_part_is_read_back_only_under_the_same_judge_rubric_and_labels(tmp_path):
    rubric, labels = tmp_path / "rubric.yaml", tmp_path / "part.jsonl"
    rubric.write_text(RUBRIC.read_text())
    labels.write_text(json.dumps({"id": "a", "prompt": "What is 3 + 4?", "completion": "7"}) + "\n")
    out = tmp_path / "round1" / "held-out"
    out.mkdir(parents=True)
    written = {"lines": [{"id": "a"}], "dimensions": {}}
    (out / "calibration.json").write_text(json.dumps(written))
    setting = {"judge": "judge.gguf"}
    part = {**setting, "rubric": cr.file_sha256(rubric), "labels": cr.file_sha256(labels)}
    cr.mark_finished(out, part, 12.34)
    # read back without judging: no rlkit is run (there is no server to run it against)
    assert cr.calibrate_part([], rubric, labels, out, tmp_path, None, setting) == (written, 12.3, "", True)
    assert cr.finished_seconds(out, {**part, "judge": "another.gguf"}) is None
    rubric.write_text(rubric.read_text() + "\n# revised\n")
    assert cr.finished_seconds(out, {**setting, "rubric": cr.file_sha256(rubric), "labels": part["labels"]}) is None
    (out / "calibration.json").unlink()
    assert cr.finished_seconds(out, part) is None, "a marker without its calibration is not a finished part"
