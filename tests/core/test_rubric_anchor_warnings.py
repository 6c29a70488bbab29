"""Anchor warnings: a dimension's levels without anchor text and a dimension without a negative example are counted by
hand here; they are warnings (the rubric loads, its hash is what it was), shown by ``rlkit validate`` and
``rlkit rubric lint``, never by loading a rubric for a run."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import yaml

from rlkit.cli import main
from rlkit.core.rubric import (
    anchor_levels,
    anchor_report,
    load_rubric,
    rubric_from_dict,
)

REPO = Path(__file__).resolve().parents[2]
RUBRICS = REPO / "conf" / "rubric_files"

# levels and negatives, dimension by dimension:
#   clarity  [1, 5], anchors 1 (with a negative), 3, 5    -> levels 2, 4 missing; has a negative
#   format   binary, anchor 1 only, no negative           -> level 0 missing; no negative
#   score    [0, 100] (continuous: only its ends), both    -> nothing
#   tone     [1, 3], level 1's text blank, a negative at 2 -> level 1 missing; has a negative
#   balance  [-0.5, 0.5], no anchors                       -> both ends missing; no negative
# in all: 2 + 1 + 0 + 1 + 2 = 6 levels without anchors, 2 dimensions without a negative example
GAPPY = {"name": "gappy", "version": "1", "dimensions": [
    {"name": "clarity", "type": "scale", "range": [1, 5],
     "anchors": {1: {"text": "Confusing", "negative": ["As an AI, I think maybe..."]}, 3: "Readable", 5: "Clear"}},
    {"name": "format", "type": "binary", "anchors": {1: {"text": "Starts with a number", "positive": ["7"]}}},
    {"name": "score", "type": "scale", "range": [0, 100],
     "anchors": {0: {"text": "Wrong", "negative": ["8"]}, 100: "Right"}},
    {"name": "tone", "type": "scale", "range": [1, 3],
     "anchors": {1: "  ", 2: {"text": "Curt", "negative": ["Whatever."]}, 3: "Warm"}},
    {"name": "balance", "type": "scale", "range": [-0.5, 0.5]}]}


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


def test_levels_and_negatives_counted_by_hand(tmp_path):
    report = anchor_report(load_rubric(_write(tmp_path / "gappy.yaml", GAPPY)))
    assert report.skipped is None
    assert [(f.dimension, f.missing_levels, f.no_negative) for f in report.findings] == [
        ("clarity", (2.0, 4.0), False), ("format", (0.0,), True), ("tone", (1.0,), False),
        ("balance", (-0.5, 0.5), True)]
    assert report.unanchored_levels == 6 and report.dimensions_without_negative == 2
    assert report.summary() == "rubric anchors: 6 levels without anchors, 2 dimensions without a negative example"
    source = str(tmp_path / "gappy.yaml")
    assert report.messages() == [
        f"{source}: dimensions[0](clarity).anchors: levels 2, 4 of range [1, 5] have no anchor text",
        f"{source}: dimensions[1](format).anchors: level 0 of range [0, 1] has no anchor text",
        f"{source}: dimensions[1](format).anchors: no negative example (an anchor's `negative:` list: an answer that "
        "looks right but is not)",
        f"{source}: dimensions[3](tone).anchors: level 1 of range [1, 3] has no anchor text",
        f"{source}: dimensions[4](balance).anchors: levels -0.5, 0.5 of range [-0.5, 0.5] have no anchor text",
        f"{source}: dimensions[4](balance).anchors: no negative example (an anchor's `negative:` list: an answer that "
        "looks right but is not)"]


@pytest.mark.parametrize(("range_", "levels"), [
    ((1, 5), [1, 2, 3, 4, 5]), ((0, 10), list(range(11))), ((0, 11), [0, 11]), ((0, 100), [0, 100]),
    ((-1, 0), [-1, 0]), ((0.5, 2.5), [0.5, 2.5])])
def test_which_levels_need_an_anchor(range_, levels):
    rubric = rubric_from_dict({"name": "r", "version": "1", "dimensions": [
        {"name": "d", "type": "scale", "range": list(range_)}]})
    assert anchor_levels(rubric.dimensions[0]) == [float(v) for v in levels]


def test_shipped_rubrics():
    """Counted by hand from the files: arithmetic's brevity anchors 1, 3, 5 and repetition 1, 5 of [1, 5], every
    dimension with a negative; the others anchor every level with a negative; per_record is a frame."""
    arithmetic = anchor_report(load_rubric(RUBRICS / "arithmetic.yaml"))
    assert (arithmetic.unanchored_levels, arithmetic.dimensions_without_negative) == (5, 0)
    assert [(f.dimension, f.missing_levels) for f in arithmetic.findings] == [
        ("brevity", (2.0, 4.0)), ("repetition", (2.0, 3.0, 4.0))]
    for name in ("calculator", "calculator_steps", "chat_arithmetic", "learner_definition"):
        report = anchor_report(load_rubric(RUBRICS / f"{name}.yaml"))
        assert report.findings == () and report.skipped is None, name
        assert report.summary() == "rubric anchors: 0 levels without anchors, 0 dimensions without a negative example"
    frame = anchor_report(load_rubric(RUBRICS / "per_record.yaml"))
    assert frame.findings == () and "per_record" in frame.skipped
    assert frame.summary().startswith("rubric anchors: not checked (")


def test_a_per_prompt_rubric_is_not_checked():
    criteria = [{"name": f"essential_{i}", "type": "binary", "category": "essential", "anchors": {0: "Not met",
                                                                                                  1: "Met"}}
                for i in range(7)]
    report = anchor_report(rubric_from_dict({"name": "q1", "version": "1", "dimensions": criteria}))
    assert report.findings == () and "per-prompt" in report.skipped


# The hash is part of a run's identity: the check adds no field, so a rubric hashes as it always did. Pinned values:
# the shipped rubrics' changelog hashes, and this inline rubric's hash under rlkit before the check existed.
PINNED = {"name": "pinned", "version": "1", "dimensions": [
    {"name": "clarity", "type": "scale", "range": [1, 3],
     "anchors": {1: {"text": "Muddled", "negative": ["um, so, like"]}, 3: "Clear"}},
    {"name": "format", "type": "binary", "checks": [{"type": "regex", "pattern": "^\\d"}]}]}
PINNED_HASH = "e85222d05a6504518b845fbe21a3e8569ee1c094bcb8982e1361084102ef856c"
SHIPPED_HASHES = {"arithmetic": "f089cdf08376238f041c908fe2d888ba082b21eb71583a1a8d618f8339b47e20",
                  "calculator": "ea3cb5fcbfddb7b26e86f7fca175a8dd9d4111c93953b26fd3f67a1bed0c023e",
                  "chat_arithmetic": "d65b9eddb28bb1b8c9e08a72faf59973e6842656fff6d6c276b6a62f5ac6b65d",
                  "learner_definition": "58c7352cce4cf2bf38cfaca96122744802ee4f1a5f7dba58a2aaa2e8932d7f5b",
                  "per_record": "bf73027fefd6b5f9dae89ae94224dcc079ab4d2dea5ff9d79412af34472661d5"}


def test_the_content_hash_is_unchanged():
    rubric = rubric_from_dict(PINNED)
    assert rubric.content_hash == PINNED_HASH
    anchor_report(rubric)
    assert rubric.content_hash == PINNED_HASH  # reading it changes nothing
    assert set(rubric.canonical()["dimensions"][0]["anchors"]["1.0"]) == {"text", "positive", "negative"}
    for name, digest in SHIPPED_HASHES.items():
        assert load_rubric(RUBRICS / f"{name}.yaml").content_hash == digest, name


def test_not_errors_and_not_on_load(tmp_path):
    path = _write(tmp_path / "gappy.yaml", GAPPY)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rubric = load_rubric(path)  # what `rlkit fit` does: it loads, and says nothing about anchors
    assert not caught
    assert anchor_report(rubric).unanchored_levels == 6


def test_rubric_lint_lists_them(tmp_path, capsys):
    path = _write(tmp_path / "gappy.yaml", GAPPY)
    assert main(["rubric", "lint", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"warning: {path}: dimensions[0](clarity).anchors: levels 2, 4 of range [1, 5] have no anchor text"
    assert len(out) == 7 and out[-1] == ("rubric anchors: 6 levels without anchors, 2 dimensions without a negative "
                                         "example")


def test_rubric_lint_is_validation(tmp_path, capsys):
    path = _write(tmp_path / "bad.yaml", {**GAPPY, "dimensions": [{**GAPPY["dimensions"][0], "weight": -1}]})
    assert main(["rubric", "lint", str(path)]) == 2
    assert "dimensions[0](clarity).weight" in capsys.readouterr().err


def test_validate_counts_them_in_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    path = _write(tmp_path / "gappy.yaml", {**GAPPY, "dimensions": [
        {**d, "checks": [{"type": "length", "max": 4}]} for d in GAPPY["dimensions"]]})
    assert main(["validate", "judge=rule", "logger=none", f"rubric.path={path}"]) == 0
    captured = capsys.readouterr()
    assert "config ok: rubric gappy" in captured.out
    assert [line.strip() for line in captured.out.splitlines() if "anchors" in line] == [
        f"rubric anchors: 6 levels without anchors, 2 dimensions without a negative example (warning; `rlkit rubric "
        f"lint {path}` lists them)"]
    assert "anchor" not in captured.err
