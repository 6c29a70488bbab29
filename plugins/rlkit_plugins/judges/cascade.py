"""``cascade``: a cheap judge for every group, the expensive judge only where the cheap one cannot decide.

A group goes to the expensive judge when the cheap scores cannot separate its completions (on every
dimension the spread within the group, in units of the dimension's range, is below ``span_threshold``)
or when the cheap judge left any score unscored (e.g. a failed parse). The expensive judge's scores then
replace the cheap ones for the whole group, so one group is never scored by two different scales.
``metrics()`` reports the escalated share of groups beside the members' own metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.plugin import (
    CallPlan,
    ConfigError,
    JudgeLoad,
    JudgeRef,
    PluginRef,
    RecordField,
    Rollout,
    Rubric,
    Spend,
    check_member_judge,
    close_judges,
    hookimpl,
    judge_spend,
    last_reasons,
    member_model_folders,
    member_record_fields,
    member_scope_caveats,
    merge_reasons,
    plan_judge,
    sum_plans,
    sum_spend,
)

if TYPE_CHECKING:
    import torch


class CascadeJudge:
    @dataclass
    class Params:
        cheap: JudgeRef = field(default_factory=lambda: PluginRef.to("judge", "rule"))
        expensive: JudgeRef = field(default_factory=lambda: PluginRef.to("judge", "rule"))
        span_threshold: float = 0.1

    def __init__(self, params: Params) -> None:
        self.params = params
        self.stages = [check_member_judge(params.cheap, "cascade"), check_member_judge(params.expensive, "cascade")]
        if not 0 <= params.span_threshold <= 1:
            raise ConfigError("must lie in [0, 1] (a share of each dimension's range)", "judge.params.span_threshold")
        self._escalated = 0.0
        self._reasons: list[list[dict[str, str]]] | None = None

    def check_rubric(self, rubric: Rubric) -> None:
        for judge in self.stages:
            check = getattr(judge, "check_rubric", None)
            if check is not None:
                check(rubric)

    def model_folders(self) -> list[Path]:
        return member_model_folders(self.stages)

    def scope_caveats(self, records: Sequence[dict[str, Any]], rubric: Rubric) -> list[str]:
        return member_scope_caveats(((judge, rubric) for judge in self.stages), records)

    def record_fields(self, rubric: Rubric) -> list[RecordField]:
        return member_record_fields((judge, rubric) for judge in self.stages)

    def escalate(self, cheap: torch.Tensor, rubric: Rubric) -> torch.Tensor:
        """``bool [B]``: the groups the expensive judge must score."""
        import torch
        span = torch.tensor([d.high - d.low for d in rubric.dimensions], dtype=cheap.dtype)
        spread = (cheap.amax(dim=1) - cheap.amin(dim=1)) / span  # [B, D]; NaN where anything is unscored
        undecided = (spread.nan_to_num(nan=0.0) < self.params.span_threshold).all(dim=-1)
        return undecided | torch.isnan(cheap).flatten(1).any(dim=1)

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        import torch
        cheap_judge, expensive_judge = self.stages
        scores = cheap_judge.score(rollout, rubric).to(torch.float32)
        cheap_reasons = last_reasons(cheap_judge)
        chosen = self.escalate(scores, rubric)
        self._escalated = float(chosen.float().mean()) if len(chosen) else 0.0
        index = chosen.nonzero().flatten().tolist()
        expensive_reasons = None
        if index:
            subset = Rollout(records=[rollout.records[i] for i in index],
                             completions=[rollout.completions[i] for i in index],
                             completion_token_counts=None if rollout.completion_token_counts is None
                             else rollout.completion_token_counts[index])
            scores[index] = expensive_judge.score(subset, rubric).to(torch.float32)
            expensive_reasons = last_reasons(expensive_judge)
        # a group's reasons are those of the stage whose scores it kept
        escalated = set(index)
        kept = [i for i in range(len(rollout.completions)) if i not in escalated]
        self._reasons = merge_reasons(
            [("cheap", None if cheap_reasons is None else [cheap_reasons[i] for i in kept], kept),
             ("expensive", expensive_reasons, index)], [len(group) for group in rollout.completions])
        return scores

    def reasons(self) -> list[list[dict[str, str]]] | None:
        """Each group's one-line reasons from the stage whose scores it kept: the expensive judge's for the groups
        it was asked about, the cheap judge's (where it gives any) for the rest."""
        return self._reasons

    def close(self) -> None:
        """Close every member (a model judge stops the engine its backend runs)."""
        close_judges(self.stages)

    def metrics(self) -> dict[str, float]:
        merged: dict[str, float] = {}
        for judge in self.stages:
            merged.update(getattr(judge, "metrics", dict)())
        merged["judge/escalated_groups"] = self._escalated
        return merged

    def spend(self) -> Spend | None:
        """Both stages' calls added; None when both are rule judges."""
        return sum_spend(judge_spend(judge) for judge in self.stages)

    def planned_calls(self, load: JudgeLoad, rubric: Rubric) -> CallPlan | None:
        """The cheap judge on every group, and at most as much again: every group escalated."""
        cheap, expensive = (plan_judge(judge, load, rubric) for judge in self.stages)
        return sum_plans([cheap.labelled("cheap") if cheap else None,
                          expensive.labelled("expensive, at most") if expensive else None])


@hookimpl
def rlkit_register_judges(register):
    register("cascade", CascadeJudge)
