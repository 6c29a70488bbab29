"""Sampled completions as the loop trains on them, and what a generator plugin is asked for."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlkit.data.records import prompt_text
from rlkit.lm.conversation import is_conversation
from rlkit.lm.logprobs import (
    mask_after_eos,
    selective_log_softmax,
    selective_log_softmax_and_entropy,
    truncated_rows,
)

if TYPE_CHECKING:
    import torch


@dataclass
class SampledBatch:
    """Token tensors of B×G sequences (prompt + completion) and the completion texts ``[B][G]``.

    ``input_ids``/``attention_mask`` are ``[B*G, P+C]`` (prompt left-padded to P); the completion
    is the last C positions, ``completion_mask`` ``[B*G, C]`` is 1 up to and including the token that ended the row
    (EOS, or another of the model's end tokens such as ``<|im_end|>``: see :func:`assemble_sampled_batch`).

    A generator that samples elsewhere (an inference engine) may add what it knows of the sampling:
    ``engine_logprobs`` ``float32 [B*G, C]``, the sampler's log-prob of each completion token (0 past the mask; NaN
    for a token the engine gave none: the importance correction then lets the trainer's own log-prob stand in, ratio
    1, and leaves it out of the mismatch KL), and
    ``policy_version``, the weight version that sampled the batch, and ``policy_lag``, the optimiser steps the
    policy has taken since those weights (importance sampling against ``engine_logprobs`` corrects for both).
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    completion_mask: torch.Tensor
    prompt_length: int
    texts: list[list[str]]
    truncated: torch.Tensor
    engine_logprobs: torch.Tensor | None = None
    policy_version: int | None = None
    policy_lag: int | None = None
    # Multi-turn episodes (``rlkit.train.episodes``): ``episodes`` [B][G] the conversations (``rlkit.Episode``), and per
    # row the policy turns' [start, end) columns in the completion. The completion then holds the environment's
    # tokens between policy turns: attended to, but 0 in ``completion_mask`` (no loss, no KL, no count).
    episodes: list[list[Any]] | None = None
    turn_spans: list[list[tuple[int, int]]] | None = None

    @property
    def completion_ids(self) -> torch.Tensor:
        return self.input_ids[:, self.prompt_length:]

    @property
    def completion_token_counts(self) -> torch.Tensor:
        """The policy's own tokens per row (an episode's environment tokens are not counted)."""
        return self.completion_mask.sum(dim=1)

    @property
    def completion_spans(self) -> torch.Tensor:
        """Completion columns each row occupies, environment tokens included: the width a log-prob pass needs."""
        import torch
        if self.turn_spans is None:
            return self.completion_token_counts
        return torch.tensor([spans[-1][1] if spans else 0 for spans in self.turn_spans],
                            device=self.completion_mask.device)

    def rows(self, rows: slice | torch.Tensor) -> SampledBatch:
        """The sequences ``rows`` (a slice or an index tensor) of the flat ``[B*G]`` axis, for micro-batched
        passes (texts left out)."""
        engine = None if self.engine_logprobs is None else self.engine_logprobs[rows]
        spans = None
        if self.turn_spans is not None:
            picked = range(len(self.turn_spans))[rows] if isinstance(rows, slice) else rows.tolist()
            spans = [self.turn_spans[i] for i in picked]
        return SampledBatch(self.input_ids[rows], self.attention_mask[rows], self.completion_mask[rows],
                            self.prompt_length, [], self.truncated[rows], engine, self.policy_version,
                            self.policy_lag, turn_spans=spans)


