"""The triage's self-internalisation check (the ``self_internalisation`` monitor's ``internalised`` and ``gap``, one
point every 5 steps), on hand-computed histories; and the live ``triage`` monitor's alerts left out of the doctor's
findings (they are the same checks)."""

from __future__ import annotations

import json

import pytest

from rlkit.cli import main
from rlkit.runs.signals import self_internalisation
from rlkit.runs.triage import ADVICE, triage

KEY = "monitors/self_internalisation/"
STEPS = list(range(0, 45, 5))


def points(values):
    return list(zip(STEPS, values, strict=False))


def history(internalised, gap):
    return [(s, {f"{KEY}internalised": i, f"{KEY}gap": g}) for s, i, g in zip(STEPS, internalised, gap, strict=False)]


def test_internalised_falling_below_its_start():
    # start: mean of 0, 0.02, 0.04 = 0.02; the line 0.02 - 0.05 = -0.03: -0.04, -0.06, -0.08 (steps 30, 35, 40)
    # are the first three in a row under it (-0.02 at step 25 is not)
    internalised = [0.0, 0.02, 0.04, 0.05, 0.03, -0.02, -0.04, -0.06, -0.08]
    which, signal = self_internalisation(points(internalised), points([0.0] * 9))
    assert which == "internalised" and signal.step == 30
    assert signal.evidence.startswith("internalised -0.040 nats/token against +0.020 at the start")


def test_the_gap_growing_while_internalised_stalls():
    # gap start: mean of 0, 0.01, 0.02 = 0.01, so above 0.11 from step 20 (0.12, 0.15, 0.20); internalised's start
    # 0.01, its gains 0.01, 0, 0.01 at those steps: each under a quarter of the gap's rise (0.11, 0.14, 0.19)
    gap = [0.0, 0.01, 0.02, 0.05, 0.12, 0.15, 0.20, 0.25, 0.30]
    internalised = [0.0, 0.01, 0.02, 0.02, 0.02, 0.01, 0.02, 0.03, 0.02]
    which, signal = self_internalisation(points(internalised), points(gap))
    assert which == "gap" and signal.step == 20
    assert signal.evidence.startswith("gap +0.120 nats/token against +0.010 at the start while internalised moved "
                                      "+0.010")


def test_a_gap_that_grows_with_the_references_is_not_a_finding():
    # the same gap, but internalised gains 0.07, 0.09, 0.11, ... by then: more than a quarter of the gap's rise
    gap = [0.0, 0.01, 0.02, 0.05, 0.12, 0.15, 0.20, 0.25, 0.30]
    internalised = [0.0, 0.01, 0.02, 0.05, 0.08, 0.10, 0.12, 0.14, 0.16]
    assert self_internalisation(points(internalised), points(gap)) is None
    assert self_internalisation(points(internalised[:5]), points(gap[:5])) is None  # too few measurements


def test_the_earlier_of_the_two_is_the_finding_in_the_policy_stage(tmp_path, capsys):
    internalised = [0.0, 0.01, 0.02, 0.02, 0.02, -0.05, -0.05, -0.06, -0.06]  # its own signal: step 25
    gap = [0.0, 0.01, 0.02, 0.05, 0.12, 0.15, 0.20, 0.25, 0.30]              # the gap's: step 20
    assert self_internalisation(points(internalised), points([0.0] * 9))[1].step == 25
    result = triage(history(internalised, gap))
    (finding,) = result.findings
    assert (finding.stage, finding.name, finding.severity, finding.step, finding.metric) == \
        ("policy", "self_internalisation", "warning", 20, f"{KEY}gap")
    assert finding.advice == ADVICE["self_internalisation"] and "gold judge" in finding.advice
    assert result.checked["policy"][-2:] == [f"{KEY}internalised", f"{KEY}gap"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "metrics": m}) + "\n"
                                               for s, m in history(internalised, gap)))
    assert main(["doctor", str(run)]) == 0
    assert f"warning at step 20: self internalisation — {KEY}gap: gap +0.120" in capsys.readouterr().out


def test_a_run_without_the_monitor_is_not_checked_for_it():
    result = triage([(s, {"reward/mean": 0.5}) for s in range(5)])
    assert not any(KEY in m for m in result.checked["policy"])


@pytest.mark.parametrize("severity", ["warning", "error"])
def test_the_live_triage_alerts_are_not_findings_twice(severity):
    """The ``triage`` monitor's alerts are these checks on the same metrics: the doctor finds them itself."""
    alert = {"monitor": "triage", "step": 37, "severity": severity, "message": "reward signal: std jump from step 30"}
    other = {"monitor": "length_drift", "step": 12, "severity": "warning", "message": "longer"}
    findings = triage([(s, {"reward/mean": 0.5}) for s in range(5)], [alert, other]).findings
    assert [(f.name, f.metric) for f in findings] == [("alert", "alerts.jsonl (length_drift)")]
