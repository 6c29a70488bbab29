"""Reward-hacking and health monitors on hand-made views, their config, and one short ``rlkit fit`` with them."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from rlkit import ConfigError, PluginError
from rlkit.config import check_config, compose_config, resolve_path
from rlkit.core.registry import load_registry
from rlkit.evaluation.calibration import read_labels
from rlkit.reward.monitor_view import make_view
from rlkit.testing import MonitorContract, run_monitor
from rlkit.testing.monitor_contract import arithmetic_rubric
from rlkit.train.monitoring import MonitorHost

REGISTRY = load_registry()
RUBRIC = arithmetic_rubric()
RECORDS = [{"prompt": "1+1=", "reference": "2"}, {"prompt": "2+2=", "reference": "4"}]


def monitor(name: str, **params):
    return REGISTRY.create("monitor", name, params)


def view(step: int, texts: list[list[str]], raw: torch.Tensor | None = None, **kwargs):
    """A view over RECORDS; scores default to mid-range values that differ within each group."""
    if raw is None:
        g = len(texts[0])
        raw = torch.tensor([[[j % 2, (j + 1) % 2, 1 + j % 5, 5 - j % 5] for j in range(g)]] * len(texts),
                           dtype=torch.float32)
    return make_view(step, RECORDS[:len(texts)], texts, raw, RUBRIC, **kwargs)


def test_template_share_climbing_past_the_threshold_alerts_once_with_its_step():
    m = monitor("template_phrases", threshold=0.6, max_rise=1.0)
    templated = "First, add the digits. Second, carry. Finally, 4."
    views = [view(step, [[templated if j < step else "4" for j in range(4)]] * 2) for step in range(5)]
    metrics, alerts = run_monitor(m, views)
    assert [x["share"] for x in metrics] == [0.0, 0.25, 0.5, 0.75, 1.0]
    assert all(x["start_share"] == 0.0 for x in metrics)
    assert len(alerts) == 1 and alerts[0].step == 3 and "75%" in alerts[0].message
    assert m.summary() == {"measurements": 5, "start_share": 0.0, "final_share": 1.0, "max_share": 1.0}


def test_template_rise_over_the_start_and_the_chinese_pattern():
    m = monitor("template_phrases", threshold=1.0, max_rise=0.4)
    zh = "首先计算个位，其次进位，最后得到 4。"
    _, alerts = run_monitor(m, [view(0, [[zh, "4", "4", "4"]]), view(1, [[zh, zh, zh, "4"]])])
    assert [a.step for a in alerts] == [1] and "started at 25%" in alerts[0].message


def test_template_bad_pattern_names_the_field():
    with pytest.raises(ConfigError, match=r"monitors\.template_phrases\.params\.patterns\[1\]"):
        monitor("template_phrases", patterns=["ok", "(unclosed"])


def test_length_drift_against_the_first_steps():
    m = monitor("length_drift", baseline_steps=2, max_ratio=2.0)
    lengths = [10.0, 12.0, 15.0, 30.0, 40.0, 11.0, 25.0]
    views = [view(s, [["a", "b"]], completion_lengths=torch.full((1, 2), n)) for s, n in enumerate(lengths)]
    metrics, alerts = run_monitor(m, views)
    assert "baseline" not in metrics[0] and metrics[2]["baseline"] == 11.0
    assert [a.step for a in alerts] == [3, 6], "raised on leaving the band, again only after coming back"
    assert "2.73x the first steps' 11.0" in alerts[0].message


def test_tool_errors_against_the_first_steps_and_silent_without_calls():
    from rlkit.core.types import Episode

    def episodes(calls: int, errors: int):
        return [[Episode((), ("x",), {"tool_calls": float(calls), "tool_errors": float(errors)}),
                 Episode((), ("y",), {"tool_calls": 1.0, "tool_errors": 0.0})]]

    m = monitor("tool_errors", baseline_steps=2, max_rise=0.2)
    counts = [(3, 0), (3, 1), (3, 3), (0, 0), (3, 0)]  # with the other episode's call: 0, 0.25, 0.75, 0, 0
    views = [view(s, [["a", "b"]], episodes=episodes(c, e)) for s, (c, e) in enumerate(counts)]
    metrics, alerts = run_monitor(m, [view(99, [["a", "b"]]), *views])
    assert metrics[0] == {} and metrics[4] == {"value": 0.0, "baseline": 0.125}  # no episodes: nothing measured
    assert metrics[3]["value"] == pytest.approx(0.75) and [a.step for a in alerts] == [2]
    assert "75% of tool calls failed" in alerts[0].message and "up from 12%" in alerts[0].message


def test_repetition_drift_flags_looping_text():
    m = monitor("repetition_drift", baseline_steps=1, ngram=2, max_rise=0.3)
    loop = "the answer is " * 6
    metrics, alerts = run_monitor(m, [view(0, [["the sum is 4", "4"]]), view(1, [[loop, loop]])])
    assert metrics[0]["value"] == 0.0 and metrics[1]["value"] > 0.6
    assert [a.step for a in alerts] == [1]


def test_reward_collapse_names_the_saturated_dimension():
    m = monitor("reward_collapse", patience=2)
    # format, correctness and repetition equal within every group, brevity still differs: rewards differ, no alert
    varied = torch.tensor([[[1, 1, 1 + j, 5] for j in range(4)]] * 2, dtype=torch.float32)
    # then every dimension but brevity is saturated, and brevity differs in no group either: rewards tie
    flat = torch.tensor([[[1, 0, 3, 5]] * 4] * 2, dtype=torch.float32)
    views = [view(0, [["4"] * 4] * 2, varied), *(view(s, [["4"] * 4] * 2, flat) for s in (1, 2, 3))]
    metrics, alerts = run_monitor(m, views)
    assert metrics[0]["flat_groups"] == 0.0 and metrics[0]["saturated/correctness"] == 1.0
    assert metrics[1]["flat_groups"] == 1.0
    assert len(alerts) == 1 and alerts[0].step == 2
    assert "correctness" in alerts[0].message and "brevity" in alerts[0].message
    assert m.summary()["first_collapse_step"] == 2


def test_reward_collapse_when_every_completion_scores_the_maximum():
    m = monitor("reward_collapse", patience=1, max_flat_share=1.0)
    top = torch.tensor([[[1, 1, 5, 5]] * 3], dtype=torch.float32)
    metrics, alerts = run_monitor(m, [view(0, [["4"] * 3], top)])
    assert metrics[0]["at_max"] == 1.0 and "every completion scores the maximum" in alerts[0].message


def test_judge_stability_flags_a_judge_that_degrades():
    labels_path = resolve_path("pkg://rlkit.conf/calibration/arithmetic_labels.jsonl")
    truth = {(r["prompt"], r["completion"]): r["labels"] for r in read_labels(labels_path, RUBRIC)}
    quality = {"good": True}

    def judge_scores(records, completions):
        rows = []
        for record, (text,) in zip(records, completions, strict=True):
            labels = truth[(record["prompt"], text)]
            good = [labels.get(d.name) for d in RUBRIC.dimensions]  # None: not labelled, left out of the kappa
            rows.append([[float(v if v is not None and quality["good"] else d.low)
                          for v, d in zip(good, RUBRIC.dimensions, strict=True)]])
        return torch.tensor(rows, dtype=torch.float32)

    m = monitor("judge_stability", every=2, max_drop=0.2)
    m.check_rubric(RUBRIC)
    views = [view(s, [["4"]], judge_scores=judge_scores) for s in range(5)]
    metrics, alerts = [], []
    for v in views:
        quality["good"] = v.step < 4
        metrics.append(m.observe(v.step, v))
        alerts.extend(m.alerts())
    assert metrics[1] == {} and metrics[0]["agreement"] == pytest.approx(1.0)
    assert metrics[4]["agreement"] < 0.5 and metrics[4]["start_agreement"] == pytest.approx(1.0)
    assert [a.step for a in alerts] == [4] and "scores the same texts differently" in alerts[0].message
    assert alerts[0].monitor == "judge_stability"


def test_judge_stability_is_constant_for_a_deterministic_judge_whatever_the_policy_writes():
    """Why it is not a collusion check: the policy's texts never reach it, so its number cannot move."""
    labels_path = resolve_path("pkg://rlkit.conf/calibration/arithmetic_labels.jsonl")
    rule = REGISTRY.create("judge", "rule", {})

    def judge_scores(records, completions):
        from rlkit import Rollout

        return rule.score(Rollout(records=list(records), completions=[list(c) for c in completions]), RUBRIC)

    m = monitor("judge_stability", every=1, labels=str(labels_path))
    policies = [["4"], ["First, the answer is 4. Finally 4."], ["no idea"]]
    metrics = [m.observe(step, view(step, [texts], judge_scores=judge_scores)) for step, texts in enumerate(policies)]
    assert len({x["agreement"] for x in metrics}) == 1


