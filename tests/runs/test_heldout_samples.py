"""``heldout_samples.jsonl``: every held-out evaluation's answers in one file, read by `rlkit compare` (its first and
last evaluation) and shown before/after by `rlkit report`; runs of older versions (``heldout/start.jsonl`` and
``end.jsonl``) still read."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.core.errors import DataError
from rlkit.runs.heldout_answers import (
    SAMPLES_FILE,
    answer_rows,
    append_heldout_samples,
    before_after,
    carry_heldout_samples,
    read_heldout_answers,
    read_heldout_samples,
)
from rlkit.runs.report import write_report

PROMPTS = [("2+2=", "4"), ("3+4=", "7"), ("5+5=", "10"), ("6+7=", "13"), ("9+9=", "18")]
DIMS = ["correctness", "brevity"]


def _evaluation(step: int, answers: list[str], brevity: list[float] | None = None) -> list[dict]:
    records = [{"prompt": p, "reference": r} for p, r in PROMPTS]
    scores = [[float(a == r), b] for a, (_, r), b in zip(answers, PROMPTS, brevity or [5.0] * len(PROMPTS),
                                                         strict=True)]
    return answer_rows(records, answers, [s[0] for s in scores], scores, DIMS, step)


BEFORE = ["To find a number using addition, you simply add", "7", "eleven", "12", "The sum is 18"]
AFTER = ["4", "7", "10", "13", "18"]


def test_an_evaluation_at_a_step_the_file_holds_is_not_written_again_and_later_steps_append(tmp_path):
    assert append_heldout_samples(tmp_path, _evaluation(0, BEFORE))
    assert append_heldout_samples(tmp_path, _evaluation(2, AFTER))
    assert not append_heldout_samples(tmp_path, _evaluation(2, AFTER)), "the end at the last heldout_every step"
    evaluations = read_heldout_samples(tmp_path / SAMPLES_FILE)
    assert [(e.step, len(e.rows)) for e in evaluations] == [(0, 5), (2, 5)]
    assert read_heldout_answers(tmp_path, "start")[0]["completion"] == BEFORE[0]
    assert read_heldout_answers(tmp_path, "end")[0]["completion"] == "4"


def test_before_after_picks_the_prompts_whose_score_moved_most_on_each_dimension_that_moved():
    pairs = before_after(_evaluation(0, BEFORE, [1, 5, 2, 5, 3]), _evaluation(8, AFTER))
    by_dim = {}
    for pair in pairs:
        by_dim.setdefault(pair.dimension, []).append(pair)
    # correctness rose on 4 prompts (3 shown, in split order among equal moves); brevity rose by 4, 3 and 2
    assert [p.prompt for p in by_dim["correctness"]] == ["2+2=", "5+5=", "6+7="]
    assert [p.prompt for p in by_dim["brevity"]] == ["2+2=", "5+5=", "9+9="]
    assert by_dim["correctness"][0].before["completion"] == BEFORE[0] and by_dim["correctness"][0].after[
        "completion"] == "4"
    assert before_after(_evaluation(0, AFTER), _evaluation(8, AFTER)) == [], "nothing moved, nothing shown"


def test_the_run_report_shows_before_and_after_on_the_dimensions_that_moved(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "metrics": {"reward/mean": 0.5}}) + "\n"
                                                    for s in (0, 1)))
    append_heldout_samples(tmp_path, _evaluation(0, BEFORE))
    append_heldout_samples(tmp_path, _evaluation(4, ["4", "7", "10", "12", "18"]))
    append_heldout_samples(tmp_path, _evaluation(8, AFTER))
    report = write_report(tmp_path)
    text = report.markdown.read_text()
    section = text.split("## What the model said, before and after")[1].split("\n## ")[0]
    assert "step 0 and step 8 (all 3 evaluations" in section
    assert "| correctness | 2+2= | To find a number using addition, you simply add | 0.000 | 4 | 1.000 |" in section
    assert "brevity" not in section.split("|---|")[1], "brevity did not move"
    columns, rows = report.tables["report/heldout_before_after"]
    assert columns[:3] == ["dimension", "prompt", "before"] and len(rows) == 3


def test_a_resumed_run_starts_its_file_with_the_earlier_runs_evaluations_up_to_the_checkpoint(tmp_path):
    earlier, resumed = tmp_path / "earlier", tmp_path / "resumed"
    for step, answers in ((0, BEFORE), (2, BEFORE), (4, AFTER)):
        append_heldout_samples(earlier, _evaluation(step, answers))
    assert carry_heldout_samples(earlier / "checkpoints" / "last.ckpt", resumed, 2) == [0, 2]
    assert [e.step for e in read_heldout_samples(resumed / SAMPLES_FILE)] == [0, 2], "step 4 is trained again"
    assert carry_heldout_samples(tmp_path / "elsewhere" / "last.ckpt", tmp_path / "other", 2) == []
    assert not (tmp_path / "other" / SAMPLES_FILE).exists()


def test_an_older_runs_start_and_end_files_still_read_and_a_run_with_only_its_start_has_no_end(tmp_path):
    old = tmp_path / "old"
    (old / "heldout").mkdir(parents=True)
    for when, step, answers in (("start", 0, BEFORE), ("end", 6, AFTER)):
        (old / "heldout" / f"{when}.jsonl").write_text("".join(json.dumps(r) + "\n"
                                                               for r in _evaluation(step, answers)))
    assert read_heldout_answers(old, "start")[0]["completion"] == BEFORE[0]
    assert read_heldout_answers(old, "end")[0]["completion"] == "4"
    stopped = tmp_path / "stopped"
    append_heldout_samples(stopped, _evaluation(0, BEFORE))
    with pytest.raises(DataError, match="only the evaluation at step 0"):
        read_heldout_answers(stopped, "end")
    (stopped / SAMPLES_FILE).write_text('{"prompt": "2+2=", "completion": "4"}\n')
    with pytest.raises(DataError, match='heldout_samples.jsonl:1.*missing "step"') as caught:
        read_heldout_answers(stopped, "start")
    assert Path(caught.value.where).name == "heldout_samples.jsonl:1"
