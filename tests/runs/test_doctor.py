"""``rlkit doctor``: each detector finds its signal at the step it starts in a run folder written as ``rlkit fit``
writes one; a healthy history and a real default run give no finding; exit codes 0/1/2 and one-line errors."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.runs.history import read_history
from rlkit.runs.triage import triage

STEPS, ONSET = 60, 30


def healthy(seed: int = 0) -> dict[str, list[float]]:
    """A run that learns slowly and stays calm: every metric the triage reads, with noise."""
    rng = random.Random(seed)

    def noisy(f, sd):
        return [f(t) + rng.gauss(0.0, sd) for t in range(STEPS)]

    return {
        "reward/mean": noisy(lambda t: 0.3 + 0.3 * t / STEPS, 0.02),
        "reward/std": noisy(lambda t: 0.25, 0.015),
        "reward/min": noisy(lambda t: 0.3, 0.01),
        "reward/max": noisy(lambda t: 0.7, 0.01),
        "advantages/frac_zero_groups": [max(0.0, v) for v in noisy(lambda t: 0.1, 0.03)],
        "advantages/std": noisy(lambda t: 0.9, 0.02),
        "kl": [abs(v) for v in noisy(lambda t: 0.04 * (1 - math.exp(-t / 10)), 0.002)],
        "entropy": noisy(lambda t: 0.8 - 0.2 * t / STEPS, 0.01),
        "completion_length": noisy(lambda t: 20.0, 0.8),
        "rewards/correctness/unscored": [0.0] * STEPS,
    }


def write_run(path: Path, metrics: dict[str, list[float]], samples: list[dict] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    with (path / "metrics.jsonl").open("w", encoding="utf-8") as fh:
        fh.write(json.dumps({"step": 0, "metrics": {"heldout/reward": 0.5}}) + "\n")  # eval-only line, as fit's
        for t in range(STEPS):
            fh.write(json.dumps({"step": t, "metrics": {k: v[t] for k, v in metrics.items()}}) + "\n")
    if samples is not None:
        (path / "samples.jsonl").write_text("".join(json.dumps(s) + "\n" for s in samples), encoding="utf-8")
    return path


def after(onset: int, before: float, then: list[float] | float) -> list[float]:
    later = then if isinstance(then, list) else [then] * (STEPS - onset)
    return [before] * onset + later


def with_signal(name: str) -> dict[str, list[float]]:
    m = healthy()
    rng = random.Random(1)
    if name == "std_jump":
        m["reward/std"] = [v if t < ONSET else 0.9 + rng.gauss(0, 0.02) for t, v in enumerate(m["reward/std"])]
    elif name == "range_blowup":
        m["reward/min"] = [v if t < ONSET else 0.0 for t, v in enumerate(m["reward/min"])]
        m["reward/max"] = [v if t < ONSET else 1.5 + rng.gauss(0, 0.02) for t, v in enumerate(m["reward/max"])]
    elif name == "spike_then_plateau":
        m["reward/mean"] = [v if t < ONSET else 0.9 + rng.gauss(0, 0.003) for t, v in enumerate(m["reward/mean"])]
        m["reward/mean"][ONSET] = 0.65  # two steps up, not one
    elif name == "kl_acceleration":
        m["kl"] = [0.02 + rng.gauss(0, 0.001) if t < ONSET else 0.02 + 0.005 * (t - ONSET) ** 2
                   for t in range(STEPS)]
    elif name == "entropy_collapse":
        m["entropy"] = [v if t < ONSET else max(0.05, 0.8 * 0.5 ** (1 + 2 * (t - ONSET)))
                        for t, v in enumerate(m["entropy"])]
    elif name == "zero_advantage":
        m["advantages/frac_zero_groups"] = [v if t < ONSET else 0.7 + rng.gauss(0, 0.03)
                                            for t, v in enumerate(m["advantages/frac_zero_groups"])]
    return m


@pytest.mark.parametrize("signal", ["std_jump", "range_blowup", "spike_then_plateau", "kl_acceleration",
                                    "entropy_collapse", "zero_advantage"])
def test_each_signal_is_found_where_it_starts(tmp_path, signal):
    run = write_run(tmp_path / "run", with_signal(signal))
    findings = triage(read_history(run / "metrics.jsonl")).findings
    assert [f.name for f in findings] == [signal], findings
    assert abs(findings[0].step - ONSET) <= 2, findings[0]


@pytest.mark.parametrize("seed", range(5))
def test_a_healthy_history_has_no_finding(tmp_path, seed, capsys):
    run = write_run(tmp_path / "run", healthy(seed))
    assert triage(read_history(run / "metrics.jsonl")).findings == []
    assert main(["doctor", str(run)]) == 0
    out = capsys.readouterr().out
    assert "0 error(s), 0 warning(s)" in out
    assert out.index("1. reward signal") < out.index("2. judge health") < out.index("3. reference leaks") \
        < out.index("4. policy")


def test_an_error_finding_exits_1_with_its_step_evidence_advice_and_samples(tmp_path, capsys):
    samples = [{"step": s, "prompt": "2+2=", "completion": "first 2, second 2, finally 4", "reward": 0.95}
               for s in (20, 32)] + [{"step": 32, "prompt": "1+1=", "completion": "2", "reward": 0.4}]
    run = write_run(tmp_path / "run", with_signal("spike_then_plateau"), samples)
    assert main(["doctor", str(run)]) == 1
    out = capsys.readouterr().out
    assert "error at step 30: spike then plateau — reward/mean:" in out
    assert "try: the reward-hacking picture" in out
    assert "sample (step 32, reward 0.950): '2+2=' → 'first 2, second 2, finally 4'" in out
    assert "1 error(s), 0 warning(s)" in out


def test_warnings_alone_exit_0_and_monitor_alerts_are_findings(tmp_path, capsys):
    run = write_run(tmp_path / "run", with_signal("zero_advantage"))
    (run / "alerts.jsonl").write_text(json.dumps({"monitor": "template_phrases", "step": 41, "severity": "warning",
                                                  "message": "67% of completions follow a template phrase"}) + "\n")
    assert main(["doctor", str(run)]) == 0
    out = capsys.readouterr().out
    assert "warning at step 30: zero advantage — advantages/frac_zero_groups" in out
    assert "warning at step 41: alert — alerts.jsonl (template_phrases): 67% of completions" in out


def test_every_group_without_signal_is_an_error(tmp_path):
    m = healthy()
    m["advantages/frac_zero_groups"] = after(ONSET, 0.1, 1.0)
    run = write_run(tmp_path / "run", m)
    assert main(["doctor", str(run)]) == 1


def test_judge_health_and_reference_leaks(tmp_path):
    m = healthy()
    m["judge/parse_failure_rate"] = after(ONSET, 0.0, 0.12)
    m["judge/reference_leaks"] = after(45, 0.0, 2.0)
    m["rewards/correctness/unscored"] = after(50, 0.0, 1.0)
    samples = [{"step": 30, "prompt": "1+1=", "completion": "2", "reward": 1.0},
               {"step": 30, "prompt": "2+2=", "completion": "\u0000\u0000 4", "reward": None}]
    result = triage(read_history(write_run(tmp_path / "run", m) / "metrics.jsonl"), samples=samples)
    got = [(f.stage, f.name, f.severity, f.step) for f in result.findings]
    assert got == [("judge health", "parse_failures", "warning", 30), ("judge health", "unscored", "error", 50),
                   ("reference leaks", "reference_leaks", "error", 45)]
    assert result.findings[0].samples[0]["reward"] is None  # what the judge could not read comes first


def _one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    return lines[0]


def test_a_corrupt_metrics_line_is_one_error_line_and_exit_2(tmp_path, capsys):
    run = write_run(tmp_path / "run", healthy())
    lines = (run / "metrics.jsonl").read_text().splitlines()
    lines[5] = lines[5][:20]
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    assert main(["doctor", str(run)]) == 2
    assert _one_error_line(capsys).startswith(f"rlkit: error: {run / 'metrics.jsonl'}:6: invalid JSON")


def test_not_a_run_folder_is_one_error_line_and_exit_2(tmp_path, capsys):
    assert main(["doctor", str(tmp_path)]) == 2
    assert _one_error_line(capsys) == (f"rlkit: error: {tmp_path / 'metrics.jsonl'}: no metric history; it is "
                                       "written by rlkit fit (is this a run directory?)")
    assert main(["doctor", str(tmp_path / "missing")]) == 2
    assert _one_error_line(capsys) == f"rlkit: error: {tmp_path / 'missing'}: no such run directory"
    assert main(["doctor"]) == 2
    assert _one_error_line(capsys) == "rlkit: error: rlkit doctor: usage: rlkit doctor <run dir>"


def test_a_corrupt_summary_or_alert_line_is_one_error_line(tmp_path, capsys):
    run = write_run(tmp_path / "run", healthy())
    (run / "summary.json").write_text('{\n  "steps": 5,\n  oops\n}\n')
    assert main(["doctor", str(run)]) == 2
    assert _one_error_line(capsys).startswith(f"rlkit: error: {run / 'summary.json'}:3: invalid JSON")
    (run / "summary.json").unlink()
    (run / "alerts.jsonl").write_text('{"monitor": "m", "step": 1, "message": "x"}\nnot json\n')
    assert main(["doctor", str(run)]) == 2
    assert _one_error_line(capsys).startswith(f"rlkit: error: {run / 'alerts.jsonl'}:2: ")


def test_an_interrupted_run_is_read_to_its_last_whole_line(tmp_path, capsys):
    run = write_run(tmp_path / "run", healthy())
    with (run / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 60, "metrics": {"reward/me')  # killed mid-write
    (run / "summary.json").write_text(json.dumps({"steps": 60, "warnings": ["judge retried 3 calls"],
                                                  "interrupted": {"step": 60, "checkpoint": "c.ckpt"}}))
    assert main(["doctor", str(run)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"run {run}: 60 training steps, 0 monitor alert(s); interrupted at step 60"
    assert out[1] == "run warning (summary.json): judge retried 3 calls"


def test_a_real_40_step_default_run_has_no_finding(tmp_path, capsys):
    """The metrics the triage reads, from `rlkit fit logger=csv trainer.max_steps=40` (its KL swings 0.03-0.2)."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_bytes((Path(__file__).parent / "fixtures" / "default_run_40_steps.metrics.jsonl")
                                        .read_bytes())
    assert main(["doctor", str(run)]) == 0
    assert "0 error(s), 0 warning(s)" in capsys.readouterr().out