def test_judge_drift_the_removed_name_is_refused_with_the_list_naming_judge_stability():
    with pytest.raises(PluginError, match="unknown monitor 'judge_drift'; available monitors: .*judge_stability"):
        validated("monitors=[judge_drift]")


def test_judge_stability_labels_must_fit_the_rubric():
    from rlkit.testing import example_rubric

    with pytest.raises(Exception, match="unknown dimension"):
        monitor("judge_stability").check_rubric(example_rubric())


def test_label_sample_writes_a_reward_stratified_sample_of_the_live_completions(tmp_path):
    from rlkit.evaluation.calibration import read_labels
    from rlkit.evaluation.labelling import read_labelling

    m = monitor("label_sample", every=5, size=4, output=str(tmp_path))
    g = 8
    texts = [[f"completion {i}-{j}" for j in range(g)] for i in range(2)]
    rewards = torch.arange(16, dtype=torch.float32).reshape(2, g) / 15  # distinct: slices are known
    assert m.observe(3, view(3, texts, rewards=rewards)) == {}  # not due
    assert m.observe(5, view(5, texts, rewards=rewards)) == {"written": 4.0}
    path = tmp_path / "step_0000005.jsonl"
    lines = read_labelling(path)
    # one from each quarter of the reward order: ranks 0-3, 4-7, 8-11, 12-15
    ranks = sorted(round(line["reward"] * 15) for line in lines)
    assert [r // 4 for r in ranks] == [0, 1, 2, 3]
    assert all(line["step"] == 5 and line["window"] == 5 for line in lines)
    assert lines[0]["dimensions"][0]["anchors"] == {"0": "No number first", "1": "Starts with a number"}
    assert all(v is None for line in lines for v in line["labels"].values())
    assert lines[0]["rubric"]["hash"] == RUBRIC.content_hash and set(lines[0]["judge"]) == set(RUBRIC.dimension_names)
    assert len(read_labels(path, RUBRIC)) == 4  # what rlkit calibrate reads
    # the same step again draws the same sample (seeded by step)
    again = monitor("label_sample", every=5, size=4, output=str(tmp_path / "again"))
    again.observe(5, view(5, texts, rewards=rewards))
    assert (tmp_path / "again" / "step_0000005.jsonl").read_text() == path.read_text()
    assert m.summary() == {"files": 1, "last": str(path)}


def test_label_sample_outside_a_run_keeps_the_sample_in_memory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = monitor("label_sample", every=1, size=30)
    assert m.observe(0, view(0, [["4", "5"]])) == {"written": 2.0}
    assert [line["completion"] for line in m.samples[0]] == ["4", "5"] and not any(tmp_path.iterdir())
    with pytest.raises(ConfigError, match="monitors.label_sample.params.size"):
        monitor("label_sample", size=0)


def test_probes_record_group_scores_over_time():
    asked = []

    def generate(records, n):
        asked.append(len(asked))
        return [[r["reference"] if len(asked) > 1 else "x"] * n for r in records]

    def judge_scores(records, completions):
        return torch.tensor([[[float(c == r["reference"]), float(c == r["reference"]), 5, 5] for c in group]
                             for r, group in zip(records, completions, strict=True)])

    m = monitor("probes", every=2, num_generations=3, prompts=[{"prompt": "1+1=", "reference": "2"}])
    metrics, _ = run_monitor(m, [view(s, [["4"]], judge_scores=judge_scores, generate=generate) for s in range(4)])
    assert len(asked) == 2 and metrics[1] == {}
    assert metrics[0]["correctness"] == 0.0 and metrics[2]["correctness"] == 1.0
    assert metrics[2]["score"] > metrics[0]["score"]
    summary = m.summary()
    assert [h["step"] for h in summary["history"]] == [0, 2] and summary["history"][1]["scores"] == [1.0]
    json.dumps(summary, allow_nan=False)


def test_host_prefixes_metrics_writes_alerts_and_summary(tmp_path):
    host = MonitorHost({"phrases": monitor("template_phrases", patterns=["."], threshold=0.1)}, tmp_path)
    with pytest.warns(UserWarning, match="rlkit monitor phrases, step 0"):
        metrics = host.observe(view(0, [["4", "5"]]))
    assert metrics == {"monitors/phrases/share": 1.0, "monitors/phrases/start_share": 1.0}
    line = json.loads((tmp_path / "alerts.jsonl").read_text())
    assert line["monitor"] == "phrases" and line["step"] == 0 and line["severity"] == "warning"
    assert set(line) == {"monitor", "step", "severity", "message"}
    host.summary()
    assert json.loads((tmp_path / "monitors.json").read_text())["phrases"]["measurements"] == 1


def test_contract_catches_a_monitor_that_logs_nan():
    class Broken:
        def observe(self, step, view):
            return {"value": float("nan")}

        def alerts(self):
            return []

        def summary(self):
            return {}

    with pytest.raises(AssertionError):
        MonitorContract().test_metrics_are_finite_floats(Broken(), [view(0, [["4"]])])
    with pytest.raises(PluginError, match="finite"):
        MonitorHost({"broken": Broken()}).observe(view(0, [["4"]]))


# --- config ------------------------------------------------------------------------------------


def validated(*overrides: str):
    return check_config(compose_config(REGISTRY, list(overrides)), REGISTRY, read_data=False)


def test_monitors_are_a_list_off_by_default():
    assert validated().plugins["monitor"] == {}
    assert validated("monitors=[]").plugins["monitor"] == {}
    chosen = validated("monitors=[template_phrases,length_drift]", "monitors.length_drift.params.max_ratio=3")
    assert list(chosen.plugins["monitor"]) == ["template_phrases", "length_drift"]
    assert chosen.plugins["monitor"]["length_drift"].params.max_ratio == 3.0
    assert chosen.plugin_names["monitor"] == "template_phrases, length_drift"


def test_monitor_config_errors_name_the_monitor():
    with pytest.raises(PluginError, match="unknown monitor 'nope'; available monitors: .*judge_stability"):
        validated("monitors=[length_drift,nope]")
    with pytest.raises(ConfigError, match=r"monitors\.length_drift\.params.*max_ratio"):
        validated("monitors=[length_drift]", "monitors.length_drift.params.max_ratio=fast")
    with pytest.raises(ConfigError, match=r"monitors\.reward_collapse\.params: unknown key 'extra'"):
        validated("monitors=[reward_collapse]", "+monitors.reward_collapse.params.extra=1")


def test_plugins_command_lists_monitors(capsys):
    from rlkit.cli import main

    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "monitors=[template_phrases]" in out and "monitors=[reward_collapse]" in out


# --- end to end ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_fit_logs_monitors_writes_summary_and_a_forced_alert(tmp_path, monkeypatch, capsys):
    from rlkit.cli import main

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    # model=tiny_random: these data settings would need a warm start of their own
    code = main(["fit", "model=tiny_random", "logger=csv", "trainer.max_steps=2", "batch_size=2", "num_generations=2",
                 "max_completion_length=8", "data.num_prompts=16",
                 "monitors=[template_phrases,length_drift,reward_collapse,judge_stability,label_sample]",
                 "monitors.label_sample.params.every=1", "monitors.label_sample.params.size=3",
                 "monitors.template_phrases.params.patterns=[.]", "monitors.template_phrases.params.threshold=0.1",
                 f"hydra.run.dir={run_dir}"])
    out = capsys.readouterr().out
    assert code == 0
    assert "monitor template_phrases:" in out and "1 alert(s)" in out
    (path,) = Path(run_dir).glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("reward/mean")]
    assert len(rows) == 2
    for key in ("monitors/template_phrases/share", "monitors/length_drift/value",
                "monitors/reward_collapse/flat_groups", "monitors/reward_collapse/saturated/correctness"):
        assert all(r[key] != "" for r in rows), key
    assert rows[0]["monitors/judge_stability/agreement"] != ""
    assert [r["monitors/label_sample/written"] for r in rows] == ["3.0", "3.0"]
    assert sorted(p.name for p in (run_dir / "labelling").iterdir()) == ["step_0000000.jsonl", "step_0000001.jsonl"]
    summary = json.loads((run_dir / "monitors.json").read_text())
    assert set(summary) == {"template_phrases", "length_drift", "reward_collapse", "judge_stability", "label_sample"}
    assert summary["template_phrases"]["measurements"] == 2
    (alert,) = [json.loads(line) for line in (run_dir / "alerts.jsonl").read_text().splitlines()]
    assert alert["monitor"] == "template_phrases" and alert["step"] == 0
