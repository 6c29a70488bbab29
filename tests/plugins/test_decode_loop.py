"""The hf generator's KV-cache decoding loop draws exactly what ``generate`` draws, token for token."""

from __future__ import annotations

import pytest
import torch

from rlkit.core.registry import load_registry
from rlkit.lm.decoding import loop_can_decode
from rlkit.lm.models import TinyPolicySpec, build_tiny_policy, load_policy
from rlkit.lm.sampling import GenerationRequest

RECORDS = [{"prompt": "1+2="}, {"prompt": "What is 17 + 25? Answer:"}, {"prompt": "9*9"}]


@pytest.fixture(scope="module")
def policy():
    model, tokenizer = load_policy(build_tiny_policy(TinyPolicySpec()))
    return model, tokenizer


def _sample(policy, *, decode_loop: bool, seed: int, **params):
    model, tokenizer = policy
    kwargs = params.pop("request", {})
    generator = load_registry().create("generator", "hf", {"decode_loop": decode_loop, **params})
    request = GenerationRequest(RECORDS, 4, 12, temperature=kwargs.get("temperature", 1.0),
                                greedy=kwargs.get("greedy", False), seeds=kwargs.get("seeds"))
    torch.manual_seed(seed)
    return generator.generate(model, tokenizer, request)


@pytest.mark.parametrize("case", [
    {},  # multinomial sampling from the global generator
    {"request": {"temperature": 0.7}},
    {"request": {"greedy": True}},
    {"generation_kwargs": {"min_new_tokens": 12}},
    {"per_prompt_seed": True, "request": {"seeds": [11, 12, 13]}},
], ids=["sample", "temperature", "greedy", "min_new_tokens", "seeded"])
def test_the_loop_draws_what_generate_draws(policy, case):
    for seed in range(3):
        by_loop = _sample(policy, decode_loop=True, seed=seed, **case)
        by_generate = _sample(policy, decode_loop=False, seed=seed, **case)
        assert by_loop.texts == by_generate.texts
        assert torch.equal(by_loop.input_ids, by_generate.input_ids)
        assert torch.equal(by_loop.completion_mask, by_generate.completion_mask)
        assert torch.equal(by_loop.truncated, by_generate.truncated)


def test_rows_that_ended_are_padded_and_some_rows_end_early(policy):
    out = _sample(policy, decode_loop=True, seed=0)
    lengths = out.completion_mask.sum(dim=1)
    assert int(lengths.min()) < out.completion_mask.shape[1]  # a random policy emits EOS at random
    assert not out.truncated.all()


def test_settings_the_loop_does_not_implement_go_through_generate(policy):
    model, _ = policy
    assert loop_can_decode(model, {}) and loop_can_decode(model, {"min_new_tokens": 4})
    assert not loop_can_decode(model, {"repetition_penalty": 1.1})
    top_k = model.generation_config.top_k
    model.generation_config.top_k = 20  # switched off by the generator's top_k=None, in `generate` as in the loop
    try:
        assert loop_can_decode(model, {})
    finally:
        model.generation_config.top_k = top_k
    before = model.generation_config.repetition_penalty
    model.generation_config.repetition_penalty = 1.2
    try:
        assert not loop_can_decode(model, {})
    finally:
        model.generation_config.repetition_penalty = before
    assert loop_can_decode(model, {})


def test_a_models_own_top_k_is_switched_off_on_both_paths(policy):
    model, _ = policy
    top_k = model.generation_config.top_k
    model.generation_config.top_k = 1  # would make sampling greedy if either path applied it
    try:
        by_loop, by_generate = (_sample(policy, decode_loop=loop, seed=0) for loop in (True, False))
        assert by_loop.texts == by_generate.texts
    finally:
        model.generation_config.top_k = top_k
    assert _sample(policy, decode_loop=False, seed=0).texts == by_generate.texts
