"""``min_gap`` measures a pair's gap on the ordering that produced it (issue 39, item 6): the weighted-sum or other
scalar reward, the deciding dimension of a lexicographic order, the largest margin of a Pareto one. By hand."""

from __future__ import annotations

import math

import pytest
import torch

from rlkit import PreferencePairs, RewardBatch, rubric_from_dict
from rlkit.core.registry import load_registry
from rlkit.reward.preferences import drop_close_pairs, ordering_batch, pair_gaps

REGISTRY = load_registry()
NAN = math.nan


def batch_of(scores) -> RewardBatch:
    """Normalised scores on (correctness, format, style), priorities in that order, weights 1."""
    s = torch.tensor(scores, dtype=torch.float32)
    rubric = rubric_from_dict({"name": "t", "version": "1", "dimensions": [
        {"name": n, "range": [0, 1], "priority": k + 1} for k, n in enumerate(["correctness", "format", "style"])]})
    return RewardBatch(rubric=rubric, raw_scores=s, scores=s, weights=torch.ones(3))


def pair(chosen: int = 0, rejected: int = 1, prompt: int = 0) -> PreferencePairs:
    return PreferencePairs(torch.tensor([prompt]), torch.tensor([chosen]), torch.tensor([rejected]), torch.ones(1))


def ordered(batch: RewardBatch, aggregator, constructor="best_worst", mask_saturated=False
            ) -> tuple[RewardBatch, PreferencePairs]:
    order = ordering_batch(batch, aggregator, mask_saturated=mask_saturated)
    return order, REGISTRY.create("preference_constructor", constructor).pairs(order)


def triples(pairs) -> list[tuple[int, int, int]]:
    return list(zip(pairs.prompt_index.tolist(), pairs.chosen.tolist(), pairs.rejected.tolist(), strict=True))


def test_lexicographic_pair_is_kept_on_its_deciding_dimension_though_the_weighted_sum_is_close():
    # correctness decides: 0.6 over 0.4, gap 0.2 >= 0.1. The weighted sum (0.6 against 0.4 + 0.1 + 0.1) ties: 0.
    lex = REGISTRY.create("aggregator", "lexicographic")
    order, pairs = ordered(batch_of([[[0.6, 0.0, 0.0], [0.4, 0.1, 0.1]]]), lex)
    assert triples(pairs) == [(0, 0, 1)]
    assert pair_gaps(pairs, order).tolist() == pytest.approx([0.0])                    # the old rule
    assert pair_gaps(pairs, order, aggregator=lex).tolist() == pytest.approx([0.2])
    kept, dropped = drop_close_pairs(pairs, order, 0.1, aggregator=lex)
    assert triples(kept) == [(0, 0, 1)] and dropped == 0.0
    assert drop_close_pairs(pairs, order, 0.1)[1] == 1.0, "the weighted sum alone would have dropped it"


def test_lexicographic_pair_is_dropped_on_its_deciding_dimension_though_the_weighted_sum_is_wide():
    # correctness decides: 0.55 over 0.5, gap 0.05 < 0.1. The weighted sum: |0.55 - 2.5| / 3 = 0.65.
    lex = REGISTRY.create("aggregator", "lexicographic")
    order, pairs = ordered(batch_of([[[0.55, 0.0, 0.0], [0.5, 1.0, 1.0]]]), lex)
    assert triples(pairs) == [(0, 0, 1)]
    assert pair_gaps(pairs, order).tolist() == pytest.approx([0.65])
    assert pair_gaps(pairs, order, aggregator=lex).tolist() == pytest.approx([0.05])
    kept, dropped = drop_close_pairs(pairs, order, 0.1, aggregator=lex)
    assert len(kept) == 0 and dropped == 1.0


def test_lexicographic_tolerance_moves_the_deciding_dimension():
    # tolerance 0.1: correctness 0.55 and 0.5 tie, so format decides, 1 over 0, gap 1.0
    lex = REGISTRY.create("aggregator", "lexicographic", {"tolerance": 0.1})
    order, pairs = ordered(batch_of([[[0.55, 0.0, 0.0], [0.5, 1.0, 1.0]]]), lex)
    assert triples(pairs) == [(0, 1, 0)]
    assert pair_gaps(pairs, order, aggregator=lex).tolist() == pytest.approx([1.0])
    # correctness NaN for the rejected one decides (NaN ranks below any score): gap 0.3 - 0 (the bottom)
    order, pairs = ordered(batch_of([[[0.3, 0.0, 0.0], [NAN, 1.0, 1.0]]]), lex)
    assert triples(pairs) == [(0, 0, 1)]
    assert pair_gaps(pairs, order, aggregator=lex).tolist() == pytest.approx([0.3])


def test_weighted_sum_pair_as_before():
    # weights 1: (1, 1, 1) over (1, 0.9, 1): 0.1 / 3 = 0.033 dropped; over (0, 0, 0): 1.0 kept
    ws = REGISTRY.create("aggregator", "weighted_sum")
    batch = batch_of([[[1.0, 1.0, 1.0], [1.0, 0.9, 1.0], [0.0, 0.0, 0.0]]])
    order = ordering_batch(batch, ws, mask_saturated=False)
    pairs = PreferencePairs(torch.tensor([0, 0]), torch.tensor([0, 0]), torch.tensor([1, 2]), torch.ones(2))
    assert pair_gaps(pairs, order, aggregator=ws).tolist() == pytest.approx([0.1 / 3, 1.0])
    assert pair_gaps(pairs, order, aggregator=ws).tolist() == pytest.approx(pair_gaps(pairs, order).tolist())
    kept, dropped = drop_close_pairs(pairs, order, 0.1, aggregator=ws)
    assert triples(kept) == [(0, 0, 2)] and dropped == 0.5


