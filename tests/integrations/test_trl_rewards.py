"""rlkit's rewards as TRL reward functions, called as TRL calls them (no TRL needed here)."""

from __future__ import annotations

import logging
import math
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from rlkit.config import compose_config
from rlkit.core.errors import ConfigError, DataError, RlkitError
from rlkit.core.registry import load_registry
from rlkit.integrations.trl import completion_text, trl_reward_funcs

PROMPTS = ["3+4="] * 3 + ["10+2="] * 3
COMPLETIONS = ["7", "8", "the answer is 7", "12", "12 12 12 12 12", "twelve"]
REFERENCE = ["7"] * 3 + ["12"] * 3


def _call(funcs, **kwargs):
    return {f.__name__: f(**kwargs) for f in funcs}


def test_one_function_per_dimension_named_for_trls_logs_with_the_rubric_weights():
    rewards = trl_reward_funcs()
    assert [f.__name__ for f in rewards.funcs] == ["format", "correctness", "brevity", "repetition"]
    assert rewards.weights == [1.0, 2.0, 0.5, 0.5]  # the arithmetic rubric's weights, weights=constant
    out = _call(rewards.funcs, prompts=PROMPTS, completions=COMPLETIONS, reference=REFERENCE)
    assert out["format"] == [1.0, 1.0, 0.0, 1.0, 1.0, 0.0]
    assert out["correctness"] == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
    assert out["brevity"][0] == 1.0 and out["brevity"][2] < 1.0  # "the answer is 7" is over 12 characters
    assert out["repetition"][4] < 1.0 and out["repetition"][0] == 1.0


def test_raw_scale_gives_each_dimension_in_its_own_range():
    rewards = trl_reward_funcs(scale="raw")
    out = _call(rewards.funcs, prompts=PROMPTS[:1], completions=COMPLETIONS[:1], reference=REFERENCE[:1])
    assert out == {"format": [1.0], "correctness": [1.0], "brevity": [5.0], "repetition": [5.0]}


def test_unscored_is_none_and_the_aggregate_skips_it():
    rewards = trl_reward_funcs(mode="both")
    out = _call(rewards.funcs, prompts=["3+4="] * 2, completions=["7", "x"])  # no reference column: not checkable
    assert out["correctness"] == [None, None]
    both = _call(rewards.funcs, prompts=["3+4="] * 2, completions=["7", "x"], reference=["7", "7"])
    assert out["weighted_sum"][0] == 1.0 and both["weighted_sum"][0] == 1.0
    assert out["weighted_sum"][1] != both["weighted_sum"][1]  # the missing dimension is left out, not a 0


def test_conversational_prompts_and_completions():
    rewards = trl_reward_funcs()
    prompts = [[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "3+4="}]] * 2
    completions = [[{"role": "assistant", "content": "7"}], [{"role": "assistant", "content": "eight"}]]
    out = _call(rewards.funcs, prompts=prompts, completions=completions, reference=["7", "7"])
    assert out["correctness"] == [1.0, 0.0] and out["format"] == [1.0, 0.0]
    tool_turns = [{"role": "assistant", "content": "calling"}, {"role": "tool", "content": "7"},
                  {"role": "assistant", "content": [{"type": "text", "text": "7"}]}]
    assert completion_text(tool_turns) == "7"  # the answer the completion ends with
    with pytest.raises(DataError, match="completions: a completion must be text"):
        completion_text(7)


def test_the_batch_is_judged_once_for_every_function_of_the_set():
    rewards = trl_reward_funcs(mode="both")
    calls = []
    judge = rewards.scorer.judge
    original = judge.score
    judge.score = lambda rollout, rubric: calls.append(rollout.num_prompts) or original(rollout, rubric)
    _call(rewards.funcs, prompts=PROMPTS, completions=COMPLETIONS, reference=REFERENCE)
    assert calls == [2]  # one call, two groups of three, for five functions
    _call(rewards.funcs, prompts=PROMPTS, completions=COMPLETIONS[::-1], reference=REFERENCE)
    assert calls == [2, 2]  # new completions are judged anew


