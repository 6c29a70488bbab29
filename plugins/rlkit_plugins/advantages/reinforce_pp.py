"""``reinforce_pp``: REINFORCE++ with a baseline, a group (or leave-one-out) baseline and global batch normalisation.

REINFORCE++ (Hu et al., "REINFORCE++: Stabilizing Critic-Free Policy Optimization with Global Advantage
Normalization", arXiv 2501.03262, the ``-baseline`` variant for outcome rewards):

    A_i = r_i - b_i                 b_i = mean of the group (``baseline: group``) or of the others (``loo``)
    Â_i = (A_i - mean_batch(A)) / (std_batch(A) + eps)

Normalising over the whole batch, not per group, keeps the relative size of a group's spread: a group whose
rewards barely differ gets small advantages instead of ±1 (GRPO's per-group std inflates them). As in veRL's
``compute_reinforce_plus_plus_baseline_outcome_advantage`` and OpenRLHF's ``reinforce_baseline`` the baseline is
subtracted per group and the whitening is global; two deliberate differences: the batch statistics are taken over
completions, not tokens (those peers whiten token-level copies of the advantage, so a long completion weighs more),
and the KL penalty stays in the objective's loss (``objective.params.beta``) rather than folded into the reward.

NaN rewards take no part and get 0; so does a group with fewer than two scored completions (it has no baseline). A
group whose scored rewards are all equal enters the batch statistics as zeros, as in the peers, and gets exactly 0:
centring the batch would otherwise hand it the negative of the batch mean, a push with no contrast behind it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from rlkit.plugin import ConfigError, RewardBatch, hookimpl, nan_mean_std, scored_values_differ

if TYPE_CHECKING:
    import torch

Baseline = Literal["group", "loo"]


def reinforce_pp_advantages(rewards: torch.Tensor, baseline: Baseline = "group", eps: float = 1e-4) -> torch.Tensor:
    """``rewards [B, G]`` (NaN = unscored) → advantages ``float32 [B, G]`` with no NaN."""
    import torch
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [B, G], got {tuple(rewards.shape)}")
    if baseline not in get_args(Baseline):
        raise ValueError(f"baseline must be group or loo, got {baseline!r}")
    r = rewards.double()
    valid = ~torch.isnan(r)
    n = valid.sum(dim=1, keepdim=True)
    total = torch.where(valid, r, torch.zeros_like(r)).sum(dim=1, keepdim=True)
    others = (total - r) / (n - 1).clamp(min=1)
    adv = r - (total / n.clamp(min=1) if baseline == "group" else others)
    counted = valid & (n >= 2)
    informative = counted & scored_values_differ(r, valid)
    # Equal rewards centre to 0 only up to rounding in the sum; make it exact before the batch statistics.
    adv = torch.where(informative, adv, torch.where(counted, torch.zeros_like(adv), torch.full_like(adv, torch.nan)))
    mean, std, _ = nan_mean_std(adv.reshape(-1), dim=0)
    adv = (adv - mean) / (std + eps)
    return torch.where(informative, adv, torch.zeros_like(adv)).float()


class ReinforcePlusPlusAdvantage:
    """REINFORCE++-baseline over the aggregated reward."""

    group_relative = True  # the baseline is the group's; `rlkit validate` asks for num_generations >= 2

    @dataclass
    class Params:
        baseline: Baseline = "group"
        eps: float = 1e-4

    def __init__(self, params: Params) -> None:
        if params.baseline not in get_args(Baseline):
            raise ConfigError(f"baseline must be group or loo, got {params.baseline!r}", "advantage.params.baseline")
        if not params.eps > 0:
            raise ConfigError(f"eps must be > 0, got {params.eps}", "advantage.params.eps")
        self.params = params

    def advantages(self, batch: RewardBatch) -> torch.Tensor:
        if batch.rewards is None:
            raise ValueError("reinforce_pp needs aggregated rewards in the batch")
        return reinforce_pp_advantages(batch.rewards, self.params.baseline, self.params.eps)


@hookimpl
def rlkit_register_advantage_estimators(register):
    register("reinforce_pp", ReinforcePlusPlusAdvantage)
