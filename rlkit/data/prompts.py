"""How a reward model reads a prompt, and which side of a held-out split a prompt falls on: one rendering and one
split key, used when a reward model is trained, when it judges and when labels are split into training data.

One chat question reaches ``rlkit data from-labels``, ``rlkit train-grm``, ``rlkit train-rm`` and the ``grm`` and
``reward_model`` judges in three shapes:

* chat messages, as ``rlkit fit``'s chat records hold it: ``[{"role": "user", "content": q}]``;
* ``user: q``, as a labelling file written from a chat run holds it (the labelling page, ``rlkit calibrate sample``
  and the ``label_sample`` monitor flatten messages with :func:`rlkit.data.records.prompt_text`);
* the bare question ``q``, as a labelling file written by hand holds it
  (``conf/calibration/chat_arithmetic_labels.jsonl``).

:func:`reward_prompt` renders all three as ``q``, so a model trained on labels reads in ``rlkit fit`` the text it was
trained on. Anything else renders as :func:`~rlkit.data.records.prompt_text` does: a plain-text prompt as it is
(``3+4=``), several messages as ``role: content`` lines. The rendering never depends on a tokenizer or a chat template:
a labelling file holds no policy, and the GRM puts the prompt inside its own question template.

:func:`prompt_key` is that rendering with whitespace runs collapsed: what ``rlkit data from-labels`` groups,
de-duplicates and splits by, and what ``train-grm``'s and ``train-rm``'s own held-out split hashes
(:func:`heldout_share`). One question in any of the three shapes is one prompt, so it never lands on both sides of
a split, whichever command drew it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from rlkit.data.records import CHAT_ROLES, prompt_text
from rlkit.text.similarity import normalize_whitespace

_USER = "user: "
# where a second message would start in prompt_text's rendering
_NEXT_MESSAGE = tuple(f"\n{role}: " for role in CHAT_ROLES)


def reward_prompt(prompt: str | Sequence[dict[str, str]]) -> str:
    """The text a GRM's question or a reward model's input holds for ``prompt`` (text or chat messages): one user
    message as its content alone, whether given as messages or as ``user: <content>`` text; anything else as
    :func:`~rlkit.data.records.prompt_text`. Messages and their ``prompt_text`` render alike."""
    text = prompt_text(prompt)
    # Read from prompt_text's output, not from the messages, so messages and their flattened text always agree.
    # A content with a line of its own starting "assistant: " reads as two messages and keeps its prefix.
    if text.startswith(_USER) and not any(marker in text for marker in _NEXT_MESSAGE):
        return text[len(_USER):]
    return text


def prompt_key(prompt: Any) -> str:
    """The prompt as compared for grouping and for the held-out split: :func:`reward_prompt`, whitespace collapsed."""
    return normalize_whitespace(reward_prompt(prompt))


def heldout_share(prompt: Any, seed: int) -> float:
    """A seeded hash of :func:`prompt_key` in [0, 1): a prompt whose share is below the held-out fraction is held out,
    so it keeps its side as the data grow, and the same question keeps it in every shape."""
    digest = hashlib.sha256(f"{seed}/{prompt_key(prompt)}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64
