"""The host's diagnostics on hand-made groups."""

from __future__ import annotations

import math

import torch

from rlkit.reward.diagnostics import (
    SignalWatch,
    conflict_rate,
    distinct_values_per_group,
    saturated_groups,
    saturation_share,
    unique_counts,
    unscored_share,
)

nan = math.nan


def test_unique_counts_and_saturation_ignore_nan():
    scores = torch.tensor([[[1.0, 0.0], [1.0, 0.5], [nan, 1.0]],
                           [[0.0, nan], [1.0, nan], [1.0, nan]]])
    assert unique_counts(scores).tolist() == [[1, 3], [2, 0]]
    # a group with nothing scored is unscored, not saturated: a judge that scores nothing must not look like a
    # dimension the policy has learnt
    assert saturated_groups(scores).tolist() == [[True, False], [False, False]]
    assert saturated_groups(scores, majority_share=0.6).tolist() == [[True, False], [True, False]]
    assert unscored_share(scores).tolist() == [1 / 6, 3 / 6]


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


def test_signal_watch_says_when_a_dimension_goes_unscored_and_again_after_it_recovers():
    watch = SignalWatch(["format", "correctness"])
    healthy = {"rewards/format/unscored": 0.0, "rewards/correctness/unscored": 0.25,
               "advantages/frac_zero_groups": 0.5}
    assert watch.update(0, healthy) == [], "some completions unscored is not a whole step without the dimension"
    silent = {**healthy, "rewards/correctness/unscored": 1.0}
    first = watch.update(1, silent)
    assert len(first) == 1 and first[0].startswith("step 1:") and "correctness" in first[0]
    assert watch.update(2, silent) == [], "said once when it starts, not every step"
    watch.update(3, healthy)
    assert len(watch.update(4, silent)) == 1, "a new stretch is said again"
    assert watch.summary_lines() == ["dimension correctness was scored on no completion in 3 of 5 steps"]


def test_signal_watch_says_no_learning_signal_after_patience_steps_in_a_row():
    watch = SignalWatch(["format"], patience=3)
    flat = {"rewards/format/unscored": 0.0, "advantages/frac_zero_groups": 1.0}
    assert watch.update(0, flat) == [] and watch.update(1, flat) == []
    watch.update(2, {**flat, "advantages/frac_zero_groups": 0.75})  # one group with a gradient breaks the run
    assert watch.update(3, flat) == [] and watch.update(4, flat) == []
    said = watch.update(5, flat)
    assert len(said) == 1 and said[0].startswith("steps 3-5: no learning signal")
    assert watch.update(6, flat) == []
    assert watch.summary_lines() == ["no learning signal in 6 of 7 steps: every group's completions scored alike"]
    pairs = SignalWatch(["format"], patience=1)
    assert pairs.update(0, {"pairs/used": 0.0}) and pairs.summary_lines()[0].startswith(
        "no learning signal in 1 of 1 steps (the rewards trained nothing)")
    assert SignalWatch(["format"]).summary_lines() == [], "nothing to say about a healthy run"


def test_signal_watch_names_a_judge_that_scores_every_completion_alike_once():
    watch = SignalWatch(["format", "correctness"], judge="llm")
    alike = {"rewards/format/mean": 0.0, "rewards/format/std": 0.0, "rewards/correctness/mean": 1.0,
             "rewards/correctness/std": 0.0, "advantages/frac_zero_groups": 1.0}
    told_apart = {**alike, "rewards/correctness/std": 0.5, "advantages/frac_zero_groups": 0.5}
    assert watch.update(0, told_apart) == [], "one dimension that tells completions apart is a signal"
    (said,) = watch.update(1, alike)
    assert said.startswith("step 1: judge=llm gave every completion the same score on every dimension "
                           "(format 0, correctness 1)")
    assert watch.update(2, alike) == [], "warned once"
    assert "judge=llm gave every completion the same score on every dimension in 2 of 3 steps" in \
        watch.summary_lines()
    # a step that sampled nothing to tell apart (an objective that learns from demonstrations) is not the judge's
    demonstrations = {k: v for k, v in alike.items() if not k.startswith("advantages/")}
    assert SignalWatch(["format", "correctness"], judge="llm").update(0, demonstrations) == []
    unscored = {**alike, "rewards/format/mean": nan}  # said by the unscored-dimension warning instead
    assert SignalWatch(["format", "correctness"]).update(0, unscored) == []
