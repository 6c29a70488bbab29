"""``hybrid``: each rubric dimension scored by the judge named for it.

A dimension's judge is its ``judge`` field in the rubric, else ``params.assign[<dimension>]``, else
``params.default``. Each judge sees a rubric holding only its own dimensions, so only the dimensions meant
for a model (accuracy, clarity) reach it, while binary safety and format checks stay with the rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlkit import ConfigError, Rollout, Rubric, hookimpl
from rlkit.judging.members import member_judge


class HybridJudge:
    @dataclass
    class Params:
        judges: dict[str, dict[str, Any]] = field(default_factory=lambda: {"rule": {}})  # name -> that judge's params
        default: str = "rule"
        assign: dict[str, str] = field(default_factory=dict)  # dimension -> judge, for rubrics without `judge`

    def __init__(self, params: Params) -> None:
        from rlkit.registry import load_registry

        if params.default not in params.judges:
            raise ConfigError(f"default judge {params.default!r} is not among judges {sorted(params.judges)}",
                              "judge.params.default")
        registry = load_registry()
        self.params = params
        self.judges = {name: member_judge(registry, name, p or {}, f"judge.params.judges.{name}", "hybrid",
                                         params_where=f"judge.params.judges.{name}")
                       for name, p in params.judges.items()}

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

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        out = torch.full((rollout.num_prompts, rollout.group_size, len(rubric.dimensions)), float("nan"))
        for name, indices in self.routing(rubric).items():
            out[..., indices] = self.judges[name].score(rollout, self._subset(rubric, indices)).to(torch.float32)
        return out

    def metrics(self) -> dict[str, float]:
        merged: dict[str, float] = {}
        for judge in self.judges.values():
            merged.update(getattr(judge, "metrics", dict)())
        return merged


@hookimpl
def rlkit_register_judges(register):
    register("hybrid", HybridJudge)
