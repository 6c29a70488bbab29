"""``rlkit calibrate`` says what to fix: the lines where judge and humans disagree most, and the change since a
previous round of the same rubric (``calibrate.previous``)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from rlkit.cli import main
from rlkit.core.errors import DataError
from rlkit.core.rubric import load_rubric
from rlkit.evaluation.calibration import calibrate
from rlkit.evaluation.calibration_rounds import (
    compare_rounds,
    line_changes,
    line_scores,
    pair_text,
    read_round,
    round_payload,
    worst_disagreements,
)

REPO = Path(__file__).resolve().parents[2]
RUBRIC = REPO / "conf" / "rubric_files" / "arithmetic.yaml"  # format 0/1, correctness 0/1, brevity 1-5, repetition 1-5


def _labelled() -> list[dict]:
    both = {"format": 1, "correctness": 1, "brevity": 5, "repetition": 5}
    return [{"id": "a", "prompt": "1+1=", "completion": "2", "labels": both},
            {"id": "b", "prompt": "2+2=", "completion": "four", "labels": {**both, "brevity": None}},
            {"id": "c", "prompt": "3+3=", "completion": "6 6 6", "labels": both}]


def test_disagreement_is_the_mean_gap_over_each_dimension_span():
    rubric = load_rubric(RUBRIC)
    scores = np.array([[1, 1, 5, 5],          # agrees everywhere
                       [0, 0, 1, np.nan],      # format and correctness miss by a whole span; brevity unlabelled
                       [1, 1, 4, 2]])          # brevity off by 1/4 of its span, repetition by 3/4
    lines = line_scores(_labelled(), scores, rubric)
    assert [line.size for line in lines] == [0.0, pytest.approx((1 + 1) / 2), pytest.approx((0.25 + 0.75) / 4)]
    assert lines[1].judge == {"format": 0.0, "correctness": 0.0, "brevity": 1.0}, "an unscored dimension is absent"
    worst = worst_disagreements(lines, 5)
    assert [line.record_id for line in worst] == ["b", "c"], "largest first; a line that agrees is not listed"
    assert pair_text(worst[0]) == "format 1→0, correctness 1→0"
    assert pair_text(worst[1]) == "brevity 5→4, repetition 5→2"
    assert worst_disagreements(lines, 1) == worst[:1]


def test_a_round_compares_with_the_previous_one_per_dimension_and_line(tmp_path):
    rubric = load_rubric(RUBRIC)
    labelled = _labelled()
    first = np.array([[1, 1, 5, 5], [0, 0, 1, 5], [1, 1, 5, 1]], dtype=float)
    second = np.array([[1, 0, 5, 5], [1, 1, 5, 5], [1, 1, 5, 1]], dtype=float)
    before = calibrate(labelled, first, rubric, judge="rule")
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(round_payload(before, line_scores(labelled, first, rubric))))
    previous = read_round(tmp_path, rubric)  # the folder finds its calibration.json
    now = calibrate(labelled, second, rubric, judge="llm")
    changes = {c.name: c for c in compare_rounds(previous, now)}
    for name in ("format", "correctness"):
        row_before = next(r for r in before.rows if r.name == name)
        row_now = next(r for r in now.rows if r.name == name)
        assert math.isnan(changes[name].kappa_before) == math.isnan(row_before.kappa)
        if not math.isnan(row_before.kappa):
            assert changes[name].kappa_before == pytest.approx(row_before.kappa, abs=1e-6)
        assert changes[name].kappa_now is row_now.kappa
    # line a: agreed, now wrong on correctness; line b: wrong, now right; line c: wrong both times
    assert line_changes(previous, line_scores(labelled, second, rubric), rubric) == (1, 1, 3)


def test_expected_scores_agree_at_the_level_they_round_to(tmp_path):
    # scoring: expected gives probability-weighted levels, never exactly one: a line agrees when every score rounds
    # (as κ rounds it: nearest level, halves up) to the human level
    rubric = load_rubric(RUBRIC)
    labelled = _labelled()
    first = np.array([[0.9, 0.8, 4.6, 4.5],     # a: rounds to the labels everywhere (4.5 up to 5)
                      [0.2, 0.4, 1.3, 4.9],     # b: format and correctness round to 0, the labels are 1
                      [0.7, 0.6, 4.8, 1.4]])    # c: repetition rounds to 1, labelled 5
    second = np.array([[0.9, 0.3, 4.6, 4.5],    # a: correctness now rounds to 0
                       [0.6, 0.8, 2.0, 4.7],    # b: now rounds to the labels (brevity unlabelled)
                       [0.7, 0.6, 4.8, 1.2]])   # c: still repetition
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps(round_payload(calibrate(labelled, first, rubric, judge="llm"),
                                             line_scores(labelled, first, rubric))))
    lines = line_scores(labelled, second, rubric)
    assert all(line.size > 0 for line in lines), "no fractional score is a disagreement of exactly 0"
    assert line_changes(read_round(tmp_path, rubric), lines, rubric) == (1, 1, 3)
    assert [line.differing for line in lines] == [["correctness"], [], ["repetition"]]
    assert [line.record_id for line in worst_disagreements(lines, 5)] == ["c", "a"], \
        "b's scores round to its labels: not listed, though no score is exactly its label"


@pytest.mark.parametrize("content, message", [
    (None, "no previous calibration round"),
    ("{not json", "not a calibration round"),
    ('{"format": 99, "dimensions": {}}', "format 1"),
    ('{"format": 1, "dimensions": {}, "rubric": {"name": "calculator"}}', "rubric 'calculator', not of 'arithmetic'"),
])
def test_a_wrong_previous_round_is_named(tmp_path, content, message):
    path = tmp_path / "calibration.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(DataError, match=message) as info:
        read_round(path, load_rubric(RUBRIC))
    assert str(path) in str(info.value)


def test_cli_lists_disagreements_writes_the_round_and_compares_the_next(tmp_path, capsys):
    first, second = tmp_path / "round1", tmp_path / "round2"
    assert main(["calibrate", f"calibrate.output={first}", "logger=none", "calibrate.disagreements=3"]) == 0
    out = capsys.readouterr().out
    assert "disagree most" in out and "twelve" in out, "the shipped labels call 'twelve' well formatted"
    saved = json.loads((first / "calibration.json").read_text())
    assert saved["judge"] == "rule" and len(saved["lines"]) == 42
    assert "## Where judge and humans disagree most" in (first / "calibration.md").read_text()
    assert main(["calibrate", f"calibrate.output={second}", "logger=none", f"calibrate.previous={first}"]) == 0
    out = capsys.readouterr().out
    assert "since the previous round" in out and "of 42 lines in both rounds: 0 now agree" in out
    assert "## Since the previous round" in (second / "calibration.md").read_text()


def test_cli_refuses_a_previous_round_of_another_rubric_before_judging(tmp_path, capsys):
    other = tmp_path / "other"
    other.mkdir()
    (other / "calibration.json").write_text(json.dumps({"format": 1, "dimensions": {}, "rubric": {"name": "x"}}))
    out = tmp_path / "cal"
    assert main(["calibrate", f"calibrate.output={out}", "logger=none", f"calibrate.previous={other}"]) == 2
    err = capsys.readouterr().err
    assert "rubric 'x', not of 'arithmetic'" in err and str(other / "calibration.json") in err
    assert not (out / "calibration.md").exists(), "nothing written"


def test_a_model_judge_calibrated_poorly_says_so_when_a_run_starts(tmp_path, monkeypatch, capsys):
    from rlkit.testing.canned_chat import CannedChatServer

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    # a judge that calls every answer perfect: no agreement with the labellers on anything they told apart
    perfect = json.dumps({"format": 1, "correctness": 1, "brevity": 5, "repetition": 5})
    with CannedChatServer(lambda messages: perfect) as server:
        judge = ["judge=llm", "judge.params.backend.name=openai",
                 f"++judge.params.backend.params={{base_url: '{server.url}', max_retries: 0}}", "logger=none"]
        assert main(["calibrate", f"calibrate.output={tmp_path / 'cal'}", *judge]) == 0
        assert "kept for rlkit fit's start-up check" in capsys.readouterr().out
        assert main(["fit", *judge, "trainer.max_steps=1", "batch_size=2", "num_generations=2",
                     f"hydra.run.dir={tmp_path / 'run'}"]) == 0
        err = capsys.readouterr().err
        assert "rlkit: warning: judge llm: its calibration against 42 human labels" in err
        assert "is poor on format (κ " in err and "correctness (κ " in err
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert any("its calibration against 42 human labels" in w for w in summary["warnings"])
        # another judge config (another max_tokens) has no stored calibration: nothing said
        other = [*judge[:2], f"++judge.params.backend.params={{base_url: '{server.url}', max_retries: 0, "
                             "max_tokens: 32}", "logger=none"]
        assert main(["fit", *other, "trainer.max_steps=1", "batch_size=2", "num_generations=2",
                     f"hydra.run.dir={tmp_path / 'run2'}"]) == 0
        assert "its calibration against" not in capsys.readouterr().err
