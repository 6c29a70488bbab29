"""``cascade``: a cheap judge for every group, the expensive judge only where the cheap one cannot decide.

A group goes to the expensive judge when the cheap scores cannot separate its completions (on every
dimension the spread within the group, in units of the dimension's range, is below ``span_threshold``)
or when the cheap judge left any score unscored (e.g. a failed parse). The expensive judge's scores then
replace the cheap ones for the whole group, so one group is never scored by two different scales.
Each judgement's metrics report the escalated share of groups beside the members' own metrics.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.plugin import (
    CallPlan,
    JudgeLoad,
    Judgement,
    JudgeRef,
    MemberJudges,
    ParamError,
    PluginRef,
    RecordField,
    Rollout,
    Rubric,
    Spend,
    hookimpl,
    plan_judge,
    sum_plans,
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
        self.panel = MemberJudges([("cheap", params.cheap), ("expensive", params.expensive)], "cascade")
        self.stages = self.panel.judges
        if not 0 <= params.span_threshold <= 1:
            raise ParamError("must lie in [0, 1] (a share of each dimension's range)", "span_threshold")

    def check_rubric(self, rubric: Rubric) -> None:
        self.panel.check_rubric(self.panel.each(rubric))

    def model_folders(self) -> list[Path]:
        return self.panel.model_folders()

    def scope_caveats(self, records: Sequence[dict[str, Any]], rubric: Rubric) -> list[str]:
        return self.panel.scope_caveats(self.panel.each(rubric), records)

    def record_fields(self, rubric: Rubric) -> list[RecordField]:
        return self.panel.record_fields(self.panel.each(rubric))

    def escalate(self, cheap: torch.Tensor, rubric: Rubric) -> torch.Tensor:
        """``bool [B]``: the groups the expensive judge must score."""
        import torch
        span = torch.tensor([d.high - d.low for d in rubric.dimensions], dtype=cheap.dtype)
        spread = (cheap.amax(dim=1) - cheap.amin(dim=1)) / span  # [B, D]; NaN where anything is unscored
        undecided = (spread.nan_to_num(nan=0.0) < self.params.span_threshold).all(dim=-1)
        return undecided | torch.isnan(cheap).flatten(1).any(dim=1)

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        return self.assess(rollout, rubric).scores

    def assess(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        """The cheap judge's scores, the expensive judge's for the groups it was asked about; each group's reasons
        from the stage whose scores it kept; both stages' metrics and spend, and the escalated share of groups
        (``judge/escalated_groups``)."""
        cheap_stage, expensive_stage = self.panel.members
        cheap = self.panel.assess(cheap_stage, rollout, rubric)
        scores = cheap.scores.clone()
        chosen = self.escalate(scores, rubric)
        index = chosen.nonzero().flatten().tolist()
        escalated = set(index)
        kept = [i for i in range(len(rollout.completions)) if i not in escalated]
        judged = [("cheap", replace(cheap, reasons=None if cheap.reasons is None
                                    else [cheap.reasons[i] for i in kept]), kept)]
        if index:
            subset = Rollout(records=[rollout.records[i] for i in index],
                             completions=[rollout.completions[i] for i in index],
                             completion_token_counts=None if rollout.completion_token_counts is None
                             else rollout.completion_token_counts[index])
            expensive = self.panel.assess(expensive_stage, subset, rubric)
            scores[index] = expensive.scores
            judged.append(("expensive", expensive, index))
        share = float(chosen.float().mean()) if len(chosen) else 0.0
        return MemberJudges.joined(scores, judged, [len(group) for group in rollout.completions],
                                   {"judge/escalated_groups": share})

    def close(self) -> None:
        """Close every member (a model judge stops the engine its backend runs)."""
        self.panel.close()

    def spend(self) -> Spend | None:
        """Both stages' calls added; None when both are rule judges."""
        return self.panel.spend()

    def planned_calls(self, load: JudgeLoad, rubric: Rubric) -> CallPlan | None:
        """The cheap judge on every group, and at most as much again: every group escalated."""
        cheap, expensive = (plan_judge(judge, load, rubric) for judge in self.stages)
        return sum_plans([cheap.labelled("cheap") if cheap else None,
                          expensive.labelled("expensive, at most") if expensive else None])


@hookimpl
def rlkit_register_judges(register):
    register("cascade", CascadeJudge)
