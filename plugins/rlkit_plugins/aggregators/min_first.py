"""``min_first``: every gate dimension must pass, then the weighted sum of the other dimensions."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import ConfigError, RewardBatch, Rubric, hookimpl
from rlkit_plugins.aggregators.weighted_sum import nan_weighted_sum

if TYPE_CHECKING:
    import torch


class MinFirstAggregator:
    """Gates first, quality second.

    The gate dimensions are those with ``gate:`` set in the rubric; one passes when its *raw*
    score is >= its gate. Then, per completion:

    * any gate failed → ``floor``. A gate that could not be scored (NaN) counts as failed: a
      safety or format gate nobody checked must not let a completion through.
    * all gates passed → the weighted sum (scheduler weights, NaN skipped) of the other
      dimensions; where there is no other dimension, or none of them was scored, the reward is
      1.0, since passing every gate is then all that was asked.
    * nothing scored at all → NaN, as for every aggregator.

    The gate dimensions' weights are not used. A rubric without gates (rejected by
    ``check_rubric``) would reduce this to ``weighted_sum``.
    """

    @dataclass
    class Params:
        floor: float = 0.0
        """The reward of a completion that fails a gate, in [0, 1]."""

    def __init__(self, params: Params) -> None:
        if not (math.isfinite(params.floor) and 0 <= params.floor <= 1):
            raise ConfigError(f"floor must lie in [0, 1], got {params.floor:g}", "aggregator.params.floor")
        self.params = params

    def check_rubric(self, rubric: Rubric) -> None:
        if not any(d.gate is not None for d in rubric.dimensions):
            raise ConfigError(
                f"aggregator 'min_first' needs at least one gate dimension, but rubric {rubric.name!r} sets "
                f"no 'gate:' (dimensions: {', '.join(rubric.dimension_names)}); add e.g. 'gate: 1' to a "
                f"binary dimension, or choose another aggregator",
                "aggregator",
            )

    def aggregate(self, batch: RewardBatch) -> torch.Tensor:
        import torch
        dims = batch.rubric.dimensions
        raw, scores = batch.raw_scores, batch.scores
        is_gate = torch.tensor([d.gate is not None for d in dims], dtype=torch.bool, device=raw.device)
        thresholds = torch.tensor([d.gate for d in dims if d.gate is not None], dtype=raw.dtype, device=raw.device)
        # NaN >= t is False, so an unscored gate fails without a separate test.
        passed = (raw[..., is_gate] >= thresholds).all(dim=-1)
        rest = scores[..., ~is_gate]
        if rest.shape[-1]:
            quality = nan_weighted_sum(rest, batch.weights[~is_gate])
            quality = torch.where(torch.isnan(quality), torch.ones_like(quality), quality)
        else:
            quality = scores.new_ones(scores.shape[:-1])
        reward = torch.where(passed, quality, torch.full_like(quality, self.params.floor))
        unscored = torch.isnan(scores).all(dim=-1)
        return torch.where(unscored, torch.full_like(reward, float("nan")), reward).to(torch.float32)


@hookimpl
def rlkit_register_aggregators(register):
    register("min_first", MinFirstAggregator)
