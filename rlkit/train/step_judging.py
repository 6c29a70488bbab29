"""One step's judging, for the training loop: the rollout as a judge sees it, the judge's checked scores gathered
from every process (with the step scores of multi-turn episodes, the bias-correction features and the judge's
confidence), and the reward batch they make once debiased, weighed and aggregated."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from rlkit.core.types import RewardBatch, Rollout
from rlkit.judging.members import last_reasons
from rlkit.lm.sampling import SampledBatch, render_prompt
from rlkit.reward.debias import completion_features
from rlkit.reward.dropout import with_criteria_dropout, with_rubric_dropout
from rlkit.reward.pipeline import aggregate_rewards, check_judge_output, normalize_scores, with_group_confidence
from rlkit.reward.steps import score_steps, single_turn_steps, turn_token_counts, with_step_means


@dataclass
class Judged:
    """What the judge said of one batch (every process's groups), before weights, bias correction and aggregation."""

    raw: torch.Tensor                 # [B, G, D]
    lengths: torch.Tensor             # [B, G] completion token counts
    features: torch.Tensor | None     # [B, G, F] for the bias correction
    confidence: torch.Tensor | None   # [B] the judge's group confidence
    steps: torch.Tensor | None = None      # [B, G, T, D] step scores (rubrics with `scope: step` dimensions)
    num_turns: torch.Tensor | None = None  # [B, G] policy turns per episode (multi-turn rollouts)

    def groups(self, index: torch.Tensor) -> Judged:
        pick = lambda t: None if t is None else t[index.to(t.device)]  # noqa: E731
        return Judged(*(pick(getattr(self, name)) for name in JUDGED_FIELDS))

    @staticmethod
    def cat(parts: list[Judged]) -> Judged:
        join = lambda ts: None if ts[0] is None else torch.cat(ts)  # noqa: E731
        return Judged(*(join([getattr(p, name) for p in parts]) for name in JUDGED_FIELDS))


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


def judge_step(module: Any, records: list[dict[str, Any]], sampled: SampledBatch, *,
               heldout: bool = False) -> Judged:
    """The judge's checked scores of every process's groups for ``module`` (the run's ``RubricRLModule``; held-out:
    this process's, which are all)."""
    if not heldout and module.record_rubrics is not None:
        records = module.record_rubrics(records)
    if not heldout and module.rubric.per_record:  # rubric.dropout acts on each record's criteria, in the judge
        settings = module.settings
        records = with_criteria_dropout(records, settings.rubric_dropout, settings.seed, module.global_step)
    rollout = as_rollout(records, sampled, module.tokenizer)
    judge = module.parts.judge
    raw = check_judge_output(judge.score(rollout, module.judged_rubric), rollout, module.rubric,
                             module.parts.judge_name)
    if not heldout:  # the judge's one-line reasons for this process's groups, where it gives them
        module.last_reasons = last_reasons(judge)
    own = raw  # this process's groups
    report = getattr(judge, "group_confidence", None)
    confidence = report() if callable(report) else None
    debias = None if heldout else module.parts.debias
    features = completion_features(rollout, debias.features) if debias is not None else None
    if not heldout:
        # Each process judged its own groups; weights, bias fit, aggregation and advantages see them all,
        # as a single process would (held-out evaluation runs the whole split on every process).
        spread = module.spread
        raw = spread.gather(raw, module.device)
        features = None if features is None else spread.gather(features, module.device)
        if confidence is not None:
            confidence = spread.gather(torch.as_tensor(confidence, dtype=torch.float32), module.device)
    lengths = rollout.completion_token_counts
    if not heldout:
        lengths = module.spread.gather(lengths.to(module.device), module.device)
    steps = num_turns = None
    if module.rubric.step_dimensions:
        steps = step_scores(module, rollout, sampled, own)
        if not heldout:
            steps = module.spread.gather(steps.to(module.device), module.device)
        raw = with_step_means(raw, steps.to(raw.device), module.rubric)
    if sampled.turn_spans is not None:
        num_turns = torch.tensor([len(s) for s in sampled.turn_spans]).view(rollout.num_prompts, -1)
        if not heldout:
            num_turns = module.spread.gather(num_turns.to(module.device), module.device)
    return Judged(raw, lengths, features, confidence, steps, num_turns)

def step_scores(module: Any, rollout: Rollout, sampled: SampledBatch, raw: torch.Tensor) -> torch.Tensor:
    """This process's step scores ``[B, G, T, D]`` (``rlkit.reward.steps``), T the environment's turn limit;
    for single-turn rollouts the completion's own scores ``raw``."""
    if rollout.episodes is None:
        return single_turn_steps(raw.cpu(), module.rubric)
    limit = int(module.episodes.environment.max_turns) if module.episodes is not None else 1
    b, g = rollout.num_prompts, rollout.group_size
    judge, name = module.parts.judge, module.parts.judge_name
    return score_steps(lambda turn: check_judge_output(judge.score(turn, module.judged_rubric), turn, module.rubric,
                                                       name),
                       rollout, module.rubric, limit, turn_token_counts(sampled.turn_spans, b, g, limit))

def reward_batch(module: Any, judged: Judged, step: int, scheduler: Any | None = None, *,
                 heldout: bool = False, debias: Any = None) -> RewardBatch:
    """Debias (training only; ``debias`` overrides the run's), weigh and aggregate judged scores. The batch's
    ``extras["completion_lengths"]`` carries the completions' token counts for estimators that weigh by length."""
    debias = None if heldout else (debias if debias is not None else module.parts.debias)
    raw = judged.raw if debias is None else debias.correct(judged.raw, judged.features)
    batch = aggregate_rewards(raw, module.rubric, scheduler or module.parts.scheduler, module.parts.aggregator, step,
                              module.parts.score_normalization)
    if not heldout and not module.rubric.per_record:
        # rubric.dropout: training rewards only; the same drops on every process and after a resume (a per-record
        # rubric's frame dimensions summarise criteria: those are dropped in the judge, judge_step)
        batch = with_rubric_dropout(batch, module.parts.aggregator, module.settings.rubric_dropout,
                                    module.settings.seed, step)
    batch = with_group_confidence(batch, judged.confidence, module.parts.judge_name)
    extras = {**batch.extras, "completion_lengths": judged.lengths.float().cpu()}
    if judged.steps is not None:  # estimators that credit turns read these (rlkit_register_advantage_estimators)
        extras["step_scores"] = normalize_scores(judged.steps.cpu(), module.rubric)
        extras["step_raw_scores"] = judged.steps.cpu()
    if judged.num_turns is not None:
        extras["num_turns"] = judged.num_turns.cpu()
    return replace(batch, extras=extras)
