"""Sampling completions from the policy: one batched, left-padded ``generate`` per step."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlkit.data import prompt_text
from rlkit.losses import mask_after_eos, selective_log_softmax, truncated_rows


@dataclass
class SampledBatch:
    """Token tensors of B×G sequences (prompt + completion) and the completion texts ``[B][G]``.

    ``input_ids``/``attention_mask`` are ``[B*G, P+C]`` (prompt left-padded to P); the completion
    is the last C positions, ``completion_mask`` ``[B*G, C]`` is 1 up to and including EOS.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    prompt_length: int
    texts: list[list[str]]
    truncated: torch.Tensor

    @property
    def completion_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_length:]

    @property
    def completion_token_counts(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)

    def rows(self, rows: slice) -> SampledBatch:
        """The sequences ``rows`` of the flat ``[B*G]`` axis, for micro-batched passes (texts left out)."""
        return SampledBatch(self.input_ids[rows], self.attention_mask[rows], self.completion_mask[rows],
                            self.prompt_length, [], self.truncated[rows])


def micro_batches(num_rows: int, num_chunks: int) -> list[slice]:
    """``num_rows`` split into at most ``num_chunks`` contiguous, nearly equal slices."""
    size = -(-num_rows // max(1, min(num_chunks, num_rows)))
    return [slice(start, min(start + size, num_rows)) for start in range(0, num_rows, size)]


def render_prompt(prompt: str | Sequence[dict[str, str]], tokenizer: Any) -> str:
    """Chat messages go through the tokenizer's chat template when it has one."""
    if isinstance(prompt, str):
        return prompt
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
    return prompt_text(prompt)


@torch.no_grad()
def sample_completions(model: Any, tokenizer: Any, records: Sequence[dict[str, Any]], num_generations: int,
                       max_completion_length: int, temperature: float = 1.0, greedy: bool = False) -> SampledBatch:
    """Generate ``num_generations`` completions per record in one batched call (KV cache on)."""
    prompts = [render_prompt(r["prompt"], tokenizer) for r in records]
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    device = next(model.parameters()).device
    ids = enc["input_ids"].repeat_interleave(num_generations, dim=0).to(device)
    attn = enc["attention_mask"].repeat_interleave(num_generations, dim=0).to(device)
    was_training = model.training
    model.eval()
    out = model.generate(
        input_ids=ids, attention_mask=attn, max_new_tokens=max_completion_length,
        do_sample=not greedy, temperature=temperature if not greedy else None, top_k=None, top_p=None,
        pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, use_cache=True,
    )
    model.train(was_training)
    prompt_length = ids.shape[1]
    completion = out[:, prompt_length:]
    completion_mask = mask_after_eos(completion, tokenizer.eos_token_id)
    attention = torch.cat([attn, completion_mask], dim=1)
    texts_flat = tokenizer.batch_decode(completion.masked_fill(completion_mask == 0, tokenizer.pad_token_id),
                                        skip_special_tokens=True)
    texts = [texts_flat[i * num_generations:(i + 1) * num_generations] for i in range(len(records))]
    return SampledBatch(out, attention, completion_mask, prompt_length, texts,
                        truncated_rows(completion, tokenizer.eos_token_id))


def sequence_log_probs(model: Any, sampled: SampledBatch) -> torch.Tensor:
    """Per-token log-probs of the completion tokens ``[N, C]`` under ``model``."""
    logits = model(input_ids=sampled.input_ids, attention_mask=sampled.attention_mask).logits
    # position t predicts token t+1: keep the logits that predict completion tokens only
    logits = logits[:, sampled.prompt_length - 1:-1, :]
    return selective_log_softmax(logits.float(), sampled.completion_ids)
