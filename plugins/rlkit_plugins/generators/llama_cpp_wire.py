"""llama.cpp's ``/completion`` wire as the ``llama_cpp`` generator speaks it: the request body it sends and how it
reads the answer, each sampled token with its raw log-prob.

Wire (llama.cpp ``tools/server/README.md``, ``POST /completion``): ``prompt`` as token ids (nothing re-tokenised),
``n_cmpl`` = G completions of one prompt (the j-th seeded ``seed + j``; at most ``slots``), ``n_predict``,
``temperature`` (0: greedy), ``top_k`` 0, ``top_p`` 1, ``min_p`` 0 (llama.cpp's defaults 40, 0.95 and 0.05 would
sample a truncated distribution the trainer's log-probs do not describe), ``n_probs`` 1 with ``post_sampling_probs``
off: each ``completion_probabilities[i].logprob`` is the sampled token's log-prob under the raw model distribution
(softmax of the logits, no temperature), which is what the trainer computes and ``engine_logprobs`` promises.
``return_tokens``: the sampled ids, the end-of-generation token that ends a completion among them.

Two things in the answer are not one-per-token, and the generator reads them as the server builds them
(``tools/server/server-context.cpp``, ``process_token`` and ``send_final_response``):

* A token after which the text ends partway through a UTF-8 character gets no ``completion_probabilities`` entry
  (the server withholds it until a later token completes the character; that token's entry carries its own ``id``
  and log-prob), and neither do the tokens of a completion that ends mid-character. Entries are matched to tokens by
  ``id`` in order: a token gets an entry's log-prob where every way of matching agrees (the leftmost and the
  rightmost matching place the entry on it), NaN otherwise, and ``generator/logprobs_missing`` counts them each
  step. The importance correction takes a NaN as "not known": ratio 1 there (the trainer's own log-prob stands in)
  and the mismatch KL is averaged over the known tokens (``rlkit.lm.logprobs.importance_correction``).
* Whether a completion ended or was cut is the server's ``stop_type`` (``eos``: any end-of-generation token of the
  GGUF's vocabulary, e.g. a chat template's ``<|im_end|>`` where the tokenizer's EOS is another token; ``word``: a
  stop string; ``limit``: ``n_predict``), not the presence of the tokenizer's EOS: each row's mask covers exactly the
  tokens the engine sampled, its last one included.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from rlkit.plugin import GenerationRequest

# One completion as read: its token ids, each one's log-prob (NaN: not known) and whether the engine ended it
# (None: the answer does not say).
Rows = list[tuple[list[int], list[float], bool | None]]


def completion_body(prompt: list[int], request: GenerationRequest, seed: int | None, prompt_cache: bool,
                    extra_body: dict[str, Any] | None) -> dict[str, Any]:
    """The ``POST /completion`` body that samples ``request``'s G completions of one prompt (token ids)."""
    body: dict[str, Any] = {
        "prompt": prompt, "n_cmpl": request.num_generations, "n_predict": request.max_new_tokens,
        "temperature": 0.0 if request.greedy else request.temperature, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
        "n_probs": 1, "post_sampling_probs": False, "return_tokens": True,
        "cache_prompt": prompt_cache, "stream": False, **(extra_body or {})}
    if seed is not None:
        body["seed"] = seed % (2**32 - 1)  # llama.cpp's seed is 32-bit, and 2**32 - 1 means "random"
    return body


def read_completions(n: int) -> Callable[[bytes], Rows | None]:
    """Reads a ``/completion`` answer: ``[(token ids, log-probs, ended)] * n`` in ``index`` order, or None."""

    def read(body: bytes) -> Rows | None:
        try:
            answer = json.loads(body)
            results = sorted(answer if isinstance(answer, list) else [answer], key=lambda r: r.get("index", 0))
            out = []
            for result in results:
                ids = [int(t) for t in result["tokens"]]
                # absent when no token has an entry (the server leaves an empty list out)
                entries = [(int(p["id"]), float(p["logprob"])) for p in result.get("completion_probabilities", [])]
                logps = aligned_logprobs(ids, entries)
                if logps is None:
                    return None
                out.append((ids, logps, engine_ended(result)))
        except (ValueError, KeyError, TypeError, AttributeError):
            return None
        return out if len(out) == n else None

    return read


def aligned_logprobs(ids: list[int], entries: list[tuple[int, float]]) -> list[float] | None:
    """Each token's log-prob from the server's ``(id, logprob)`` entries, which are the tokens' in order with some
    tokens left out (see the module doc); NaN for a token no entry is certainly for. None: the entries are not the
    tokens' (not a subsequence of them).

    Any matching places entry k between its leftmost and its rightmost place, so where those agree it is the only
    one; where they differ (a left-out token with the id of the next token's entry), no token gets the entry."""
    left, k = [], 0
    for i, token in enumerate(ids):
        if k < len(entries) and entries[k][0] == token:
            left.append(i)
            k += 1
    if k < len(entries):
        return None
    right, k = [], len(entries) - 1
    for i in range(len(ids) - 1, -1, -1):
        if k >= 0 and entries[k][0] == ids[i]:
            right.append(i)
            k -= 1
    out = [math.nan] * len(ids)
    for (_, logp), first, last in zip(entries, left, reversed(right), strict=True):
        if first == last:
            out[first] = logp
    return out


def engine_ended(result: dict[str, Any]) -> bool | None:
    """Whether the engine ended the completion (an end-of-generation token, a stop string) rather than cutting it at
    ``n_predict``; None where the answer does not say (then the tokenizer's EOS decides)."""
    stop = result.get("stop_type")
    if isinstance(stop, str):
        return stop in ("eos", "word")
    if "stopped_eos" in result or "stopped_word" in result:  # llama.cpp before stop_type (2024)
        return bool(result.get("stopped_eos") or result.get("stopped_word"))
    return None
