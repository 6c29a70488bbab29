"""``rank``: advantages from each completion's rank within its group; reward magnitudes are discarded.

Only the order of ``batch.rewards`` inside a group matters, so the advantages are unchanged by any
strictly increasing transform of the reward (a judge's calibration, a rubric's weights scaled up).
Rank 1 is the best completion; tied rewards share the average of their ranks; NaN rewards are not
ranked and get 0; ``n`` is the number of scored completions in the group. Methods:

* ``linear`` (GOPO, Choi et al., "GOPO: Policy Optimization using Ranked Rewards", arXiv 2602.03876):
  ``A = 2 - 4 (rank - 1) / (n - 1)``: +2 for the best, -2 for the worst, evenly spaced between.
* ``softmax``: ``p = softmax(-rank / temperature)`` over the scored completions, and
  ``A = n p - 1``: the completion's weight relative to uniform, minus 1, so it lies in (-1, n - 1] and a
  group of equals gets 0 whatever n is. Lower temperatures concentrate the credit on the best.
* ``wins``: the number of other completions it beats (a tie counts 1/2), centred and divided by
  ``n - 1``: ``A = wins / (n - 1) - 1/2``, in [-1/2, 1/2]. Since ``wins = n - rank`` with averaged ranks,
  this is ``linear`` divided by 4; it is kept as its own name for configs that think in win rates.

Every method gives each group mean 0 over its scored completions (average ranks preserve the rank sum;
the softmax weights sum to 1), so ``zero_mean_groups`` holds. A group with fewer than two scored
completions, or whose scored rewards are all equal, gets 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from rlkit.plugin import ConfigError, RewardBatch, hookimpl, scored_values_differ

if TYPE_CHECKING:
    import torch

RankMethod = Literal["linear", "softmax", "wins"]


def group_ranks(rewards: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``rewards [B, G]`` → ``(rank, wins, n)``: average ranks (1 = best) and wins ``[B, G]``, ``n [B, 1]``.

    Entries with NaN reward are left out of every comparison; their own rank and wins are meaningless.
    """
    import torch
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [B, G], got {tuple(rewards.shape)}")
    valid = ~torch.isnan(rewards)
    mine, other = rewards.unsqueeze(2), rewards.unsqueeze(1)
    counted = valid.unsqueeze(1)
    better = ((other > mine) & counted).sum(dim=2)
    worse = ((other < mine) & counted).sum(dim=2)
    tied_others = ((other == mine) & counted).sum(dim=2) - 1  # NaN never equals itself, so -1 for invalid
    rank = 1 + better + tied_others.clamp(min=0) / 2
    wins = worse + tied_others.clamp(min=0) / 2
    return rank.to(torch.float64), wins.to(torch.float64), valid.sum(dim=1, keepdim=True)


def rank_advantages(rewards: torch.Tensor, method: RankMethod = "linear", temperature: float = 1.0) -> torch.Tensor:
    """``rewards [B, G]`` (NaN = unscored) → advantages ``float32 [B, G]``; see the module docstring."""
    import torch
    rank, wins, n = group_ranks(rewards)
    valid = ~torch.isnan(rewards)
    spread = (n - 1).clamp(min=1).to(torch.float64)
    if method == "linear":
        adv = 2 - 4 * (rank - 1) / spread
    elif method == "softmax":
        logits = torch.where(valid, -rank / temperature, torch.full_like(rank, -torch.inf))
        adv = n * torch.softmax(logits, dim=1) - 1
    elif method == "wins":
        adv = wins / spread - 0.5
    else:
        raise ValueError(f"method must be linear, softmax or wins, got {method!r}")
    # Exact zeros for groups without an order: the softmax of equal logits is 1/n only up to rounding.
    no_order = (n < 2) | ~scored_values_differ(rewards, valid)
    return torch.where(valid & ~no_order, adv, torch.zeros_like(adv)).float()


class RankAdvantage:
    """Rank-based advantages over the aggregated reward."""

    zero_mean_groups = True
    group_relative = True  # compares completions within their group; `rlkit validate` asks for num_generations >= 2
    order_invariant = True  # checked by rlkit.testing.properties: only the order of the rewards is read

    @dataclass
    class Params:
        method: RankMethod = "linear"
        temperature: float = 1.0

    def __init__(self, params: Params) -> None:
        if params.method not in get_args(RankMethod):
            raise ConfigError(f"method must be one of {', '.join(get_args(RankMethod))}, got {params.method!r}",
                              "advantage.params.method")
        if not params.temperature > 0:
            raise ConfigError(f"temperature must be > 0, got {params.temperature}", "advantage.params.temperature")
        self.params = params

    def advantages(self, batch: RewardBatch) -> torch.Tensor:
        if batch.rewards is None:
            raise ValueError("rank needs aggregated rewards in the batch")
        return rank_advantages(batch.rewards, self.params.method, self.params.temperature)


@hookimpl
def rlkit_register_advantage_estimators(register):
    register("rank", RankAdvantage)
