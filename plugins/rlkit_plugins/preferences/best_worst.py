"""``best_worst``: one pair per group, its best completion over its worst.

Common rules (as every built-in constructor; see ``all_pairs``): the order comes from ``batch.rewards``;
a NaN reward is never paired; rewards within 1e-6 are a tie and never paired; ``chosen`` has the higher
reward; a group with fewer than two scored completions or no reward gap gives no pairs; weights are 1;
pairs are ordered by prompt index.

Here: best = the highest scored reward, worst = the lowest; among equal rewards the lowest completion
index is taken. The pair is kept when ``r_best - r_worst > 1e-6``. This is the pair Self-Rewarding
Language Models build from a group of judged responses (Yuan et al. 2024, highest vs lowest score,
dropped when the scores are equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import PreferencePairs, RewardBatch, hookimpl
from rlkit_plugins.preferences.all_pairs import TIE_TOLERANCE, pairs_from_mask, require_rewards, reward_order

if TYPE_CHECKING:
    import torch


def best_worst_pairs(rewards: torch.Tensor, tol: float = TIE_TOLERANCE) -> PreferencePairs:
    """``rewards [B, G]`` (NaN = unscored) → at most one pair per group: best over worst."""
    import torch
    b, g = rewards.shape
    if g == 0:
        return pairs_from_mask(torch.zeros(b, 0, 0, dtype=torch.bool, device=rewards.device))
    best = reward_order(rewards, descending=True)[0][:, 0]
    worst = reward_order(rewards, descending=False)[0][:, 0]
    rows = torch.arange(b, device=rewards.device)
    # NaN rewards compare False, so a group with no scored completion drops out here too.
    keep = (rewards[rows, best] - rewards[rows, worst]) > tol
    mask = torch.zeros(b, g, g, dtype=torch.bool, device=rewards.device)
    mask[rows, best, worst] = keep
    return pairs_from_mask(mask)


class BestWorstPreferences:
    """One hard pair per group: the completion with the highest reward against the lowest."""

    @dataclass
    class Params:
        pass

    def __init__(self, params: Params) -> None:
        self.params = params

    def pairs(self, batch: RewardBatch) -> PreferencePairs:
        return best_worst_pairs(require_rewards(batch))


@hookimpl
def rlkit_register_preference_constructors(register):
    register("best_worst", BestWorstPreferences)
