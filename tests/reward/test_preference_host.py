"""Host rules of the preference objective: ordering batch, confidence gap, chosen win share."""

from __future__ import annotations

import math

import torch

from rlkit import PreferencePairs, RewardBatch
from rlkit.reward.pipeline import normalize_scores
from rlkit.reward.preferences import chosen_win_share, drop_close_pairs, ordering_batch
from rlkit.testing.contracts import example_rubric
from rlkit_plugins.aggregators.minimum import MinAggregator
from rlkit_plugins.aggregators.weighted_sum import nan_weighted_sum

nan = math.nan


def _batch(unit: list) -> RewardBatch:
    rubric = example_rubric()
    u = torch.tensor(unit, dtype=torch.float32)
    low = torch.tensor([d.low for d in rubric.dimensions])
    high = torch.tensor([d.high for d in rubric.dimensions])
    raw = low + u * (high - low)
    batch = RewardBatch(rubric=rubric, raw_scores=raw, scores=normalize_scores(raw, rubric),
                        weights=torch.tensor([2.0, 1.0, 1.0]))
    return batch.with_rewards(nan_weighted_sum(batch.scores, batch.weights))


def test_saturated_dimension_leaves_the_ordering():
    # dim 0 is 0 for the whole group: under `min` it would flatten every reward to 0
    batch = _batch([[[0.0, 0.9, 0.5], [0.0, 0.2, 0.5], [0.0, 0.6, 0.5]]])
    plain = MinAggregator(MinAggregator.Params()).aggregate(batch)
    assert torch.equal(plain, torch.zeros(1, 3))
    ordered = ordering_batch(batch, MinAggregator(MinAggregator.Params()), mask_saturated=True)
    assert ordered.rewards[0].argsort(descending=True).tolist() == [0, 2, 1]


def test_all_saturated_group_has_no_order():
    ordered = ordering_batch(_batch([[[1.0, 0.5, 0.5], [1.0, 0.5, 0.5]]]), MinAggregator(MinAggregator.Params()),
                             mask_saturated=True)
    assert torch.isnan(ordered.rewards).all()


def test_close_pairs_are_dropped_and_counted():
    batch = _batch([[[1.0, 1.0, 1.0], [1.0, 0.9, 1.0], [0.0, 0.0, 0.0]]])
    pairs = PreferencePairs(torch.tensor([0, 0]), torch.tensor([0, 0]), torch.tensor([1, 2]), torch.ones(2))
    kept, dropped = drop_close_pairs(pairs, batch, 0.1)
    # gap(0,1) = 0.1/4 = 0.025 < 0.1 is dropped; gap(0,2) = 1.0 is kept
    assert kept.rejected.tolist() == [2] and dropped == 0.5
    empty = PreferencePairs(*(torch.zeros(0, dtype=torch.long),) * 3, torch.zeros(0))
    assert drop_close_pairs(empty, batch, 0.1)[1] == 0.0


def test_chosen_win_share_per_dimension_skips_nan():
    batch = _batch([[[1.0, 0.0, nan], [0.0, 1.0, 0.5]]])
    pairs = PreferencePairs(torch.tensor([0]), torch.tensor([0]), torch.tensor([1]), torch.ones(1))
    assert chosen_win_share(pairs, batch).tolist() == [1.0, 0.0, 0.0]
