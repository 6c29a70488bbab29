"""Constrained generation: a transformers logits processor that lets each row of a batch write only text a JSON
schema accepts, so a judge's answer always parses (structured outputs, as vLLM, SGLang and llama.cpp's server offer).

The grammar engine is llguidance (the one vLLM and SGLang can use): its matcher follows each row's tokens and gives
the set of tokens allowed next, which is applied with plain torch (llguidance's own torch helper is
``torch.compile``d, which compiles C++ on a CPU machine's first call: 30 s).
"""

from __future__ import annotations

import json
import re
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rlkit.core.errors import ConfigError

if TYPE_CHECKING:
    import torch

# tokenizer -> {(vocab, stop ids): LLTokenizer}; weak, so a dropped model's tokenizer is not kept, and a new tokenizer
# never finds another's entry (an id() key can be reused once its object is freed)
_TOKENIZERS: weakref.WeakKeyDictionary[Any, dict[tuple[int, tuple[int, ...]], Any]] = weakref.WeakKeyDictionary()


def _engine_tokenizer(tokenizer: Any, vocab: int, stop: tuple[int, ...]) -> Any:
    """llguidance's view of ``tokenizer`` (built once per tokenizer: 0.4 s for a 49k vocabulary)."""
    import llguidance.hf

    built = _TOKENIZERS.setdefault(tokenizer, {})
    if (vocab, stop) not in built:
        built[vocab, stop] = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab, eos_token=list(stop) or None)
    return built[vocab, stop]


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


def single_digit_levels(schema: dict[str, Any]) -> dict[str, list[int]]:
    """The fields of ``schema`` whose values are an integer ``enum`` of one-digit levels (a rubric's 0/1 and 1-5
    dimensions): those whose probability over levels can be read at the one token that writes the value."""
    out = {}
    for name, spec in (schema.get("properties") or {}).items():
        levels = spec.get("enum") if isinstance(spec, dict) and spec.get("type") == "integer" else None
        if levels and all(isinstance(v, int) and 0 <= v <= 9 for v in levels):
            out[name] = list(levels)
    return out


_LEADING_DIGIT = re.compile(r"\s*(\d)(?!\d)")


class JsonSchemaConstraint:
    """A ``logits_processor`` for ``model.generate``: at each step, every row's disallowed tokens get ``-inf``.

    One matcher per row follows what the row wrote; a row whose answer is complete may write only a stop token,
    and a row that has stopped is left alone (its later tokens are padding). ``stop_ids`` are the model's end
    tokens (the chat template's end of turn included).

    With ``level_probs`` it also reads, for every one-digit integer field of the schema (``single_digit_levels``),
    the model's probability of each level at the step that writes the field's value: the softmax of the logits
    over the tokens the schema allows there, each token counted for the digit it starts with (G-Eval's
    probability-weighted score, Liu et al. 2023). ``self.level_probs[row]`` maps field -> {level: probability}."""

    def __init__(self, tokenizer: Any, schema: dict[str, Any], batch: int, stop_ids: Sequence[int], *,
                 level_probs: bool = False) -> None:
        self.tokenizer, self.grammar = tokenizer, json_schema_grammar(schema)
        self.batch, self.stop = batch, tuple(sorted(stop_ids))
        self.matchers: list[Any] | None = None
        self.done = [False] * batch  # the row wrote a stop token: what follows is padding
        self.errors: list[str] = []
        self.levels = single_digit_levels(schema) if level_probs else {}
        self.level_probs: list[dict[str, dict[int, float]]] = [{} for _ in range(batch)]
        self._written: list[list[int]] = [[] for _ in range(batch)]
        self._digit_of: dict[int, int | None] = {}  # token id -> the digit its text starts with

    def _start(self, vocab: int) -> None:
        import llguidance

        engine = _engine_tokenizer(self.tokenizer, vocab, self.stop)
        self.matchers = [llguidance.LLMatcher(engine, self.grammar) for _ in range(self.batch)]

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import numpy as np
        import torch
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
                    self._written[row].append(token)
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
            if self.levels:
                self._read_levels(row, scores[row], allowed)
            scores[row] = scores[row].masked_fill(~allowed, float("-inf"))
        return scores

    def _field_before_value(self, row: int) -> str | None:
        """The level field whose value the row writes next (its text so far ends in ``"<field>":``, perhaps with a
        space), if any. Read again at each such step: the last one before the value is the one that writes it."""
        text = self.tokenizer.decode(self._written[row]).rstrip()
        if not text.endswith(":"):
            return None
        for name in self.levels:
            if text[:-1].rstrip().endswith(json.dumps(name)):
                return name
        return None

    def _read_levels(self, row: int, logits: torch.Tensor, allowed: torch.Tensor) -> None:
        import torch
        name = self._field_before_value(row)
        if name is None:
            return
        ids = allowed.nonzero().flatten().tolist()
        digits = []
        for token in ids:
            if token not in self._digit_of:
                found = _LEADING_DIGIT.match(self.tokenizer.decode([token]))
                self._digit_of[token] = int(found.group(1)) if found else None
            digits.append(self._digit_of[token])
        probs = torch.softmax(logits[ids].double(), dim=0).tolist()
        mass: dict[int, float] = {}
        for digit, p in zip(digits, probs, strict=True):
            if digit in self.levels[name]:
                mass[digit] = mass.get(digit, 0.0) + p
        total = sum(mass.values())
        if total > 0:  # the schema allows only level tokens here; renormalised against any space-led ones
            self.level_probs[row][name] = {level: mass.get(level, 0.0) / total for level in self.levels[name]}


__all__ = ["JsonSchemaConstraint", "json_schema_grammar", "single_digit_levels"]
