"""``judge.params.scoring: expected`` through the ``openai`` backend: the request asks for ``logprobs`` and
``top_logprobs`` beside the schema's ``response_format``, each dimension's levels are read from the ``top_logprobs`` of
the token that writes its value (found by text offset, through a ```json fence too) and renormalised over the levels,
and a server that sends no log-probs is one clear error, never NaN scores."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from rlkit.core.errors import ConfigError
from rlkit.core.registry import load_registry
from rlkit.core.rubric import load_rubric
from rlkit.core.types import Rollout
from rlkit.judging.schema import rubric_json_schema
from rlkit.testing.canned_chat import CannedChatServer, Token, split_tokens, tokens_of
from rlkit_plugins.backends.openai import OpenAIBackend, read_level_probs, value_token

ARITHMETIC = Path(__file__).resolve().parents[2] / "conf" / "rubric_files" / "arithmetic.yaml"
ANSWER = json.dumps({"format": 1, "correctness": 0, "brevity": 4, "repetition": 5})
CHAT = [{"role": "user", "content": "score"}]
# log-probs at each dimension's value token, and the expectation worked out by hand
ALTERNATIVES = {
    "format": {"1": math.log(0.8), "0": math.log(0.2)},  # 0.8
    "correctness": {"0": math.log(0.7), "1": math.log(0.3)},  # 0.3
    # "x" is no level: dropped, and 4 and 5 renormalised to 2/3 and 1/3 -> 4 + 1/3
    "brevity": {"4": math.log(0.6), " 5": math.log(0.3), "x": math.log(0.1)},
    "repetition": {"x": math.log(0.9), "}": math.log(0.1)},  # no level listed: the written 5, with probability 1
}
EXPECTED = [0.8, 0.3, 4 + 1 / 3, 5.0]


def _schema() -> dict:
    return rubric_json_schema(load_rubric(ARITHMETIC).dimensions)


def _judge(server: CannedChatServer, **params):
    backend = {"name": "openai", "params": {"base_url": server.url, "max_retries": 0, **params}}
    return load_registry().create("judge", "llm", {"backend": backend, "scoring": "expected"})


def _rollout() -> Rollout:
    return Rollout(records=[{"prompt": "3+4=", "reference": "7"}], completions=[["7"]])


def test_the_request_asks_for_logprobs_beside_the_schema_and_only_when_levels_are_asked():
    schema = _schema()
    with CannedChatServer(lambda messages: ANSWER) as server:
        backend = OpenAIBackend(OpenAIBackend.Params(base_url=server.url, top_logprobs=5))
        backend.complete([CHAT], schema=schema, level_probs=True)
        backend.complete([CHAT], schema=schema)
    asked, sampled = server.bodies
    assert asked["logprobs"] is True and asked["top_logprobs"] == 5
    assert asked["response_format"]["json_schema"]["schema"] == schema == server.schemas[0]
    assert "logprobs" not in sampled and "top_logprobs" not in sampled, "a sampled judge pays for no log-probs"
    assert backend.level_probs_outputs


def test_expected_scores_are_the_renormalised_levels_of_the_value_tokens(tmp_path, monkeypatch):
    """judge=llm, scoring: expected, backend: openai (refused before): each dimension's hand-worked expectation,
    the dimension whose token lists no level at its written level, counted."""
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path))
    with CannedChatServer(lambda messages: tokens_of(ANSWER, ALTERNATIVES)) as server:
        judge = _judge(server)
        with pytest.warns(UserWarning, match=r"1 dimension score\(s\) could not be read .*level_probs_fallbacks"):
            judgement = judge.assess(_rollout(), load_rubric(ARITHMETIC))
            scores = judgement.scores
    assert scores[0, 0].tolist() == pytest.approx(EXPECTED)
    assert judgement.metrics["judge/parse_failure_rate"] == 0.0
    assert judge.backend.configured.level_probs_fallbacks == 1
    assert server.bodies[0]["logprobs"] is True and server.bodies[0]["top_logprobs"] == 20


def test_a_one_to_five_scale_with_mass_on_four_and_five_weighs_both():
    tokens = tokens_of('{"brevity": 5}', {"brevity": {" 4": math.log(0.25), " 5": math.log(0.75)}})
    schema = {"type": "object", "properties": {"brevity": {"type": "integer", "enum": [1, 2, 3, 4, 5]}}}
    with CannedChatServer(lambda messages: tokens) as server:
        (answer,) = OpenAIBackend(OpenAIBackend.Params(base_url=server.url)).complete([CHAT], schema=schema,
                                                                                      level_probs=True)
    assert answer.text == '{"brevity": 5}'
    assert answer.level_probs == {"brevity": pytest.approx({1: 0.0, 2: 0.0, 3: 0.0, 4: 0.25, 5: 0.75})}
    assert sum(level * p for level, p in answer.level_probs["brevity"].items()) == pytest.approx(4.75)


def test_a_json_fence_in_the_token_stream_moves_nothing(tmp_path, monkeypatch):
    """llama.cpp's server lets the model write ```json before the object and strips it from ``content``: the value
    tokens are found in the token stream by their text, wherever it starts."""
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path))
    with (CannedChatServer(lambda messages: tokens_of(ANSWER, ALTERNATIVES, fence=True)) as server,
          pytest.warns(UserWarning, match="level_probs_fallbacks")):
        scores = _judge(server).score(_rollout(), load_rubric(ARITHMETIC))
    assert scores[0, 0].tolist() == pytest.approx(EXPECTED)


def test_tokens_that_straddle_quotes_colons_and_spaces_are_found_by_offset():
    """A hand-made stream: a fence, tokens that join the quote and the colon, a space on its own before the digit,
    and a field whose name also ends another field's (``ness`` in ``correctness``)."""
    texts = ["```", "json", "\n", '{"', "correct", "ness", '":', " ", "1", ',"', "ness", '":', "0", "}", "\n", "```"]
    tokens = [{"token": t, "logprob": 0.0, "top_logprobs": [{"token": t, "logprob": 0.0}]} for t in texts]
    tokens[8]["top_logprobs"] = [{"token": "1", "logprob": math.log(0.9)}, {"token": "0", "logprob": math.log(0.1)}]
    assert value_token(texts, "correctness") == 8 and value_token(texts, "ness") == 12
    assert value_token(texts, "missing") is None
    probs, missed = read_level_probs(tokens, {"correctness": [0, 1], "ness": [0, 1]})
    assert probs == {"correctness": pytest.approx({0: 0.1, 1: 0.9}), "ness": {0: 1.0, 1: 0.0}} and missed == []
    # OpenAI's -9999 ("outside the top 20") is no evidence: the written level, counted
    tokens[8]["top_logprobs"] = [{"token": "1", "logprob": -9999.0}, {"token": "0", "logprob": -9999.0}]
    probs, missed = read_level_probs(tokens, {"correctness": [0, 1]})
    assert probs == {"correctness": {0: 0.0, 1: 1.0}} and missed == ["correctness"]
    glued = ["{", '"a":4', "}"]  # the value shares a token with the colon: its alternatives are the colon's
    assert value_token(glued, "a") is None