def micro_batches(num_rows: int, num_chunks: int, *, exact: bool = False) -> list[slice]:
    """``num_rows`` split into at most ``num_chunks`` contiguous, nearly equal slices; with ``exact``, into
    exactly ``max(1, num_chunks)``, the surplus ones empty (every process of a DDP run makes as many passes)."""
    size = -(-num_rows // max(1, min(num_chunks, num_rows))) if num_rows else 1
    chunks = [slice(start, min(start + size, num_rows)) for start in range(0, num_rows, size)]
    if exact:
        chunks += [slice(num_rows, num_rows)] * (max(1, num_chunks) - len(chunks))
    return chunks


def length_buckets(lengths: torch.Tensor, num_buckets: int, *, width: int = 0,
                   max_rows: int | None = None, slack: float | None = None) -> list[torch.Tensor]:
    """Row indices of ``lengths`` (completion token counts) in ``min(num_buckets, len(lengths))`` non-empty
    passes of rows of similar length, shortest first, each at most ``max_rows`` rows (on ``lengths``' device).
    With ``slack`` (a single process), fewer passes where they cost little more: the fewest whose token
    positions are within ``slack`` (a fraction) of the least that ``num_buckets`` passes reach.

    A pass is cut to its longest completion (``sequence_log_probs``), so it costs about rows × (``width`` +
    its longest length) token positions. The cuts between the sorted rows are the ones that minimise that sum
    (dynamic programming, O(buckets · rows²) on small integer arrays); among equally cheap cuts, the most even.
    Equal-row cuts let a few long completions set the width of a whole slice: on a long-tailed 64-row rollout
    (benchmarks/length_buckets.py) they paid for 12–33% more positions than these with 8–2 buckets. The number
    of passes depends on the row count only, never on the lengths, so every process of a DDP run makes as many
    backward passes; a single process need not, and every pass has a fixed cost: on equal lengths two passes
    made a tiny-policy step 7% slower than one (benchmarks/length_buckets.py).
    """
    import numpy as np
    import torch
    counts = lengths.cpu()
    order = torch.argsort(counts, stable=True)
    n = len(order)
    m = min(max(num_buckets, 1), n)
    if m <= 1:
        return [order.to(lengths.device)] if n else []
    cap = n if max_rows is None else max(max_rows, -(-n // m))
    # numpy, not torch: these are a few dozen tiny ops, and torch's thread pool costs milliseconds per op on a
    # busy machine (measured: 87 ms for 64 rows in 8 buckets with 2 threads, 0.5 ms single-threaded).
    longest = counts.numpy()[order.numpy()].astype(np.int64) + width  # bucket (s, i] is this wide at i-1
    # A bucket of sorted rows s..i-1 costs area × tie + rows²: the area decides, and the square sum (smallest
    # for even buckets) only breaks ties; exact in int64 for any realistic batch.
    tie = n * n + 1
    rows = np.arange(n + 1)[None, :] - np.arange(n + 1)[:, None]
    never = np.iinfo(np.int64).max // 4  # "impossible", small enough that two of them still add up
    step_cost = np.where((rows >= 1) & (rows <= cap),
                         rows * longest[np.clip(np.arange(n + 1) - 1, 0, None)][None, :] * tie + rows * rows, never)
    best = np.full(n + 1, never)
    best[0] = 0
    cut_at, areas = [], []
    for _ in range(m):  # best[i]: cheapest split of the first i sorted rows into the buckets so far
        total = best[:, None] + step_cost
        start = total.argmin(axis=0)
        best = np.minimum(total[start, np.arange(n + 1)], never)
        cut_at.append(start)
        areas.append(best[n] // tie if best[n] < never else never)
    if slack is not None:  # the fewest passes (that fit under the row cap) within the slack of the least area
        within = [k for k, area in enumerate(areas) if area <= areas[-1] * (1 + slack)]
        cut_at = cut_at[:within[0] + 1]
    bounds, end = [], n
    for start in reversed(cut_at):
        begin = int(start[end])
        bounds.append((begin, end))
        end = begin
    return [order[a:b].to(lengths.device) for a, b in reversed(bounds)]


def render_prompt(prompt: str | Sequence[dict[str, str]], tokenizer: Any) -> str:
    """Chat messages go through the tokenizer's chat template when it has one."""
    if isinstance(prompt, str):
        return prompt
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(list(prompt), tokenize=False, add_generation_prompt=True)
    return prompt_text(prompt)


@dataclass(frozen=True)
class GenerationRequest:
    """What a generator is asked for: ``num_generations`` completions of each record's prompt.

    ``seeds`` holds one integer per record, derived from the run seed, the step and the record's position
    in the global batch (not from which process holds it). A generator that honours them samples a record's
    completions from its seed alone, so they do not depend on the other records in the batch or on how the
    batch is split across processes.
    """

    records: Sequence[dict[str, Any]]
    num_generations: int
    max_new_tokens: int
    temperature: float = 1.0
    greedy: bool = False
    seeds: Sequence[int] | None = None
    # One token-id list per record, sampled after exactly as given (a multi-turn episode's conversation so far,
    # whose earlier turns must not be re-tokenised); None: each record's ``prompt`` is rendered and tokenised.
    prompt_token_ids: Sequence[Sequence[int]] | None = None


def tokenize_prompts(tokenizer: Any, records: Sequence[dict[str, Any]],
                     token_ids: Sequence[Sequence[int]] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and attention mask ``[B, P]`` (chat prompts through the chat template); with
    ``token_ids`` (a request's ``prompt_token_ids``), those ids left-padded instead."""
    if token_ids is None:
        prompts = [render_prompt(r["prompt"], tokenizer) for r in records]
        enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        return enc["input_ids"], enc["attention_mask"]
    if len(token_ids) != len(records):
        raise ValueError(f"{len(token_ids)} prompt token lists for {len(records)} records")
    return left_padded([list(ids) for ids in token_ids], pad_id(tokenizer))


def pad_id(tokenizer: Any) -> int:
    return tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id


def left_padded(rows: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``int64 [N, W]`` ids left-padded with ``pad`` to the longest row, and their attention mask."""
    import torch
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        if row:
            ids[i, width - len(row):] = torch.tensor(row, dtype=torch.long)
            mask[i, width - len(row):] = 1
    return ids, mask


def demonstration_text(record: dict[str, Any]) -> str | None:
    """A record's demonstration: its ``completion`` (text, or TRL's conversational list whose assistant messages
    are joined), else its ``reference``; None when it has neither."""
    completion = record.get("completion")
    if isinstance(completion, list):
        parts = [m.get("content") for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
        completion = "".join(p for p in parts if isinstance(p, str)) or None
    if isinstance(completion, str):
        return completion
    reference = record.get("reference")
    return None if reference is None else str(reference)


def demonstration_batch(tokenizer: Any, records: Sequence[dict[str, Any]], max_new_tokens: int,
                        device: torch.device | str = "cpu") -> SampledBatch:
    """Each record's prompt followed by its demonstration and EOS, cut at ``max_new_tokens``, as the
    ``SampledBatch`` a generator would return with one completion per record (prompt tokenised as for sampling)."""
    import torch
    if any(is_conversation(r.get("completion")) for r in records):
        return conversation_batch(tokenizer, records, max_new_tokens, device)
    prompt_ids, prompt_mask = tokenize_prompts(tokenizer, records)
    rows = []
    for i, record in enumerate(records):
        text = demonstration_text(record)
        if text is None:
            raise ValueError(f"record {i} has neither a `completion` nor a `reference` to learn from")
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows.append(ids[:max_new_tokens])
    # A cut row (no EOS) is exactly max_new_tokens long, the widest any row can be: no padding ever follows it,
    # so padding with a pad id that equals EOS cannot end it early.
    width = max(len(r) for r in rows)
    completion = torch.full((len(rows), width), tokenizer.pad_token_id, dtype=prompt_ids.dtype)
    for i, row in enumerate(rows):
        completion[i, :len(row)] = torch.tensor(row, dtype=prompt_ids.dtype)
    return assemble_sampled_batch(prompt_ids.to(device), prompt_mask.to(device), completion.to(device), tokenizer, 1)


def conversation_batch(tokenizer: Any, records: Sequence[dict[str, Any]], max_new_tokens: int,
                       device: torch.device | str = "cpu") -> SampledBatch:
    """Demonstrations with multi-turn completions (tool results between assistant turns) as the ``SampledBatch`` of
    the episodes they show: only the assistant's tokens in ``completion_mask``; single-turn ones as one turn."""
    import torch

    from rlkit.lm.conversation import conversation_ids

    prompts, rows, masks, spans = [], [], [], []
    for i, record in enumerate(records):
        completion = record.get("completion")
        if not isinstance(completion, list):
            text = demonstration_text(record)
            if text is None:
                raise ValueError(f"record {i} has neither a `completion` nor a `reference` to learn from")
            completion = [{"role": "assistant", "content": text}]
        # the record's tools (TRL's `tools` column) are rendered into the prompt, as an environment's are
        p, ids, mask, turns = conversation_ids(tokenizer, record["prompt"], completion, max_new_tokens,
                                               record.get("tools"))
        prompts.append(p)
        rows.append(ids)
        masks.append(mask)
        spans.append(turns)
    input_ids, attention, policy, prompt_length = episode_tensors(prompts, rows, masks, pad_id(tokenizer))
    eos = tokenizer.eos_token_id
    truncated = torch.tensor([not turns or ids[turns[-1][1] - 1] != eos for ids, turns in zip(rows, spans,
                                                                                              strict=True)])
    texts = [[demonstration_text(r) or ""] for r in records]
    return SampledBatch(input_ids.to(device), attention.to(device), policy.to(device), prompt_length,
                        texts, truncated.to(device), turn_spans=spans)


def episode_tensors(prompts: Sequence[Sequence[int]], completions: Sequence[Sequence[int]],
                    policy_masks: Sequence[Sequence[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor,
                                                                             torch.Tensor, int]:
    """Episodes as a ``SampledBatch`` holds them: ``input_ids`` and ``attention_mask`` ``[N, P+C]`` (prompts
    left-padded, completions right-padded, every token of a completion attended to), the ``completion_mask``
    ``[N, C]`` from ``policy_masks`` (1 on the policy's tokens) and P."""
    import torch
    prompt_ids, prompt_mask = left_padded(prompts, pad)
    width = max(1, max(len(r) for r in completions))
    completion = torch.full((len(completions), width), pad, dtype=torch.long)
    attend = torch.zeros((len(completions), width), dtype=prompt_mask.dtype)
    policy = torch.zeros((len(completions), width), dtype=torch.long)
    for i, (ids, mask) in enumerate(zip(completions, policy_masks, strict=True)):
        completion[i, :len(ids)] = torch.tensor(ids, dtype=torch.long)
        attend[i, :len(ids)] = 1
        policy[i, :len(ids)] = torch.tensor(mask, dtype=torch.long)
    return (torch.cat([prompt_ids, completion], dim=1), torch.cat([prompt_mask, attend], dim=1), policy,
            prompt_ids.shape[1])


def assemble_sampled_batch(prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, completion_ids: torch.Tensor,
                           tokenizer: Any, num_generations: int, *, lengths: Sequence[int] | None = None,
                           stopped: Sequence[bool] | None = None,
                           end_ids: Sequence[int] | None = None) -> SampledBatch:
    """The ``SampledBatch`` the loop trains on, from ``[B*G, P]`` left-padded prompts (each prompt repeated G
    times, consecutively) and ``[B*G, C]`` completion ids; anything after a row's first end token is ignored.

    A generator that produces tokens elsewhere (an inference engine) builds its result with this, so the mask,
    texts and truncation flags follow one rule whichever engine sampled. The end tokens are ``end_ids`` (what the
    generator stopped at: ``rlkit.lm.decoding.end_token_ids``, the tokenizer's EOS and the generation config's),
    the tokenizer's EOS alone by default. An engine that knows more than the ids say passes it: ``lengths``, the
    tokens it sampled per row (the mask covers exactly those, an end token that is not the tokenizer's EOS
    included, padding never), and ``stopped``, whether it ended each row itself (an end-of-generation token such as
    a chat template's ``<|im_end|>``, a stop string) rather than cutting it at the length limit; a row not stopped
    is ``truncated``."""
    import torch
    ends = tokenizer.eos_token_id if end_ids is None else list(end_ids)
    if lengths is None:
        completion_mask = mask_after_eos(completion_ids, ends)
    else:
        positions = torch.arange(completion_ids.shape[1], device=completion_ids.device)
        completion_mask = (positions < torch.tensor(list(lengths), device=completion_ids.device)[:, None]).long()
    truncated = truncated_rows(completion_ids, ends) if stopped is None else \
        ~torch.tensor(list(stopped), dtype=torch.bool, device=completion_ids.device)
    attention = torch.cat([prompt_mask, completion_mask.to(prompt_mask.dtype)], dim=1)
    texts_flat = tokenizer.batch_decode(completion_ids.masked_fill(completion_mask == 0, tokenizer.pad_token_id),
                                        skip_special_tokens=True)
    b = len(texts_flat) // num_generations
    texts = [texts_flat[i * num_generations:(i + 1) * num_generations] for i in range(b)]
    return SampledBatch(torch.cat([prompt_ids, completion_ids], dim=1), attention, completion_mask,
                        prompt_ids.shape[1], texts, truncated)


def sequence_log_probs(model: Any, sampled: SampledBatch) -> torch.Tensor:
    """Per-token log-probs of the completion tokens ``[N, C]`` under ``model``; only positions inside
    ``completion_mask`` mean anything (columns past the longest completion are 0).

    Only what the rows need goes through the model: prompt columns that are padding in every row and
    completion columns past the longest completion are cut (so a micro-batch of short completions pays for
    its own length, not the batch's), and the vocabulary projection runs for completion positions only
    (``logits_to_keep``). Cutting left padding shifts absolute positions, which rotary embeddings do not see.
    No KV cache: a single pass never reads one back.
    """
    import torch
    logits, keep, c = _completion_logits(model, sampled)
    logp = selective_log_softmax(logits, sampled.completion_ids[:, :keep])  # float32, upcast a chunk at a time
    return torch.nn.functional.pad(logp, (0, c - keep)) if keep < c else logp


def sequence_log_probs_and_entropy(model: Any, sampled: SampledBatch,
                                   entropy_grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`sequence_log_probs` and, from the same forward pass's logits, the policy's entropy at each completion
    position ``[N, C]`` (detached unless ``entropy_grad``; 0 past the longest completion; only ``completion_mask``
    positions mean anything)."""
    import torch
    logits, keep, c = _completion_logits(model, sampled)
    logp, entropy = selective_log_softmax_and_entropy(logits, sampled.completion_ids[:, :keep], entropy_grad)
    if keep < c:
        logp, entropy = (torch.nn.functional.pad(t, (0, c - keep)) for t in (logp, entropy))
    return logp, entropy


def _completion_logits(model: Any, sampled: SampledBatch) -> tuple[torch.Tensor, int, int]:
    """The logits predicting the first ``keep`` completion tokens ``[N, keep, V]``, ``keep`` and the full width C."""
    p, c = sampled.prompt_length, sampled.completion_mask.shape[1]
    keep = max(int(sampled.completion_spans.max()), 1) if sampled.completion_mask.numel() else c
    used = sampled.attention_mask[:, :p].any(dim=0).nonzero()
    start = min(int(used[0]) if len(used) else p - 1, p - 1)  # keep at least the token predicting the first one
    ids = sampled.input_ids[:, start:p + keep]
    logits = model(input_ids=ids, attention_mask=sampled.attention_mask[:, start:p + keep],
                   logits_to_keep=keep + 1, use_cache=False).logits[:, :-1, :]
    # position t predicts token t+1: the kept logits predict exactly the completion tokens
    return logits, keep, c
