"""veRL's custom reward function contract, called with veRL's argument names as its reward managers call it.

veRL itself is not installed (nor installable on this CPU-only machine); the calls below follow
verl/workers/reward_manager/naive.py (one response, keyword arguments) and batch.py (one batch), and the way
verl/trainer/ppo/reward.py loads the function: by file path and name, with ``reward_kwargs`` merged in.
"""

from __future__ import annotations

import importlib.util
import math
import sys

import pytest

import rlkit.integrations.verl as verl
from rlkit.core.errors import ConfigError, RlkitError

DIMENSIONS = ["format", "correctness", "brevity", "repetition"]


def _load_as_verl_does():
    """The module as veRL's get_custom_reward_fn loads it: from its file, under another name."""
    spec = importlib.util.spec_from_file_location("custom_module", verl.__file__)
    module = importlib.util.module_from_spec(spec)
    sys.modules["custom_module"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["custom_module"]
    return module


def test_compute_score_with_verls_argument_names_returns_score_and_dimensions():
    module = _load_as_verl_does()
    reward_kwargs = {"rlkit_overrides": ["judge=rule"]}  # custom_reward_function.reward_kwargs
    right = module.compute_score(data_source="arithmetic", solution_str="7", ground_truth="7",
                                 extra_info={"index": 0, "question": "3+4=", "num_turns": None}, **reward_kwargs)
    assert set(right) == {"score", "rlkit_scored", *DIMENSIONS}
    assert right == {"score": 1.0, "rlkit_scored": 1.0, "format": 1.0, "correctness": 1.0, "brevity": 1.0,
                     "repetition": 1.0}
    wrong = module.compute_score(data_source="arithmetic", solution_str="8", ground_truth="7", extra_info=None,
                                 **reward_kwargs)
    assert wrong["correctness"] == 0.0 and wrong["format"] == 1.0 and 0 < wrong["score"] < right["score"]


def test_a_numeric_ground_truth_and_raw_scale():
    out = verl.compute_score("arithmetic", "7 is the sum here", 7, {"question": "3+4="}, scale="raw")
    assert out["correctness"] == 1.0 and out["brevity"] < 5.0 and out["repetition"] == 5.0  # own ranges


def test_unscored_responses_get_a_number_and_a_flag_not_a_silent_zero():
    out = verl.compute_score("arithmetic", "7", None, {}, unscored_score=-1.0)  # no reference: correctness unknown
    assert math.isnan(out["correctness"]) and out["rlkit_scored"] == 1.0  # the rest is scored
    broken = verl.compute_score_batch(["arithmetic"], ["7"], ["7"], [{}],
                                      rlkit_overrides=["++weights.params.weights={format: 0, correctness: 0, "
                                                       "brevity: 0, repetition: 0}"], unscored_score=-1.0)
    assert broken[0]["score"] == -1.0 and broken[0]["rlkit_scored"] == 0.0  # no weight left: no reward formed


def test_batch_form_groups_each_prompts_rollouts_for_a_group_relative_aggregator():
    overrides = ["aggregator=lexicographic"]
    rows = [("7", "7", 0), ("8", "7", 0), ("seven", "7", 0), ("12", "12", 1), ("13", "12", 1), ("12", "12", 1)]
    out = verl.compute_score_batch(data_sources=["arithmetic"] * 6, solution_strs=[r[0] for r in rows],
                                   ground_truths=[r[1] for r in rows],
                                   extra_infos=[{"index": r[2], "num_turns": i} for i, r in enumerate(rows)],
                                   rlkit_overrides=overrides)
    assert len(out) == 6 and all(set(o) == {"score", "rlkit_scored", *DIMENSIONS} for o in out)
    scores = [o["score"] for o in out]
    # a win rate within each prompt's three rollouts: the right answer wins its group
    assert scores[0] == max(scores[:3]) and math.isclose(sum(scores[:3]), 1.5)
    assert math.isclose(sum(scores[3:]), 1.5) and scores[3] == scores[5] > scores[4]
    fixed = verl.compute_score_batch(["arithmetic"] * 6, [r[0] for r in rows], [r[1] for r in rows], None,
                                     rlkit_overrides=overrides, group_size=3)
    assert [o["score"] for o in fixed] == scores


def test_a_group_relative_aggregator_is_refused_one_response_at_a_time():
    with pytest.raises(ConfigError, match="aggregator: aggregator=lexicographic compares responses within their "
                                          "group.*use compute_score_batch"):
        verl.compute_score("arithmetic", "7", "7", {}, rlkit_overrides=["aggregator=lexicographic"])


@pytest.mark.parametrize(("call", "message"), [
    (lambda: verl.compute_score("a", "7", "7", scale="percent"), "scale: must be one of normalized, raw"),
    (lambda: verl.compute_score("a", "7", "7", rlkit_overrides="judge=rule"), "rlkit_overrides: a list"),
    (lambda: verl.compute_score("a", "7", "7", rlkit_config="/nonexistent.yaml"), "no such config file"),
    (lambda: verl.compute_score_batch(["a"], ["7", "8"], ["7"]), "must be as long; got 1, 2, 1 and 2"),
])
def test_bad_input_is_one_line(call, message):
    with pytest.raises(RlkitError) as err:
        call()
    assert message in str(err.value) and "\n" not in str(err.value)
