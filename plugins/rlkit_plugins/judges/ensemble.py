"""``ensemble``: several judges score every dimension; their scores are combined per dimension.

Members may be different judges, or the same judge with different backends, templates or models.
``combine``: ``mean`` or ``median`` of the members that scored a value (NaN skipped), or ``agreement``:
a weighted mean where each member's weight on a dimension falls with its mean distance from the members'
median on the batch (1 / (0.05 + distance), distance in units of the dimension's range), so a member
that keeps disagreeing with the rest counts less. Each judgement's metrics report, per dimension, the inter-judge
agreement 1 − (mean absolute pairwise difference / range) over the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

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
    nan_median,
    plan_judge,
    sum_plans,
)

if TYPE_CHECKING:
    import torch


class EnsembleJudge:
    @dataclass
    class Params:
        members: list[JudgeRef] = field(default_factory=lambda: [PluginRef.to("judge", "rule")])
        combine: Literal["mean", "median", "agreement"] = "mean"

    def __init__(self, params: Params) -> None:
        if not params.members:
            raise ParamError("needs at least one member", "members")
        self.params = params
        # each member labelled by its name, numbered when it repeats: how its reasons are told apart
        self.panel = MemberJudges(MemberJudges.labelled(params.members), "ensemble")
        self.members = self.panel.judges

    def check_rubric(self, rubric: Rubric) -> None:
        self.panel.check_rubric(self.panel.each(rubric))

    def model_folders(self) -> list[Path]:
        return self.panel.model_folders()

    def scope_caveats(self, records: Sequence[dict[str, Any]], rubric: Rubric) -> list[str]:
        return self.panel.scope_caveats(self.panel.each(rubric), records)

    def record_fields(self, rubric: Rubric) -> list[RecordField]:
        return self.panel.record_fields(self.panel.each(rubric))

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        return self.assess(rollout, rubric).scores

    def assess(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        """The members' scores combined; their reasons, each labelled with its member where several give one; their
        metrics and spend, and per dimension the agreement between them (``judge/agreement/<dimension>``)."""
        import torch
        judged = [(m.label, self.panel.assess(m, rollout, rubric), None) for m in self.panel]
        stack = torch.stack([j.scores for _, j, _ in judged])  # [M, B, G, D]
        span = torch.tensor([d.high - d.low for d in rubric.dimensions], dtype=torch.float32)
        agreed = {f"judge/agreement/{name}": value
                  for name, value in zip(rubric.dimension_names, agreement(stack, span).tolist(), strict=True)}
        low = torch.tensor([d.low for d in rubric.dimensions], dtype=torch.float32)
        return MemberJudges.joined(combine_scores(stack, low, low + span, self.params.combine), judged,
                                   [len(group) for group in rollout.completions], agreed)

    def close(self) -> None:
        """Close every member (a model judge stops the engine its backend runs)."""
        self.panel.close()

    def spend(self) -> Spend | None:
        """The members' calls added; None when every member is a rule judge."""
        return self.panel.spend()

    def planned_calls(self, load: JudgeLoad, rubric: Rubric) -> CallPlan | None:
        """Every member asked on every dimension."""
        plans = ((i, plan_judge(member, load, rubric)) for i, member in enumerate(self.panel.judges))
        return sum_plans(plan.labelled(f"members[{i}]") for i, plan in plans if plan is not None)


def combine_scores(stack: torch.Tensor, low: torch.Tensor, high: torch.Tensor, how: str) -> torch.Tensor:
    """Members' scores ``[M, B, G, D]`` → ``[B, G, D]`` by ``mean``, ``median`` or ``agreement`` weighting
    (each member weighted by 1 / (0.05 + its mean distance from the median, per dimension)); NaN where no
    member scored. The median of an even number of members is the mean of the middle two (``nan_median``), so two
    members that disagree are equally far from it and weigh the same. Clamped to each range: a weighted mean of
    in-range float32 values can land a rounding error outside it (5.0000005 on a 1-5 scale), which the host's
    range check rightly rejects."""
    import torch
    if how == "median":
        combined = nan_median(stack, dim=0)
    elif how == "mean":
        combined = stack.nanmean(dim=0)
    else:
        consensus = nan_median(stack, dim=0)
        distance = ((stack - consensus).abs() / (high - low)).nanmean(dim=(1, 2)).nan_to_num(nan=1.0)  # [M, D]
        weight = (1.0 / (0.05 + distance)).view(stack.shape[0], 1, 1, -1).expand_as(stack)
        weight = torch.where(torch.isnan(stack), torch.zeros_like(weight), weight)
        total = weight.sum(dim=0)
        combined = (torch.nan_to_num(stack) * weight).sum(dim=0) / total.clamp(min=1e-12)
        combined = torch.where(total > 0, combined, torch.full_like(combined, float("nan")))
    return torch.minimum(torch.maximum(combined, low), high)  # NaN stays NaN


def agreement(stack: torch.Tensor, span: torch.Tensor) -> torch.Tensor:
    """``[D]``: 1 − mean absolute pairwise difference between members, in units of each range (NaN skipped);
    NaN for a dimension no two members both scored."""
    import torch
    m = stack.shape[0]
    diffs = []
    for i in range(m):
        for j in range(i + 1, m):
            diffs.append(((stack[i] - stack[j]).abs() / span).flatten(0, 1))  # [B*G, D]
    if not diffs:
        return torch.ones(stack.shape[-1])
    return 1.0 - torch.cat(diffs).nanmean(dim=0)


@hookimpl
def rlkit_register_judges(register):
    register("ensemble", EnsembleJudge)
