"""``opo``: OPO's optimal reward baseline, the group's length-weighted mean reward; no std scaling.

OPO (Hao et al., "On-Policy RL with Optimal Reward Baseline", arXiv 2505.23585, §3.2): under the sequence-level
policy gradient the variance-minimising baseline weighs each reward by the squared norm of its log-prob gradient,
which the paper approximates by the completion's length ``l_i``:

    b = Σ_j l_j r_j / Σ_j l_j        A_i = r_i - b

as in veRL's ``compute_opo_outcome_advantage`` (no division by the group std: the paper drops it so the objective is
the expected reward alone). Lengths are completion token counts, read from ``batch.extras["completion_lengths"]``
(``[B, G]``, attached by the training loop); a batch without them (a contract suite, another trainer's data) is
treated as equal lengths, i.e. plain group centring.

NaN rewards take no part and get 0. A group with fewer than two scored completions, or whose scored rewards are all
equal, gets exactly 0. Groups are not zero-mean: the baseline is a weighted mean, so long completions' rewards
weigh more in it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlkit.plugin import RewardBatch, hookimpl, scored_values_differ

if TYPE_CHECKING:
    import torch

LENGTHS_KEY = "completion_lengths"


def opo_advantages(rewards: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """``rewards [B, G]`` (NaN = unscored), ``lengths [B, G]`` (tokens; None: equal) → advantages ``float32 [B, G]``."""
    import torch
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [B, G], got {tuple(rewards.shape)}")
    r = rewards.double()
    length = torch.ones_like(r) if lengths is None else lengths.to(r).clamp(min=0)
    if length.shape != r.shape:
        raise ValueError(f"lengths must be {list(r.shape)}, got {list(length.shape)}")
    valid = ~torch.isnan(r)
    weight = torch.where(valid, length, torch.zeros_like(length))
    total = weight.sum(dim=1, keepdim=True)
    # An all-empty group (every length 0) falls back to equal weights rather than dividing by zero.
    weight = torch.where(total > 0, weight, valid.to(r))
    baseline = (weight * torch.where(valid, r, torch.zeros_like(r))).sum(dim=1, keepdim=True) / weight.sum(
        dim=1, keepdim=True).clamp(min=1e-12)
    n = valid.sum(dim=1, keepdim=True)
    informative = valid & (n >= 2) & scored_values_differ(r, valid)
    return torch.where(informative, r - baseline, torch.zeros_like(r)).float()


class OptimalBaselineAdvantage:
    """OPO's length-weighted baseline over the aggregated reward."""

    group_relative = True  # the baseline is the group's; `rlkit validate` asks for num_generations >= 2

    def __init__(self, params: None = None) -> None:
        del params  # OPO has no knobs: the baseline is fixed by the paper's derivation

    def advantages(self, batch: RewardBatch) -> torch.Tensor:
        if batch.rewards is None:
            raise ValueError("opo needs aggregated rewards in the batch")
        return opo_advantages(batch.rewards, batch.extras.get(LENGTHS_KEY))


@hookimpl
def rlkit_register_advantage_estimators(register):
    register("opo", OptimalBaselineAdvantage)
