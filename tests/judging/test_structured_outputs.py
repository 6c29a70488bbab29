"""Structured outputs: the JSON schema a rubric asks for, constrained generation in-process (the ``hf`` backend),
and the ``response_format`` the ``openai`` backend sends, in each shape a server accepts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlkit.core.errors import ConfigError
from rlkit.core.rubric import load_rubric, rubric_from_dict
from rlkit.judging.schema import rubric_json_schema
from rlkit.testing.canned_chat import CannedChatServer

REPO = Path(__file__).resolve().parents[2]
ARITHMETIC = REPO / "conf" / "rubric_files" / "arithmetic.yaml"


def test_the_schema_has_one_field_per_dimension_with_exactly_its_levels():
    rubric = load_rubric(ARITHMETIC)
    schema = rubric_json_schema(rubric.dimensions)
    assert schema["required"] == ["format", "correctness", "brevity", "repetition"]
    assert schema["additionalProperties"] is False  # what OpenAI's strict mode needs
    assert schema["properties"]["format"] == {"type": "integer", "enum": [0, 1]}  # binary
    assert schema["properties"]["brevity"] == {"type": "integer", "enum": [1, 2, 3, 4, 5]}  # a 1-5 scale
    reordered = rubric_json_schema([rubric.dimensions[2], rubric.dimensions[0]])
    assert list(reordered["properties"]) == ["brevity", "format"], "the order asked is the order written"
    fractional = rubric_from_dict({"name": "f", "version": "1", "dimensions": [
        {"name": "quality", "type": "scale", "range": [0, 2.5], "checks": [{"type": "length", "max": 3}]}]})
    assert rubric_json_schema(fractional.dimensions)["properties"]["quality"] == {
        "type": "number", "minimum": 0.0, "maximum": 2.5}


@pytest.fixture(scope="module")
def tiny_backend(tmp_path_factory):
    """The hf backend on the embedded tiny policy with random weights: a model that writes noise unconstrained."""
    from rlkit.lm.models import build_tiny_policy
    from rlkit_plugins.backends.hf import HFBackend

    folder = build_tiny_policy(cache_dir=tmp_path_factory.mktemp("models"))
    return HFBackend(HFBackend.Params(model=str(folder), max_new_tokens=96, batch_size=4))


def test_constrained_generation_on_a_random_tiny_model_always_parses(tiny_backend):
    rubric = load_rubric(ARITHMETIC)
    schema = rubric_json_schema(rubric.dimensions)
    chats = [[{"role": "user", "content": f"Score the answer {i} to {i}+1= on {', '.join(rubric.dimension_names)}."}]
             for i in range(6)]
    free = tiny_backend.complete(chats)
    assert not any(_parses(c.text, schema) for c in free), "random weights write no JSON unconstrained"
    constrained = tiny_backend.complete(chats, schema=schema)
    assert all(_parses(c.text, schema) for c in constrained), [c.text for c in constrained]
    assert all(c.tokens_out is not None and c.tokens_out <= 96 for c in constrained)


def _parses(text: str | None, schema: dict) -> bool:
    try:
        answer = json.loads(text or "")
    except ValueError:
        return False
    props = schema["properties"]
    return (isinstance(answer, dict) and set(answer) == set(props)
            and all(answer[k] in props[k]["enum"] for k in props))


def test_a_schema_the_grammar_engine_cannot_compile_is_one_config_error():
    from rlkit.lm.constrained import json_schema_grammar

    with pytest.raises(ConfigError, match="the JSON schema cannot constrain generation"):
        json_schema_grammar({"type": "object", "properties": {"a": {"type": "frob"}}})


@pytest.mark.parametrize("style, expected", [
    ("json_schema", {"type": "json_schema", "json_schema": {"name": "rubric_scores", "strict": True}}),
    ("json_object", {"type": "json_object"}),  # llama-cpp-python's server takes only this form
    ("none", None),
])
def test_the_openai_backend_sends_the_response_format_the_server_takes(style, expected):
    from rlkit_plugins.backends.openai import OpenAIBackend

    schema = rubric_json_schema(load_rubric(ARITHMETIC).dimensions)
    with CannedChatServer(lambda messages: '{"format": 1}') as server:
        backend = OpenAIBackend(OpenAIBackend.Params(base_url=server.url, response_format=style))
        (answer,) = backend.complete([[{"role": "user", "content": "score"}]], schema=schema)
        (plain,) = backend.complete([[{"role": "user", "content": "hello"}]])
    assert answer.text == '{"format": 1}'
    sent = server.bodies[0].get("response_format")
    if expected is None:
        assert sent is None and not backend.structured_outputs
    elif style == "json_schema":
        assert sent["type"] == "json_schema" and sent["json_schema"]["schema"] == schema
        assert {k: sent["json_schema"][k] for k in ("name", "strict")} == {"name": "rubric_scores", "strict": True}
    else:
        assert sent == {"type": "json_object", "schema": schema}
    assert "response_format" not in server.bodies[1], "no schema asked, none sent"
    assert backend.identity()["response_format"] == style  # a cached answer is never reused across styles


def test_a_response_format_that_is_not_one_of_the_three_is_refused():
    from rlkit_plugins.backends.openai import OpenAIBackend

    with pytest.raises(ConfigError, match=r"judge\.params\.backend\.params\.response_format: must be json_schema"):
        OpenAIBackend(OpenAIBackend.Params(response_format="grammar"))  # type: ignore[arg-type]


def test_the_llm_judge_asks_for_the_rubric_schema_and_the_cache_keeps_styles_apart(tmp_path, monkeypatch):
    """judge=llm over openai: each request carries the schema of its permutation's dimension order; with
    ``structured: false`` none is sent."""
    from rlkit.core.registry import load_registry
    from rlkit.core.types import Rollout

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path))
    rubric = load_rubric(ARITHMETIC)
    answer = json.dumps({"format": 1, "correctness": 1, "brevity": 5, "repetition": 5})
    rollout = Rollout(records=[{"prompt": "3+4=", "reference": "7"}], completions=[["7", "12"]])
    with CannedChatServer(lambda messages: answer) as server:
        registry = load_registry()
        backend = {"name": "openai", "params": {"base_url": server.url}}
        judge = registry.create("judge", "llm", {"backend": backend, "permutations": 2})
        scores = judge.score(rollout, rubric)
        plain = registry.create("judge", "llm", {"backend": backend, "structured": False}).score(rollout, rubric)
    assert scores.tolist() == plain.tolist() == [[[1.0, 1.0, 5.0, 5.0], [1.0, 1.0, 5.0, 5.0]]]
    structured = [b["response_format"]["json_schema"]["schema"] for b in server.bodies[:4]]
    orders = {tuple(s["properties"]) for s in structured}
    assert len(orders) == 2 and ("format", "correctness", "brevity", "repetition") in orders
    assert all("response_format" not in b for b in server.bodies[4:]) and len(server.bodies) == 6


# --- scores from probabilities (scoring: expected) -------------------------------------------------------------


def test_level_probabilities_are_read_at_the_value_token_and_weigh_each_level(tiny_backend):
    """Hand-made logits at the step that writes ``format``'s value: "1" three times as likely as "0" (every other
    token impossible) gives {0: 0.25, 1: 0.75}, whose expectation is 0.75."""
    import math

    import torch

    from rlkit.lm.constrained import JsonSchemaConstraint

    tiny_backend.complete([[{"role": "user", "content": "load"}]])  # loads the tokenizer
    tokenizer = tiny_backend._tokenizer
    schema = rubric_json_schema(load_rubric(ARITHMETIC).dimensions)
    constraint = JsonSchemaConstraint(tokenizer, schema, 1, [tokenizer.eos_token_id], level_probs=True)
    vocab = len(tokenizer)
    constraint(torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, vocab))  # starts the matcher
    for token in tokenizer('{"format":', add_special_tokens=False)["input_ids"]:
        constraint(torch.tensor([[token]]), torch.zeros(1, vocab))
    zero, one = (tokenizer(d, add_special_tokens=False)["input_ids"][0] for d in "01")
    logits = torch.full((1, vocab), -math.inf)
    logits[0, zero], logits[0, one] = 0.0, math.log(3.0)
    constraint(torch.tensor([[tokenizer(" ", add_special_tokens=False)["input_ids"][0]]]), logits.clone())
    probs = constraint.level_probs[0]["format"]
    assert probs == pytest.approx({0: 0.25, 1: 0.75})
    assert sum(level * p for level, p in probs.items()) == pytest.approx(0.75)


def test_the_hf_backend_returns_level_probabilities_consistent_with_what_it_wrote(tiny_backend):
    schema = rubric_json_schema(load_rubric(ARITHMETIC).dimensions)
    chats = [[{"role": "user", "content": f"score {i}"}] for i in range(4)]
    for completion in tiny_backend.complete(chats, schema=schema, level_probs=True):
        written = json.loads(completion.text)
        assert set(completion.level_probs) == set(schema["properties"])
        for name, probs in completion.level_probs.items():
            assert sum(probs.values()) == pytest.approx(1.0) and set(probs) == set(schema["properties"][name]["enum"])
            assert max(probs, key=probs.get) == written[name], "greedy decoding writes the likeliest level"


def test_expected_scoring_needs_structured_answers_and_a_backend_that_reads_probabilities():
    from rlkit.core.registry import load_registry

    registry = load_registry()
    with pytest.raises(ConfigError, match=r"judge\.params\.scoring: expected .* set judge\.params\.structured: true"):
        registry.create("judge", "llm", {"scoring": "expected", "structured": False})
    # openai reads them from the server's top_logprobs (tests/judging/test_openai_expected.py), but only when it
    # sends a schema: without one there is no structured answer whose value tokens to read
    with pytest.raises(ConfigError, match=r"judge\.params\.scoring: expected needs a backend .* openai does not"):
        registry.create("judge", "llm", {"scoring": "expected", "backend": {
            "name": "openai", "params": {"response_format": "none"}}})


def test_the_llm_judge_scores_the_expected_level_between_the_levels(tiny_backend, tmp_path, monkeypatch):
    """On a random-weight model every answer parses, and ``expected`` gives each dimension the probability-weighted
    mean of its levels: inside the range, and not only whole levels (the ties GRPO cannot use are rarer)."""
    from rlkit.core.registry import load_registry
    from rlkit.core.types import Rollout

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path))
    rubric = load_rubric(ARITHMETIC)
    rollout = Rollout(records=[{"prompt": "3+4=", "reference": "7"}, {"prompt": "1+1=", "reference": "2"}],
                      completions=[["7", "12"], ["2", "two"]])
    backend = {"name": "hf", "params": {"model": tiny_backend.params.model, "max_new_tokens": 96}}
    judge = load_registry().create("judge", "llm", {"backend": backend, "scoring": "expected",
                                                    "template": "judge/rubric_scores.jinja"})
    judgement = judge.assess(rollout, rubric)
    scores = judgement.scores
    assert judgement.metrics["judge/parse_failure_rate"] == 0.0
    low = torch.tensor([d.low for d in rubric.dimensions])
    high = torch.tensor([d.high for d in rubric.dimensions])
    assert ((scores >= low) & (scores <= high)).all()
    assert (scores != scores.round()).any(), "probability-weighted, not whole levels"
