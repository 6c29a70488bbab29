"""Log-prob passes pay only for what their rows need, and give the same numbers as a full forward."""

from __future__ import annotations

import itertools

import torch

from rlkit.lm.logprobs import selective_log_softmax
from rlkit.lm.models import build_tiny_policy, load_policy
from rlkit.lm.sampling import GenerationRequest, length_buckets, sequence_log_probs
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


def test_log_prob_passes_build_no_kv_cache():
    # models default to use_cache=True: a pass would build a cache it never reads, and under gradient
    # checkpointing transformers warns that it turns it off
    model, tokenizer = load_policy(build_tiny_policy())
    request = GenerationRequest([{"prompt": "1+1="}], 2, 6)
    sampled = HFGenerator(HFGenerator.Params()).generate(model, tokenizer, request)
    outputs = []
    model.register_forward_hook(lambda _module, _args, out: outputs.append(out))
    with torch.no_grad():
        sequence_log_probs(model, sampled)
    assert outputs
    assert getattr(outputs[0], "past_key_values", None) is None and getattr(outputs[0], "cache", None) is None


def _least_padding(lengths: list[int], buckets: int, width: int, max_rows: int) -> int:
    """Every way to cut the sorted rows into ``buckets`` non-empty runs, the cheapest (rows × widest)."""
    ordered, n = sorted(lengths), len(lengths)
    costs = []
    for cuts in itertools.combinations(range(1, n), buckets - 1):
        bounds = [0, *cuts, n]
        runs = list(itertools.pairwise(bounds))
        if max(b - a for a, b in runs) <= max_rows:
            costs.append(sum((b - a) * (ordered[b - 1] + width) for a, b in runs))
    return min(costs)


def test_length_buckets_cut_where_padding_is_least():
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        n, buckets = int(torch.randint(1, 10, (1,), generator=g)), int(torch.randint(1, 5, (1,), generator=g))
        lengths = torch.randint(1, 40, (n,), generator=g)
        width, max_rows = int(torch.randint(0, 5, (1,), generator=g)), int(torch.randint(1, n + 1, (1,), generator=g))
        out = length_buckets(lengths, buckets, width=width, max_rows=max_rows)
        passes = min(buckets, n)
        cap = max(max_rows, -(-n // passes))  # a cap too small for the passes is raised to the least that fits
        # as many passes as asked (capped by the rows), whatever the lengths: DDP processes stay in step
        assert len(out) == passes and all(1 <= len(rows) <= cap for rows in out)
        assert sorted(torch.cat(out).tolist()) == list(range(n))
        cost = sum(len(rows) * (int(lengths[rows].max()) + width) for rows in out)
        assert cost == _least_padding(lengths.tolist(), passes, width, cap)


def test_length_buckets_put_the_long_tail_apart_and_split_equal_lengths_evenly():
    lengths = torch.tensor([3] * 12 + [40, 128, 5, 6])
    out = length_buckets(lengths, 2)
    assert [sorted(lengths[rows].tolist()) for rows in out][1] == [40, 128]  # not 8 rows as wide as 128
    assert [len(rows) for rows in length_buckets(torch.full((64,), 16), 4)] == [16, 16, 16, 16]
    assert length_buckets(torch.tensor([], dtype=torch.long), 4) == []


def test_length_buckets_with_slack_make_fewer_passes_only_where_they_cost_little():
    equal = torch.full((64,), 16)
    assert [len(rows) for rows in length_buckets(equal, 4, width=6, slack=0.05)] == [64]
    # rows capped at 16 (gradient accumulation): the fewest passes that fit, not one
    assert [len(rows) for rows in length_buckets(equal, 4, width=6, max_rows=16, slack=0.05)] == [16] * 4
    long_tail = torch.tensor([3] * 12 + [40, 128, 5, 6])
    assert len(length_buckets(long_tail, 4, slack=0.05)) == len(length_buckets(long_tail, 4))
    nearly_equal = torch.tensor([16] * 63 + [15])  # a second pass would save one position in 1,024
    assert len(length_buckets(nearly_equal, 2, slack=0.05)) == 1
    assert len(length_buckets(nearly_equal, 2, slack=0.0)) == 2
