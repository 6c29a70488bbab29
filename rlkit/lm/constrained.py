"""Constrained generation: a transformers logits processor that lets each row of a batch write only text a JSON
schema accepts, so a judge's answer always parses (structured outputs, as vLLM, SGLang and llama.cpp's server offer).

The grammar engine is llguidance (the one vLLM and SGLang can use): its matcher follows each row's tokens and gives
the set of tokens allowed next, which is applied with plain torch (llguidance's own torch helper is
``torch.compile``d, which compiles C++ on a CPU machine's first call: 30 s).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlkit.core.errors import ConfigError

_TOKENIZERS: dict[tuple[int, int, tuple[int, ...]], Any] = {}  # (id(tokenizer), vocab, stop ids) -> LLTokenizer


def _engine_tokenizer(tokenizer: Any, vocab: int, stop: tuple[int, ...]) -> Any:
    """llguidance's view of ``tokenizer`` (built once per tokenizer: 0.4 s for a 49k vocabulary)."""
    import llguidance.hf

    key = (id(tokenizer), vocab, stop)
    if key not in _TOKENIZERS:
        _TOKENIZERS[key] = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab, eos_token=list(stop) or None)
    return _TOKENIZERS[key]


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """The schema as an llguidance grammar; a schema it cannot compile is a ``ConfigError``. Between tokens at
    most one space is allowed, never a newline: the model keeps its own habit (``{"a":1}`` or ``{"a": 1}``; the
    offline tiny judge was trained on the first) and cannot spend its answer on blank lines."""
    import llguidance

    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        json.dumps(schema), defaults={"whitespace_flexible": True, "whitespace_pattern": "[ ]?"})
    error = llguidance.LLMatcher.validate_grammar(grammar)  # "" when the grammar compiles
    if error:
        raise ConfigError(f"the JSON schema cannot constrain generation: {error}", "schema")
    return grammar


class JsonSchemaConstraint:
    """A ``logits_processor`` for ``model.generate``: at each step, every row's disallowed tokens get ``-inf``.

    One matcher per row follows what the row wrote; a row whose answer is complete may write only a stop token,
    and a row that has stopped is left alone (its later tokens are padding). ``stop_ids`` are the model's end
    tokens (the chat template's end of turn included)."""

    def __init__(self, tokenizer: Any, schema: dict[str, Any], batch: int, stop_ids: Sequence[int]) -> None:
        self.tokenizer, self.grammar = tokenizer, json_schema_grammar(schema)
        self.batch, self.stop = batch, tuple(sorted(stop_ids))
        self.matchers: list[Any] | None = None
        self.done = [False] * batch  # the row wrote a stop token: what follows is padding
        self.errors: list[str] = []

    def _start(self, vocab: int) -> None:
        import llguidance

        engine = _engine_tokenizer(self.tokenizer, vocab, self.stop)
        self.matchers = [llguidance.LLMatcher(engine, self.grammar) for _ in range(self.batch)]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        vocab = scores.shape[-1]
        if self.matchers is None:
            self._start(vocab)  # the first call sees the prompts alone: nothing written yet
        else:
            for row, token in enumerate(input_ids[:, -1].tolist()):
                matcher = self.matchers[row]
                if token in self.stop:
                    self.done[row] = True
                elif not self.done[row] and not matcher.is_stopped() and not matcher.is_error():
                    matcher.consume_token(token)
        assert self.matchers is not None
        for row, matcher in enumerate(self.matchers):
            if self.done[row]:
                continue
            if matcher.is_error():
                if len(self.errors) < 5:
                    self.errors.append(matcher.get_error())
                continue
            if matcher.is_stopped():  # the answer is complete: end it
                only_stop = torch.full_like(scores[row], float("-inf"))
                only_stop[list(self.stop)] = scores[row, list(self.stop)]
                scores[row] = only_stop
                continue
            bits = np.unpackbits(np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
            allowed = torch.from_numpy(bits[:vocab].astype(bool)).to(scores.device)
            scores[row] = scores[row].masked_fill(~allowed, float("-inf"))
        return scores


__all__ = ["JsonSchemaConstraint", "json_schema_grammar"]
