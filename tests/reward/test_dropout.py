"""Rubric dropout (``rubric.dropout``): the renormalised aggregation, p = 0, drops fixed by seed and step, and
never a group without a dimension."""

from __future__ import annotations

import pytest
import torch

from rlkit.core.registry import load_registry
from rlkit.core.types import RewardBatch
from rlkit.reward.dropout import dropped_share, rubric_dropout, with_rubric_dropout
from rlkit.testing import example_rubric

WEIGHTS = torch.tensor([1.0, 2.0, 0.5])
# two groups of two completions, three dimensions already in [0, 1]
SCORES = torch.tensor([[[1.0, 0.0, 0.5], [0.0, 1.0, 0.25]],
                       [[0.5, 0.5, 1.0], [1.0, 1.0, 0.0]]])


def batch(scores: torch.Tensor = SCORES, weights: torch.Tensor = WEIGHTS) -> RewardBatch:
    rubric = example_rubric()
    assert len(rubric.dimensions) == scores.shape[-1]
    low = torch.tensor([d.low for d in rubric.dimensions])
    high = torch.tensor([d.high for d in rubric.dimensions])
    raw = low + scores * (high - low)
    return RewardBatch(rubric=rubric, raw_scores=raw, scores=scores, weights=weights)


@pytest.fixture(scope="module")
def weighted_sum():
    return load_registry().create("aggregator", "weighted_sum")


def test_rewards_are_the_weighted_sum_over_each_groups_kept_dimensions(weighted_sum):
    out = with_rubric_dropout(batch(), weighted_sum, 0.5, seed=0, step=0)
    # seed 0, step 0 keeps correctness alone in group 0 and format + correctness in group 1
    assert out.extras["rubric_kept"].tolist() == [[False, True, False], [True, True, False]]
    # group 0: correctness alone, weight 2 / 2 -> its score; group 1: (1·s_format + 2·s_correctness) / (1 + 2)
    expected = torch.tensor([[0.0, 1.0], [(0.5 + 2 * 0.5) / 3, (1.0 + 2 * 1.0) / 3]])
    torch.testing.assert_close(out.rewards, expected)
    assert out.extras["rubric_dropped_share"] == pytest.approx(3 / 6)
    # the batch keeps the judge's full scores; only the rewards follow the draw
    assert torch.equal(out.scores, SCORES) and torch.equal(out.weights, WEIGHTS)


def test_renormalisation_matches_the_kept_mask_on_any_draw(weighted_sum):
    scores = torch.rand(64, 3, 3, generator=torch.Generator().manual_seed(1))
    for step in range(5):
        out = with_rubric_dropout(batch(scores), weighted_sum, 0.4, seed=7, step=step)
        w = WEIGHTS * out.extras["rubric_kept"].float()  # [B, D]: each group's kept weights
        expected = (scores * w.unsqueeze(1)).sum(-1) / w.sum(-1, keepdim=True)
        torch.testing.assert_close(out.rewards, expected)


def test_p_zero_is_the_identity(weighted_sum):
    dropped, kept = rubric_dropout(SCORES, WEIGHTS, 0.0, seed=3, step=9)
    assert dropped is SCORES and bool(kept.all())
    b = batch().with_rewards(torch.zeros(2, 2))
    assert with_rubric_dropout(b, weighted_sum, 0.0, seed=3, step=9) is b


def test_the_same_seed_and_step_draw_the_same_drops_whatever_ran_before():
    scores = torch.rand(256, 2, 3)
    first = rubric_dropout(scores, WEIGHTS, 0.3, seed=5, step=11)[1]
    torch.rand(1000)  # the global stream moved (a resumed run's is elsewhere): the drops must not follow it
    again = rubric_dropout(scores, WEIGHTS, 0.3, seed=5, step=11)[1]
    assert torch.equal(first, again)
    assert not torch.equal(first, rubric_dropout(scores, WEIGHTS, 0.3, seed=5, step=12)[1])
    assert not torch.equal(first, rubric_dropout(scores, WEIGHTS, 0.3, seed=6, step=11)[1])


def test_a_group_always_keeps_a_usable_dimension():
    scores = torch.rand(500, 2, 3)
    scores[:100, :, 0] = float("nan")  # unscored in these groups: never the one kept
    weights = torch.tensor([1.0, 2.0, 0.0])  # weight 0: never drawn, and never enough on its own
    dropped, kept = rubric_dropout(scores, weights, 0.95, seed=0, step=0)
    usable = kept & (weights > 0) & ~scores.isnan().all(dim=1)
    assert bool((usable.sum(dim=1) >= 1).all())
    assert bool(kept[:, 2].all())  # weight 0 is not drawn
    assert int(usable.sum(dim=1).max()) <= 2
    assert (usable.sum(dim=1) == 1).float().mean() > 0.8  # at p = 0.95 most groups are down to the one kept
    assert bool(dropped[~kept.unsqueeze(1).expand_as(dropped)].isnan().all())


def test_dropped_share_is_about_p():
    scores = torch.rand(4000, 2, 4)
    weights = torch.ones(4)
    _, kept = rubric_dropout(scores, weights, 0.3, seed=0, step=0)
    # a little under p: a group that drew all four keeps one back (0.3⁴ of groups, one dimension in four)
    assert dropped_share(kept, scores, weights) == pytest.approx(0.3 - 0.3 ** 4 / 4, abs=0.015)


def test_p_must_be_below_one():
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        rubric_dropout(SCORES, WEIGHTS, 1.0, seed=0, step=0)
