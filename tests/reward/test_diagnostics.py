"""The host's diagnostics on hand-made groups."""

from __future__ import annotations

import math

import torch

from rlkit.reward.diagnostics import (
    conflict_rate,
    distinct_values_per_group,
    saturated_groups,
    saturation_share,
    unique_counts,
)

nan = math.nan


def test_unique_counts_and_saturation_ignore_nan():
    scores = torch.tensor([[[1.0, 0.0], [1.0, 0.5], [nan, 1.0]],
                           [[0.0, nan], [1.0, nan], [1.0, nan]]])
    assert unique_counts(scores).tolist() == [[1, 3], [2, 0]]
    assert saturated_groups(scores).tolist() == [[True, False], [False, True]]


def test_majority_share_catches_one_outlier():
    col = torch.tensor([1.0] * 7 + [0.0]).view(1, 8, 1)
    assert not saturated_groups(col)[0, 0], "two values: not saturated by the strict rule"
    assert saturated_groups(col, majority_share=0.85)[0, 0], "7 of 8 identical: saturated at 0.85"
    assert saturation_share(col, majority_share=0.9).tolist() == [0.0]


def test_conflict_rate_counts_opposite_orders():
    # dims agree on (0,1), conflict on (0,2) and (1,2): 2 of 3 pairs
    scores = torch.tensor([[[1.0, 1.0], [0.5, 0.5], [0.0, 2.0]]])
    assert abs(conflict_rate(scores) - 2 / 3) < 1e-6
    assert conflict_rate(torch.tensor([[[1.0, nan], [0.0, 1.0]]])) == 0.0, "NaN takes no side"
    assert math.isnan(conflict_rate(torch.zeros(2, 1, 3)))


def test_distinct_values_per_group():
    assert distinct_values_per_group(torch.tensor([[1.0, 1.0, -1.0], [0.0, 0.0, nan]])).tolist() == [2, 1]


def test_conflict_watch_flags_once_after_a_full_window():
    from rlkit.reward.diagnostics import ConflictWatch

    watch = ConflictWatch(window=3, threshold=0.2)
    assert [watch.update(r) for r in (0.5, 0.5)] == [False, False], "not before a full window"
    assert watch.update(0.5) is True
    assert watch.update(0.9) is False, "once per run"
    quiet = ConflictWatch(window=2, threshold=0.2)
    assert not any(quiet.update(r) for r in (0.1, 0.3, nan, 0.1))


def test_running_means_over_the_run_and_the_tail():
    from rlkit.reward.diagnostics import RunningMeans

    means = RunningMeans(tail=2)
    for v in (1.0, 2.0, nan, 6.0):
        means.update({"x": v})
    assert means.mean("x") == 3.0 and means.last("x") == 4.0
    assert math.isnan(means.mean("absent"))
