"""One step's reward, for the training loop: the rollout as a judge sees it, the judge's checked scores gathered from
every process (with the step scores of multi-turn episodes, the bias-correction features, the judge's confidence
and reasons), and the reward batch they make once debiased, weighed, dropped out, aggregated and shaped.

:class:`RewardPipeline` owns every part of that path (the judge, both rubrics, the weights, the aggregator, the bias
correction, rubric dropout, the reward of cut completions); the LightningModule hands it rollouts and gets a
``RewardBatch`` back."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from rlkit.core.rubric import Rubric
from rlkit.core.types import RewardBatch, Rollout
from rlkit.judging.members import judgement_of
from rlkit.judging.types import Judgement
from rlkit.lm.sampling import SampledBatch, render_prompt
from rlkit.reward.debias import completion_features
from rlkit.reward.dropout import dropout_view, with_criteria_dropout
from rlkit.reward.pipeline import (
    aggregate_rewards,
    aggregated,
    check_judge_output,
    normalize_scores,
    weighed_scores,
    with_group_confidence,
)
from rlkit.reward.rubric_schedule import StagedRubric
from rlkit.reward.steps import score_steps, single_turn_steps, turn_token_counts, with_step_means
from rlkit.train.distributed import Spread
from rlkit.train.dynamic_sampling import shape_truncated
from rlkit.train.settings import RewardParts, TrainingSettings

Reasons = list[list[dict[str, str]]]


@dataclass
class Judged:
    """What the judge said of one batch (every process's groups), before weights, bias correction and aggregation."""

    raw: torch.Tensor                 # [B, G, D]
    lengths: torch.Tensor             # [B, G] completion token counts
    features: torch.Tensor | None     # [B, G, F] for the bias correction
    confidence: torch.Tensor | None   # [B] the judge's group confidence
    steps: torch.Tensor | None = None      # [B, G, T, D] step scores (rubrics with `scope: step` dimensions)
    num_turns: torch.Tensor | None = None  # [B, G] policy turns per episode (multi-turn rollouts)
    # the judge's one-line reasons for this process's groups, one per completion, where it gives them
    reasons: Reasons | None = None
    # the judgement's metrics (this process's call), logged with the step's
    metrics: dict[str, float] = field(default_factory=dict)

    def groups(self, index: torch.Tensor) -> Judged:
        pick = lambda t: None if t is None else t[index.to(t.device)]  # noqa: E731
        reasons = None if self.reasons is None or len(self.reasons) != len(self.raw) else \
            [self.reasons[int(i)] for i in index]
        return Judged(*(pick(getattr(self, name)) for name in JUDGED_FIELDS), reasons=reasons, metrics=self.metrics)

    @staticmethod
    def cat(parts: list[Judged]) -> Judged:
        """Several rounds' groups as one; the metrics those of the last round's call, as a step of one call logs."""
        join = lambda ts: None if ts[0] is None else torch.cat(ts)  # noqa: E731
        reasons = None if any(p.reasons is None for p in parts) else [r for p in parts for r in p.reasons]
        return Judged(*(join([getattr(p, name) for p in parts]) for name in JUDGED_FIELDS), reasons=reasons,
                      metrics=parts[-1].metrics)


JUDGED_FIELDS = ("raw", "lengths", "features", "confidence", "steps", "num_turns")


def as_rollout(records: list[dict[str, Any]], sampled: SampledBatch, tokenizer: Any = None) -> Rollout:
    """What a judge scores: the records, their sampled completions (an episode's last policy turn), the
    completions' token counts, for multi-turn rollouts the episodes, and with ``tokenizer`` the prompts as the policy
    saw them (chat messages through its chat template)."""
    g = len(sampled.texts[0])
    seen = [render_prompt(r["prompt"], tokenizer) for r in records] if tokenizer is not None else None
    return Rollout(records=records, completions=sampled.texts,
                   completion_token_counts=sampled.completion_token_counts.view(len(records), g).cpu(),
                   episodes=sampled.episodes, prompt_texts=seen)


class RewardPipeline:
    """Rollouts → ``RewardBatch``: judge, check, gather, debias, weigh, drop out, aggregate (once), shape.

    The judge is asked with ``rubric``, the user's (what a checkpoint is keyed by); its scores follow
    ``scored_rubric``. They differ only for judges that derive their own (a ranking judge's single ``rank``).
    ``turn_limit``: the environment's turn limit for multi-turn rollouts (step scores), None for single-turn ones."""

    def __init__(self, parts: RewardParts, settings: TrainingSettings, rubric: Rubric,
                 scored_rubric: Rubric | None = None, tokenizer: Any = None, turn_limit: int | None = None) -> None:
        self.parts, self.settings = parts, settings
        self.rubric, self.scored_rubric = rubric, scored_rubric or rubric
        self.tokenizer, self.turn_limit = tokenizer, turn_limit
        # training records -> the same records with each one's current rubric (rubric.evolve sets it,
        # rlkit.train.rubric_evolution); held-out scoring never goes through it, so it keeps the records' own
        self.record_rubrics: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None
        # rubric.schedule (rlkit.train.rubric_schedule sets it): training rewards weigh the current stage's
        # dimensions only; held-out scoring keeps the whole rubric
        self.schedule: StagedRubric | None = None
        # held-out rewards use the scheduler's step-0 weights from a fresh copy (heldout_batch)
        self._initial_scheduler = copy.deepcopy(parts.scheduler)

    @property
    def heldout_scored_rubric(self) -> Rubric:
        """The rubric held-out scores follow."""
        scoring = self.parts.heldout_scoring
        return scoring.rubric if scoring is not None else self.scored_rubric

    # --- judging ---------------------------------------------------------------------------------------------

    def judgement(self, rollout: Rollout) -> Judgement:
        """The judge's judgement of ``rollout`` (this process's; nothing gathered), its scores checked."""
        said = judgement_of(self.parts.judge, rollout, self.rubric)
        return replace(said, scores=check_judge_output(said.scores, rollout, self.scored_rubric, self.parts.judge_name))

    def judge_scores(self, rollout: Rollout) -> torch.Tensor:
        """The judge's checked scores ``[B, G, D]`` of ``rollout`` (this process's; nothing gathered)."""
        return self.judgement(rollout).scores

    def judge(self, records: list[dict[str, Any]], sampled: SampledBatch, step: int,
              device: torch.device | None = None, *, evaluation: bool = False) -> Judged:
        """The judge's checked scores of every process's groups (``evaluation``, held-out completions: this
        process's, which are all; no bias features, reasons, evolved rubrics or dropout)."""
        if not evaluation and self.record_rubrics is not None:
            records = self.record_rubrics(records)
        # rubric.dropout acts on each per-record rubric's criteria, in the judge
        if not evaluation and self.scored_rubric.per_record:
            records = with_criteria_dropout(records, self.settings.rubric_dropout, self.settings.seed, step)
        rollout = as_rollout(records, sampled, self.tokenizer)
        said = self.judgement(rollout)
        own, confidence = said.scores, said.confidence  # this process's groups
        reasons = None if evaluation else said.reasons
        debias = None if evaluation else self.parts.debias
        features = completion_features(rollout, debias.features) if debias is not None else None
        # Each process judged its own groups; weights, bias fit, aggregation and advantages see them all,
        # as a single process would (held-out evaluation runs the whole split on every process).
        spread = Spread() if evaluation else Spread.current()
        raw = spread.gather(own, device)
        features = None if features is None else spread.gather(features, device)
        if confidence is not None:
            confidence = spread.gather(torch.as_tensor(confidence, dtype=torch.float32), device)
        lengths = rollout.completion_token_counts
        lengths = spread.gather(lengths.to(device), device) if spread.distributed else lengths
        steps = num_turns = None
        if self.scored_rubric.step_dimensions:
            steps = self._step_scores(rollout, sampled, own)
            steps = spread.gather(steps.to(device), device) if spread.distributed else steps
            raw = with_step_means(raw, steps.to(raw.device), self.scored_rubric)
        if sampled.turn_spans is not None:
            num_turns = torch.tensor([len(s) for s in sampled.turn_spans]).view(rollout.num_prompts, -1)
            num_turns = spread.gather(num_turns.to(device), device) if spread.distributed else num_turns
        return Judged(raw, lengths, features, confidence, steps, num_turns, reasons, dict(said.metrics))

    def _step_scores(self, rollout: Rollout, sampled: SampledBatch, raw: torch.Tensor) -> torch.Tensor:
        """This process's step scores ``[B, G, T, D]`` (``rlkit.reward.steps``), T the environment's turn limit;
        for single-turn rollouts the completion's own scores ``raw``."""
        if rollout.episodes is None:
            return single_turn_steps(raw.cpu(), self.scored_rubric)
        limit = self.turn_limit or 1
        b, g = rollout.num_prompts, rollout.group_size
        return score_steps(self.judge_scores, rollout, self.scored_rubric, limit,
                           turn_token_counts(sampled.turn_spans, b, g, limit))

    # --- from judged scores to rewards -------------------------------------------------------------------------

    def batch(self, judged: Judged, step: int, scheduler: Any | None = None, *, evaluation: bool = False,
              debias: Any = None, truncated: torch.Tensor | None = None) -> RewardBatch:
        """Debias (training only; ``debias`` overrides the run's), weigh, drop out (training only), aggregate and
        give cut completions ``sampling.truncated``'s reward (``truncated``: every row's flag; None: as judged).
        The batch's ``extras["completion_lengths"]`` carries the completions' token counts for estimators that
        weigh by length."""
        parts, settings = self.parts, self.settings
        debias = None if evaluation else (debias if debias is not None else parts.debias)
        raw = judged.raw if debias is None else debias.correct(judged.raw, judged.features)
        staged = self.schedule if not evaluation else None
        rubric = staged.current if staged is not None else self.scored_rubric
        batch = weighed_scores(raw, rubric, scheduler or parts.scheduler, step, parts.score_normalization)
        view, extras = batch, {}
        if staged is not None:  # a scheduler that does not read the rubric's weights still leaves later stages out
            batch = view = replace(batch, weights=batch.weights * staged.mask().to(batch.weights))
        if not evaluation and not self.scored_rubric.per_record and settings.rubric_dropout > 0.0:
            # rubric.dropout: training rewards only; the same drops on every process and after a resume (a
            # per-record rubric's frame dimensions summarise criteria: those are dropped in the judge)
            view, extras = dropout_view(batch, settings.rubric_dropout, settings.seed, step)
        batch = batch.with_rewards(aggregated(view, parts.aggregator))
        if truncated is not None and settings.sampling.truncated != "keep":
            batch = batch.with_rewards(self.shaped(batch.rewards, truncated))
        batch = with_group_confidence(batch, judged.confidence, parts.judge_name)
        extras = {**batch.extras, **extras, "completion_lengths": judged.lengths.float().cpu()}
        if staged is not None:  # the stage's version, on the step's samples (rlkit.train.callbacks)
            extras["rubric_version"] = rubric.version
        if judged.steps is not None:  # estimators that credit turns read these (rlkit_register_advantage_estimators)
            extras["step_scores"] = normalize_scores(judged.steps.cpu(), self.scored_rubric)
            extras["step_raw_scores"] = judged.steps.cpu()
        if judged.num_turns is not None:
            extras["num_turns"] = judged.num_turns.cpu()
        return replace(batch, extras=extras)

    def shaped(self, rewards: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
        """``sampling.truncated``'s reward for completions cut at the length limit (``truncated``: every row's
        flag)."""
        s = self.settings.sampling
        return shape_truncated(rewards, truncated.reshape(rewards.shape).to(rewards.device) > 0.5, s.truncated,
                               s.truncated_value)

    def heldout_batch(self, records: list[dict[str, Any]], sampled: SampledBatch) -> RewardBatch:
        """Held-out completions' rewards: by the run's separate held-out scoring where it has one, else by this
        pipeline with the scheduler's step-0 weights from a fresh copy (start and end stay comparable while training
        weights move, and evaluation never feeds the training scheduler) and the judge's uncorrected scores (the
        bias correction has no fit at the start and a moving one later)."""
        other = self.parts.heldout_scoring
        if other is None:
            judged = self.judge(records, sampled, 0, evaluation=True)
            return self.batch(judged, 0, copy.deepcopy(self._initial_scheduler), evaluation=True)
        rollout = as_rollout(records, sampled, self.tokenizer)
        raw = check_judge_output(judgement_of(other.judge, rollout, other.rubric).scores, rollout, other.rubric,
                                 other.judge_name)
        return aggregate_rewards(raw, other.rubric, copy.deepcopy(other.scheduler), other.aggregator,
                                 normalization=self.parts.score_normalization)
