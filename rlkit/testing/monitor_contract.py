"""The monitor contract suite: finite metrics, well-formed alerts, a JSON summary, determinism, resumable state.

The suite's views follow rlkit's default task (the shipped arithmetic rubric and its rule judge), so monitors
that read labelled files for that task (``judge_stability``) run on them unchanged; override ``monitor_views`` for
a monitor that needs another rubric.
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Sequence
from typing import Any

import pytest
import torch

from rlkit.core.rubric import Rubric, load_rubric
from rlkit.reward.monitor_view import SEVERITIES, MonitorView, make_view

ARITHMETIC_RUBRIC = "pkg://rlkit.conf/rubric_files/arithmetic.yaml"


def arithmetic_rubric() -> Rubric:
    """The rubric of rlkit's default task."""
    from rlkit.config import resolve_path

    return load_rubric(resolve_path(ARITHMETIC_RUBRIC))


class ExactAnswerJudge:
    """A stand-in judge for hand-made views: every dimension at its top level when the completion is exactly the
    record's reference, at its bottom level otherwise (the suite needs scores that move, not a plugin)."""

    def score(self, rollout: Any, rubric: Rubric) -> torch.Tensor:
        high = torch.tensor([d.high for d in rubric.dimensions], dtype=torch.float32)
        low = torch.tensor([d.low for d in rubric.dimensions], dtype=torch.float32)
        right = torch.tensor([[text.strip() == str(record.get("reference")) for text in group]
                              for record, group in zip(rollout.records, rollout.completions, strict=True)])
        return torch.where(right.unsqueeze(-1), high, low)


def example_monitor_views(steps: int = 8, judge: Any = None) -> list[MonitorView]:
    """Steps 0..steps-1 of a run that drifts: answers start short and right, then grow long, templated,
    repetitive, and all score the same, and half their tool calls fail. The views carry ``judge`` (default
    :class:`ExactAnswerJudge`), a deterministic fake generator and fake log-probs (the policy's drift from the
    reference grows with the step and the text's length)."""
    from rlkit.core.types import Episode

    rubric = arithmetic_rubric()
    judge = judge if judge is not None else ExactAnswerJudge()
    records = [{"prompt": f"{i}+{i}=", "reference": str(2 * i)} for i in range(1, 4)]

    def judge_scores(recs: Sequence[dict[str, Any]], completions: Sequence[Sequence[str]]) -> torch.Tensor:
        from rlkit.core.types import Rollout

        return judge.score(Rollout(records=list(recs), completions=[list(c) for c in completions]), rubric)

    def generate(recs: Sequence[dict[str, Any]], num_generations: int) -> list[list[str]]:
        return [[f"{len(str(r['prompt'])) + j}" for j in range(num_generations)] for r in recs]

    def fake_log_probs(step: int) -> Any:
        def log_probs(recs: Sequence[dict[str, Any]], completions: Sequence[Sequence[str]]) -> tuple[torch.Tensor,
                                                                                                    torch.Tensor]:
            length = torch.tensor([[float(len(t)) for t in group] for group in completions])
            return -1.0 - 0.1 * length / (1.0 + step), -1.0 - 0.1 * length
        return log_probs

    views = []
    for step in range(steps):
        late = step >= steps // 2
        texts = [[(f"First, add. Second, check. Finally, {2 * i} " + "the answer is the answer is " * step)
                  if late else (str(2 * i) if j % 2 else str(2 * i + j)) for j in range(4)]
                 for i in range(1, 4)]
        raw = judge_scores(records, texts)
        # each answer an episode with one tool call, which fails more often late in the run
        episodes = [[Episode((), (text,), {"tool_calls": 1.0, "tool_errors": float(late and j % 2 == 0)})
                     for j, text in enumerate(group)] for group in texts]
        views.append(make_view(step, records, texts, raw, rubric, judge_scores=judge_scores, generate=generate,
                               episodes=episodes, log_probs=fake_log_probs(step)))
    return views


def run_monitor(monitor: Any, views: Sequence[MonitorView]) -> tuple[list[dict[str, float]], list[Any]]:
    """``views`` through ``monitor`` as the host hands them over, step after step: each step's metrics, and every
    alert raised, in order."""
    metrics, alerts = [], []
    for view in views:
        metrics.append(monitor.observe(view.step, view))
        alerts.extend(monitor.alerts())
    return metrics, alerts


class MonitorContract:
    """Metrics are finite floats, alerts well-formed and only for observed steps, summaries JSON, runs repeatable.

    Provide a ``monitor`` fixture (a freshly built monitor); ``monitor_views`` may be overridden.
    """

    @pytest.fixture
    def monitor_views(self) -> list[MonitorView]:
        return example_monitor_views()

    @staticmethod
    def _run(monitor: Any, views: Sequence[MonitorView]) -> tuple[list[dict[str, float]], list[Any]]:
        return run_monitor(monitor, views)

    def test_metrics_are_finite_floats(self, monitor: Any, monitor_views: list[MonitorView]) -> None:
        metrics, _ = self._run(monitor, monitor_views)
        assert any(metrics), "a monitor that never measures anything on eight steps is broken"
        for step_metrics in metrics:
            assert isinstance(step_metrics, dict)
            for key, value in step_metrics.items():
                assert isinstance(key, str) and key and not key.startswith("/"), key
                assert isinstance(value, float | int) and not isinstance(value, bool), (key, value)
                assert math.isfinite(value), (key, value)

    def test_alerts_are_well_formed(self, monitor: Any, monitor_views: list[MonitorView]) -> None:
        _, alerts = self._run(monitor, monitor_views)
        steps = {v.step for v in monitor_views}
        for alert in alerts:
            assert isinstance(alert.monitor, str) and alert.monitor
            assert isinstance(alert.step, int) and alert.step in steps
            assert isinstance(alert.message, str) and alert.message.strip()
            assert alert.severity in SEVERITIES
        assert monitor.alerts() == [], "alerts() returns each alert once"

    def test_summary_is_json(self, monitor: Any, monitor_views: list[MonitorView]) -> None:
        json.dumps(copy.deepcopy(monitor).summary(), allow_nan=False)  # before any step too
        self._run(monitor, monitor_views)
        summary = monitor.summary()
        assert isinstance(summary, dict)
        json.dumps(summary, allow_nan=False)

    def test_deterministic(self, monitor: Any, monitor_views: list[MonitorView]) -> None:
        twin = copy.deepcopy(monitor)
        first, second = self._run(monitor, monitor_views), self._run(twin, monitor_views)
        assert first[0] == second[0]
        assert [a.__dict__ for a in first[1]] == [a.__dict__ for a in second[1]]
        assert monitor.summary() == twin.summary()

    def test_state_round_trip(self, monitor: Any, monitor_views: list[MonitorView]) -> None:
        if not callable(getattr(monitor, "state_dict", None)):
            return
        half = len(monitor_views) // 2
        resumed = copy.deepcopy(monitor)
        self._run(monitor, monitor_views[:half])
        # through JSON: a checkpoint must not need the monitor's classes to load
        resumed.load_state_dict(json.loads(json.dumps(monitor.state_dict())))
        assert self._run(monitor, monitor_views[half:])[0] == self._run(resumed, monitor_views[half:])[0]
        assert monitor.summary() == resumed.summary()
