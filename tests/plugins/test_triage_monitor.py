"""The ``triage`` monitor: ``rlkit doctor``'s checks run live. A std jump at step 30 alerts once, at the first step the
doctor's detector can see it, naming its start; a healthy run raises nothing; a resumed run alerts as an
uninterrupted one; the host hands it the step's metrics and the earlier monitors'; its contract suite; a short
``rlkit fit``."""

from __future__ import annotations

import json
import math
import random
import re
from dataclasses import replace

import pytest
import torch
from monitor_fit import fit_rows  # same folder

from rlkit.core.registry import load_registry
from rlkit.reward.monitor_view import make_view
from rlkit.runs.triage import ADVICE, READS, triage, triage_reads
from rlkit.testing import MonitorContract
from rlkit.testing.monitor_contract import arithmetic_rubric, example_monitor_views
from rlkit.train.monitoring import MonitorHost

REGISTRY = load_registry()
RUBRIC = arithmetic_rubric()
RECORDS = [{"prompt": "1+1=", "reference": "2"}]
STEPS, ONSET = 60, 30


def monitor(**params):
    return REGISTRY.create("monitor", "triage", {"every": 1, **params})


def healthy(seed: int = 0) -> list[dict[str, float]]:
    """A calm run, one metric dict per step: what the triage reads, with noise (as tests/runs/test_doctor.py)."""
    rng = random.Random(seed)
    return [{"reward/mean": 0.3 + 0.3 * t / STEPS + rng.gauss(0, 0.02), "reward/std": 0.25 + rng.gauss(0, 0.015),
             "reward/min": 0.3 + rng.gauss(0, 0.01), "reward/max": 0.7 + rng.gauss(0, 0.01),
             "advantages/frac_zero_groups": max(0.0, 0.1 + rng.gauss(0, 0.03)),
             "advantages/std": 0.9 + rng.gauss(0, 0.02),
             "kl": abs(0.04 * (1 - math.exp(-t / 10)) + rng.gauss(0, 0.002)),
             "entropy": 0.8 - 0.2 * t / STEPS + rng.gauss(0, 0.01), "completion_length": 20 + rng.gauss(0, 0.8),
             "rewards/correctness/unscored": 0.0, "loss": rng.gauss(0, 1), "time/step": 0.1}
            for t in range(STEPS)]


def std_jump() -> list[dict[str, float]]:
    rng = random.Random(1)
    return [{**m, "reward/std": 0.9 + rng.gauss(0, 0.02)} if t >= ONSET else m for t, m in enumerate(healthy())]


def spike() -> list[dict[str, float]]:
    rng = random.Random(1)
    rows = [{**m, "reward/mean": 0.9 + rng.gauss(0, 0.003)} if t >= ONSET else m for t, m in enumerate(healthy())]
    rows[ONSET]["reward/mean"] = 0.65
    return rows


def view(step: int, metrics: dict[str, float] | None):
    return make_view(step, RECORDS, [["2", "3"]], torch.tensor([[[1.0, 1.0, 5.0, 5.0], [1.0, 0.0, 5.0, 5.0]]]),
                     RUBRIC, metrics=metrics)


def run(built, rows, start: int = 0):
    """(step, alert) of every alert raised while ``built`` observes ``rows`` from ``start``, and the metrics."""
    raised, logged = [], []
    for step in range(start, len(rows)):
        logged.append(built.observe(step, view(step, rows[step])))
        raised += [(step, a) for a in built.alerts()]
    return raised, logged


def first_seen(rows, name: str) -> int:
    """The first step at which the doctor's triage of the history so far has the finding."""
    return next(t for t in range(len(rows))
                if any(f.name == name for f in triage(list(enumerate(rows[:t + 1]))).findings))


def start_of(message: str) -> int:
    return int(re.search(r"from step (\d+)", message).group(1))


def test_a_std_jump_alerts_once_at_the_first_step_the_detector_sees_it():
    rows = std_jump()
    raised, logged = run(monitor(), rows)
    assert [(step, a.severity) for step, a in raised] == [(first_seen(rows, "std_jump"), "warning")]
    (step, alert), = raised
    assert ONSET < step < ONSET + 10  # it needs part of a window after the jump, not the whole run
    assert alert.monitor == "triage" and alert.step == step
    assert "reward signal: std jump from step" in alert.message and "reward/std" in alert.message
    assert abs(start_of(alert.message) - ONSET) <= 2
    assert alert.message.endswith(f"try: {ADVICE['std_jump']}")
    assert [m["findings"] for m in logged] == [0.0] * step + [1.0] * (STEPS - step)


def test_an_error_finding_is_an_error_alert():
    rows = spike()
    raised, logged = run(monitor(), rows)
    assert [(step, a.severity) for step, a in raised] == [(first_seen(rows, "spike_then_plateau"), "error")]
    assert abs(start_of(raised[0][1].message) - ONSET) <= 2
    assert logged[-1] == {"findings": 1.0, "errors": 1.0}


