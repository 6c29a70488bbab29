import torch

from rlkit_plugins.aggregators.weighted_sum import nan_weighted_sum

NAN = float("nan")


def test_weighted_mean_by_hand():
    scores = torch.tensor([[[1.0, 0.0, 0.5]]])
    w = torch.tensor([2.0, 1.0, 1.0])
    assert torch.allclose(nan_weighted_sum(scores, w), torch.tensor([[2.5 / 4]]))


def test_nan_dimension_skipped_and_weights_renormalised():
    scores = torch.tensor([[[1.0, NAN, 0.0]]])
    w = torch.tensor([1.0, 5.0, 3.0])
    assert torch.allclose(nan_weighted_sum(scores, w), torch.tensor([[0.25]]))


def test_all_nan_or_only_zero_weight_scored_is_nan():
    w = torch.tensor([1.0, 0.0])
    out = nan_weighted_sum(torch.tensor([[[NAN, NAN], [NAN, 0.8]]]), w)
    assert torch.isnan(out).all()
