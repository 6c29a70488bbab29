"""``pareto``: reward by Pareto dominance within each group (non-dominated sorting)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rlkit.plugin import ConfigError, PreferencePairs, RewardBatch, hookimpl

if TYPE_CHECKING:
    import torch


def dominance(scores: torch.Tensor) -> torch.Tensor:
    """``scores [B, G, D]`` → ``bool [B, G, G]``: ``[b, i, j]`` is True when i dominates j.

    i dominates j when it is >= on every dimension and > on at least one. NaN is treated as worse
    than any score (and equal to another NaN): an unscored dimension can never be an advantage.
    """
    import torch
    filled = torch.nan_to_num(scores, nan=float("-inf"), posinf=float("inf"), neginf=float("-inf"))
    a, b = filled.unsqueeze(2), filled.unsqueeze(1)  # [B, G, 1, D] against [B, 1, G, D]
    return (a >= b).all(dim=-1) & (a > b).any(dim=-1)


def pareto_fronts(dominates: torch.Tensor, member: torch.Tensor) -> torch.Tensor:
    """Front number (1 = non-dominated) of each member of each group; 0 for non-members.

    ``dominates [B, G, G]`` from ``dominance``, ``member bool [B, G]``. Peels off the
    non-dominated set repeatedly, as the non-dominated sorting of NSGA-II (Deb et al. 2002,
    "A fast and elitist multiobjective genetic algorithm: NSGA-II"), vectorised over groups.
    """
    import torch
    fronts = torch.zeros(member.shape, dtype=torch.long, device=member.device)
    remaining = member.clone()
    front = 0
    while remaining.any():
        front += 1
        dominated = (dominates & remaining.unsqueeze(2)).any(dim=1)
        current = remaining & ~dominated
        fronts[current] = front
        remaining &= ~current
    return fronts


def largest_margin(scores: torch.Tensor, pairs: PreferencePairs) -> torch.Tensor:
    """``scores [B, G, D]`` (the dimensions compared), pairs → ``[P]``: the largest margin by which each chosen
    completion beats its rejected one on a single dimension, NaN counting as 0 (the bottom of the range); 0 where it
    beats it on none.

    The gap of a Pareto order: it weighs no dimension against another, so whether a pair is more than judge noise
    is asked of its largest advantage, in the units of that dimension."""
    import torch
    filled = scores.nan_to_num(nan=0.0)
    margin = filled[pairs.prompt_index, pairs.chosen] - filled[pairs.prompt_index, pairs.rejected]  # [P, D]
    if margin.shape[-1] == 0:
        return torch.zeros(len(pairs), device=scores.device)
    return margin.amax(dim=-1).clamp(min=0.0)


class ParetoAggregator:
    """The reward says how close a completion is to its group's Pareto front.

    Dimensions whose current weight is 0 are left out; otherwise weights are not used. Only the
    order of each dimension's scores matters, so the reward is unchanged by any strictly increasing
    transform of a dimension. NaN counts as worse than any score on its dimension; a completion with
    no counted dimension scored gets NaN and takes no part in its group's comparison (so "G" below
    is the number of completions of the group that were scored).

    * ``rank``: reward = 1 - (front - 1) / max(fronts - 1, 1), front 1 being the non-dominated
      completions: 1 on the front, 0 on the last front; all 1 where no completion dominates another.
    * ``count``: reward = 1 - (completions dominating it) / max(G - 1, 1).
    """

    order_invariant = True  # rlkit.testing.properties checks it
    group_relative = True  # fronts within a group: held-out rewards use heldout_aggregator

    @dataclass
    class Params:
        method: Literal["rank", "count"] = "rank"
        """``rank``: by front number (non-dominated sorting); ``count``: by how many dominate it."""

    def __init__(self, params: Params) -> None:
        if params.method not in ("rank", "count"):
            raise ConfigError(f"method must be 'rank' or 'count', got {params.method!r}", "aggregator.params.method")
        self.params = params

    def aggregate(self, batch: RewardBatch) -> torch.Tensor:
        import torch
        scores = batch.scores[..., batch.weights > 0]
        member = ~torch.isnan(scores).all(dim=-1)
        dominates = dominance(scores) & member.unsqueeze(2) & member.unsqueeze(1)
        if self.params.method == "rank":
            fronts = pareto_fronts(dominates, member)
            last = fronts.amax(dim=1, keepdim=True)
            reward = 1 - (fronts - 1).float() / (last - 1).clamp(min=1).float()
        else:
            beaten_by = dominates.sum(dim=1).float()
            others = (member.sum(dim=1, keepdim=True) - 1).clamp(min=1).float()
            reward = 1 - beaten_by / others
        return torch.where(member, reward, torch.full_like(reward, float("nan"))).to(torch.float32)

    def pair_gaps(self, batch: RewardBatch, pairs: PreferencePairs) -> torch.Tensor:
        """``[P]``: :func:`largest_margin` over the dimensions of positive weight, what ``group_dpo``'s ``min_gap``
        compares (the reward, a front position, says nothing about how far apart two completions are)."""
        return largest_margin(batch.scores[..., batch.weights > 0], pairs)


@hookimpl
def rlkit_register_aggregators(register):
    register("pareto", ParetoAggregator)
