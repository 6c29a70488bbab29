"""The ``gold_judge`` monitor: its divergence alert on a constructed history, held-out prompts sampled by the policy,
its contract suite, and one short ``rlkit fit`` that logs the gold metrics."""

from __future__ import annotations

import json

import pytest
import torch
from monitor_fit import fit_rows  # same folder

from rlkit import ConfigError
from rlkit.core.registry import load_registry
from rlkit.reward.monitor_view import make_view
from rlkit.testing import MonitorContract, run_monitor
from rlkit.testing.monitor_contract import arithmetic_rubric, example_monitor_views

REGISTRY = load_registry()
RUBRIC = arithmetic_rubric()  # format (weight 1), correctness (2), brevity (0.5, 1-5), repetition (0.5, 1-5)
RECORDS = [{"prompt": "1+1=", "reference": "2"}, {"prompt": "2+2=", "reference": "4"}]
G = 4


def gold_judge(**params):
    return REGISTRY.create("monitor", "gold_judge", {"every": 1, **params})


def step_view(step: int, train_right: int, gold_wrong: int):
    """Two groups of G completions. The training judge's raw scores give ``train_right`` of each group full
    correctness, so its yardstick is 0.5 + 0.125 · train_right ((1 + 2·right/G + 0.5 + 0.5) / 4). The texts are
    right but for ``gold_wrong`` of them, so the gold (rule) judge's yardstick is 1 − 0.125 · gold_wrong (a wrong
    bare number keeps format, brevity and repetition: (1 + 0 + 0.5 + 0.5) / 4 = 0.5)."""
    texts = [[str(int(r["reference"]) + (j < gold_wrong)) for j in range(G)] for r in RECORDS]
    raw = torch.tensor([[[1.0, float(j < train_right), 5.0, 5.0] for j in range(G)]] * len(RECORDS))
    return make_view(step, RECORDS, texts, raw, RUBRIC)


def test_gold_and_training_reward_of_the_same_completions():
    (metrics,), _ = run_monitor(gold_judge(), [step_view(0, train_right=2, gold_wrong=1)])
    assert metrics["train/reward"] == pytest.approx(0.75)
    assert metrics["gold/reward"] == pytest.approx(0.875)
    assert metrics["divergence"] == pytest.approx(-0.125)
    assert metrics["gold/unscored"] == 0.0


def test_divergence_alert_fires_when_training_rises_and_gold_falls_not_before():
    # steps 0-3 flat; step 4 the training reward rises alone; from step 5 the gold reward falls as it keeps rising.
    # window 3 = the last 4 measurements, each change read off their least-squares line:
    #   step 4: train 0.5, 0.5, 0.5, 0.625 -> +0.1125; gold flat -> 0: no alert (only one of the two moved)
    #   step 5: train 0.5, 0.5, 0.625, 0.75 -> +0.2625; gold 1, 1, 1, 0.875 -> -0.1125: the alert
    schedule = [(0, 0), (0, 0), (0, 0), (0, 0), (1, 0), (2, 1), (3, 2), (4, 3)]
    monitor = gold_judge(window=3, min_rise=0.05, min_fall=0.05)
    metrics, alerts = run_monitor(monitor, [step_view(s, *rg) for s, rg in enumerate(schedule)])
    assert [a.step for a in alerts] == [5]  # once: edge-triggered while the divergence lasts
    assert "rose +0.26" in alerts[0].message and "fell -0.11" in alerts[0].message
    assert [round(m["divergence"], 4) for m in metrics] == [-0.5] * 4 + [-0.375, -0.125, 0.125, 0.375]
    summary = monitor.summary()
    assert summary["measurements"] == 8 and summary["final_divergence"] == pytest.approx(0.375)


def test_alert_when_gold_falls_and_the_training_reward_stays_level():
    # a saturated training judge: its reward stays at 0.75 while the gold's falls 1, 1, 1, 0.875 (-0.1125 off the
    # line through the last 4), so the gap widens 0.1125 > min_rise + min_fall = 0.1 at step 3; the old rule (the
    # training reward must rise) stayed silent here
    views = [step_view(s, 2, wrong) for s, wrong in enumerate([0, 0, 0, 1, 2, 3])]
    _, alerts = run_monitor(gold_judge(window=3), views)
    assert [a.step for a in alerts] == [3]
    assert "fell -0.11" in alerts[0].message and "moved only +0.000" in alerts[0].message


def test_no_alert_when_both_judges_fall_together():
    # the policy got worse and both judges see it: the gap does not widen
    views = [step_view(s, right, wrong) for s, (right, wrong) in enumerate([(4, 0)] * 3 + [(3, 1), (2, 2), (1, 3)])]
    assert run_monitor(gold_judge(window=3), views)[1] == []


def test_no_alert_when_both_rise_or_before_a_full_window():
    both_rise = [step_view(s, min(s, 4), max(0, 3 - s)) for s in range(8)]
    assert run_monitor(gold_judge(window=3), both_rise)[1] == []
    # the sharpest divergence, but only 3 measurements: a window of 3 needs 4
    early = [step_view(s, 2 * s, s) for s in range(3)]
    assert run_monitor(gold_judge(window=3), early)[1] == []


