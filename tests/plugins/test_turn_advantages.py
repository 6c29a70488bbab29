"""The turn-level estimators (``turn_return``, ``process``) on hand-computed batches, their exact reduction to GRPO
on single-turn batches, and how the loop spreads per-turn advantages over tokens."""

from __future__ import annotations

import math

import pytest
import torch

from rlkit.core.package_files import resolve_path
from rlkit.core.registry import Registry, create_plugin_manager
from rlkit.core.rubric import load_rubric
from rlkit.core.types import RewardBatch
from rlkit.reward.pipeline import normalize_scores
from rlkit.testing import example_reward_batch
from rlkit.train.episodes import episode_means, token_advantages
from rlkit_plugins.advantages.grpo import group_normalized_advantages
from rlkit_plugins.advantages.turn_return import discounted_returns

NAN = float("nan")
REGISTRY = Registry(create_plugin_manager())
STEPS_RUBRIC = load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/calculator_steps.yaml"))


def _batch(rewards, num_turns, steps=None):
    """A batch of the calculator_steps rubric (D = 3; well_formed_turn, index 2, is step-scoped)."""
    rewards = torch.tensor(rewards, dtype=torch.float32)
    b, g = rewards.shape
    raw = torch.zeros((b, g, 3))
    extras = {"num_turns": torch.tensor(num_turns)}
    if steps is not None:
        t = len(steps[0][0])
        full = torch.full((b, g, t, 3), NAN)
        full[..., 2] = torch.tensor(steps, dtype=torch.float32)
        extras["step_scores"] = normalize_scores(full, STEPS_RUBRIC)
    return RewardBatch(STEPS_RUBRIC, raw, normalize_scores(raw, STEPS_RUBRIC), torch.tensor([1.0, 2.0, 0.5]),
                       rewards, extras)


def test_discounted_returns_by_hand():
    rewards = torch.tensor([[[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]]])
    exists = torch.tensor([[[True, True, False], [True, False, False]]])
    out = discounted_returns(rewards, exists, 0.5)
    assert out[0, 0, :2].tolist() == [0.5, 1.0] and math.isnan(out[0, 0, 2])
    assert out[0, 1, 0] == 2.0 and torch.isnan(out[0, 1, 1:]).all()


def test_turn_return_without_step_dimensions_is_openenv_discounting_normalised_per_turn():
    # g0: two turns, reward 1 -> turn rewards [0, 1], returns [0.5, 1]; g1: one turn, reward 0 -> returns [0]
    est = REGISTRY.create("advantage_estimator", "turn_return", {"gamma": 0.5})
    adv = est.advantages(_batch([[1.0, 0.0]], [[2, 1]]))
    z = 0.25 / (math.sqrt(0.125) + 1e-4)  # turn 1: returns [0.5, 0], mean 0.25, Bessel std sqrt(0.125)
    assert adv.shape == (1, 2, 2)
    assert adv[0, 0, 0] == pytest.approx(z) and adv[0, 1, 0] == pytest.approx(-z)
    assert adv[0, 0, 1] == 0 and adv[0, 1, 1] == 0  # turn 2: one episode reached it, no contrast; g1 has none


def test_turn_return_adds_discounted_step_rewards():
    # well_formed_turn (weight 0.5, the only step dimension): g0 turns [1, 0], g1 [1, 1]; rewards 0 and 0
    est = REGISTRY.create("advantage_estimator", "turn_return", {"gamma": 1.0, "step_coef": 1.0})
    adv = est.advantages(_batch([[0.0, 0.0]], [[2, 2]], steps=[[[1.0, 0.0], [1.0, 1.0]]]))
    # returns: g0 [1, 0], g1 [2, 1] -> per turn, each pair normalised to -/+ 1/sqrt(2)·sqrt(2) = -/+ 0.7071
    z = 0.5 / (math.sqrt(0.5) + 1e-4)
    assert adv[0, :, 0].tolist() == pytest.approx([-z, z]) and adv[0, :, 1].tolist() == pytest.approx([-z, z])


def test_process_adds_group_normalised_step_rewards_to_the_episode_advantage():
    est = REGISTRY.create("advantage_estimator", "process", {"step_coef": 0.5})
    adv = est.advantages(_batch([[1.0, 0.0]], [[2, 1]], steps=[[[1.0, 0.0], [0.0, NAN]]]))
    episode = group_normalized_advantages(torch.tensor([[1.0, 0.0]]))[0].tolist()
    # scored steps of the group: [1, 0, 0], mean 1/3, Bessel std sqrt(1/3)
    std = math.sqrt(1 / 3)
    bonus = [(1 - 1 / 3) / (std + 1e-4), (0 - 1 / 3) / (std + 1e-4), (0 - 1 / 3) / (std + 1e-4)]
    assert adv[0, 0].tolist() == pytest.approx([episode[0] + 0.5 * bonus[0], episode[0] + 0.5 * bonus[1]])
    assert adv[0, 1, 0] == pytest.approx(episode[1] + 0.5 * bonus[2]) and adv[0, 1, 1] == 0


@pytest.mark.parametrize("name", ["turn_return", "process"])
def test_single_turn_batches_reduce_exactly_to_grpo(name):
    batch = example_reward_batch()
    est = REGISTRY.create("advantage_estimator", name, {})
    grpo = REGISTRY.create("advantage_estimator", "grpo", {})
    assert torch.equal(est.advantages(batch), grpo.advantages(batch))
    one_turn = RewardBatch(batch.rubric, batch.raw_scores, batch.scores, batch.weights, batch.rewards,
                           {"num_turns": torch.ones(batch.shape[:2], dtype=torch.long)})
    assert torch.equal(est.advantages(one_turn), grpo.advantages(batch))


def test_unscored_episodes_get_zero_on_every_turn():
    adv = REGISTRY.create("advantage_estimator", "turn_return", {}).advantages(_batch([[NAN, 1.0, 0.0]],
                                                                                     [[2, 2, 1]]))
    assert (adv[0, 0] == 0).all() and torch.isfinite(adv).all()


def test_per_turn_advantages_spread_over_each_turns_tokens():
    adv = torch.tensor([[0.5, -1.0], [2.0, 0.0]])
    spans = [[(0, 3), (5, 7)], [(0, 2)]]
    out = token_advantages(adv, spans, 8)
    assert out.tolist() == [[0.5, 0.5, 0.5, 0, 0, -1.0, -1.0, 0], [2.0, 2.0, 0, 0, 0, 0, 0, 0]]
    assert torch.equal(token_advantages(adv, None, 8), adv[:, 0])  # single-turn rows: per completion, as before
    means = episode_means(adv.view(1, 2, 2), torch.tensor([[2, 1]]))
    assert means.tolist() == [[-0.25, 2.0]]
