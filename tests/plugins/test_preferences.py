"""The built-in preference constructors: exact pair lists on hand-built groups, ties, NaN, labels, configs."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch
import yaml

from rlkit import ConfigError, PreferencePairs, RewardBatch, rubric_from_dict
from rlkit.cli import main
from rlkit.core.registry import Registry, create_plugin_manager
from rlkit.testing import example_reward_batch
from rlkit_plugins.preferences.adjacent import adjacent_pairs
from rlkit_plugins.preferences.all_pairs import all_pairs, reward_order
from rlkit_plugins.preferences.best_worst import best_worst_pairs
from rlkit_plugins.preferences.pareto import pareto_pairs, strict_dominance
from rlkit_plugins.preferences.topk import TopKPreferences, topk_pairs
from rlkit_plugins.preferences.winrate import WinratePreferences, dimension_winrate, winrate_pairs

NAN = math.nan
CONF = Path(__file__).resolve().parents[2] / "conf"
NAMES = ["best_worst", "topk", "adjacent", "all_pairs", "winrate", "pareto"]
REGISTRY = Registry(create_plugin_manager())


def make_batch(rewards, scores=None, weights=None) -> RewardBatch:
    """A batch with the given rewards; scores default to the rewards as one [0, 1] dimension."""
    r = torch.tensor(rewards, dtype=torch.float32)
    s = r.unsqueeze(-1) if scores is None else torch.tensor(scores, dtype=torch.float32)
    rubric = rubric_from_dict({"name": "t", "version": "1", "dimensions": [
        {"name": f"d{k}", "range": [0, 1]} for k in range(s.shape[-1])]})
    w = torch.ones(s.shape[-1]) if weights is None else torch.tensor(weights, dtype=torch.float32)
    return RewardBatch(rubric=rubric, raw_scores=s, scores=s, weights=w, rewards=r)


def triples(pairs: PreferencePairs) -> list[tuple[int, int, int]]:
    return list(zip(pairs.prompt_index.tolist(), pairs.chosen.tolist(), pairs.rejected.tolist(), strict=True))


def build(name: str):
    return REGISTRY.create("preference_constructor", name)


# --- every constructor -------------------------------------------------------------------------


def test_all_builtins_registered():
    assert set(NAMES) <= set(REGISTRY.names("preference_constructor"))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("rewards", [
    [[0.5, 0.5, 0.5, 0.5]],                 # all equal
    [[0.5, 0.5 + 4e-7, 0.5 - 4e-7]],        # equal within the 1e-6 tie tolerance
    [[NAN, 0.4, NAN]],                      # one scored completion
    [[NAN, NAN, NAN]],                      # none scored
    [[0.7]],                                # a group of one
])
def test_groups_without_an_order_give_no_pairs(name, rewards):
    pairs = build(name).pairs(make_batch(rewards))
    assert len(pairs) == 0
    assert pairs.prompt_index.dtype == pairs.chosen.dtype == pairs.rejected.dtype == torch.int64
    assert pairs.weight.dtype == torch.float32


@pytest.mark.parametrize("name", NAMES)
def test_group_of_two(name):
    pairs = build(name).pairs(make_batch([[0.1, 0.7], [0.3, 0.3], [0.9, NAN]]))
    assert triples(pairs) == [(0, 1, 0)]
    assert pairs.weight.tolist() == [1.0]


@pytest.mark.parametrize("name", NAMES)
def test_nan_rewards_never_paired_and_chosen_is_better(name):
    batch = example_reward_batch(3, prompts=5, group=8)
    rewards = batch.rewards.clone()
    rewards[0, ::3] = NAN
    batch = batch.with_rewards(rewards)
    pairs = build(name).pairs(batch)
    assert len(pairs) > 0
    chosen, rejected = rewards[pairs.prompt_index, pairs.chosen], rewards[pairs.prompt_index, pairs.rejected]
    assert not torch.isnan(chosen).any() and not torch.isnan(rejected).any()
    if name != "pareto":  # pareto orders by dominance; weighted_sum keeps it consistent but not by > 1e-6
        assert (chosen - rejected > 1e-6).all()


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_and_sorted(name):
    batch = example_reward_batch(1, prompts=6, group=7)
    a, b = build(name).pairs(batch), build(name).pairs(batch)
    for field in ("prompt_index", "chosen", "rejected", "weight"):
        assert torch.equal(getattr(a, field), getattr(b, field))
    assert triples(a) == sorted(triples(a)), "ordered by prompt, then chosen, then rejected"


@pytest.mark.parametrize("name", NAMES)
def test_needs_rewards(name):
    batch = example_reward_batch()
    with pytest.raises(ValueError, match="aggregated rewards"):
        build(name).pairs(dataclasses.replace(batch, rewards=None))


@pytest.mark.parametrize("name", NAMES)
def test_yaml_validates_and_spells_out_every_default(name):
    assert main(["validate", f"preference={name}"]) == 0
    text = (CONF / "preference" / f"{name}.yaml").read_text()
    assert text.startswith("# ")
    node = yaml.safe_load(text)
    assert node["name"] == name
    params_cls = REGISTRY.get("preference_constructor", name).schema
    assert node["params"] == dataclasses.asdict(params_cls())


def test_subsets_of_all_pairs():
    batch = example_reward_batch(5, prompts=6, group=8)
    every = set(triples(all_pairs(batch.rewards)))
    small, mid = set(triples(best_worst_pairs(batch.rewards))), set(triples(topk_pairs(batch.rewards, 2)))
    assert small <= mid <= every
    assert set(triples(adjacent_pairs(batch.rewards))) <= every
    assert set(triples(winrate_pairs(batch.rewards, batch.scores, batch.weights))) <= every
    assert triples(topk_pairs(batch.rewards, 1)) == triples(best_worst_pairs(batch.rewards))
    assert triples(topk_pairs(batch.rewards, 8)) == triples(all_pairs(batch.rewards))


def test_reward_order_ties_lowest_index_first_nan_last():
    order, position = reward_order(torch.tensor([[0.5, NAN, 0.9, 0.5, -math.inf]]))
    assert order.tolist() == [[2, 0, 3, 4, 1]]
    assert position.tolist() == [[1, 4, 0, 2, 3]]
    assert reward_order(torch.tensor([[0.5, NAN, 0.9, 0.5]]), descending=False)[0].tolist() == [[0, 3, 2, 1]]


# --- best_worst ----------------------------------------------------------------------------------


def test_best_worst_by_hand():
    rewards = torch.tensor([
        [0.2, 0.9, 0.5, 0.9],   # best: the lower index of the two 0.9s
        [0.9, 0.1, 0.1, 0.5],   # worst: the lower index of the two 0.1s
        [0.4, 0.4, 0.4, 0.4],   # no pair
        [NAN, 0.3, 0.8, NAN],   # NaN left out
    ])
    pairs = best_worst_pairs(rewards)
    assert triples(pairs) == [(0, 1, 0), (1, 0, 1), (3, 2, 1)]
    assert pairs.weight.tolist() == [1.0, 1.0, 1.0]


# --- topk --------------------------------------------------------------------------------------


def test_topk_by_hand():
    # order: 1 (0.9), 3 (0.7), 2 (0.5), 4 (0.3), 0 (0.1), 5 (0.0); top {1, 3}, bottom {5, 0}
    assert triples(topk_pairs(torch.tensor([[0.1, 0.9, 0.5, 0.7, 0.3, 0.0]]), 2)) == [
        (0, 1, 0), (0, 1, 5), (0, 3, 0), (0, 3, 5)]


def test_topk_small_group_overlaps_without_self_pairs():
    # G = 3 < 2k: top {1, 2}, bottom {0, 2}; 2 is in both and pairs only with 0, below it
    assert triples(topk_pairs(torch.tensor([[0.2, 0.8, 0.5]]), 2)) == [(0, 1, 0), (0, 1, 2), (0, 2, 0)]


def test_topk_skips_ties_and_nan():
    # top {0, 1} (two of three 0.5s, lowest index first), bottom {3, 0}: (0, 0) and (1, 0) are no pairs
    assert triples(topk_pairs(torch.tensor([[0.5, 0.5, 0.5, 0.1]]), 2)) == [(0, 0, 3), (0, 1, 3)]
    assert triples(topk_pairs(torch.tensor([[NAN, 0.9, 0.1, NAN, 0.5]]), 1)) == [(0, 1, 2)]


@pytest.mark.parametrize("k", [0, -1, True, 1.5])
def test_topk_rejects_bad_k(k):
    with pytest.raises(ConfigError) as err:
        TopKPreferences(TopKPreferences.Params(k=k))
    assert err.value.where == "preference.params.k"


def test_topk_bad_k_fails_validation():
    assert main(["validate", "preference=topk", "preference.params.k=0"]) != 0


# --- adjacent ----------------------------------------------------------------------------------


def test_adjacent_by_hand():
    # levels: {1, 4} (0.9) > {3} (0.5) > {0, 2} (0.3, first 0) > {5} (0.1)
    pairs = adjacent_pairs(torch.tensor([[0.3, 0.9, 0.3, 0.5, 0.9, 0.1]]))
    assert triples(pairs) == [(0, 0, 5), (0, 1, 3), (0, 2, 5), (0, 3, 0), (0, 4, 3)]


def test_adjacent_levels_chain_within_tolerance_and_skip_nan():
    # 0.5, 0.5000004, 0.5000008 are one level: each neighbour within 1e-6
    assert triples(adjacent_pairs(torch.tensor([[0.5, 0.5 + 4e-7, 0.5 + 8e-7, 0.2]]))) == [
        (0, 0, 3), (0, 1, 3), (0, 2, 3)]
    assert triples(adjacent_pairs(torch.tensor([[NAN, 0.4, 0.8, NAN], [0.1, NAN, 0.2, 0.3]]))) == [
        (0, 2, 1), (1, 2, 0), (1, 3, 2)]


def test_adjacent_at_most_n_minus_one_pairs():
    rewards = torch.rand(20, 16, generator=torch.Generator().manual_seed(0))
    assert len(adjacent_pairs(rewards)) == 20 * 15


# --- all_pairs ---------------------------------------------------------------------------------


def test_all_pairs_by_hand():
    assert triples(all_pairs(torch.tensor([[0.2, 0.6, 0.6, NAN, 0.1]]))) == [
        (0, 0, 4), (0, 1, 0), (0, 1, 4), (0, 2, 0), (0, 2, 4)]


# --- winrate -----------------------------------------------------------------------------------


def test_winrate_labels_by_hand():
    scores = [[[1.0, 0.5, 0.0],
               [0.0, 0.5, 1.0],
               [1.0, NAN, 0.2],
               [0.0, 0.5, 0.0]]]
    batch = make_batch([[0.6, 0.5, 0.7, 0.1]], scores, weights=[2.0, 1.0, 1.0])
    pairs = WinratePreferences(WinratePreferences.Params()).pairs(batch)
    assert WinratePreferences.soft_labels is True
    assert triples(pairs) == [(0, 0, 1), (0, 0, 3), (0, 1, 3), (0, 2, 0), (0, 2, 1), (0, 2, 3)]
    expected = [
        (2 + 0.5 * 1) / 4,      # 0 over 1: wins d0, ties d1, loses d2
        (2 + 0.5 * 2) / 4,      # 0 over 3: wins d0, ties d1 and d2
        (0.5 * 3 + 1) / 4,      # 1 over 3: ties d0 (weight 2) and d1, wins d2
        (0.5 * 2 + 1) / 3,      # 2 over 0: d1 NaN for 2, left out; ties d0, wins d2
        2 / 3,                  # 2 over 1: wins d0, loses d2
        3 / 3,                  # 2 over 3: wins d0 and d2
    ]
    assert torch.allclose(pairs.weight, torch.tensor(expected))


def test_winrate_drops_half_keeps_below_half_and_skips_unshared():
    # one win, one loss of equal weight: 0.5, no information
    assert len(winrate_pairs(torch.tensor([[0.6, 0.4]]), torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]),
                             torch.tensor([1.0, 1.0]))) == 0
    # 0.3 + 0.2 against 0.5 adds up to 0.5 only up to rounding; still dropped
    assert len(winrate_pairs(torch.tensor([[0.6, 0.4]]), torch.tensor([[[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]]),
                             torch.tensor([0.3, 0.2, 0.5]))) == 0
    # the reward ranks 0 first, the weight sides with 1: the label stays 0.25
    low = winrate_pairs(torch.tensor([[0.9, 0.1]]), torch.tensor([[[1.0, 0.0], [0.0, 1.0]]]), torch.tensor([1.0, 3.0]))
    assert triples(low) == [(0, 0, 1)] and low.weight.tolist() == [0.25]
    # no dimension scored for both, or only one of weight 0: no label, no pair
    assert len(winrate_pairs(torch.tensor([[0.9, 0.1]]), torch.tensor([[[1.0, NAN], [NAN, 0.0]]]),
                             torch.tensor([1.0, 1.0]))) == 0
    assert len(winrate_pairs(torch.tensor([[0.9, 0.1]]), torch.tensor([[[1.0, NAN], [0.0, NAN]]]),
                             torch.tensor([0.0, 1.0]))) == 0
    # tied rewards are no pair even when the dimensions disagree
    assert len(winrate_pairs(torch.tensor([[0.5, 0.5]]), torch.tensor([[[1.0, 1.0], [0.0, 0.0]]]),
                             torch.tensor([1.0, 1.0]))) == 0


def test_winrate_label_matrix_is_complementary():
    batch = example_reward_batch(2)
    label = dimension_winrate(batch.scores, batch.weights)
    both = ~torch.isnan(label)
    assert torch.allclose((label + label.transpose(1, 2))[both], torch.ones(()).double())


# --- pareto ------------------------------------------------------------------------------------


def test_pareto_drops_conflicts_ties_and_nan():
    scores = [[[1.0, 1.0],    # 0 dominates 1, 2, 3, 4
               [0.5, 0.5],
               [1.0, 0.0],    # conflicts with 1 and 3
               [0.0, 1.0],
               [0.5, 0.5],    # ties 1
               [1.0, NAN],    # scored on d0 only: comparable with 7 alone
               [0.2, 0.2],    # dominated by 0 and 1, but its reward is NaN
               [0.5, NAN]]]
    rewards = [[1.0, 0.5, 0.5, 0.5, 0.5, 1.0, NAN, 0.5]]
    pairs = pareto_pairs(torch.tensor(rewards), torch.tensor(scores), torch.tensor([1.0, 1.0]))
    assert triples(pairs) == [(0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 0, 4), (0, 5, 7)]
    assert pairs.weight.tolist() == [1.0] * 5


def test_pareto_ignores_dimensions_of_zero_weight_and_ignores_reward_ties():
    scores = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    assert triples(pareto_pairs(torch.tensor([[0.5, 0.5]]), scores, torch.tensor([1.0, 0.0]))) == [(0, 0, 1)]
    assert len(pareto_pairs(torch.tensor([[0.5, 0.5]]), scores, torch.tensor([1.0, 1.0]))) == 0
    # equal rewards (as from `min`), yet 0 dominates 1
    same = pareto_pairs(torch.tensor([[0.2, 0.2]]), torch.tensor([[[1.0, 0.2], [0.2, 0.2]]]), torch.tensor([1.0, 1.0]))
    assert triples(same) == [(0, 0, 1)]


def test_pareto_dominance_is_antisymmetric_with_tolerance():
    d = strict_dominance(torch.tensor([[[0.5, 0.5], [0.5 + 5e-7, 0.5], [0.6, 0.5 - 5e-7]]]))
    assert d.tolist() == [[[False, False, False], [False, False, False], [True, True, False]]]
