"""What a judge backend hands back for one request."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Completion:
    """One backend answer: ``text`` is None when the request failed after the backend's retries
    (then ``error`` says why). ``latency`` is the wall time of the request in seconds, retries included."""

    text: str | None
    error: str | None = None
    latency: float = 0.0
    attempts: int = 1


def render_chat(messages: Sequence[dict[str, str]], tokenizer: Any) -> str:
    """The prompt text for one chat: the tokenizer's chat template, else ``role: content`` lines + ``assistant:``.

    One rendering for every local model path (the hf backend, the OpenAI-compatible test server), so they
    answer a chat identically under greedy decoding.
    """
    if getattr(tokenizer, "chat_template", None):
        return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True)
    return "".join(f"{m['role']}: {m['content']}\n" for m in messages) + "assistant:"
