"""The judge's health by step window: where ``rlkit calibrate`` has scored labels of the run's own completions
(``calibration/windows.json``), a window whose agreement falls below the threshold after one above it is a finding
from that window's first step."""

from __future__ import annotations

import json
import math
from pathlib import Path

from rlkit.cli import main
from rlkit.config import resolve_path
from rlkit.core.rubric import load_rubric
from rlkit.evaluation.calibration import calibrate, calibrate_by_window, write_windows
from rlkit.runs.signals import agreement_fall
from rlkit.runs.triage import ADVICE, triage

RUBRIC = load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/arithmetic.yaml"))
HUMAN = [1, 0, 1, 0, 1, 0]


def test_agreement_fall_by_hand():
    # threshold 0.6: 0.8 (step 0) and 0.7 (10) hold, 0.4 from step 20 falls below after them
    assert agreement_fall([(0, 0.8), (10, 0.7), (20, 0.4)], 0.6).step == 20
    assert agreement_fall([(0, 0.8), (10, 0.7), (20, 0.4)], 0.6).evidence == \
        "κ 0.40 in the window from step 20, after 0.80 in the one from step 0 (threshold 0.60)"
    assert agreement_fall([(0, 0.4), (10, 0.3)], 0.6) is None  # never above: calibration's flag, not a fall
    assert agreement_fall([(0, 0.8), (10, 0.7)], 0.6) is None
    # a window of 3 labelled lines is passed over
    assert agreement_fall([(0, 0.8), (10, 0.2), (20, 0.5)], 0.6, counts={0: 6, 10: 3, 20: 6}).step == 20
    assert agreement_fall([(0, 0.8), (10, 0.2)], 0.6, counts={0: 6, 10: 3}) is None


def write_calibration(run: Path) -> None:
    """Three windows of six labelled completions, as ``rlkit calibrate`` writes them: the judge agrees with the
    humans on correctness at steps 0 and 10 (κ 1); from step 20 it calls every completion correct (κ 0)."""
    records, scores = [], []
    for window in (0, 10, 20):
        for k, human in enumerate(HUMAN):
            records.append({"completion": "x", "step": window + k, "window": window,
                            "labels": {"correctness": human}})
            scores.append([math.nan, 1.0 if window == 20 else float(human), math.nan, math.nan])
    windows = calibrate_by_window(records, scores, RUBRIC)
    assert [(w.window, {r.name: r for r in w.report.rows}["correctness"].kappa) for w in windows] == \
        [(0, 1.0), (10, 1.0), (20, 0.0)]
    (run / "calibration").mkdir()  # rlkit calibrate makes its output folder first
    write_windows(windows, calibrate(records, scores, RUBRIC), run / "calibration")


def test_the_doctor_reads_the_agreement_by_window(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "metrics": {"reward/mean": 0.5}}) + "\n"
                                               for s in range(30)))
    write_calibration(run)
    assert main(["doctor", str(run)]) == 0
    out = capsys.readouterr().out
    assert "warning at step 20: human agreement — calibration/window/correctness/kappa: κ 0.00 in the window from " \
           "step 20, after 1.00 in the one from step 0 (threshold 0.60)" in out
    assert f"try: {ADVICE['human_agreement']}" in out
    # the dimensions nobody labelled have no κ: checked, nothing found
    payload = json.loads((run / "calibration" / "windows.json").read_text())
    result = triage([(0, {"reward/mean": 0.5})], agreement=payload)
    assert [(f.stage, f.name, f.step) for f in result.findings] == [("judge health", "human_agreement", 20)]
    assert "calibration/window/format/kappa" in result.checked["judge health"]


def test_a_run_without_calibration_and_a_corrupt_file(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(json.dumps({"step": 0, "metrics": {"reward/mean": 0.5}}) + "\n")
    assert main(["doctor", str(run)]) == 0
    assert "human agreement" not in capsys.readouterr().out
    (run / "calibration").mkdir()
    (run / "calibration" / "windows.json").write_text("{not json")
    assert main(["doctor", str(run)]) == 2
    assert "windows.json" in capsys.readouterr().err
