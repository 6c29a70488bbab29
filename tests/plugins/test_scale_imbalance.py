"""The scale-imbalance example of the multi-reward note (004 §2.1), pinned on rlkit's own estimators.

The note: r1 sits near 0.98 with a group std of 0.01, r2 near 0.5 with a std of 0.2; summed as w1·r1 + w2·r2 and
z-scored per group (GRPO), "whatever w1", the advantage follows r2. Hand-checked: a group's z-score is a linear map
of its total, so within a group the advantage correlates with r1 as the total does,
    rho1(w1) = w1·s1 / sqrt((w1·s1)² + (w2·s2)²)   (r1 and r2 independent),
0.05 at w1 = 1, 0.24 at w1 = 5, 0.71 at w1 = 20 = s2/s1, where both count alike. So the note's "whatever w1" holds
only while w1·s1 is small beside s2: up to w1 ≈ 5 here. GDPO z-scores each reward in its group before the weighted
sum, so each reward's share is its weight's, w1 / sqrt(w1² + w2²) = 0.71 at w1 = w2 = 1, whatever the stds.
"""

from __future__ import annotations

import math

import pytest
import torch

from rlkit_plugins.advantages.gdpo import gdpo_advantages
from rlkit_plugins.advantages.grpo import group_normalized_advantages

GROUPS, G = 2000, 8   # the computation: 2,000 groups of 8
S1, S2 = 0.01, 0.2    # the note's group stds


@pytest.fixture(scope="module")
def rewards() -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    r1 = 0.98 + S1 * torch.randn(GROUPS, G, generator=gen, dtype=torch.float64)
    r2 = 0.5 + S2 * torch.randn(GROUPS, G, generator=gen, dtype=torch.float64)
    return r1, r2


def within_group_correlation(adv: torch.Tensor, r: torch.Tensor) -> float:
    """Pearson's r of the advantage with a reward's deviation from its group mean, over every completion."""
    a = adv.double().reshape(-1)
    d = (r - r.mean(dim=1, keepdim=True)).reshape(-1)
    return float(((a - a.mean()) * d).sum() / ((a - a.mean()).norm() * d.norm()))


def expected_share(w1: float, s1: float = S1, w2: float = 1.0, s2: float = S2) -> float:
    return w1 * s1 / math.hypot(w1 * s1, w2 * s2)


@pytest.mark.parametrize(("w1", "by_hand"), [(1.0, 0.05), (5.0, 0.24), (20.0, 0.71)])
def test_grpo_advantage_follows_the_noisier_reward_until_w1_matches_the_std_ratio(rewards, w1, by_hand):
    r1, r2 = rewards
    adv = group_normalized_advantages((w1 * r1 + r2).float())
    rho1, rho2 = within_group_correlation(adv, r1), within_group_correlation(adv, r2)
    assert expected_share(w1) == pytest.approx(by_hand, abs=0.005)  # the hand computation above
    # groups of 8 estimate each std with noise, so the sample sits a little off the closed form
    assert rho1 == pytest.approx(by_hand, abs=0.04)
    assert rho2 == pytest.approx(expected_share(1.0, S2, w1, S1), abs=0.04)


def test_grpo_failure_holds_up_to_w1_5_and_ends_at_the_std_ratio(rewards):
    r1, r2 = rewards
    share = {w1: within_group_correlation(group_normalized_advantages((w1 * r1 + r2).float()), r1)
             for w1 in (1.0, 5.0, 20.0)}
    assert share[1.0] < 0.1 and share[5.0] < 0.3   # the note's failure: r2 drives the advantage
    assert share[20.0] > 0.6                         # but not "whatever w1": at w1 = s2/s1 they count alike


def test_gdpo_gives_each_reward_its_weight_s_share_whatever_its_std(rewards):
    r1, r2 = rewards
    adv = gdpo_advantages(torch.stack([r1, r2], dim=-1).float(), torch.tensor([1.0, 1.0]))
    rho1, rho2 = within_group_correlation(adv, r1), within_group_correlation(adv, r2)
    assert rho1 == pytest.approx(1 / math.sqrt(2), abs=0.04)
    assert rho2 == pytest.approx(1 / math.sqrt(2), abs=0.04)
    assert abs(rho1 - rho2) < 0.05