def test_groups_are_consecutive_rows_of_one_prompt_or_fixed_chunks():
    rewards = trl_reward_funcs(overrides=["aggregator=lexicographic"], mode="aggregate")
    (func,) = rewards.funcs
    out = func(prompts=PROMPTS, completions=COMPLETIONS, reference=REFERENCE)
    # lexicographic is a win rate within the group: each group of three shares out its wins
    assert math.isclose(sum(out[:3]), 1.5) and math.isclose(sum(out[3:]), 1.5)
    chunks = trl_reward_funcs(overrides=["aggregator=lexicographic"], mode="aggregate",
                              group_size=2).funcs[0]
    paired = chunks(prompts=PROMPTS, completions=COMPLETIONS, reference=REFERENCE)
    assert all(math.isclose(paired[i] + paired[i + 1], 1.0) for i in range(0, 6, 2))
    with pytest.raises(DataError, match="group_size: 6 completions do not split into groups of 4"):
        trl_reward_funcs(mode="aggregate", group_size=4).funcs[0](prompts=PROMPTS, completions=COMPLETIONS)


def test_trainer_state_steps_the_weight_schedule_and_log_metric_reports_it():
    schedule = "++weights.params.curricula={format: {type: linear, start: 0.0, end: 2.0, steps: 2}}"
    rewards = trl_reward_funcs(overrides=["weights=schedule", schedule], mode="aggregate")
    (func,) = rewards.funcs
    seen, logged = [], {}
    for step in (0, 1, 2, 5):
        metric = logged.setdefault(step, {})
        seen.append(func(prompts=["3+4="], completions=["7 is it"], reference=["8"],
                         trainer_state=SimpleNamespace(global_step=step), log_metric=metric.__setitem__)[0])
    assert [logged[s]["rlkit/weight/format"] for s in (0, 1, 2, 5)] == [0.0, 1.0, 2.0, 2.0]
    assert logged[0]["rlkit/score/correctness"] == 0.0 and logged[0]["rlkit/weight/correctness"] == 2.0
    assert seen[0] < seen[1] < seen[2] == seen[3]  # format (scored 1) gains weight, so the reward rises


def test_rubric_identity_is_logged_once(caplog):
    rewards = trl_reward_funcs(mode="both")
    with caplog.at_level(logging.INFO, logger="rlkit.integrations.trl"):
        for _ in range(2):
            _call(rewards.funcs, prompts=["3+4="], completions=["7"], reference=["7"])
    lines = [r.getMessage() for r in caplog.records if "rubric" in r.getMessage()]
    assert len(lines) == 1 and rewards.rubric_identity["hash"] in lines[0]
    assert rewards.rubric_identity["name"] == "arithmetic" and rewards.rubric_identity["judge"] == "rule"


def test_config_from_a_composed_config_or_a_yaml_file(tmp_path):
    cfg = compose_config(load_registry(), ["aggregator=lexicographic"])
    assert trl_reward_funcs(cfg, mode="aggregate").names == ["lexicographic"]
    tuned = trl_reward_funcs(cfg, ["aggregator.params.tolerance=0.25", "+score_normalization=quantile"])
    assert tuned.scorer.aggregator.params.tolerance == 0.25 and tuned.scorer.normalization == "quantile"
    path = tmp_path / "config.yaml"
    OmegaConf.save(cfg, path)
    from_file = trl_reward_funcs(path, ["aggregator.params.tolerance=0.5"], mode="aggregate")
    assert from_file.names == ["lexicographic"] and from_file.scorer.aggregator.params.tolerance == 0.5


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"mode": "sum"}, "mode: must be one of dimensions, aggregate, both, got 'sum'"),
    ({"scale": "percent"}, "scale: must be one of normalized, raw"),
    ({"group_size": 0}, "group_size: must be >= 1"),
    ({"mode": "both", "aggregate_name": "format"}, "aggregate_name: 'format' is also a dimension"),
    ({"overrides": ["aggregator=nope"]}, "unknown aggregator 'nope'; available aggregators:"),
    ({"config": "/nonexistent/rlkit.yaml"}, "/nonexistent/rlkit.yaml: no such config file"),
    ({"config": ["aggregator=min"]}, "config: a DictConfig, a YAML path or None; give overrides as overrides=[...]"),
    ({"overrides": "aggregator=min"}, "overrides: a list of key=value strings"),
])
def test_bad_arguments_are_one_line_errors(kwargs, message):
    with pytest.raises(RlkitError) as err:
        trl_reward_funcs(**kwargs)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_yaml_file_that_is_not_a_mapping_or_a_bad_override(tmp_path):
    listing = tmp_path / "list.yaml"
    listing.write_text("- a\n- b\n")
    with pytest.raises(ConfigError, match="list.yaml: must hold a mapping"):
        trl_reward_funcs(listing)
    cfg = tmp_path / "cfg.yaml"
    OmegaConf.save(compose_config(load_registry(), []), cfg)
    with pytest.raises(ConfigError, match="overrides: expected key=value, got 'judge'"):
        trl_reward_funcs(cfg, ["judge"])
