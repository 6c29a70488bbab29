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


class HybridJudge:
    @dataclass
    class Params:
        # label -> the judge: a name, or {name, params}; dimensions are routed to labels
        judges: dict[str, JudgeRef] = field(default_factory=lambda: {"rule": PluginRef.to("judge", "rule")})
        default: str = "rule"
        assign: dict[str, str] = field(default_factory=dict)  # dimension -> judge, for rubrics without `judge`

    def __init__(self, params: Params) -> None:
        if params.default not in params.judges:
            raise ConfigError(f"default judge {params.default!r} is not among judges {sorted(params.judges)}",
                              "judge.params.default")
        self.params = params
        self.judges = {label: check_member_judge(ref, "hybrid") for label, ref in params.judges.items()}
        self._reasons: list[list[dict[str, str]]] | None = None

    def routing(self, rubric: Rubric) -> dict[str, list[int]]:
        """Judge name → the indices of the dimensions it scores."""
        routes: dict[str, list[int]] = {}
        for i, dim in enumerate(rubric.dimensions):
            name = dim.judge or self.params.assign.get(dim.name) or self.params.default
            if name not in self.judges:
                raise ConfigError(f"dimension {dim.name!r} is assigned to judge {name!r}, which is not among "
                                  f"judge.params.judges {sorted(self.judges)}", "judge.params.judges")
            routes.setdefault(name, []).append(i)
        return routes

    @staticmethod
    def _subset(rubric: Rubric, indices: list[int]) -> Rubric:
        return rubric.model_copy(update={"dimensions": [rubric.dimensions[i] for i in indices]})

    def check_rubric(self, rubric: Rubric) -> None:
        unknown = sorted(set(self.params.assign) - set(rubric.dimension_names))
        if unknown:
            raise ConfigError(f"assign names unknown dimensions {unknown}; the rubric has {rubric.dimension_names}",
                              "judge.params.assign")
        for name, indices in self.routing(rubric).items():
            check = getattr(self.judges[name], "check_rubric", None)
            if check is not None:
                check(self._subset(rubric, indices))

    def model_folders(self) -> list[Path]:
        return member_model_folders(self.judges.values())

    def record_fields(self, rubric: Rubric) -> list[RecordField]:
        return member_record_fields((self.judges[name], self._subset(rubric, indices))
                                    for name, indices in self.routing(rubric).items())

    def scope_caveats(self, records: Sequence[dict[str, Any]], rubric: Rubric) -> list[str]:
        return member_scope_caveats(((self.judges[name], self._subset(rubric, indices))
                                     for name, indices in self.routing(rubric).items()), records)

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        import torch
        out = torch.full((rollout.num_prompts, rollout.group_size, len(rubric.dimensions)), float("nan"))
        reasons = []
        for name, indices in self.routing(rubric).items():
            out[..., indices] = self.judges[name].score(rollout, self._subset(rubric, indices)).to(torch.float32)
            reasons.append((name, last_reasons(self.judges[name]), None))
        self._reasons = merge_reasons(reasons, [len(group) for group in rollout.completions])
        return out

    def reasons(self) -> list[list[dict[str, str]]] | None:
        """The one-line reasons of the members that give them, each for the dimensions routed to it."""
        return self._reasons

    def close(self) -> None:
        """Close every member (a model judge stops the engine its backend runs)."""
        close_judges(self.judges.values())

    def metrics(self) -> dict[str, float]:
        merged: dict[str, float] = {}
        for judge in self.judges.values():
            merged.update(getattr(judge, "metrics", dict)())
        return merged

    def spend(self) -> Spend | None:
        """The members' calls added; None when every member is a rule judge."""
        return sum_spend(judge_spend(judge) for judge in self.judges.values())

    def planned_calls(self, load: JudgeLoad, rubric: Rubric) -> CallPlan | None:
        """Each member asked once a step with only its own dimensions."""
        plans = ((name, plan_judge(self.judges[name], load, self._subset(rubric, indices)))
                 for name, indices in self.routing(rubric).items())
        return sum_plans(plan.labelled(name) for name, plan in plans if plan is not None)


@hookimpl
def rlkit_register_judges(register):
    register("hybrid", HybridJudge)
