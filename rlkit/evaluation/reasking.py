"""Asking a model backend for a structured answer until it parses: an answer that does not is shown back to the
model with what is wrong and asked again, up to ``retries`` times. ``rlkit rubric generate`` (criteria),
``rubric.evolve`` and ``rlkit rubric tighten``'s model backend (anchors) ask this way."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

Chat = list[dict[str, str]]


def ask_until_parsed(complete: Callable[[list[Chat], list[int]], Sequence[Any]], chats: Sequence[Chat],
                     parse: Callable[[int, str], Any], reminder: Callable[[int], str], retries: int) -> list[Any]:
    """Each chat's parsed answer, or (a ``str``) the last problem with its answer after ``retries`` reminders.

    ``complete(chats, indices)`` answers the chats still pending (``indices`` into ``chats``), each answer with
    ``text`` (None when the backend failed it) and ``error``; ``parse(i, text)`` raises ValueError saying what is
    wrong; ``reminder(i)`` is what the model is told to answer instead, after that problem."""
    results: list[Any] = ["not asked"] * len(chats)
    pending = {i: list(chat) for i, chat in enumerate(chats)}
    for attempt in range(retries + 1):
        order = sorted(pending)
        answers = complete([pending[i] for i in order], order)
        for i, answer in zip(order, answers, strict=True):
            try:
                if answer.text is None:
                    raise ValueError(f"no answer ({answer.error})")
                results[i] = parse(i, answer.text)
                del pending[i]
            except ValueError as exc:
                results[i] = str(exc)
                if attempt < retries and answer.text is not None:
                    pending[i] = [*pending[i], {"role": "assistant", "content": answer.text},
                                  {"role": "user", "content": f"That answer cannot be used: {exc}. {reminder(i)}"}]
        if not pending:
            break
    return results
