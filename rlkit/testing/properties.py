"""Property-based contract suites (hypothesis) for aggregators and advantage estimators.

Like the suites in ``rlkit.testing``, subclass one and provide the ``aggregator`` or ``estimator``
fixture. Needs ``hypothesis`` (in rlkit's ``dev`` extra). A plugin opts into the stronger properties
with class attributes:

* ``order_invariant = True`` (aggregator): the within-group order of rewards does not change under a
  strictly increasing transform of any one dimension's scores (``lexicographic`` without tolerance, ``pareto``).
* ``order_invariant = True`` (estimator): the advantages do not change under a strictly increasing
  transform of the reward (``rank``).
* ``zero_mean_groups = True`` (estimator): each group's advantages over its scored completions sum to 0.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlkit.core.stats import nan_weighted_sum
from rlkit.core.types import RewardBatch
from rlkit.reward.pipeline import normalize_scores
from rlkit.testing.contracts import example_rubric

_LEVELS = [0.0, 0.25, 0.5, 0.75, 1.0, math.nan]  # few levels: ties and NaN holes are common
_SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def reward_batches(draw: Any) -> RewardBatch:
    """Batches over ``example_rubric()`` (3 dimensions) with B 1–4, G 2–6, ties, NaN holes and any weights."""
    rubric = example_rubric()
    b, g, d = draw(st.integers(1, 4)), draw(st.integers(2, 6)), len(rubric.dimensions)
    unit = torch.tensor(draw(st.lists(st.sampled_from(_LEVELS), min_size=b * g * d, max_size=b * g * d)),
                        dtype=torch.float32).view(b, g, d)
    weights = torch.tensor(draw(st.lists(st.sampled_from([0.5, 1.0, 2.0, 3.0]), min_size=d, max_size=d)))
    low = torch.tensor([x.low for x in rubric.dimensions])
    high = torch.tensor([x.high for x in rubric.dimensions])
    raw = low + unit * (high - low)
    batch = RewardBatch(rubric=rubric, raw_scores=raw, scores=normalize_scores(raw, rubric), weights=weights)
    return batch.with_rewards(nan_weighted_sum(batch.scores, batch.weights))


def _increasing(x: torch.Tensor) -> torch.Tensor:
    """A strictly increasing map of [0, 1] onto itself that is far from affine."""
    return x ** 3


def _transform_dimension(batch: RewardBatch, dim: int) -> RewardBatch:
    scores = batch.scores.clone()
    scores[..., dim] = _increasing(scores[..., dim])
    rubric = batch.rubric
    d = rubric.dimensions[dim]
    raw = batch.raw_scores.clone()
    raw[..., dim] = d.low + scores[..., dim] * (d.high - d.low)
    return RewardBatch(rubric=rubric, raw_scores=raw, scores=scores, weights=batch.weights, rewards=batch.rewards)


def _pairwise_order(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x.unsqueeze(-1) - x.unsqueeze(-2)).nan_to_num(nan=9.0)


class AggregatorProperties:
    @_SETTINGS
    @given(batch=reward_batches())
    def test_shape_and_nan_only_where_unscored(self, aggregator: Any, batch: RewardBatch) -> None:
        rewards = aggregator.aggregate(batch)
        assert rewards.dtype == torch.float32 and tuple(rewards.shape) == batch.shape[:2]
        unscored = torch.isnan(batch.scores).all(dim=-1)
        assert torch.isnan(rewards[unscored]).all()
        assert torch.isfinite(rewards[~unscored]).all()

    @_SETTINGS
    @given(batch=reward_batches(), scale=st.sampled_from([0.1, 3.0, 50.0]))
    def test_overall_weight_scale_does_not_matter(self, aggregator: Any, batch: RewardBatch, scale: float) -> None:
        scaled = RewardBatch(rubric=batch.rubric, raw_scores=batch.raw_scores, scores=batch.scores,
                             weights=batch.weights * scale)
        a, b = aggregator.aggregate(batch), aggregator.aggregate(scaled)
        assert torch.allclose(a.nan_to_num(-1), b.nan_to_num(-1), atol=1e-5)

    @_SETTINGS
    @given(batch=reward_batches(), dim=st.integers(0, 2))
    def test_order_invariant_when_declared(self, aggregator: Any, batch: RewardBatch, dim: int) -> None:
        if not getattr(aggregator, "order_invariant", False):
            return
        before = _pairwise_order(aggregator.aggregate(batch))
        after = _pairwise_order(aggregator.aggregate(_transform_dimension(batch, dim)))
        assert torch.equal(before, after)


class AdvantageEstimatorProperties:
    @_SETTINGS
    @given(batch=reward_batches())
    def test_finite_and_unscored_get_zero(self, estimator: Any, batch: RewardBatch) -> None:
        adv = estimator.advantages(batch)
        assert adv.dtype == torch.float32 and tuple(adv.shape) == batch.shape[:2]
        assert torch.isfinite(adv).all()
        assert batch.rewards is not None
        assert (adv[torch.isnan(batch.rewards)] == 0).all()

    @_SETTINGS
    @given(batch=reward_batches())
    def test_zero_mean_groups_when_declared(self, estimator: Any, batch: RewardBatch) -> None:
        if not getattr(estimator, "zero_mean_groups", False):
            return
        adv = estimator.advantages(batch)
        assert batch.rewards is not None
        scored = ~torch.isnan(batch.rewards)
        group_sum = torch.where(scored, adv, torch.zeros_like(adv)).sum(dim=1)
        assert torch.allclose(group_sum, torch.zeros_like(group_sum), atol=1e-4)

    @_SETTINGS
    @given(batch=reward_batches())
    def test_order_invariant_when_declared(self, estimator: Any, batch: RewardBatch) -> None:
        if not getattr(estimator, "order_invariant", False):
            return
        assert batch.rewards is not None
        transformed = batch.with_rewards(_increasing(batch.rewards))
        assert torch.allclose(estimator.advantages(batch), estimator.advantages(transformed), atol=1e-5)
