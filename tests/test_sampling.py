"""Log-prob passes pay only for what their rows need, and give the same numbers as a full forward."""

from __future__ import annotations

import torch

from rlkit.losses import selective_log_softmax
from rlkit.models import build_tiny_policy, load_policy
from rlkit.sampling import GenerationRequest, sequence_log_probs
from rlkit_plugins.generators.hf import HFGenerator


def _full_forward_log_probs(model, sampled) -> torch.Tensor:
    """The plain way: every column through the model, every position through the vocabulary projection."""
    logits = model(input_ids=sampled.input_ids, attention_mask=sampled.attention_mask).logits
    logp = selective_log_softmax(logits[:, sampled.prompt_length - 1:-1].float(), sampled.completion_ids)
    return logp * sampled.completion_mask


def test_trimmed_passes_match_the_full_forward_and_cut_padding():
    model, tokenizer = load_policy(build_tiny_policy())
    eos = tokenizer.eos_token_id
    with torch.no_grad():
        model.get_output_embeddings().weight[eos] += 0.6  # some completions end early, some run to the limit
    records = [{"prompt": "1+1="}, {"prompt": "123+456="}, {"prompt": "7+8="}]
    torch.manual_seed(0)
    sampled = HFGenerator(HFGenerator.Params()).generate(model, tokenizer, GenerationRequest(records, 4, 12))
    lengths = sampled.completion_token_counts
    assert lengths.min() < lengths.max(), "the test needs completions of different lengths"
    seen: list[tuple[int, int]] = []
    original = model.forward

    def recording(*args, **kwargs):
        seen.append(tuple(kwargs["input_ids"].shape))
        return original(*args, **kwargs)

    with torch.no_grad():
        full = _full_forward_log_probs(model, sampled)
        model.forward = recording
        whole = sequence_log_probs(model, sampled)
        short = torch.argsort(lengths)[:4]  # the four shortest completions, of the short prompts
        part = sequence_log_probs(model, sampled.rows(short))
    mask = sampled.completion_mask
    assert torch.allclose(whole * mask, full, atol=1e-5)
    assert torch.allclose(part * mask[short], full[short], atol=1e-5)
    width = sampled.input_ids.shape[1]
    assert seen[0][1] == sampled.prompt_length + int(lengths.max())
    assert seen[1][1] < width, "a pass over short completions must not run the full width"
