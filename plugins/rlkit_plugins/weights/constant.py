"""``constant``: the rubric's initial weights, unchanged for the whole run (optionally overridden)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlkit.plugin import ConfigError, Rubric, hookimpl

if TYPE_CHECKING:
    import torch


class ConstantWeights:
    """Returns the initial weights, or ``params.weights`` (by dimension name) where given."""

    @dataclass
    class Params:
        weights: dict[str, float] = field(default_factory=dict)

    def __init__(self, params: Params) -> None:
        if any(w < 0 for w in params.weights.values()):
            raise ConfigError("weights must be >= 0", "weights.params.weights")
        self.params = params

    def check_rubric(self, rubric: Rubric) -> None:
        unknown = sorted(set(self.params.weights) - set(rubric.dimension_names))
        if unknown:
            raise ConfigError(f"weights given for unknown dimensions {unknown}; the rubric has "
                              f"{rubric.dimension_names}", "weights.params.weights")

    def weights(self, step: int, scores: torch.Tensor, rubric: Rubric) -> torch.Tensor:
        import torch
        self.check_rubric(rubric)
        return torch.tensor([self.params.weights.get(d.name, d.weight) for d in rubric.dimensions],
                            dtype=torch.float32)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@hookimpl
def rlkit_register_weight_schedulers(register):
    register("constant", ConstantWeights)
