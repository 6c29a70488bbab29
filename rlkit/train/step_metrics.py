"""A training step's metrics: gathered from every part that reports one (reward diagnostics, the update, dynamic
sampling, episodes, the engine, the judge, the bias correction, monitors, the judge's spend, timings), checked for
warnings, and written to the loggers at Lightning's cadence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_warn

from rlkit.core.types import RewardBatch
from rlkit.lm.sampling import SampledBatch
from rlkit.reward.diagnostics import ConflictWatch, reward_step_metrics
from rlkit.runs.history import MetricsHistory
from rlkit.train.distributed import Spread
from rlkit.train.episodes import episode_metrics
from rlkit.train.monitoring import MonitorSources, step_view
from rlkit.train.step_rewards import RewardPipeline
from rlkit.train.updates import StepOutcome


@dataclass
class StepTimes:
    """``time.perf_counter()`` at the step's start and as generation, judging, the log-prob passes and the update
    finished; ``iteration``: the previous step's whole iteration (Lightning's loop and data loading included)."""

    start: float
    sampled: float
    decided: float
    logprobs: float
    updated: float
    iteration: float | None = None


class StepMetrics:
    """Gathers a step's metrics from every part that reports one, and owns the conflict warning's window.

    ``monitors``: the run's ``rlkit.train.monitoring.MonitorHost`` or None; ``judge_spend``: the judge's per-step
    spend (``rlkit.judging.spend.StepSpend``); ``generator``: the run's generator plugin (its weight syncs' metrics).
    """

    def __init__(self, rewards: RewardPipeline, monitors: Any = None, judge_spend: Any = None,
                 generator: Any = None) -> None:
        self.rewards, self.monitors, self.judge_spend = rewards, monitors, judge_spend
        self.generator = generator
        self.conflict_watch = ConflictWatch()

    def collect(self, step: int, records: list[dict[str, Any]], sampled: SampledBatch, batch: RewardBatch,
                outcome: StepOutcome, truncated: torch.Tensor, filtered: dict[str, float], times: StepTimes, *,
                device: torch.device, lr: float, requested_ahead: bool | None = None,
                sources: MonitorSources | None = None, judge_metrics: Mapping[str, float] | None = None,
                ) -> dict[str, float]:
        """Every metric of the step, global over processes. ``requested_ahead``: whether this step's rollout was
        requested ahead (None: the generator samples no rollouts ahead); ``sources``: what the monitors' view calls
        back into; ``judge_metrics``: the step's judgement's (``Judged.metrics``)."""
        spread = Spread.current()
        lengths = spread.gather(sampled.completion_token_counts.float(), device)
        metrics = self.reward_metrics(batch, lengths, truncated)
        metrics.update(outcome.metrics)
        if "rubric_dropped_share" in batch.extras:  # rubric.dropout (rlkit.reward.dropout)
            metrics["rubric/dropped_share"] = float(batch.extras["rubric_dropped_share"])
        metrics.update(filtered)
        metrics.update(episode_metrics(sampled))
        if sampled.policy_version is not None:  # sampled by an engine: which weights, how far behind the policy
            metrics["rollout/policy_version"] = float(sampled.policy_version)
            metrics["rollout/policy_lag"] = float(sampled.policy_lag or 0)
        if requested_ahead is not None:
            metrics["rollout/requested_ahead"] = float(requested_ahead)
        generator_metrics = getattr(self.generator, "metrics", None)
        if callable(generator_metrics):  # an engine's weight syncs since the last step (time/sync, sync/bytes)
            metrics.update({k: float(v) for k, v in generator_metrics().items()})
        parts = self.rewards.parts
        metrics.update({k: float(v) for k, v in (judge_metrics or {}).items()})
        if parts.debias is not None:
            metrics.update(parts.debias.metrics(self.rewards.scored_rubric.dimension_names))
        if self.monitors is not None and sources is not None:  # after the judge's metrics: a monitor may judge again
            metrics.update(self.monitors.observe(step_view(sources, step, records, sampled, batch, metrics)))
        if self.judge_spend is not None:  # after the monitors: their judge calls are the step's too
            metrics.update(self.judge_spend.metrics())
        t = times
        metrics.update({
            "loss": float(outcome.loss),
            "time/generation": t.sampled - t.start, "time/judge": t.decided - t.sampled,
            "time/logprob": t.logprobs - t.decided, "time/optim": t.updated - t.logprobs,
            "time/step": t.updated - t.start,
            "tokens_per_sec": float(lengths.sum()) / max(t.updated - t.start, 1e-9),
            "lr": lr,
        })
        if t.iteration is not None:
            metrics["time/iteration"] = t.iteration
        return metrics

    def reward_metrics(self, batch: RewardBatch, lengths: torch.Tensor, truncated: torch.Tensor) -> dict[str, float]:
        """:func:`rlkit.reward.diagnostics.reward_step_metrics` of the step, and the conflict warning it may call
        for."""
        out = reward_step_metrics(batch, self.rewards.scored_rubric, lengths, truncated)
        watch = self.conflict_watch
        if watch.update(out["dimension_conflict_rate"]) and self.rewards.parts.aggregator_name == "weighted_sum":
            rank_zero_warn(
                f"dimensions order completions oppositely in {watch.mean:.0%} of pairs (mean of the last "
                f"{watch.window} steps); a weighted sum then trades one for another at random. Consider "
                "aggregator=lexicographic (priorities) or advantage=gdpo.")
        return out


def log_step_metrics(trainer: Any, history: MetricsHistory | None, metrics: dict[str, float], epoch: int) -> None:
    """The step's metrics straight to the logger(s), at the step and cadence ``self.log`` would use, and to the
    run's metric history (rank 0, every step whatever the logger and its cadence).

    ``log_dict`` runs Lightning's per-metric bookkeeping (result objects, reduction, sync checks) for ~60 floats a
    step that are already global and reduced: measured at ~30% of a tiny-policy step."""
    step = trainer.fit_loop.epoch_loop._batches_that_stepped  # the step Lightning's own logging records
    if history is not None and trainer.is_global_zero:
        history.append(step, metrics)
    if not trainer.loggers or step % max(trainer.log_every_n_steps, 1):
        return
    row = {**metrics, "epoch": float(epoch)}
    for logger in trainer.loggers:
        logger.log_metrics(row, step=step)