def test_a_server_that_returns_no_logprobs_is_one_clear_error_not_nan_scores(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path))
    with CannedChatServer(lambda messages: ANSWER, logprobs=False) as server:
        judge = _judge(server)
        with pytest.raises(ConfigError, match=rf"judge\.params\.scoring: {server.url} does not return logprobs .*"
                                              r"use scoring: sampled"):
            judge.score(_rollout(), load_rubric(ARITHMETIC))
        sampled = load_registry().create("judge", "llm", {"backend": {"name": "openai", "params": {
            "base_url": server.url}}}).score(_rollout(), load_rubric(ARITHMETIC))
    assert sampled[0, 0].tolist() == [1.0, 0.0, 4.0, 5.0], "the same server still serves a sampled judge"


def test_top_logprobs_is_checked_and_keys_only_the_answers_it_changes():
    for bad in (0, 21, True):
        with pytest.raises(ConfigError, match=r"backend\.params\.top_logprobs: must be an integer from 1 to 20"):
            OpenAIBackend(OpenAIBackend.Params(top_logprobs=bad))  # type: ignore[arg-type]
    default = OpenAIBackend(OpenAIBackend.Params()).identity()
    assert "top_logprobs" not in default and "logprobs" not in default, "a sampled judge's cache keys are unchanged"
    assert OpenAIBackend(OpenAIBackend.Params(top_logprobs=5)).identity()["top_logprobs"] == 5


def test_expected_with_openai_is_no_longer_refused_unless_no_schema_is_sent():
    judge = load_registry().create("judge", "llm", {"scoring": "expected", "backend": {"name": "openai"}})
    assert judge.backend.configured.level_probs_outputs
    # response_format: none sends no schema, so no structured answer to read: refused (test_structured_outputs.py)
    assert not OpenAIBackend(OpenAIBackend.Params(response_format="none")).level_probs_outputs


# --- the canned server's side of the wire ----------------------------------------------------------------------


def test_the_canned_server_speaks_openais_logprobs_layout_and_checks_the_fields():
    import httpx

    text = '{"a": 12}'
    assert "".join(split_tokens(text)) == text and split_tokens(text)[-3:] == [" 1", "2", "}"]
    answer = [Token("```"), Token("json"), Token("\n"), *[Token(t) for t in split_tokens(text)], Token("\n"),
              Token("```")]
    with CannedChatServer(lambda messages: answer) as server:
        def post(**fields) -> httpx.Response:
            return httpx.post(f"{server.url}/chat/completions", json={"messages": CHAT, **fields}, timeout=10)

        body = post(logprobs=True, top_logprobs=2).json()
        plain = post(logprobs=True).json()
        assert post(top_logprobs=2).status_code == 400, "top_logprobs alone, as OpenAI and llama-server refuse it"
        assert post(logprobs=True, top_logprobs=21).status_code == 400
        assert post(response_format={"type": "grammar"}).status_code == 400
        assert post(response_format={"type": "json_object", "schema": {"type": "object"}}).status_code == 200
    choice = body["choices"][0]
    assert choice["message"]["content"] == text, "the fence is in the tokens, not the content"
    entries = choice["logprobs"]["content"]
    assert [e["token"] for e in entries][:3] == ["```", "json", "\n"]
    assert entries[0] == {"token": "```", "logprob": 0.0, "bytes": [96, 96, 96],
                          "top_logprobs": [{"token": "```", "logprob": 0.0, "bytes": [96, 96, 96]}]}
    assert all(e["top_logprobs"] == [] for e in plain["choices"][0]["logprobs"]["content"])
    assert server.schemas == [None, None, {"type": "object"}]
