"""A completion ends at any of the model's end tokens, not only at the tokenizer's EOS: on a tiny policy whose
generation config lists a chat template's ``<|im_end|>`` beside its EOS (as Qwen2.5-Instruct's lists
``<|im_end|>`` and ``<|endoftext|>``), every generator stops a row there, marks it ended (not truncated) and leaves
the padding after it out of the mask; so ``mask_truncated_completions``, ``sampling.truncated`` and the
``frac_truncated`` / ``completion_length`` metrics see ended rows as ended."""

from __future__ import annotations

import json

import pytest
import torch

from rlkit.cli import main
from rlkit.core.registry import Registry, create_plugin_manager
from rlkit.lm.decoding import end_token_ids
from rlkit.lm.models import TinyPolicySpec, build_model, build_tokenizer
from rlkit.lm.sampling import GenerationRequest, sequence_log_probs, tokenize_prompts
from rlkit.testing import example_prompts
from rlkit.testing.openai_server import OpenAICompatibleServer
from rlkit_plugins.generators.openai_server import _read_choices

_REGISTRY = Registry(create_plugin_manager())
IM_END = "<|im_end|>"
MAX_NEW = 10
SEEDS = [11, 12, 13]


def _policy(favour: float = 1.0):
    """The tiny policy with ``<|im_end|>`` among its generation config's end tokens, its output row for it pointed
    along the prompts' hidden states (``favour``: how far) so that some samples end there and others run on."""
    spec = TinyPolicySpec()
    tokenizer = build_tokenizer(spec)
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_END]})
    model = build_model(spec, tokenizer).eval()
    end = tokenizer.convert_tokens_to_ids(IM_END)
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, end]
    ids, mask = tokenize_prompts(tokenizer, example_prompts())
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1][:, -1]
        weight = model.get_output_embeddings().weight
        weight[end] += favour * torch.nn.functional.normalize(hidden.mean(0), dim=0) * weight.norm(dim=1).mean()
    return model, tokenizer


@pytest.fixture(scope="module")
def policy():
    return _policy()


def _request(*, greedy: bool = False) -> GenerationRequest:
    return GenerationRequest(example_prompts(), 1 if greedy else 4, MAX_NEW, temperature=1.0, greedy=greedy,
                             seeds=None if greedy else SEEDS)


def _check_rows(batch, tokenizer) -> int:
    """Each row ends at its first end token (then ended, not truncated) or runs to ``MAX_NEW`` (truncated), with
    nothing but padding, outside the mask, after it; returns how many rows ``<|im_end|>`` ended."""
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    ends = {tokenizer.eos_token_id, im_end}
    lengths = batch.completion_mask.sum(1).tolist()
    by_im_end = 0
    for r, n in enumerate(lengths):
        row = batch.completion_ids[r].tolist()
        assert n > 0 and batch.completion_mask[r, :n].all() and not batch.completion_mask[r, n:].any()
        assert not ends & set(row[:n - 1]), f"row {r} runs past an end token: {row}"
        ended = row[n - 1] in ends
        assert bool(batch.truncated[r]) == (not ended), (r, row, n)
        assert ended or n == MAX_NEW, (r, row, n)
        assert all(t == tokenizer.pad_token_id for t in row[n:]), f"row {r} is padded with the pad id: {row}"
        by_im_end += row[n - 1] == im_end
    return by_im_end


def test_end_token_ids_are_the_eos_and_the_generation_configs(policy):
    model, tokenizer = policy
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    assert end_token_ids(model, tokenizer) == [tokenizer.eos_token_id, im_end]
    model.generation_config.eos_token_id = im_end  # an int, the tokenizer's EOS still ends a row
    try:
        assert end_token_ids(model, tokenizer) == [tokenizer.eos_token_id, im_end]
    finally:
        model.generation_config.eos_token_id = [tokenizer.eos_token_id, im_end]


@pytest.mark.parametrize("greedy", [False, True], ids=["sampled", "greedy"])
def test_the_hf_generator_stops_at_any_end_token_by_loop_and_by_generate(policy, greedy):
    model, tokenizer = policy
    batches = [_REGISTRY.create("generator", "hf", {"per_prompt_seed": True, "decode_loop": loop}).generate(
        model, tokenizer, _request(greedy=greedy)) for loop in (True, False)]
    by_loop, by_generate = batches
    assert torch.equal(by_loop.input_ids, by_generate.input_ids) and by_loop.texts == by_generate.texts
    assert torch.equal(by_loop.completion_mask, by_generate.completion_mask)
    assert torch.equal(by_loop.truncated, by_generate.truncated)
    assert _check_rows(by_loop, tokenizer) >= 1, "the favoured <|im_end|> ends some row"
    if not greedy:
        assert by_loop.truncated.any(), "and some row runs to the limit"


