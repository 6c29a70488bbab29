"""What a judge backend hands back for one request, and what a judge hands back for one ``assess`` call."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from rlkit.judging.spend import Spend

Reasons = list[list[dict[str, str]]]  # [B][G] dimension -> the judge's one-line reason


@dataclass(frozen=True)
class Completion:
    """One backend answer: ``text`` is None when the request failed after the backend's retries
    (then ``error`` says why). ``latency`` is the wall time of the request in seconds, retries included.
    ``tokens_in`` and ``tokens_out`` are the prompt and answer tokens it cost (a server's ``usage``, or counted by a
    local tokenizer); None when the backend cannot say, so the judge's spend leaves the call's tokens out.
    ``level_probs``, when asked for (``complete(..., level_probs=True)``), is the model's probability of each level
    of each one-digit integer field of the schema, at the token that wrote the field's value."""

    text: str | None
    error: str | None = None
    latency: float = 0.0
    attempts: int = 1
    tokens_in: int | None = None
    tokens_out: int | None = None
    level_probs: dict[str, dict[int, float]] | None = None
    tokens_cached: int | None = None  # of tokens_in, those the server's prompt cache served (None: not reported)


def render_chat(messages: Sequence[dict[str, str]], tokenizer: Any) -> str:
    """The prompt text for one chat: the tokenizer's chat template, else ``role: content`` lines + ``assistant:``.

    One rendering for every local model path (the hf backend, the OpenAI-compatible test server), so they
    answer a chat identically under greedy decoding.
    """
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"


@dataclass(frozen=True)
class Judgement:
    """Everything one judge call said of one rollout, together (as simonw/llm's ``Response`` carries text and usage):
    nothing about a call is left behind in the judge to be read afterwards.

    ``scores``: ``float32 [B, G, D]``, NaN where the judge could not score. ``reasons``: ``[B][G] -> {dimension:
    one-line reason}``, None when it gives none. ``written_scores``: ``[B, G, D]`` levels as the judge wrote them where
    ``scores`` are something else (expected values), else None. ``confidence``: ``float32 [B]`` in [0, 1], how much
    it trusts each group's order (the loop scales that group's advantages by it), None for full trust. ``spend``: the
    model calls this call made (``rlkit.plugin.Spend``), None for a judge that asks no model. ``metrics``: figures of
    this call, logged every training step (``judge/parse_failure_rate``)."""

    scores: torch.Tensor
    reasons: Reasons | None = None
    written_scores: torch.Tensor | None = None
    confidence: torch.Tensor | None = None
    spend: Spend | None = None
    metrics: Mapping[str, float] = field(default_factory=dict)

    def with_metrics(self, extra: Mapping[str, float]) -> Judgement:
        """This judgement with ``extra`` figures added (a composite's own beside its members')."""
        return replace(self, metrics={**self.metrics, **extra})