@pytest.mark.slow
def test_a_real_default_run_has_no_false_alarm(tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["fit", "logger=csv", "trainer.max_steps=5", f"hydra.run.dir={run}"]) == 0
    capsys.readouterr()
    assert main(["doctor", str(run)]) == 0
    out = capsys.readouterr().out
    assert "0 error(s), 0 warning(s)" in out
    assert "ok: reward/std" in out and "ok: kl, entropy, completion_length" in out


def test_the_report_carries_the_triage(tmp_path):
    run = write_run(tmp_path / "run", with_signal("zero_advantage"))
    assert main(["report", str(run)]) == 0
    text = (run / "report" / "report.md").read_text(encoding="utf-8")
    section = text[text.index("## Triage"):text.index("## Alerts")]
    assert "| reward signal | warning | 30 | zero advantage | advantages/frac_zero_groups |" in section
    assert "- policy: no finding (`kl`, `entropy`, `completion_length`, `advantages/std`)" in section
    assert "- reference leaks: not logged by this run" in section


def test_a_one_step_dip_and_its_recovery_is_not_a_spike():
    # a reward_hacking.py v2 run (the fixed rubric) raised this false alarm: 0.67 at one step among steps near 0.8
    from rlkit.runs.signals import spike_then_plateau

    values = [0.55 + 0.25 * min(step / 60, 1) + 0.015 * ((step * 7) % 5 - 2) for step in range(130)]
    values[115] = 0.67
    assert spike_then_plateau(list(enumerate(values))) is None
    # the same noise around a level of 0.5, then a jump to 0.95 that stays: found where it starts
    jumped = [0.5 + 0.015 * ((step * 7) % 5 - 2) for step in range(100)] + \
        [0.95 + 0.005 * ((step * 3) % 3 - 1) for step in range(30)]
    found = spike_then_plateau(list(enumerate(jumped)))
    assert found is not None and 99 <= found.step <= 101