def test_the_gap_is_measured_on_the_ordering_batch_saturated_dimensions_left_out():
    # format and style are 1 for the whole group and leave its ordering: the weighted sum that ordered the pair is
    # correctness alone, gap 0.25 (kept); over all three dimensions it would be 0.25 / 3 = 0.083 (dropped)
    ws = REGISTRY.create("aggregator", "weighted_sum")
    order, pairs = ordered(batch_of([[[0.25, 1.0, 1.0], [0.0, 1.0, 1.0]]]), ws, mask_saturated=True)
    assert pair_gaps(pairs, order, aggregator=ws).tolist() == pytest.approx([0.25])
    assert drop_close_pairs(pairs, order, 0.1, aggregator=ws)[1] == 0.0


def test_a_scalar_reward_is_measured_in_that_reward():
    # min: (1, 1, 0.3) over (0.25, 0.25, 0.25): min gap 0.05 < 0.1, dropped; the weighted sum said 0.517
    minimum = REGISTRY.create("aggregator", "min")
    order, pairs = ordered(batch_of([[[1.0, 1.0, 0.3], [0.25, 0.25, 0.25]]]), minimum)
    assert triples(pairs) == [(0, 0, 1)]
    assert pair_gaps(pairs, order, aggregator=minimum).tolist() == pytest.approx([0.05])
    assert pair_gaps(pairs, order).tolist() == pytest.approx([(2.3 - 0.75) / 3])


def test_pareto_pairs_are_measured_by_their_largest_margin():
    # (0.2, 0, 0) dominates (0, 0, 0): the weighted sum 0.2 / 3 = 0.067 < 0.1, the largest margin 0.2 >= 0.1
    ws = REGISTRY.create("aggregator", "weighted_sum")
    pareto = REGISTRY.create("preference_constructor", "pareto")
    order, pairs = ordered(batch_of([[[0.2, 0.0, 0.5], [0.0, 0.0, 0.5], [0.0, 0.0, 0.4]]]), ws, "pareto")
    # (0, 1): margin 0.2; (0, 2): 0.2; (1, 2): 0.1
    assert triples(pairs) == [(0, 0, 1), (0, 0, 2), (0, 1, 2)]
    gaps = pair_gaps(pairs, order, aggregator=ws, constructor=pareto)
    assert gaps.tolist() == pytest.approx([0.2, 0.2, 0.1])
    assert pair_gaps(pairs, order, aggregator=ws).tolist() == pytest.approx([0.2 / 3, 0.3 / 3, 0.1 / 3])
    kept, _ = drop_close_pairs(pairs, order, 0.15, aggregator=ws, constructor=pareto)
    assert triples(kept) == [(0, 0, 1), (0, 0, 2)]
    # the pareto aggregator measures the same margin over the dimensions of positive weight
    agg = REGISTRY.create("aggregator", "pareto")
    assert pair_gaps(pairs, order, aggregator=agg).tolist() == pytest.approx([0.2, 0.2, 0.1])


def test_a_rank_reward_without_its_own_measure_falls_back_to_the_weighted_sum():
    class Ranks:  # a third-party group-relative aggregator: its reward is a place, not a distance
        group_relative = True

        def aggregate(self, batch):
            return torch.tensor([[1.0, 0.0]])

    order = ordering_batch(batch_of([[[0.6, 0.0, 0.0], [0.3, 0.0, 0.0]]]), Ranks(), mask_saturated=False)
    assert pair_gaps(pair(), order, aggregator=Ranks()).tolist() == pytest.approx([0.1])


def test_a_constructor_measure_comes_first():
    class Own:
        def pair_gaps(self, batch, pairs):
            return torch.full((len(pairs),), 0.7)

    ws = REGISTRY.create("aggregator", "weighted_sum")
    order = ordering_batch(batch_of([[[0.6, 0.0, 0.0], [0.3, 0.0, 0.0]]]), ws, mask_saturated=False)
    assert pair_gaps(pair(), order, aggregator=ws, constructor=Own()).tolist() == pytest.approx([0.7])


def test_group_dpo_measures_each_group_on_the_ordering_that_paired_it():
    # weights 1. Group 0 conflicts (correctness against format in 1 of 1 pairs) and is ordered lexicographically:
    # correctness 0.6 over 0.4, gap 0.2 kept although the weighted sum ties. Group 1 (no conflict: 0.9 >= 0.8 on
    # every dimension) stays with the weighted sum: (0.9 + 0.9 + 0.9 - 0.8 - 0.9 - 0.9) / 3 = 0.033, dropped.
    batch = batch_of([[[0.6, 0.0, 0.0], [0.4, 0.1, 0.1]], [[0.9, 0.9, 0.9], [0.8, 0.9, 0.9]]])
    objective = REGISTRY.create("objective", "group_dpo", {
        "min_gap": 0.1, "mask_saturated": False, "conflict_scope": "prompt",
        "conflict_dimensions": ["correctness", "format"]})
    targets, metrics = objective.pair_targets(
        batch, torch.zeros(4, dtype=torch.bool), constructor=REGISTRY.create("preference_constructor", "best_worst"),
        aggregator=REGISTRY.create("aggregator", "weighted_sum"), step=0)
    assert metrics["ordering/lexicographic"] == 0.5
    assert metrics["pairs/built"] == 2.0 and metrics["pairs/dropped_by_gap"] == 0.5
    assert triples(targets.pairs) == [(0, 0, 1)]
