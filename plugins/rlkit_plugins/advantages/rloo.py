"""``rloo``: REINFORCE leave-one-out, A_i = r_i - mean of the other completions' rewards in the group.

The baseline for each completion is the mean reward of the other n - 1 scored completions of the same
prompt, so it does not depend on the completion itself and the estimator stays unbiased (Kool et al.,
"Buy 4 REINFORCE Samples, Get a Baseline for Free!", ICLR 2019 workshop; Ahmadian et al., "Back to
Basics: Revisiting REINFORCE Style Optimization for Learning from Human Feedback in LLMs", arXiv
2402.14740). Algebraically ``A_i = n / (n - 1) * (r_i - mean)``, the group-centred reward scaled up.

NaN rewards take no part and get 0; ``n`` counts the scored completions. A group with fewer than two of
them has no "others" and gets 0, as does a group whose scored rewards are all equal. ``scale="group"``
also divides by the group's Bessel-corrected std + eps, as GRPO does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from rlkit.plugin import ConfigError, RewardBatch, hookimpl, nan_mean_std, scored_values_differ

if TYPE_CHECKING:
    import torch

RlooScale = Literal["none", "group"]


def leave_one_out_advantages(rewards: torch.Tensor, scale: RlooScale = "none", eps: float = 1e-4) -> torch.Tensor:
    """``rewards [B, G]`` (NaN = unscored) → advantages ``float32 [B, G]`` with no NaN."""
    import torch
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [B, G], got {tuple(rewards.shape)}")
    if scale not in get_args(RlooScale):
        raise ValueError(f"scale must be none or group, got {scale!r}")
    r = rewards.double()
    valid = ~torch.isnan(r)
    n = valid.sum(dim=1, keepdim=True)
    total = torch.where(valid, r, torch.zeros_like(r)).sum(dim=1, keepdim=True)
    baseline = (total - r) / (n - 1).clamp(min=1)
    adv = r - baseline
    if scale == "group":
        _, std, _ = nan_mean_std(r, dim=1, keepdim=True)
        adv = adv / (std + eps)
    # Equal rewards give r_i - baseline = 0 only up to rounding in the sum; make it exact.
    no_contrast = (n < 2) | ~scored_values_differ(r, valid)
    return torch.where(valid & ~no_contrast, adv, torch.zeros_like(adv)).float()


class LeaveOneOutAdvantage:
    """RLOO's estimator over the aggregated reward."""

    zero_mean_groups = True
    group_relative = True  # compares completions within their group; `rlkit validate` asks for num_generations >= 2

    @dataclass
    class Params:
        scale: RlooScale = "none"
        eps: float = 1e-4

    def __init__(self, params: Params) -> None:
        if params.scale not in get_args(RlooScale):
            raise ConfigError(f"scale must be none or group, got {params.scale!r}", "advantage.params.scale")
        if not params.eps > 0:
            raise ConfigError(f"eps must be > 0, got {params.eps}", "advantage.params.eps")
        self.params = params

    def advantages(self, batch: RewardBatch) -> torch.Tensor:
        if batch.rewards is None:
            raise ValueError("rloo needs aggregated rewards in the batch")
        return leave_one_out_advantages(batch.rewards, self.params.scale, self.params.eps)


@hookimpl
def rlkit_register_advantage_estimators(register):
    register("rloo", LeaveOneOutAdvantage)
