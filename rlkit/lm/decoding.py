"""rlkit's own sampling loop over a causal LM's KV cache: what ``generate`` draws, without its per-token bookkeeping.
The ``hf`` generator samples with it, and ``rlkit.testing.openai_server`` decodes its batches with it."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

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
    import torch
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


def end_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The ids that end a completion: the tokenizer's EOS first, then each of the model's generation config's
    ``eos_token_id`` (transformers allows a list: Qwen2.5-Instruct lists ``<|im_end|>`` and ``<|endoftext|>``,
    Llama-3-Instruct ``<|end_of_text|>``, ``<|eom_id|>`` and ``<|eot_id|>``), as ``generate`` ends a row at any
    of its config's."""
    out: list[int] = []
    config = getattr(_base_model(model), "generation_config", None)
    listed = getattr(config, "eos_token_id", None)
    for token in [tokenizer.eos_token_id, *(listed if isinstance(listed, (list, tuple)) else [listed])]:
        if token is not None and int(token) not in out:
            out.append(int(token))
    return out


def decode_with_kv_cache(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, *, max_new_tokens: int,
                         eos_token_id: int | list[int] | None, pad_token_id: int | None, temperature: float = 1.0,
                         greedy: bool = False, min_new_tokens: int = 0, logits_processor: Any = None,
                         on_step: Callable[[torch.Tensor, torch.Tensor], None] | None = None) -> torch.Tensor:
    """New tokens ``[N, <= max_new_tokens]`` after left-padded prompts, one KV-cached model call per token.

    It follows ``generate``'s sampling loop step for step, so that it draws the same tokens from the same random
    numbers: positions from the attention mask (0 under padding), float32 logits of the last position, EOS masked
    while fewer than ``min_new_tokens`` are out, ``logits_processor(ids, scores)`` (rlkit's seeded sampling),
    then argmax or ``multinomial(softmax(scores / temperature))``; rows past their EOS get ``pad_token_id``, and
    the loop stops once every row has ended. ``eos_token_id`` may be several ids (:func:`end_token_ids`: any of them
    ends a row and all are masked by ``min_new_tokens``; the first pads where ``pad_token_id`` is None, as
    ``generate`` does). ``on_step(raw, tokens)``, if given, sees each step's float32 logits before any masking or
    processing (what an inference server reports as raw log-probs) and the tokens drawn.
    """
    import torch
    from transformers import DynamicCache

    stops = [eos_token_id] if isinstance(eos_token_id, int) else list(eos_token_id or [])
    if pad_token_id is None:  # as `generate` does
        pad_token_id = stops[0] if stops else 0
    stop_ids = torch.tensor(stops, dtype=torch.long, device=input_ids.device)
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
        raw = scores.clone() if on_step is not None else None
        if step < min_new_tokens and stops:
            scores[:, stop_ids] = -float("inf")
        if logits_processor is not None:
            ids = torch.cat([input_ids, *new], dim=1) if new else input_ids
            scores = logits_processor(ids, scores)
        if greedy:
            tokens = scores.argmax(dim=-1)
        else:
            tokens = torch.multinomial(torch.softmax(scores / temperature, dim=-1), num_samples=1).squeeze(1)
        tokens = tokens * unfinished + pad_token_id * (1 - unfinished)
        new.append(tokens[:, None])
        if raw is not None:
            on_step(raw, tokens)
        if stops:
            unfinished = unfinished & ~torch.isin(tokens, stop_ids).long()
            if not bool(unfinished.any()):
                break
        step_ids = tokens[:, None]
        mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)
        positions = positions[:, -1:] + 1
    return torch.cat(new, dim=1) if new else input_ids.new_zeros(input_ids.shape[0], 0)
