"""GRPO advantages against values computed by hand."""

import math

import pytest
import torch

from rlkit_plugins.advantages.grpo import GroupNormalizedAdvantage, group_normalized_advantages

NAN = float("nan")


def test_group_scaling_matches_hand_computation():
    # group [1, 2, 3]: mean 2, unbiased std 1 → (r - 2) / (1 + 1e-4)
    adv = group_normalized_advantages(torch.tensor([[1.0, 2.0, 3.0]]))
    expected = torch.tensor([[-1.0, 0.0, 1.0]]) / (1 + 1e-4)
    assert torch.allclose(adv, expected)


def test_two_groups_are_normalised_separately():
    # group 2: [0, 0, 4, 4] mean 2, unbiased std sqrt(16/3)
    rewards = torch.tensor([[1.0, 2.0, 3.0, 6.0], [0.0, 0.0, 4.0, 4.0]])
    adv = group_normalized_advantages(rewards)
    std2 = math.sqrt(16 / 3)
    assert torch.allclose(adv[1], torch.tensor([-2, -2, 2, 2]) / (std2 + 1e-4))
    std1 = math.sqrt(((1 - 3) ** 2 + (2 - 3) ** 2 + 0 + (6 - 3) ** 2) / 3)
    assert torch.allclose(adv[0], torch.tensor([-2.0, -1.0, 0.0, 3.0]) / (std1 + 1e-4))


def test_all_equal_group_gets_zero_without_nan():
    adv = group_normalized_advantages(torch.tensor([[0.7, 0.7, 0.7], [0.0, 1.0, 0.5]]))
    assert torch.equal(adv[0], torch.zeros(3))
    assert torch.isfinite(adv).all()


def test_nan_rewards_are_left_out_and_get_zero():
    # [1, NaN, 3]: statistics over {1, 3}: mean 2, unbiased std sqrt(2)
    adv = group_normalized_advantages(torch.tensor([[1.0, NAN, 3.0]]))
    s = math.sqrt(2) + 1e-4
    assert torch.allclose(adv, torch.tensor([[-1 / s, 0.0, 1 / s]]))


def test_group_with_one_scored_completion_gets_zero():
    adv = group_normalized_advantages(torch.tensor([[NAN, 5.0, NAN], [NAN, NAN, NAN]]))
    assert torch.equal(adv, torch.zeros(2, 3))


def test_batch_scaling_uses_batch_std_and_group_mean():
    rewards = torch.tensor([[0.0, 2.0], [10.0, 14.0]])
    batch_std = torch.tensor([0.0, 2.0, 10.0, 14.0]).std()
    adv = group_normalized_advantages(rewards, "batch")
    assert torch.allclose(adv, torch.tensor([[-1.0, 1.0], [-2.0, 2.0]]) / (batch_std + 1e-4))


def test_none_only_centres():
    adv = group_normalized_advantages(torch.tensor([[1.0, 3.0, NAN]]), "none")
    assert torch.equal(adv, torch.tensor([[-1.0, 1.0, 0.0]]))


def test_bad_scale_and_shape_raise():
    with pytest.raises(ValueError, match="scale_rewards"):
        group_normalized_advantages(torch.zeros(2, 2), "groups")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"\[B, G\]"):
        group_normalized_advantages(torch.zeros(4))


def test_estimator_reads_rewards_from_the_batch():
    from rlkit.testing import example_reward_batch

    batch = example_reward_batch()
    est = GroupNormalizedAdvantage(GroupNormalizedAdvantage.Params(scale_rewards="none"))
    assert torch.equal(est.advantages(batch), group_normalized_advantages(batch.rewards, "none"))
