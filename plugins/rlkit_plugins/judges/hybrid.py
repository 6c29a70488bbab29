"""``hybrid``: each rubric dimension scored by the judge named for it.

A dimension's judge is its ``judge`` field in the rubric, else ``params.assign[<dimension>]``, else
``params.default``. Each judge sees a rubric holding only its own dimensions, so only the dimensions meant
for a model (accuracy, clarity) reach it, while binary safety and format checks stay with the rules.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.plugin import (
    CallPlan,
    JudgeLoad,
    Judgement,
    JudgeRef,
    Member,
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


class HybridJudge:
    @dataclass
    class Params:
        # label -> the judge: a name, or {name, params}; dimensions are routed to labels
        judges: dict[str, JudgeRef] = field(default_factory=lambda: {"rule": PluginRef.to("judge", "rule")})
        default: str = "rule"
        assign: dict[str, str] = field(default_factory=dict)  # dimension -> judge, for rubrics without `judge`

    def __init__(self, params: Params) -> None:
        if params.default not in params.judges:
            raise ParamError(f"default judge {params.default!r} is not among judges {sorted(params.judges)}",
                             "default")
        self.params = params
        self.panel = MemberJudges(params.judges.items(), "hybrid")
        self.judges = {label: m.judge for label, m in self.panel.by_label.items()}

    def routing(self, rubric: Rubric) -> dict[str, list[int]]:
        """Judge name → the indices of the dimensions it scores."""
        routes: dict[str, list[int]] = {}
        for i, dim in enumerate(rubric.dimensions):
            name = dim.judge or self.params.assign.get(dim.name) or self.params.default
            if name not in self.judges:
                raise ParamError(f"dimension {dim.name!r} is assigned to judge {name!r}, which is not among "
                                 f"judge.params.judges {sorted(self.judges)}", "judges")
            routes.setdefault(name, []).append(i)
        return routes

    @staticmethod
    def _subset(rubric: Rubric, indices: list[int]) -> Rubric:
        return rubric.model_copy(update={"dimensions": [rubric.dimensions[i] for i in indices]})

    def _asked(self, rubric: Rubric) -> list[tuple[Member, Rubric, list[int]]]:
        """Each member that scores a dimension, with the rubric of its dimensions and their indices."""
        return [(self.panel.by_label[name], self._subset(rubric, indices), indices)
                for name, indices in self.routing(rubric).items()]

    def check_rubric(self, rubric: Rubric) -> None:
        unknown = sorted(set(self.params.assign) - set(rubric.dimension_names))
        if unknown:
            raise ParamError(f"assign names unknown dimensions {unknown}; the rubric has {rubric.dimension_names}",
                             "assign")
        self.panel.check_rubric((m, own) for m, own, _ in self._asked(rubric))

    def model_folders(self) -> list[Path]:
        return self.panel.model_folders()

    def record_fields(self, rubric: Rubric) -> list[RecordField]:
        return self.panel.record_fields((m, own) for m, own, _ in self._asked(rubric))

    def scope_caveats(self, records: Sequence[dict[str, Any]], rubric: Rubric) -> list[str]:
        return self.panel.scope_caveats(((m, own) for m, own, _ in self._asked(rubric)), records)

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        return self.assess(rollout, rubric).scores

    def assess(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        """Each dimension's scores from the member routed it; the reasons of the members that give them, each for its
        own dimensions; the members' metrics and spend."""
        import torch
        out = torch.full((rollout.num_prompts, rollout.group_size, len(rubric.dimensions)), float("nan"))
        judged = []
        for member, own, indices in self._asked(rubric):
            said = self.panel.assess(member, rollout, own)
            out[..., indices] = said.scores
            judged.append((member.label, said, None))
        return MemberJudges.joined(out, judged, [len(group) for group in rollout.completions])

    def close(self) -> None:
        """Close every member (a model judge stops the engine its backend runs)."""
        self.panel.close()

    def spend(self) -> Spend | None:
        """The members' calls added; None when every member is a rule judge."""
        return self.panel.spend()

    def planned_calls(self, load: JudgeLoad, rubric: Rubric) -> CallPlan | None:
        """Each member asked once a step with only its own dimensions."""
        plans = ((m.label, plan_judge(m.judge, load, own)) for m, own, _ in self._asked(rubric))
        return sum_plans(plan.labelled(name) for name, plan in plans if plan is not None)


@hookimpl
def rlkit_register_judges(register):
    register("hybrid", HybridJudge)