def test_alert_raised_again_after_the_trends_recover():
    schedule = [(0, 0)] * 3 + [(2, 1), (4, 2), (4, 2), (0, 0), (0, 0), (0, 0), (2, 1), (4, 2)]
    # window 2: step 3 is the first whose last 3 measurements diverge; it lasts through step 5, the trends turn at
    # step 6, and steps 7-9 diverge again
    _, alerts = run_monitor(gold_judge(window=2), [step_view(s, *rg) for s, rg in enumerate(schedule)])
    assert [a.step for a in alerts] == [3, 9]


def test_state_round_trip_keeps_the_window():
    views = [step_view(s, *rg) for s, rg in enumerate([(0, 0)] * 4 + [(1, 0), (2, 1)])]
    whole, resumed = gold_judge(window=3), gold_judge(window=3)
    run_monitor(whole, views[:4])
    resumed.load_state_dict(json.loads(json.dumps(whole.state_dict())))
    assert [a.step for a in run_monitor(resumed, views[4:])[1]] == [5]


def test_held_out_prompts_are_sampled_by_the_policy_and_scored_by_both_judges(tmp_path):
    path = tmp_path / "heldout.jsonl"
    # the suite's fake generator answers len(prompt) + j: "4" (right) then "5" (wrong) for these prompts
    path.write_text("".join(json.dumps({"prompt": p, "reference": "4"}) + "\n" for p in ("1+3=", "2+2=", "0+4=")))
    monitor = gold_judge(prompts=str(path), num_generations=2, limit=2)
    monitor.check_rubric(RUBRIC)
    assert len(monitor.records) == 2
    metrics = monitor.observe(0, example_monitor_views(1)[0])
    # training stand-in judge: right -> every dimension top, wrong -> bottom: (1 + 0) / 2; gold (rule): (1 + 0.5) / 2
    assert metrics["train/reward"] == pytest.approx(0.5)
    assert metrics["gold/reward"] == pytest.approx(0.75)


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="no prompts file"):
        gold_judge(prompts=str(tmp_path / "missing.jsonl")).check_rubric(RUBRIC)
    with pytest.raises(ConfigError, match="window"):
        gold_judge(window=0)
    with pytest.raises(ConfigError, match="unknown judge .rulle."):
        gold_judge(judge="rulle")
    with pytest.raises(ConfigError, match="rubric of its own") as err:
        gold_judge(judge="ranking")
    assert err.value.where.startswith("monitors.params.judge")


def test_the_gold_judge_is_built_from_its_reference():
    monitor = gold_judge(judge={"name": "ensemble", "params": {"members": ["rule", "rule"]}})
    (metrics,), _ = run_monitor(monitor, [step_view(0, 0, 0)])
    assert metrics["gold/reward"] == pytest.approx(1.0)


class TestGoldJudgeContract(MonitorContract):
    @pytest.fixture(params=[{}, {"every": 2, "window": 2}])
    def monitor(self, request):
        return REGISTRY.create("monitor", "gold_judge", request.param)


@pytest.mark.slow
def test_fit_logs_the_gold_metrics(tmp_path, monkeypatch):
    code, run_dir, rows = fit_rows(tmp_path, monkeypatch, 4, "monitors=[gold_judge]",
                                   "monitors.gold_judge.params.every=1", "monitors.gold_judge.params.window=2")
    assert code == 0
    assert len(rows) == 4
    for key in ("monitors/gold_judge/gold/reward", "monitors/gold_judge/train/reward",
                "monitors/gold_judge/divergence"):
        assert all(r[key] != "" for r in rows), key
    # the gold judge is the training judge here (rule): the two agree on every completion
    assert all(float(r["monitors/gold_judge/divergence"]) == pytest.approx(0.0, abs=1e-6) for r in rows)
    summary = json.loads((run_dir / "monitors.json").read_text())
    assert summary["gold_judge"]["measurements"] == 4


def test_a_gold_rubric_of_its_own(tmp_path):
    # the gold judge scores exact answers only (one binary dimension): a templated right answer, which the run's
    # rubric credits, earns 0 there; a bare right answer 1
    gold = tmp_path / "gold.yaml"
    gold.write_text("name: exact\nversion: '1'\ndimensions:\n  - name: exact_answer\n    description: the bare sum\n"
                    "    type: binary\n    anchors: {0: {text: other}, 1: {text: the sum alone}}\n"
                    "    checks: [{type: match, field: reference, mode: exact}]\n", encoding="utf-8")
    texts = [["first 1, second 1, finally 2", "2", "2", "first 1, second 1, finally 2"],
             ["4", "4", "4", "first 2, second 2, finally 4"]]
    raw = torch.tensor([[[1.0, 1.0, 5.0, 5.0]] * G] * len(RECORDS))
    (metrics,), _ = run_monitor(gold_judge(rubric=str(gold)), [make_view(0, RECORDS, texts, raw, RUBRIC)])
    assert metrics["train/reward"] == pytest.approx(1.0)
    assert metrics["gold/reward"] == pytest.approx(5 / 8)
    with pytest.raises(ConfigError, match="monitors.gold_judge.params.rubric"):
        gold_judge(rubric=str(tmp_path / "missing.yaml"))
