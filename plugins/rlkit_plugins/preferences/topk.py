"""``topk``: each of a group's k best completions over each of its k worst.

Common rules (as every built-in constructor; see ``all_pairs``): the order comes from ``batch.rewards``;
a NaN reward is never paired; rewards within 1e-6 are a tie and never paired; ``chosen`` has the higher
reward; a group with fewer than two scored completions or no reward gap gives no pairs; weights are 1;
pairs are ordered by prompt index, then chosen index, then rejected index.

Here: the top set is the first k scored completions by reward, highest first; the bottom set the first
k by reward, lowest first; equal rewards go lowest completion index first in both. Every (i in top,
j in bottom) with ``r_i - r_j > 1e-6`` is a pair, so at most k² per group. When the group has fewer
than 2k scored completions the two sets overlap; a completion in both is paired only with those below
it (never with itself, never with a tie), and with k >= the scored count this is ``all_pairs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import ConfigError, PreferencePairs, RewardBatch, hookimpl
from rlkit_plugins.preferences.all_pairs import (
    TIE_TOLERANCE,
    pairs_from_mask,
    require_rewards,
    reward_order,
    strictly_better,
)

if TYPE_CHECKING:
    import torch


def topk_pairs(rewards: torch.Tensor, k: int = 2, tol: float = TIE_TOLERANCE) -> PreferencePairs:
    """``rewards [B, G]`` (NaN = unscored) → top-k × bottom-k pairs of each group, ties skipped."""
    import torch
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    valid = ~torch.isnan(rewards)
    top = valid & (reward_order(rewards, descending=True)[1] < k)
    bottom = valid & (reward_order(rewards, descending=False)[1] < k)
    return pairs_from_mask(strictly_better(rewards, tol) & top.unsqueeze(2) & bottom.unsqueeze(1))


class TopKPreferences:
    """The k best against the k worst of each group, each pair weight 1."""

    @dataclass
    class Params:
        k: int = 2
        """How many of the best and of the worst completions of each group take part."""

    def __init__(self, params: Params) -> None:
        if isinstance(params.k, bool) or not isinstance(params.k, int) or params.k < 1:
            raise ConfigError(f"k must be an integer >= 1, got {params.k!r}", "preference.params.k")
        self.params = params

    def pairs(self, batch: RewardBatch) -> PreferencePairs:
        return topk_pairs(require_rewards(batch), self.params.k)


@hookimpl
def rlkit_register_preference_constructors(register):
    register("topk", TopKPreferences)
