"""``rlkit readiness``: the ranking note's six conditions answered from the shipped examples, a run folder, a
calibration round and labels of several labellers; the verdict's exit codes; bad input as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.core.rubric import load_rubric
from rlkit.evaluation.readiness import labels_condition, run_condition

CONF = Path(__file__).resolve().parents[2] / "conf"
CHAT = [f"labels={CONF / 'calibration' / 'chat_arithmetic_labels.jsonl'}",
        f"rubric={CONF / 'rubric_files' / 'chat_arithmetic.yaml'}"]


def _calibration(tmp_path: Path, kappa: float, rubric: str = "chat_arithmetic", name: str = "calibration") -> Path:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    dims = {d: {"n": 40, "kappa": kappa, "spearman": kappa, "bias": 0.0, "flagged": kappa < 0.6}
            for d in ("bare_number", "correctness", "stops")}
    (folder / "calibration.json").write_text(json.dumps({"format": 1, "rubric": {"name": rubric}, "judge": "rule",
                                                         "threshold": 0.6, "dimensions": dims}))
    return folder


def _run(tmp_path: Path, groups: list[list[float]]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "summary.json").write_text("{}")
    rows = [{"step": 0, "prompt": f"{g}+1=", "completion": str(i), "reward": r, "record": {"id": f"r{g}"}}
            for g, rewards in enumerate(groups) for i, r in enumerate(rewards)]
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_the_shipped_examples_say_baseline_first_with_each_conditions_evidence(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # no calibration/ here
    assert main(["readiness", f"output={tmp_path / 'r.json'}"]) == 3
    out = capsys.readouterr().out.splitlines()
    assert [line.split(".")[0] for line in out[:6]] == ["1", "2", "3", "4", "5", "6"]
    assert "42 labelled completions (under 50)" in out[5] and "5 levels without anchors" in out[1]
    assert out[-1].startswith("verdict: baseline first; next: train a scalar baseline first")
    assert "rlkit train-rm" in out[-1]
    saved = json.loads((tmp_path / "r.json").read_text())
    assert saved["score"] == 0 and saved["exit_code"] == 3 and len(saved["conditions"]) == 6


def test_a_calibrated_anchored_labelled_project_is_ready(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _calibration(tmp_path, 0.85)  # found as calibration/calibration.json, calibrate.output's default
    run = _run(tmp_path, [[0.0, 1.0], [0.5, 0.5], [1.0, 0.2]])
    assert main(["readiness", *CHAT, f"run={run}", "budget=yes"]) == 0
    out = capsys.readouterr().out
    assert "1. a plain RLHF loop already works: met — 3 sampled groups, 67% with a reward spread" in out
    assert "judge rule at κ >= 0.6 on all 3 dimensions; rubric chat_arithmetic: 3 dimensions, 0 levels" in out
    assert "score 4/6" in out and "verdict: ready" in out


def test_a_judge_below_the_threshold_means_calibrate_more(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    calibration = _calibration(tmp_path, 0.41)
    run = _run(tmp_path, [[0.0, 1.0]])
    assert main(["readiness", *CHAT, f"calibration={calibration}", f"run={run}", "budget=yes",
                 "throughput=yes"]) == 1
    out = capsys.readouterr().out
    assert "judge rule below κ 0.6 on bare_number 0.41, correctness 0.41, stops 0.41" in out
    assert "verdict: calibrate more; next: calibrate more: judge rule below" in out


def test_a_run_whose_groups_never_vary_does_not_count(tmp_path):
    condition = run_condition(_run(tmp_path, [[1.0, 1.0], [0.0, 0.0], [0.3, 0.9]]))
    assert not condition.met and "3 sampled groups, 33% with a reward spread (under 50%)" in condition.evidence


def test_two_labellers_are_measured_by_their_kappa(tmp_path):
    rubric = load_rubric(CONF / "rubric_files" / "chat_arithmetic.yaml")
    lines = [{"prompt": f"{i}+1=", "completion": str(i + 1), "labels": {},
              "labellers": {"ana": {"correctness": i % 2}, "bo": {"correctness": i % 2}}} for i in range(6)]
    path = tmp_path / "labels.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    agreed = labels_condition(path, rubric, min_labels=5, threshold=0.6)
    assert agreed.met and "2 labellers, mean inter-labeller κ 1.00" in agreed.evidence
    for r in lines:
        r["labellers"]["bo"]["correctness"] = 1 - r["labellers"]["bo"]["correctness"]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    split = labels_condition(path, rubric, min_labels=5, threshold=0.6)
    assert not split.met and "under 0.6" in split.evidence


@pytest.mark.parametrize(("args", "shown"), [
    (["foo=1"], "command line: unknown argument 'foo=1'"),
    (["labels=/nowhere/labels.jsonl"], "labels (/nowhere/labels.jsonl): no such labels file"),
    (["budget=maybe"], "budget: yes or no, got 'maybe'"),
    (["calibration=OTHER"], "a calibration of rubric 'arithmetic', not 'chat_arithmetic'"),
])
def test_bad_input_is_one_line_exit_2(args, shown, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    other = _calibration(tmp_path, 0.9, rubric="arithmetic", name="round_1")  # not found unless named
    args = [a.replace("OTHER", str(other)) for a in args]
    assert main(["readiness", *CHAT, *args]) == 2
    err = capsys.readouterr().err
    assert err.count("rlkit: error:") == 1 and shown in err
