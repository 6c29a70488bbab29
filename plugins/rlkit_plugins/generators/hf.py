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
not on the other prompts in the batch or on how many processes share the batch.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any

import torch

from rlkit.plugin import GenerationRequest, SampledBatch, assemble_sampled_batch, hookimpl, tokenize_prompts

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


# Fields of a model's generation config that do not change what the loop must draw: ids, lengths, and the
# sampling settings rlkit's `generate` call overrides (top_k=None and top_p=None switch a model's defaults off,
# and the loop applies neither); any other non-default field (repetition_penalty, min_p, no_repeat_ngram_size,
# ...) sends sampling to `generate`.
_LOOP_CONFIG_FIELDS = frozenset({"bos_token_id", "eos_token_id", "pad_token_id", "transformers_version",
                                 "_from_model_config", "use_cache", "max_length", "max_new_tokens", "do_sample",
                                 "temperature", "top_k", "top_p"})
_LOOP_KWARGS = frozenset({"min_new_tokens"})


def _base_model(model: Any) -> Any:
    get_base = getattr(model, "get_base_model", None)  # a peft wrapper passes everything through
    return get_base() if callable(get_base) else model


def _sharded_across_processes(model: Any) -> bool:
    """FSDP (1 or 2) over several processes: every forward gathers parameters from all of them, so a process
    whose rows have all ended must keep calling the model (``generate``'s ``synced_gpus``); the loop stops."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()
            and torch.distributed.get_world_size() > 1):
        return False
    return any(getattr(m, "_is_fsdp_managed_module", False)
               or type(m).__name__.startswith(("FullyShardedDataParallel", "FSDP")) for m in model.modules())


def loop_can_decode(model: Any, generation_kwargs: dict[str, Any]) -> bool:
    """Whether ``decode_with_kv_cache`` draws what ``generate`` would for this model and these kwargs."""
    base = _base_model(model)
    config = getattr(base, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False) or set(generation_kwargs) - _LOOP_KWARGS:
        return False
    if _sharded_across_processes(model):
        return False
    gen_config = getattr(base, "generation_config", None)
    diff = gen_config.to_diff_dict() if gen_config is not None else {}
    return not set(diff) - _LOOP_CONFIG_FIELDS


def decode_with_kv_cache(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, max_new_tokens: int,
                         eos_token_id: int | None, pad_token_id: int | None, temperature: float = 1.0,
                         greedy: bool = False, min_new_tokens: int = 0, logits_processor: Any = None) -> torch.Tensor:
    """New tokens ``[N, <= max_new_tokens]`` after left-padded prompts, one KV-cached model call per token.

    It follows ``generate``'s sampling loop step for step, so that it draws the same tokens from the same random
    numbers: positions from the attention mask (0 under padding), float32 logits of the last position, EOS masked
    while fewer than ``min_new_tokens`` are out, ``logits_processor(ids, scores)`` (rlkit's seeded sampling),
    then argmax or ``multinomial(softmax(scores / temperature))``; rows past their EOS get ``pad_token_id``, and
    the loop stops once every row has ended.
    """
    from transformers import DynamicCache

    if pad_token_id is None:  # as `generate` does
        pad_token_id = eos_token_id if eos_token_id is not None else 0
    base = _base_model(model)
    cache = DynamicCache(config=base.config)
    cache_kwarg = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
    mask = attention_mask.long()
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    step_ids, new = input_ids, []
    unfinished = torch.ones(input_ids.shape[0], dtype=torch.long, device=input_ids.device)
    for step in range(max_new_tokens):
        logits = model(input_ids=step_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                       logits_to_keep=1, **{cache_kwarg: cache}).logits
        scores = logits[:, -1].to(copy=True, dtype=torch.float32)
        if step < min_new_tokens and eos_token_id is not None:
            scores[:, eos_token_id] = -float("inf")
        if logits_processor is not None:
            ids = torch.cat([input_ids, *new], dim=1) if new else input_ids
            scores = logits_processor(ids, scores)
        if greedy:
            tokens = scores.argmax(dim=-1)
        else:
            tokens = torch.multinomial(torch.softmax(scores / temperature, dim=-1), num_samples=1).squeeze(1)
        tokens = tokens * unfinished + pad_token_id * (1 - unfinished)
        new.append(tokens[:, None])
        if eos_token_id is not None:
            unfinished = unfinished & (tokens != eos_token_id).long()
            if not bool(unfinished.any()):
                break
        step_ids = tokens[:, None]
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        positions = positions[:, -1:] + 1
    return torch.cat(new, dim=1) if new else input_ids.new_zeros(input_ids.shape[0], 0)


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
            if self.params.decode_loop and loop_can_decode(policy, self.params.generation_kwargs):
                completion = decode_with_kv_cache(
                    policy, ids, attn, max_new_tokens=request.max_new_tokens, eos_token_id=tokenizer.eos_token_id,
                    pad_token_id=tokenizer.pad_token_id, temperature=request.temperature, greedy=not sample,
                    min_new_tokens=int(self.params.generation_kwargs.get("min_new_tokens", 0)),
                    logits_processor=kwargs.get("logits_processor"))
            else:
                out = policy.generate(
                    input_ids=ids, attention_mask=attn, max_new_tokens=request.max_new_tokens, do_sample=sample,
                    temperature=request.temperature if sample else None, top_k=None, top_p=None,
                    pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, use_cache=True,
                    **{**kwargs, **self.params.generation_kwargs})
                completion = out[:, ids.shape[1]:]
        finally:
            policy.train(was_training)
        return assemble_sampled_batch(ids, attn, completion, tokenizer, g)

    def sync_weights(self, policy: Any) -> None:
        """Nothing to copy: the next ``generate`` uses the updated policy itself."""

    def close(self) -> None:
        pass


@hookimpl
def rlkit_register_generators(register):
    register("hf", HFGenerator)