def test_the_openai_server_generator_reads_finish_reason_and_draws_what_hf_draws(policy):
    model, tokenizer = policy
    hf = _REGISTRY.create("generator", "hf", {"per_prompt_seed": True}).generate(model, tokenizer, _request())
    with OpenAICompatibleServer() as live:  # the plain tiny policy until the sync loads ours, <|im_end|> and all
        generator = _REGISTRY.create("generator", "openai_server", {"base_url": live.url, "sync": "full"})
        try:
            generator.setup(model, tokenizer)
            batch = generator.generate(model, tokenizer, _request())
        finally:
            generator.close()
    assert _check_rows(batch, tokenizer) >= 1 and batch.truncated.any()
    assert torch.equal(batch.input_ids, hf.input_ids) and batch.texts == hf.texts
    assert torch.equal(batch.completion_mask, hf.completion_mask) and torch.equal(batch.truncated, hf.truncated)
    with torch.no_grad():
        own = sequence_log_probs(model, batch)
    keep = batch.completion_mask.bool()
    torch.testing.assert_close(batch.engine_logprobs[keep], own[keep], atol=1e-5, rtol=0)
    assert (batch.engine_logprobs[~keep] == 0).all(), "no log-prob on the padding"


def test_the_llama_cpp_generator_ends_rows_at_the_engines_end_of_generation_tokens():
    pytest.importorskip("xllamacpp", reason="llama.cpp's engine is the judge-server extra")
    model, tokenizer = _policy(favour=3.0)  # the engine draws other samples than the seeded ones: some end here
    generator = _REGISTRY.create("generator", "llama_cpp", {"threads": 1})
    try:
        generator.setup(model, tokenizer)
        batch = generator.generate(model, tokenizer, _request())
    finally:
        generator.close()
    # llama.cpp ends at <|im_end|> by its text (llama-vocab.cpp), whatever the generation config lists
    assert _check_rows(batch, tokenizer) >= 1 and batch.truncated.any()


def test_finish_reason_decides_ended_or_cut_and_its_absence_leaves_it_to_the_tokens():
    def choice(index, ids, reason):
        return {"index": index, "token_ids": ids, "logprobs": {"token_logprobs": [-1.0] * len(ids)},
                **({} if reason is None else {"finish_reason": reason})}

    body = json.dumps({"choices": [choice(0, [5, 7], "stop"), choice(1, [5, 7], "length"),
                                   choice(2, [5, 7], None), choice(3, [5, 2], "abort")]}).encode()
    assert [ended for _, _, ended in _read_choices(4)(body)] == [True, False, None, False]


@pytest.mark.slow
@pytest.mark.parametrize("generator", ["hf", "openai_server"])
def test_a_fit_sees_rows_ended_by_im_end_as_finished(tmp_path, generator):
    model, tokenizer = _policy(favour=6.0)  # most samples of the task's prompts end at once with <|im_end|>
    path = tmp_path / "policy"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    args = ["fit", f"model.name_or_path={path}", "trainer.max_steps=1", "batch_size=2", "num_generations=4",
            f"max_completion_length={MAX_NEW}", "objective.params.mask_truncated_completions=true",
            "sampling.truncated=mask", "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]
    if generator == "hf":
        assert main([*args, "generator=hf"]) == 0
    else:
        with OpenAICompatibleServer(path) as live:
            assert main([*args, "generator=openai_server", f"generator.params.base_url={live.url}",
                         "generator.params.sync=full"]) == 0
    rows = [json.loads(line)["metrics"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    step = next(r for r in rows if "frac_truncated" in r)
    # the EOS rule read every <|im_end|> row as cut: frac_truncated ~1, and (openai_server) its padding as trained
    assert step["frac_truncated"] < 0.5, step
    assert step["completion_length"] < MAX_NEW / 2, step
    # sampling.truncated=mask took the reward of the cut rows only, the same flag the metric counts
    assert step["unscored_completions"] == pytest.approx(step["frac_truncated"] * 2 * 4), step
