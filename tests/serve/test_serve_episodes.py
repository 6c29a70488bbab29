"""The reward API on episodes over real HTTP on loopback: ``messages`` (a whole conversation) or episode responses
in, per-dimension and per-step scores out; the old shapes unchanged; the ``reward_api`` judge sending episodes."""

from __future__ import annotations

import json

import httpx
import pytest

from rlkit.commands.common import compose_and_check
from rlkit.core.types import Rollout
from rlkit.reward.episodes_io import judged_rollout
from rlkit.serve.app import RewardServer, ServeSettings, create_app
from rlkit_plugins.judges.reward_api import RewardApiJudge

PROMPT = [{"role": "user", "content": "37*14"}]
CALL, RESULT = {"role": "assistant", "content": '[calc(e="37*14")]'}, {"role": "tool", "name": "calc", "content": "518"}
GOOD = [CALL, RESULT, {"role": "assistant", "content": "518"}]
BROKEN = [{"role": "assistant", "content": "[calc(e=37*14)]"},
          {"role": "tool", "name": "error", "content": "error: the tool call could not be read"},
          {"role": "assistant", "content": "518 is it"}]
FIELDS = {"reference": "518"}


@pytest.fixture(scope="module")
def steps_config():
    return compose_and_check(["judge=rule", "rubric=calculator_steps"], read_data=False)


@pytest.fixture(scope="module")
def server(steps_config):
    with RewardServer(create_app(steps_config, ServeSettings(api_key_env=None, rate_limit=0))) as s:
        yield s


def _post(server, body) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/reward", json=body, timeout=30)


def test_messages_in_per_dimension_and_per_step_scores_out(server):
    response = _post(server, {"messages": [*PROMPT, *GOOD], "fields": FIELDS})
    assert response.status_code == 200, response.text
    [result] = response.json()["results"]
    # a well-formed call and a bare-number answer: both turns well formed; the tool ran; the answer is right
    assert result["steps"] == {"well_formed_turn": [1.0, 1.0]}
    assert result["scores"] == {"tool_use": 1.0, "correctness": 1.0, "well_formed_turn": 1.0}
    assert result["reward"] == 1.0 and result["rank"] == 1


def test_a_group_of_episodes_and_a_text(server):
    body = _post(server, {"prompt": PROMPT, "responses": [GOOD, BROKEN, "518"], "fields": FIELDS}).json()
    good, broken, text = body["results"]
    assert broken["steps"] == {"well_formed_turn": [0.0, 0.0]}
    assert broken["scores"] == {"tool_use": 0.0, "correctness": 1.0, "well_formed_turn": 0.0}
    # beside episodes a text is a one-turn episode that called no tool
    assert text["steps"] == {"well_formed_turn": [1.0]} and text["scores"]["tool_use"] == 0.0
    assert [r["rank"] for r in body["results"]] == [1, 3, 2]
    assert good == {**_post(server, {"messages": [*PROMPT, *GOOD], "fields": FIELDS}).json()["results"][0], "index": 0}


def test_the_old_shape_on_a_step_rubric_has_one_step_per_text(server):
    body = _post(server, {"prompt": "37*14", "responses": ["518", "518 it is"], "fields": FIELDS}).json()
    assert [r["steps"] for r in body["results"]] == [{"well_formed_turn": [1.0]}, {"well_formed_turn": [0.0]}]
    assert [r["scores"]["tool_use"] for r in body["results"]] == [None, None]  # no episode: the check does not apply


def test_the_old_shape_is_unchanged_without_step_dimensions():
    with RewardServer(create_app(compose_and_check(["judge=rule"], read_data=False),
                                 ServeSettings(api_key_env=None, rate_limit=0))) as s:
        body = _post(s, {"prompt": "3+4=", "responses": ["7", "12"], "fields": {"reference": "7"}}).json()
        assert [set(r) for r in body["results"]] == [{"index", "reward", "rank", "scores", "steps"}] * 2
        assert [r["steps"] for r in body["results"]] == [None, None]
        spec = httpx.get(f"{s.url}/openapi.json").json()["components"]["schemas"]["RewardRequest"]
        assert {"prompt", "responses", "fields", "messages"} <= set(spec["properties"])


@pytest.mark.parametrize(("body", "loc", "needle"), [
    ({"messages": [*PROMPT, *GOOD], "prompt": "x"}, ["body"], "either messages"),
    ({"messages": [*PROMPT, *GOOD], "responses": ["1"]}, ["body"], "either messages"),
    ({"fields": FIELDS}, ["body"], "give prompt and responses"),
    ({"messages": GOOD}, ["body", "messages"], "open with the prompt's messages"),
    ({"messages": [*PROMPT, CALL, RESULT]}, ["body", "messages"], "must end with the assistant's turn"),
    ({"messages": [*PROMPT]}, ["body", "messages"], "at least 2"),
    ({"messages": [*PROMPT, {"role": "assistant", "content": 7}]}, ["body", "messages", 1, "content"], "string"),
    ({"messages": [*PROMPT, {**CALL, "tool_calls": []}, RESULT, CALL]}, ["body", "messages", 1, "tool_calls"],
     "Extra inputs"),
    ({"messages": [*PROMPT, {"role": "", "content": "1"}, CALL]}, ["body", "messages", 1, "role"], "at least 1"),
    ({"prompt": "x", "responses": ["1", [CALL, RESULT]]}, ["body", "responses"], "responses[1]: an episode must end"),
    ({"prompt": "x", "responses": [[]]}, None, "responses"),
])
def test_a_bad_conversation_is_a_422_that_names_the_field(server, body, loc, needle):
    response = _post(server, body)
    assert response.status_code == 422, response.text
    errors = response.json()["detail"]
    assert any(needle in json.dumps(e) for e in errors), errors
    if loc is not None:
        assert any(e["loc"] == loc and needle in json.dumps(e) for e in errors), errors


def test_an_episode_over_the_response_cap_is_a_413(steps_config):
    with RewardServer(create_app(steps_config, ServeSettings(api_key_env=None, rate_limit=0,
                                                             max_response_chars=25))) as s:
        assert _post(s, {"messages": [*PROMPT, *GOOD]}).status_code == 200  # 17 + 3 + 3 characters
        long = [CALL, {**RESULT, "content": "5" * 20}, {"role": "assistant", "content": "518"}]
        response = _post(s, {"messages": [*PROMPT, *long]})
        assert response.status_code == 413 and "serve.max_response_chars=25" in response.json()["detail"]


def test_the_reward_api_judge_sends_episodes_and_gets_the_local_scores(server, steps_config):
    records = [{"prompt": PROMPT, **FIELDS}, {"prompt": PROMPT, **FIELDS}]
    rollout = judged_rollout(records, [[GOOD, BROKEN], ["518", BROKEN]])
    judge = RewardApiJudge(RewardApiJudge.Params(base_url=server.url))
    remote = judge.score(rollout, steps_config.rubric)
    local = steps_config.plugins["judge"].score(rollout, steps_config.rubric)
    assert remote.nan_to_num(-1).tolist() == local.nan_to_num(-1).tolist()
    assert remote[1, 0].tolist()[0] == 0.0  # tool_use of a one-turn episode: judged as an episode remotely too
    # single-turn rollouts go as texts, as before
    texts = Rollout(records, [["518", "5"], ["518", "518 it is"]])
    assert judge.score(texts, steps_config.rubric).nan_to_num(-1).tolist() == \
        steps_config.plugins["judge"].score(texts, steps_config.rubric).nan_to_num(-1).tolist()
