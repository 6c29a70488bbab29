"""``all_pairs``: every pair of completions of a group whose rewards differ, the better one chosen.

Common rules of the built-in preference constructors (this module also holds their shared helpers):

* The order comes from ``batch.rewards``, the aggregated reward, whichever aggregator formed it
  (``pareto`` alone orders by dimension dominance instead). ``rewards`` must be set.
* A completion whose reward is NaN is never paired.
* Two rewards within ``TIE_TOLERANCE`` (1e-6, absolute) of each other are a tie, and a tie is never
  paired: it says nothing about which completion is better. ``chosen`` always has the higher reward.
* A group whose scored rewards are all tied, or with fewer than two scored completions, gives no pairs
  (no error). An empty result is valid: P = 0 tensors.
* Hard pairs have weight 1. Pairs are ordered by prompt index, then chosen index, then rejected index
  (ascending), so the output is deterministic; indices are int64, weights float32.

Here: pair (i, j) whenever ``r_i - r_j > 1e-6``; G(G-1)/2 pairs for a group of distinct rewards, as
InstructGPT's reward model used all K-choose-2 comparisons of a prompt (Ouyang et al. 2022, "Training
language models to follow instructions with human feedback").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import PreferencePairs, RewardBatch, hookimpl

if TYPE_CHECKING:
    import torch

TIE_TOLERANCE = 1e-6
"""Rewards (or scores) closer than this are equal: float32 rounding must not invent a preference."""


def require_rewards(batch: RewardBatch) -> torch.Tensor:
    """``batch.rewards``, or a ValueError when the batch has not been aggregated yet."""
    if batch.rewards is None:
        raise ValueError("preference constructors need aggregated rewards in the batch")
    return batch.rewards


def strictly_better(rewards: torch.Tensor, tol: float = TIE_TOLERANCE) -> torch.Tensor:
    """``rewards [B, G]`` → ``bool [B, G, G]``: ``[b, i, j]`` when ``r_i - r_j > tol``, both scored.

    NaN compares False, so a NaN reward is never better nor worse than anything.
    """
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [B, G], got {tuple(rewards.shape)}")
    return (rewards.unsqueeze(2) - rewards.unsqueeze(1)) > tol


def pairs_from_mask(mask: torch.Tensor, weight: torch.Tensor | None = None) -> PreferencePairs:
    """``mask bool [B, G, G]`` (``[b, i, j]``: i chosen over j) → pairs in (prompt, chosen, rejected) order.

    ``weight [B, G, G]`` gives each pair's weight or soft label; without it every pair weighs 1.
    """
    import torch
    index = mask.nonzero()  # row-major, hence sorted by (b, i, j): the documented order
    b, i, j = (index[:, k].to(torch.int64) for k in range(3))
    w = torch.ones(len(b), device=mask.device) if weight is None else weight[b, i, j]
    return PreferencePairs(prompt_index=b, chosen=i, rejected=j, weight=w.to(torch.float32))


def reward_order(rewards: torch.Tensor, descending: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """``rewards [B, G]`` → ``(order, position)``, both int64 ``[B, G]``.

    ``order[b, p]`` is the completion at position p when the scored completions are sorted by reward
    (``descending`` or not), equal rewards lowest index first, NaN rewards after every scored one;
    ``position`` is its inverse (``position[b, order[b, p]] == p``).
    """
    import torch
    valid = ~torch.isnan(rewards)
    # Two stable sorts: by reward, then by "scored" (stable keeps the reward order within each), so a
    # NaN never takes a scored completion's place, even next to a reward of -inf.
    by_reward = torch.sort(torch.where(valid, rewards, torch.zeros_like(rewards)), dim=1,
                           descending=descending, stable=True).indices
    by_valid = torch.sort(valid.gather(1, by_reward).to(torch.int8), dim=1, descending=True, stable=True).indices
    order = by_reward.gather(1, by_valid)
    position = torch.empty_like(order)
    position.scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
    return order, position


def all_pairs(rewards: torch.Tensor, tol: float = TIE_TOLERANCE) -> PreferencePairs:
    """``rewards [B, G]`` (NaN = unscored) → every pair (i, j) of a group with ``r_i - r_j > tol``."""
    return pairs_from_mask(strictly_better(rewards, tol))


class AllPairsPreferences:
    """Every ordered pair of the group: the most pairs, each weight 1."""

    @dataclass
    class Params:
        pass

    def __init__(self, params: Params) -> None:
        self.params = params

    def pairs(self, batch: RewardBatch) -> PreferencePairs:
        return all_pairs(require_rewards(batch))


@hookimpl
def rlkit_register_preference_constructors(register):
    register("all_pairs", AllPairsPreferences)
