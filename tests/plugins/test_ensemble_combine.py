"""The ensemble judge's combination of member scores stays inside each dimension's range."""

from __future__ import annotations

import pytest
import torch

from rlkit_plugins.judges.ensemble import combine_scores

LOW, HIGH = torch.tensor([0.0, 1.0]), torch.tensor([1.0, 5.0])


@pytest.mark.parametrize("how", ["mean", "median", "agreement"])
def test_combined_scores_stay_in_range_and_keep_unscored_nan(how):
    gen = torch.Generator().manual_seed(0)
    for members in (2, 3, 5):
        levels = torch.randint(0, 5, (members, 4, 8, 2), generator=gen).float()
        stack = torch.stack([levels[..., 0].clamp(max=1), levels[..., 1] + 1], dim=-1)
        stack[:, 0, 0] = float("nan")  # nobody scored this completion
        stack[0, 1, 1, 1] = float("nan")  # one member did not score this one
        out = combine_scores(stack, LOW, HIGH, how)
        assert out.shape == (4, 8, 2)
        assert torch.isnan(out[0, 0]).all() and not torch.isnan(out[1:]).any()
        finite = out[~torch.isnan(out)].view(-1)
        assert ((out[..., 1][~torch.isnan(out[..., 1])] >= 1) & (out[..., 1][~torch.isnan(out[..., 1])] <= 5)).all()
        assert finite.numel() > 0


def test_agreement_weighting_of_equal_top_scores_is_exactly_the_top():
    # float32 weights such as 1 / (0.05 + d) make sum(5 w) / sum(w) come out as 5.0000005 (seen in a run)
    stack = torch.tensor([5.0, 5.0, 5.0]).view(3, 1, 1, 1).repeat(1, 2, 3, 1)
    stack[:, 1, :, 0] = torch.tensor([1.0, 1.0, 3.0]).view(3, 1)  # unequal distances, so unequal weights
    out = combine_scores(stack, torch.tensor([1.0]), torch.tensor([5.0]), "agreement")
    assert (out[0] == 5.0).all()


@pytest.mark.parametrize("how", ["median", "agreement"])
def test_two_members_that_disagree_meet_in_the_middle(how):
    """The issue's case: rule 1, llm 0 gave 0.18 and rule 0, llm 1 gave 0.82 (``torch.nanmedian`` of two is the
    lower, so the lower-scoring member was always "the consensus"). Either order now gives 0.5, and four members
    split two against two likewise."""
    for pair in ([1.0, 0.0], [0.0, 1.0]):
        stack = torch.tensor(pair).view(2, 1, 1, 1)
        assert combine_scores(stack, torch.tensor([0.0]), torch.tensor([1.0]), how).item() == pytest.approx(0.5)
    four = torch.tensor([1.0, 0.0, 1.0, 0.0]).view(4, 1, 1, 1)
    assert combine_scores(four, torch.tensor([0.0]), torch.tensor([1.0]), how).item() == pytest.approx(0.5)
    three = torch.tensor([1.0, 0.0, 1.0]).view(3, 1, 1, 1)  # an odd count still follows its majority
    assert combine_scores(three, torch.tensor([0.0]), torch.tensor([1.0]), "median").item() == 1.0


def test_nan_median_ignores_nan_and_averages_the_middle_two():
    from rlkit.plugin import nan_median

    x = torch.tensor([[1.0, float("nan"), 3.0], [2.0, float("nan"), float("nan")], [4.0, float("nan"), 5.0],
                      [10.0, float("nan"), float("nan")]])
    assert nan_median(x, dim=0)[0].item() == 3.0  # (2 + 4) / 2
    assert torch.isnan(nan_median(x, dim=0)[1])
    assert nan_median(x, dim=0)[2].item() == 4.0
    assert nan_median(x, dim=1).tolist() == [2.0, 2.0, 4.5, 10.0]
