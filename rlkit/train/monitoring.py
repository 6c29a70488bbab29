"""The host that runs a run's monitors in ``rlkit fit``: calls them each step, logs their metrics, records alerts.

What a monitor reads (``MonitorView``) and raises (``Alert``) is in ``rlkit.reward.monitor_view``; the files the host
writes (``alerts.jsonl``, ``monitors.json``) are described there.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from rlkit.core.errors import PluginError
from rlkit.reward.monitor_view import ALERTS_FILE, SUMMARY_FILE, Alert, MonitorView

# --- the host ------------------------------------------------------------------------------------


def _finite(value: Any, key: str, where: str) -> float:
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise PluginError(f"monitor {where} returned {number} for {key!r}; return only finite metrics")
    return number


@dataclass
class MonitorHost:
    """Owns a run's monitors: calls them each step, prefixes their metrics, and records alerts and summaries.

    ``run_dir`` None keeps everything in memory (tests); ``writer`` decides whether this process writes files
    (rank 0 under DDP).
    """

    monitors: dict[str, Any]
    run_dir: Path | None = None
    writer: Callable[[], bool] = lambda: True
    alerts: list[Alert] = field(default_factory=list)

    def observe(self, view: MonitorView) -> dict[str, float]:
        """Every monitor's metrics for this step as ``monitors/<key>/<metric>``; new alerts are recorded. A view that
        carries the step's ``metrics`` reaches each monitor with those of the monitors before it added."""
        metrics: dict[str, float] = {}
        for key, monitor in self.monitors.items():
            seen = view if view.metrics is None or not metrics else replace(view, metrics={**view.metrics, **metrics})
            for metric, value in (monitor.observe(view.step, seen) or {}).items():
                metrics[f"monitors/{key}/{metric}"] = _finite(value, metric, key)
            for alert in monitor.alerts():
                alert = Alert(key, int(alert.step), str(alert.message), alert.severity)
                self.alerts.append(alert)
                if self.writer():  # one process speaks for the run (Lightning's rank_zero_warn, without its import)
                    warnings.warn(f"rlkit monitor {key}, step {alert.step}: {alert.message}", UserWarning, stacklevel=2)
                self._append(alert)
        return metrics

    def _append(self, alert: Alert) -> None:
        if self.run_dir is None or not self.writer():
            return
        from rlkit.core.atomic import append_lines

        append_lines(self.run_dir / ALERTS_FILE, [json.dumps(alert.as_dict(), ensure_ascii=False)])

    def summary(self) -> dict[str, dict[str, Any]]:
        """``{key: summary}``, written to ``monitors.json`` in the run directory (rank 0)."""
        out = {key: monitor.summary() for key, monitor in self.monitors.items()}
        if self.run_dir is not None and self.writer():
            from rlkit.core.atomic import atomic_write_text

            atomic_write_text(self.run_dir / SUMMARY_FILE, json.dumps(out, indent=2, ensure_ascii=False) + "\n")
        return out

    def state_dict(self) -> dict[str, Any]:
        """Each monitor's state where it keeps one, so a resumed run compares with the same baselines."""
        return {key: m.state_dict() for key, m in self.monitors.items() if callable(getattr(m, "state_dict", None))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            monitor = self.monitors.get(key)
            if monitor is not None and callable(getattr(monitor, "load_state_dict", None)):
                monitor.load_state_dict(value)


def summary_lines(summaries: dict[str, dict[str, Any]], alerts: Sequence[Alert]) -> list[str]:
    """One line per monitor for ``fit``'s end summary: its summary's numbers and its alert count."""
    lines = []
    for key, summary in summaries.items():
        numbers = [f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()
                   if isinstance(v, int | float | str) and not isinstance(v, bool)]
        count = sum(a.monitor == key for a in alerts)
        lines.append(f"monitor {key}: {', '.join(numbers) or 'no measurements'}; {count} alert(s)")
    return lines


# --- glue to the training module -------------------------------------------------------------------


@dataclass
class MonitorSources:
    """What a monitor's view of a training step calls back into: the judge (``rewards``: the run's
    ``rlkit.train.step_rewards.RewardPipeline``), the run's sampling (``sample``: a ``GenerationRequest`` played out
    as training plays it), and the policy and reference for log-probs."""

    rewards: Any
    sample: Callable[[Any], Any]
    policy: Any
    reference: Any
    tokenizer: Any
    settings: Any  # rlkit.train.settings.TrainingSettings
    device: torch.device


def step_view(sources: MonitorSources, step: int, records: Sequence[dict[str, Any]], sampled: Any, batch: Any,
              metrics: Mapping[str, float] | None = None) -> MonitorView:
    """The view of one training step: this process's rows, the judge and the generator, and the step's ``metrics``
    gathered so far (global over processes)."""
    from rlkit.core.types import Rollout
    from rlkit.lm.sampling import GenerationRequest
    from rlkit.reward.diagnostics import saturated_groups
    from rlkit.train.distributed import Spread

    spread, rubric, s = Spread.current(), sources.rewards.scored_rubric, sources.settings
    scores = spread.local(batch.scores).cpu()
    g = len(sampled.texts[0])

    def judge_scores(recs: Sequence[dict[str, Any]], completions: Sequence[Sequence[str]]) -> torch.Tensor:
        rollout = Rollout(records=list(recs), completions=[list(c) for c in completions])
        with torch.random.fork_rng(devices=[]):  # a sampling judge must not shift the training's draws
            return sources.rewards.judge_scores(rollout).cpu()

    def generate(recs: Sequence[dict[str, Any]], num_generations: int) -> list[list[str]]:
        # fixed seeds per record: a generator that honours them samples the same noise at every measurement
        request = GenerationRequest(list(recs), num_generations, s.max_completion_length, s.temperature,
                                    False, [s.seed * 7_919 + i for i in range(len(recs))])
        devices = [sources.device] if sources.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            out = sources.sample(request)  # played out by the run's environment, as training samples
        return [list(group) for group in out.texts]

    def log_probs(recs: Sequence[dict[str, Any]], completions: Sequence[Sequence[str]]) -> tuple[torch.Tensor, Any]:
        from rlkit.lm.reference import mean_log_probs_of_texts

        return mean_log_probs_of_texts(sources.policy, sources.reference, sources.tokenizer, recs, completions,
                                       s.max_completion_length)

    return MonitorView(step=step, records=records, texts=sampled.texts, raw_scores=spread.local(batch.raw_scores).cpu(),
                       scores=scores, rewards=spread.local(batch.rewards).cpu(), rubric=rubric,
                       completion_lengths=sampled.completion_token_counts.view(len(records), g).float().cpu(),
                       saturated=saturated_groups(scores), judge_scores=judge_scores, generate=generate,
                       episodes=sampled.episodes, log_probs=log_probs,
                       metrics=None if metrics is None else dict(metrics))


def monitor_host(validated: Any, run_dir: Path) -> MonitorHost | None:
    """The run's monitor host, or None when ``monitors=[]``."""
    from rlkit.train.distributed import Spread

    monitors = validated.plugins.get("monitor") or {}
    if not monitors:
        return None
    return MonitorHost(monitors, run_dir, writer=lambda: Spread.current().rank == 0)


__all__ = ["MonitorHost", "MonitorSources", "monitor_host", "step_view", "summary_lines"]