@pytest.mark.parametrize("seed", range(3))
def test_a_healthy_run_raises_nothing(seed):
    built = monitor()
    raised, logged = run(built, healthy(seed))
    assert raised == [] and logged[-1] == {"findings": 0.0, "errors": 0.0}
    assert built.summary()["first"] == "none" and built.summary()["steps"] == STEPS


def test_every_checks_at_its_cadence():
    rows = std_jump()
    seen = first_seen(rows, "std_jump")
    raised, _ = run(monitor(every=5), rows)
    assert [step for step, _ in raised] == [seen + (-seen) % 5]
    assert start_of(raised[0][1].message) == start_of(run(monitor(), rows)[0][0][1].message)


@pytest.mark.parametrize("split", [20, 34, 50])
def test_a_resumed_run_alerts_as_an_uninterrupted_one(split):
    rows = std_jump()
    whole = monitor()
    expected, _ = run(whole, rows)
    first = monitor()
    before, _ = run(first, rows[:split])
    resumed = monitor()
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict(), allow_nan=False)))  # as a checkpoint holds it
    after, _ = run(resumed, rows, start=split)
    assert [(s, a.__dict__) for s, a in before + after] == [(s, a.__dict__) for s, a in expected]
    assert resumed.summary() == whole.summary()


@pytest.mark.filterwarnings("ignore:rlkit monitor")
def test_the_host_hands_it_the_steps_metrics_and_the_earlier_monitors():
    """template_phrases before triage: its share of the same step reaches the triage (the doctor's template
    check); a view without metrics (outside a training run) is counted, not guessed."""
    built = {"template_phrases": REGISTRY.create("monitor", "template_phrases", {}), "triage": monitor()}
    host = MonitorHost(built)
    base = healthy()
    for step in range(12):
        texts = [["first 2, second 2, finally 2"] * 2 if step >= 6 else ["2", "3"]]
        host.observe(make_view(step, RECORDS, texts, torch.ones(1, 2, 4), RUBRIC, metrics=base[step]))
    (alert,) = [a for a in host.alerts if a.monitor == "triage"]
    assert alert.step == 6 and "template share from step 6 — monitors/template_phrases/share" in alert.message
    assert built["triage"].history[6][1]["monitors/template_phrases/share"] == 1.0
    assert "loss" not in built["triage"].history[6][1]  # only what the triage reads is kept
    alone = monitor()
    assert alone.observe(0, view(0, None)) == {"findings": 0.0, "errors": 0.0}
    assert alone.summary()["unread_steps"] == 1 and alone.summary()["steps"] == 0


def test_it_keeps_every_metric_the_triage_reads():
    """Each key the doctor's triage looks up in a step's metrics is one the monitor keeps (``triage_reads``)."""
    asked: set[str] = set()

    class Spy(dict):
        def __contains__(self, key):
            asked.add(key)
            return super().__contains__(key)

    triage([(t, Spy(m)) for t, m in enumerate(std_jump())])
    assert asked and all(triage_reads(k) for k in asked), sorted(k for k in asked if not triage_reads(k))
    assert set(READS) <= asked, sorted(set(READS) - asked)  # and none it no longer reads


def test_a_rewound_step_replaces_the_later_history():
    built = monitor()
    run(built, healthy()[:10])
    built.observe(5, view(5, healthy()[5]))
    assert [s for s, _ in built.history] == [0, 1, 2, 3, 4, 5]


class TestTriageContract(MonitorContract):
    @pytest.fixture
    def monitor(self):
        return monitor()

    @pytest.fixture
    def monitor_views(self):
        rows = spike()
        return [replace(v, metrics=rows[v.step]) for v in example_monitor_views(STEPS)]


# --- end to end ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_fit_with_the_live_triage_runs_clean(tmp_path, monkeypatch):
    code, run_dir, rows = fit_rows(tmp_path, monkeypatch, 4, "monitors=[template_phrases,triage]")
    assert code == 0
    assert len(rows) == 4 and all(r["monitors/triage/findings"] == "0.0" for r in rows)
    summary = json.loads((run_dir / "monitors.json").read_text())["triage"]
    assert summary["unread_steps"] == 0, "rlkit.train.step_metrics must hand the step's metrics to step_view"
    assert summary["steps"] == 4 and summary["findings"] == 0 and summary["found"] == []
    assert {"reward/std", "reward/min", "advantages/frac_zero_groups", "kl", "entropy", "completion_length",
            "monitors/template_phrases/share"} <= set(summary["metrics"])
    assert not (run_dir / "alerts.jsonl").exists() or "triage" not in (run_dir / "alerts.jsonl").read_text()
