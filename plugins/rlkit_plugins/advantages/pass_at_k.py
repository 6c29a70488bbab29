"""``pass_at_k``: advantages that optimise pass@k, the chance that the best of k completions succeeds.

A completion succeeds when its reward is at least ``threshold`` (binary rewards: 1 = solved). With ``n`` scored
completions in a group, ``c`` of them successes, pass@k is estimated without bias by averaging over all
``C(n, k)`` subsets of size k (Chen et al., "Evaluating Large Language Models Trained on Code", 2021; Walder &
Karkhanis, "Pass@K Policy Optimization", arXiv 2505.15201, §3):

    R̄ = ρ(n, c, k) = 1 - C(n - c, k) / C(n, k)

Each completion's advantage is its share of that estimate, in the analytic form of Chen et al., "Pass@k Training
for Adaptively Balancing Exploration and Exploitation of Large Reasoning Models" (arXiv 2508.10751, §4, eqs. 9-11):

    σ = sqrt(R̄ (1 - R̄))
    A_success = (1 - R̄) / σ
    A_failure = (1 - R̄ - C(n - c - 1, k - 1) / C(n - 1, k - 1)) / σ

A failure is penalised only by the share of k-subsets it sits in that hold no success, so a failed attempt in a
group that is usually solved costs little: credit goes to the best of k, which favours exploring. The difference
``A_success - A_failure`` is PKPO's binary transform (``k/n`` against ``k/n · ρ(n - 1, c, k - 1)``) scaled by
``n / (k σ)``, and every group's advantages sum to 0 (``(n - c) C(n-c-1, k-1) / C(n-1, k-1) = n (1 - R̄)``). With
``k = 1`` it is GRPO on the success indicator with the population std.

NaN rewards take no part and get 0. A group with no success, or with fewer than k failures (every k-subset then
holds a success: R̄ = 1, σ = 0), or with fewer than k scored completions (no k-subset to average over), gets 0.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from math import comb
from typing import TYPE_CHECKING

from rlkit.plugin import ConfigError, RewardBatch, hookimpl

if TYPE_CHECKING:
    import torch


def pass_at_k_advantages(rewards: torch.Tensor, k: int, threshold: float = 1.0) -> torch.Tensor:
    """``rewards [B, G]`` (NaN = unscored) → advantages ``float32 [B, G]`` with no NaN."""
    import torch
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [B, G], got {tuple(rewards.shape)}")
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    valid = ~torch.isnan(rewards)
    success = valid & (rewards >= threshold)
    out = torch.zeros(rewards.shape, dtype=torch.float64)
    # Binomials of group sizes (tens at most) are exact integers; a loop over groups costs nothing next to a step.
    for b, (n, c) in enumerate(zip(valid.sum(dim=1).tolist(), success.sum(dim=1).tolist(), strict=True)):
        if n < k or c == 0 or n - c < k:  # no success, or every k-subset holds one: pass@k is 0 or 1, sigma 0
            continue
        mean = 1 - comb(n - c, k) / comb(n, k)
        std = (mean * (1 - mean)) ** 0.5
        failure_share = comb(n - c - 1, k - 1) / comb(n - 1, k - 1)
        out[b] = torch.where(success[b], (1 - mean) / std, (1 - mean - failure_share) / std)
    return torch.where(valid, out, torch.zeros_like(out)).float()


class PassAtKAdvantage:
    """Pass@k advantages over the aggregated reward, binarised at ``threshold``."""

    zero_mean_groups = True
    group_relative = True  # compares completions within their group; `rlkit validate` asks for num_generations >= 2

    @dataclass
    class Params:
        k: int = 4
        threshold: float = 1.0

    def __init__(self, params: Params) -> None:
        if params.k < 1:
            raise ConfigError(f"k must be >= 1, got {params.k}", "advantage.params.k")
        self.params = params
        self._warned = False

    def advantages(self, batch: RewardBatch) -> torch.Tensor:
        if batch.rewards is None:
            raise ValueError("pass_at_k needs aggregated rewards in the batch")
        if batch.shape[1] < self.params.k and not self._warned:
            # Not an error: the contract suites hand every estimator small groups. A run would learn nothing.
            warnings.warn(f"advantage=pass_at_k with k={self.params.k} gives every group of {batch.shape[1]} "
                          f"completions advantage 0; set num_generations >= {self.params.k} or lower "
                          "advantage.params.k", stacklevel=2)
            self._warned = True
        return pass_at_k_advantages(batch.rewards, self.params.k, self.params.threshold)


@hookimpl
def rlkit_register_advantage_estimators(register):
    register("pass_at_k", PassAtKAdvantage)
