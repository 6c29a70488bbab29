"""``adjacent``: pairs between neighbouring reward levels of a group only.

Common rules (as every built-in constructor; see ``all_pairs``): the order comes from ``batch.rewards``;
a NaN reward is never paired; rewards within 1e-6 are a tie and never paired; ``chosen`` has the higher
reward; a group with fewer than two scored completions or no reward gap gives no pairs; weights are 1;
pairs are ordered by prompt index, then chosen index, then rejected index.

Here: sort the scored completions by reward, highest first, equal rewards lowest index first. A new
level starts wherever a reward lies more than 1e-6 below the one before it, so levels are runs of
rewards each within 1e-6 of its neighbour. Every completion of level ℓ is paired with the *first*
completion of level ℓ+1 (its highest reward, lowest index among equals). A group of n scored
completions gives at most n - 1 pairs, found in one sort and one scan: O(G log G).

Levels chain on the gap to the neighbour, not on the distance to the level's best member: any two
completions of different levels then differ by more than 1e-6, so no pair is a tie.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import PreferencePairs, RewardBatch, hookimpl
from rlkit_plugins.preferences.all_pairs import TIE_TOLERANCE, pairs_from_mask, require_rewards, reward_order

if TYPE_CHECKING:
    import torch


def adjacent_pairs(rewards: torch.Tensor, tol: float = TIE_TOLERANCE) -> PreferencePairs:
    """``rewards [B, G]`` (NaN = unscored) → each completion over the first of the next lower level."""
    import torch
    b, g = rewards.shape
    order, _ = reward_order(rewards, descending=True)
    ranked = rewards.gather(1, order)                     # scored rewards descending, NaN last
    valid = ~torch.isnan(ranked)
    starts = torch.zeros_like(valid)
    starts[:, 1:] = (ranked[:, :-1] - ranked[:, 1:]) > tol  # False at a NaN, which ends the scored run
    position = torch.arange(g, device=rewards.device).expand(b, g)
    sentinel = torch.full_like(position, g)
    level_start = torch.where(starts, position, sentinel)
    # The next level's first position after p: the nearest start strictly after p (reverse cummin).
    following = torch.cat([level_start[:, 1:], sentinel[:, :1]], dim=1)
    next_start = following.flip(1).cummin(dim=1).values.flip(1)
    keep = valid & (next_start < g)
    rows = torch.arange(b, device=rewards.device).unsqueeze(1).expand(b, g)
    chosen = order
    rejected = order.gather(1, next_start.clamp(max=max(g - 1, 0)))
    mask = torch.zeros(b, g, g, dtype=torch.bool, device=rewards.device)
    mask[rows[keep], chosen[keep], rejected[keep]] = True
    return pairs_from_mask(mask)


class AdjacentPreferences:
    """Only neighbouring reward levels, the closest calls a group offers; each pair weight 1."""

    @dataclass
    class Params:
        pass

    def __init__(self, params: Params) -> None:
        self.params = params

    def pairs(self, batch: RewardBatch) -> PreferencePairs:
        return adjacent_pairs(require_rewards(batch))


@hookimpl
def rlkit_register_preference_constructors(register):
    register("adjacent", AdjacentPreferences)
