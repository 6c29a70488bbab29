"""``hf``: sampling with the policy's own Hugging Face ``generate``, one batched, left-padded call per step.

The policy being trained is the model that samples, so there are no weights to synchronise. With
``per_prompt_seed`` each completion is drawn by the Gumbel-max trick from noise that is a hash of its record's
seed, its position in the group and the decoding step: a record's completions then depend on its seed alone,
not on the other prompts in the batch or on how many processes share the batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from rlkit import hookimpl
from rlkit.sampling import GenerationRequest, SampledBatch, assemble_sampled_batch, tokenize_prompts

_MASK32 = 0xFFFFFFFF


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash on int64 tensors holding values in [0, 2^32) (the ``lowbias32`` constants of
    Chris Wellons' hash-prospector). Products may pass 2^63 and wrap; the low 32 bits kept are still exact."""
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & _MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & _MASK32
    return x ^ (x >> 16)


def seeded_gumbel(row_seeds: torch.Tensor, step: int, vocab_size: int, device: torch.device) -> torch.Tensor:
    """Standard Gumbel noise ``[N, V]``: entry (n, v) is a function of ``row_seeds[n]``, ``step`` and v only."""
    base = _mix32(_mix32(row_seeds.to(device)) ^ step)
    idx = torch.arange(vocab_size, device=device, dtype=torch.int64)
    bits = _mix32(base.unsqueeze(1) ^ _mix32(idx + 0x9E3779B9).unsqueeze(0))
    u = (bits.to(torch.float64) + 0.5) / 2.0**32  # in (0, 1), never 0 or 1
    return -torch.log(-torch.log(u)).to(torch.float32)


class SeededSampling:
    """A logits processor that turns greedy decoding into sampling at ``temperature``: argmax of
    logits / T + Gumbel noise is a draw from softmax(logits / T) (the Gumbel-max trick)."""

    def __init__(self, row_seeds: torch.Tensor, prompt_length: int, temperature: float) -> None:
        self.row_seeds = row_seeds
        self.prompt_length = prompt_length
        self.temperature = temperature

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_length
        noise = seeded_gumbel(self.row_seeds, step, scores.shape[-1], scores.device)
        return scores.float() / self.temperature + noise


class HFGenerator:
    """``model.generate`` with the KV cache; greedy for held-out evaluation, sampling otherwise."""

    @dataclass
    class Params:
        # Draw each record's completions from its own seed (see the module docstring): the same samples
        # on 1 or N processes. Costs one hash over the vocabulary per decoding step.
        per_prompt_seed: bool = False
        # Passed on to `generate` (as TRL's `generation_kwargs`), e.g. {min_new_tokens: 64} for fixed-length
        # completions in a benchmark, or {repetition_penalty: 1.1}. They override rlkit's own settings.
        generation_kwargs: dict[str, Any] = field(default_factory=dict)

    def __init__(self, params: Params) -> None:
        self.params = params
        self.honours_seeds = params.per_prompt_seed  # GeneratorContract checks the promise

    def setup(self, policy: Any, tokenizer: Any) -> None:
        """Nothing to start: the policy samples itself."""

    @torch.no_grad()
    def generate(self, policy: Any, tokenizer: Any, request: GenerationRequest) -> SampledBatch:
        g = request.num_generations
        prompt_ids, prompt_mask = tokenize_prompts(tokenizer, request.records)
        device = next(policy.parameters()).device
        ids = prompt_ids.repeat_interleave(g, dim=0).to(device)
        attn = prompt_mask.repeat_interleave(g, dim=0).to(device)
        sample = not request.greedy
        kwargs: dict[str, Any] = {}
        if sample and self.params.per_prompt_seed and request.seeds is not None:
            if len(request.seeds) != len(request.records):
                raise ValueError(f"{len(request.seeds)} seeds for {len(request.records)} records")
            seeds = torch.tensor([int(s) & _MASK32 for s in request.seeds], dtype=torch.int64)
            row_seeds = _mix32(seeds.repeat_interleave(g) * g + torch.arange(g).repeat(len(seeds)))
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList([SeededSampling(row_seeds, ids.shape[1],
                                                                             request.temperature)])
            sample = False  # the processor's argmax is the draw
        was_training = policy.training
        policy.eval()
        try:
            out = policy.generate(
                input_ids=ids, attention_mask=attn, max_new_tokens=request.max_new_tokens, do_sample=sample,
                temperature=request.temperature if sample else None, top_k=None, top_p=None,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, use_cache=True,
                **{**kwargs, **self.params.generation_kwargs})
        finally:
            policy.train(was_training)
        return assemble_sampled_batch(ids, attn, out[:, ids.shape[1]:], tokenizer, g)

    def sync_weights(self, policy: Any) -> None:
        """Nothing to copy: the next ``generate`` uses the updated policy itself."""

    def close(self) -> None:
        pass


@hookimpl
def rlkit_register_generators(register):
    register("hf", HFGenerator)
