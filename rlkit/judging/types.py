"""What a judge backend hands back for one request."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


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
