"""Every registered plugin runs its kind's contract suite; the suites themselves can fail."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from rlkit import PreferencePairs, RewardBatch
from rlkit.registry import Registry, create_plugin_manager
from rlkit.testing import (
    AdvantageEstimatorContract,
    AggregatorContract,
    JudgeContract,
    PreferenceConstructorContract,
    WeightSchedulerContract,
)
from rlkit.testing.properties import AdvantageEstimatorProperties, AggregatorProperties

_REGISTRY = Registry(create_plugin_manager())


def _build(kind: str, name: str):
    return _REGISTRY.create(kind, name)


class TestJudges(JudgeContract):
    @pytest.fixture(params=_REGISTRY.names("judge"))
    def judge(self, request):
        return _build("judge", request.param)


class TestAggregators(AggregatorContract):
    @pytest.fixture(params=_REGISTRY.names("aggregator"))
    def aggregator(self, request):
        return _build("aggregator", request.param)


class TestAdvantageEstimators(AdvantageEstimatorContract):
    @pytest.fixture(params=_REGISTRY.names("advantage_estimator"))
    def estimator(self, request):
        return _build("advantage_estimator", request.param)


class TestWeightSchedulers(WeightSchedulerContract):
    @pytest.fixture(params=_REGISTRY.names("weight_scheduler"))
    def scheduler(self, request):
        return _build("weight_scheduler", request.param)


class BestWorstForTest:
    """A minimal preference constructor, registered inline, so the preference suite has a subject."""

    @dataclass
    class Params:
        pass

    def __init__(self, params):
        pass

    def pairs(self, batch: RewardBatch) -> PreferencePairs:
        rows = []
        for b in range(batch.shape[0]):
            r = batch.rewards[b]
            ok = ~torch.isnan(r)
            if ok.sum() < 2:
                continue
            masked_hi = torch.where(ok, r, torch.full_like(r, -float("inf")))
            masked_lo = torch.where(ok, r, torch.full_like(r, float("inf")))
            hi, lo = int(masked_hi.argmax()), int(masked_lo.argmin())
            if r[hi] > r[lo]:
                rows.append((b, hi, lo))
        t = torch.tensor(rows, dtype=torch.int64).reshape(-1, 3)
        return PreferencePairs(t[:, 0], t[:, 1], t[:, 2], torch.ones(len(rows)))


class _InlinePreferencePlugin:
    from rlkit import hookimpl

    @hookimpl
    def rlkit_register_preference_constructors(self, register):
        register("best_worst_for_test", BestWorstForTest)


_WITH_INLINE = Registry(create_plugin_manager(extra=[_InlinePreferencePlugin()]))


class TestPreferenceConstructors(PreferenceConstructorContract):
    @pytest.fixture(params=_WITH_INLINE.names("preference_constructor"))
    def constructor(self, request):
        return _WITH_INLINE.create("preference_constructor", request.param)


def test_every_kind_is_covered_by_a_suite():
    assert {k.key for k in _REGISTRY.kinds()} == {
        "judge", "aggregator", "advantage_estimator", "preference_constructor", "weight_scheduler"}


def test_contract_catches_a_broken_estimator():
    class Broken:
        zero_mean_groups = True

        def advantages(self, batch):
            return batch.rewards  # NaN for unscored completions, not zero-mean

    suite = AdvantageEstimatorContract()
    from rlkit.testing import example_reward_batch

    batch = example_reward_batch()
    with pytest.raises(AssertionError):
        suite.test_shape_dtype_and_finite(Broken(), batch)
    with pytest.raises(AssertionError):
        suite.test_zero_mean_groups_when_declared(Broken(), batch)


def test_contract_catches_a_judge_out_of_range():
    from rlkit import JudgeError
    from rlkit.testing import example_rollout, example_rubric

    class TooHigh:
        def score(self, rollout, rubric):
            return torch.full((rollout.num_prompts, rollout.group_size, len(rubric.dimensions)), 7.0)

    with pytest.raises(JudgeError, match="outside its range"):
        JudgeContract().test_shape_dtype_and_range(TooHigh(), example_rollout(), example_rubric())


def test_contract_catches_an_aggregator_that_invents_rewards():
    from rlkit.testing import example_reward_batch

    class ZeroFill:
        def aggregate(self, batch):
            return torch.nan_to_num(batch.scores.nanmean(-1), nan=0.0)

    with pytest.raises(AssertionError, match="nobody scored"):
        AggregatorContract().test_nan_only_where_nothing_was_scored(ZeroFill(), example_reward_batch())


class TestAggregatorProperties(AggregatorProperties):
    @pytest.fixture(params=_REGISTRY.names("aggregator"))
    def aggregator(self, request):
        return _build("aggregator", request.param)


class TestAdvantageEstimatorProperties(AdvantageEstimatorProperties):
    @pytest.fixture(params=_REGISTRY.names("advantage_estimator"))
    def estimator(self, request):
        return _build("advantage_estimator", request.param)
