"""``hf``: sampling with the policy's own Hugging Face model, one batched, left-padded pass per step.

The policy being trained is the model that samples, so there are no weights to synchronise. By default the
tokens come from ``decode_with_kv_cache``, rlkit's own decoding loop over the model's KV cache, which draws
exactly what ``generate`` draws (the same logits, the same random numbers; a test checks it token for token)
without ``generate``'s per-token bookkeeping: 1.10-1.18x faster sampling on the default tiny policy, level on
a 14M one (benchmarks/generation_trials.py). Settings the loop does not implement (a ``generation_kwargs``
entry other than ``min_new_tokens``, a non-default field of the model's generation config such as
``repetition_penalty``, an encoder-decoder model, FSDP over several processes) go through ``generate``. With
``per_prompt_seed`` each completion is drawn by the Gumbel-max trick from noise that is a hash of its record's
seed, its position in the group and the decoding step: a record's completions then depend on its seed alone,
not on the other prompts in the batch or on how many processes share the batch. A row ends at any of the
model's end tokens (``end_token_ids``: the tokenizer's EOS and its generation config's ``eos_token_id``), which
then ends its mask and marks it finished, not truncated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlkit.plugin import (
    GenerationRequest,
    SampledBatch,
    SeededSampling,
    assemble_sampled_batch,
    decode_with_kv_cache,
    end_token_ids,
    group_row_seeds,
    hookimpl,
    loop_can_decode,
    tokenize_prompts,
)


class HFGenerator:
    """The policy's own KV-cached sampling (rlkit's decoding loop, or ``generate`` where the loop would differ);
    greedy for held-out evaluation, sampling otherwise."""

    @dataclass
    class Params:
        # Draw each record's completions from its own seed (see the module docstring): the same samples
        # on 1 or N processes. Costs one hash over the vocabulary per decoding step.
        per_prompt_seed: bool = False
        # Passed on to `generate` (as TRL's `generation_kwargs`), e.g. {min_new_tokens: 64} for fixed-length
        # completions in a benchmark, or {repetition_penalty: 1.1}. They override rlkit's own settings.
        generation_kwargs: dict[str, Any] = field(default_factory=dict)
        # Decode with rlkit's KV-cache loop where it draws what `generate` would (see the module docstring);
        # false: always `generate`.
        decode_loop: bool = True

    def __init__(self, params: Params) -> None:
        self.params = params
        self.honours_seeds = params.per_prompt_seed  # GeneratorContract checks the promise

    def setup(self, policy: Any, tokenizer: Any) -> None:
        """Nothing to start: the policy samples itself."""

    def generate(self, policy: Any, tokenizer: Any, request: GenerationRequest) -> SampledBatch:
        import torch

        with torch.no_grad():
            return self._generate(policy, tokenizer, request)

    def _generate(self, policy: Any, tokenizer: Any, request: GenerationRequest) -> SampledBatch:
        g = request.num_generations
        prompt_ids, prompt_mask = tokenize_prompts(tokenizer, request.records, request.prompt_token_ids)
        device = next(policy.parameters()).device
        ids = prompt_ids.repeat_interleave(g, dim=0).to(device)
        attn = prompt_mask.repeat_interleave(g, dim=0).to(device)
        sample = not request.greedy
        kwargs: dict[str, Any] = {}
        if sample and self.params.per_prompt_seed and request.seeds is not None:
            if len(request.seeds) != len(request.records):
                raise ValueError(f"{len(request.seeds)} seeds for {len(request.records)} records")
            row_seeds = group_row_seeds(request.seeds, g)
            from transformers import LogitsProcessorList

            kwargs["logits_processor"] = LogitsProcessorList([SeededSampling(row_seeds, ids.shape[1],
                                                                             request.temperature)])
            sample = False  # the processor's argmax is the draw
        # every end token of the model, as `generate` stops by default: the tokenizer's EOS alone would read a row
        # ended by a chat template's <|im_end|> (Qwen2.5-Instruct's config lists it beside <|endoftext|>) as going on
        ends = end_token_ids(policy, tokenizer)
        was_training = policy.training
        policy.eval()
        try:
            if self.params.decode_loop and loop_can_decode(policy, self.params.generation_kwargs):
                completion = decode_with_kv_cache(
                    policy, ids, attn, max_new_tokens=request.max_new_tokens, eos_token_id=ends,
                    pad_token_id=tokenizer.pad_token_id, temperature=request.temperature, greedy=not sample,
                    min_new_tokens=int(self.params.generation_kwargs.get("min_new_tokens", 0)),
                    logits_processor=kwargs.get("logits_processor"))
            else:
                out = policy.generate(
                    input_ids=ids, attention_mask=attn, max_new_tokens=request.max_new_tokens, do_sample=sample,
                    temperature=request.temperature if sample else None, top_k=None, top_p=None,
                    pad_token_id=tokenizer.pad_token_id, eos_token_id=ends or None, use_cache=True,
                    **{**kwargs, **self.params.generation_kwargs})
                completion = out[:, ids.shape[1]:]
        finally:
            policy.train(was_training)
        return assemble_sampled_batch(ids, attn, completion, tokenizer, g, end_ids=ends)

    def sync_weights(self, policy: Any) -> None:
        """Nothing to copy: the next ``generate`` uses the updated policy itself."""

    def close(self) -> None:
        pass


@hookimpl
def rlkit_register_generators(register):
    register("hf", HFGenerator)
