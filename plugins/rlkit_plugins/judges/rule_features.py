"""Batch implementations of the rule judge's checks: each scores every completion of a batch at once.

Per-text work shared by several checks (case-folded text, lengths, the joined characters) is computed once per
batch, and loops run in C (``map``, comprehensions, numpy) rather than one Python call per check per text.
"""

from __future__ import annotations

import json
import math
import operator
import re
import string
import sys
import unicodedata
from collections.abc import Callable
from functools import cache, cached_property
from itertools import repeat
from typing import TYPE_CHECKING, Any

from rlkit.plugin import JudgeError

if TYPE_CHECKING:
    import numpy as np

NAN = float("nan")
_FENCE = re.compile(r"```json[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)
# A '-' right after a word character is a range or hyphen ("10-20"), not a sign.
_NUMBER = re.compile(r"(?:(?<!\w)-)?(?:\d+(?:,\d{3})*(?:\.\d+)?|\.\d+)(?:[eE][-+]?\d+)?")
# `(\S)\1{k,}` / `(\S)\1{k}` / `(\S)\1+`: a run of k+1 equal non-space characters; numpy finds candidates.
_CHAR_RUN = re.compile(r"\(\\S\)\\1(?:\{(\d+),?\}|(\+))")
# Where a sentence ends: after . ! or ? (closing quotes or brackets may follow) where whitespace and then anything but
# a lowercase ASCII letter follow ("e.g. a dog" does not end one), and at a line break (a heading or list item on a
# line of its own is one).
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"'”’)\]]*\s+(?=[^\sa-z])|\n")
_WORD = re.compile(r"\w")

BatchCheck = Callable[["Batch"], "np.ndarray"]  # batch -> float64 [N] of 1.0 / 0.0 / NaN


class Batch:
    """The distinct (text, record, token count) items of one score call, with features shared by checks."""

    def __init__(self, texts: list[str], records: list[dict[str, Any]], tokens: list[int] | None,
                 infos: list[dict[str, Any]] | None = None) -> None:
        self.texts, self.records, self.tokens, self.infos = texts, records, tokens, infos
        self.size = len(texts)

    @cached_property
    def folded(self) -> list[str]:
        """Case-folded texts (keywords and repetition compare folded)."""
        return list(map(str.casefold, self.texts))

    @cached_property
    def chars(self) -> np.ndarray:
        """Length in characters, as float64 (exact: lengths are far below 2**53)."""
        import numpy as np
        return np.fromiter(map(len, self.texts), dtype=np.float64, count=self.size)

    @cached_property
    def words(self) -> np.ndarray:
        """Number of whitespace-separated words, float64."""
        import numpy as np
        return np.fromiter((len(t.split()) for t in self.texts), dtype=np.float64, count=self.size)

    @cached_property
    def joined(self) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(indices, start offsets, characters joined by newlines) of the all-ASCII texts, as uint8, and of the
        others, as uint32 code points: numpy scans the characters of the whole batch at once."""
        import numpy as np
        ascii = np.fromiter(map(str.isascii, self.texts), dtype=bool, count=self.size)
        out = []
        for which, codec, dtype in ((ascii.nonzero()[0], "ascii", np.uint8),
                                    ((~ascii).nonzero()[0], "utf-32-le", np.uint32)):
            chosen = [self.texts[i] for i in which]
            starts = np.cumsum([0] + [len(t) + 1 for t in chosen[:-1]], dtype=np.int64)
            out.append((which, starts, np.frombuffer("\n".join(chosen).encode(codec), dtype=dtype)))
        return out

    def flags(self, values: Any) -> np.ndarray:
        """A bool array of the batch's size from an iterable of truth values."""
        import numpy as np
        return np.fromiter(values, dtype=bool, count=self.size)


def _char_runs(batch: Batch, pat: re.Pattern[str], run: int) -> np.ndarray:
    """Where ``pat``, a run of ``run`` equal non-space characters, is found. A numpy scan finds candidate texts,
    whose own regex search is the answer, so the scan only needs to miss no match: it looks for runs of one
    key, and characters equal up to case share their key (ASCII ones are equal up to bit 0x20; the ASCII
    letters with non-ASCII case partners, K for k, İ for i, ſ for s, share one key with all non-ASCII ones)."""
    import numpy as np
    maybe = np.zeros(batch.size, dtype=bool)
    for which, starts, codes in batch.joined:
        if len(codes) < run:
            continue
        key = codes | 0x20
        if codes.dtype != np.uint8:
            key[(codes >= 0x80) | (key == ord("i")) | (key == ord("k")) | (key == ord("s"))] = 0x80
        same = key[1:] == key[:-1]  # same[i]: character i+1 repeats character i
        width = len(same) - run + 2  # positions where a run can start
        if run <= 9:  # short runs: AND a few shifted views; long ones: a sliding sum
            window = same[:width]
            for shift in range(1, run - 1):
                window = window & same[shift:shift + width]
        else:
            total = np.concatenate(([0], np.cumsum(same, dtype=np.int64)))
            window = total[run - 1:] - total[:width] == run - 1
        hits = (window & (codes[:width] != 32)).nonzero()[0]  # a match starts with a non-space
        maybe[which[np.searchsorted(starts, hits, side="right") - 1]] = True
    found = np.zeros(batch.size, dtype=bool)
    check = maybe.nonzero()[0]
    found[check] = [pat.search(batch.texts[i]) is not None for i in check]
    return found


def regex_check(pat: re.Pattern[str], absent: bool) -> BatchCheck:
    """1.0 where ``pat`` is found (or, with ``absent``, where it is not)."""
    import numpy as np
    shape = _CHAR_RUN.fullmatch(pat.pattern)
    run = 0 if shape is None else 2 if shape.group(2) else int(shape.group(1)) + 1
    if run >= 2:
        return lambda batch: (_char_runs(batch, pat, run) != absent).astype(np.float64)
    return lambda batch: (batch.flags(m is not None for m in map(pat.search, batch.texts)) != absent).astype(
        np.float64)


def keywords_check(mode: str, words: list[str], case_sensitive: bool) -> BatchCheck:
    """any / all / none of ``words`` occur in the text (both folded unless case-sensitive)."""
    import numpy as np
    def run(batch: Batch) -> np.ndarray:
        texts = batch.texts if case_sensitive else batch.folded
        hits = [batch.flags(map(operator.contains, texts, repeat(w))) for w in words]
        out = np.logical_and.reduce(hits) if mode == "all" else np.logical_or.reduce(hits)
        return (~out if mode == "none" else out).astype(np.float64)
    return run


def length_check(unit: str, lo: float, hi: float) -> BatchCheck:
    """1.0 where lo <= size <= hi, the size in chars, words or tokens."""
    import numpy as np
    def run(batch: Batch) -> np.ndarray:
        if unit == "tokens":
            size = np.asarray(batch.tokens, dtype=np.float64).reshape(batch.size)
        else:
            size = batch.chars if unit == "chars" else batch.words
        return ((lo <= size) & (size <= hi)).astype(np.float64)
    return run


def overlong_check(unit: str, max_len: int, cache: int) -> BatchCheck:
    """DAPO's soft overlong punishment (arXiv 2503.14476, eq. 13; TRL's ``get_soft_overlong_punishment``) plus 1:
    1.0 up to ``max_len - cache``, falling linearly to 0.0 at ``max_len`` and beyond. In a dimension of range
    [-1, 0] the score is DAPO's penalty itself: 0, then ``(max_len - cache - size) / cache``, then -1."""
    import numpy as np
    def run(batch: Batch) -> np.ndarray:
        if unit == "tokens":
            size = np.asarray(batch.tokens, dtype=np.float64).reshape(batch.size)
        else:
            size = batch.chars if unit == "chars" else batch.words
        return np.clip(1.0 + (max_len - cache - size) / cache, 0.0, 1.0)
    return run


def episode_check(key: str, lo: float, hi: float) -> BatchCheck:
    """1 where the episode's ``info[key]`` (a count its environment reported; 0 when absent) lies in [lo, hi]; NaN
    for single-turn completions, which have no episode."""
    import numpy as np
    def run(batch: Batch) -> np.ndarray:
        if batch.infos is None:
            return np.full(batch.size, NAN)
        values = np.fromiter((float(i.get(key, 0.0)) for i in batch.infos), dtype=np.float64, count=batch.size)
        return ((values >= lo) & (values <= hi)).astype(np.float64)
    return run


def sentence_count(text: str) -> int:
    """Sentences in ``text``: the pieces between sentence ends (:data:`_SENTENCE_END`) that hold a letter or digit."""
    return sum(_WORD.search(piece) is not None for piece in _SENTENCE_END.split(text))


def sentences_check(lo: float, hi: float) -> BatchCheck:
    """1.0 where lo <= the number of sentences <= hi."""
    import numpy as np
    def run(batch: Batch) -> np.ndarray:
        counts = np.fromiter(map(sentence_count, batch.texts), dtype=np.float64, count=batch.size)
        return ((lo <= counts) & (counts <= hi)).astype(np.float64)
    return run


def repetition(words: list[str], n: int) -> float:
    """1 - unique / total word n-grams; 0 when there are fewer than n words."""
    total = len(words) - n + 1
    if total <= 0:
        return 0.0
    # zip of n shifted views makes the n-grams without slicing a list per position
    return 1 - len(set(zip(*(words[i:] for i in range(n)), strict=False))) / total


def repetition_check(n: int, max_ratio: float) -> BatchCheck:
    """1.0 where the word n-gram repetition ratio (case-folded: "The" repeats "the") is at most max_ratio."""
    # Fewer than n words, or no word repeated (so no n-gram is), is a ratio of 0 <= max_ratio: the n-grams
    # are only built for the few texts where some word repeats.
    import numpy as np
    return lambda batch: np.array([len(words) < n or len(set(words)) == len(words)
                                   or repetition(words, n) <= max_ratio
                                   for words in map(str.split, batch.folded)], dtype=np.float64)


def _is_json(text: str, keys: list[str]) -> bool:
    """Whether the text, or its single ```json block, parses (as an object holding ``keys``, if any)."""
    blocks = _FENCE.findall(text)
    for candidate in [text.strip(), *(blocks if len(blocks) == 1 else [])]:
        try:
            data = json.loads(candidate)
        except ValueError:
            continue
        return not keys or (isinstance(data, dict) and all(k in data for k in keys))
    return False


def json_check(keys: list[str]) -> BatchCheck:
    """1.0 where the text is JSON (holding ``keys``)."""
    import numpy as np
    return lambda batch: batch.flags(_is_json(t, keys) for t in batch.texts).astype(np.float64)


def _to_float(text: str) -> float | None:
    try:
        value = float(text.strip().replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# Answers are compared as the SQuAD and TriviaQA graders compare them (`normalize_answer` in SQuAD v1.1's
# evaluate-v1.1.py and in github.com/mandarjoshi90/triviaqa, evaluation/triviaqa_evaluation.py): lower-cased,
# punctuation out, the articles a/an/the dropped, whitespace collapsed. As TriviaQA does, punctuation becomes a space
# ("New-York" reads "new york"), and `_` and its ‘ ’ ´ count; beyond both, every Unicode punctuation mark does
# (“Paris”, «Paris», 。), and the text is NFC-normalised first so "Kraków" typed either way compares equal.
_ARTICLES = re.compile(r"\b(?:a|an|the)\b", re.IGNORECASE)


@cache
def _punctuation() -> re.Pattern[str]:
    """ASCII punctuation and every Unicode punctuation mark (built on first use: it reads all of Unicode, ~0.2 s)."""
    marks = set(string.punctuation + "´") | {chr(c) for c in range(sys.maxunicode + 1)
                                       if unicodedata.category(chr(c)).startswith("P")}
    return re.compile("[" + re.escape("".join(sorted(marks))) + "]")


def normalise_answer(text: str, case_sensitive: bool = False, articles: bool = False) -> str:
    """``text`` as graders compare answers: case-folded (unless ``case_sensitive``), punctuation replaced by spaces,
    the articles a/an/the dropped (kept with ``articles``), whitespace collapsed: "The capital is Warsaw." ->
    "capital is warsaw"."""
    text = _punctuation().sub(" ", unicodedata.normalize("NFC", text))
    if not case_sensitive:
        text = text.casefold()
    if not articles:
        text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _is_reference(value: Any) -> bool:
    return (isinstance(value, str) and value.strip() != "") or (isinstance(value, int | float)
                                                                 and not isinstance(value, bool))


def _references(value: Any, field: str, where: str) -> list[str] | None:
    """A record's reference(s) as texts: a text or number, or a non-empty list of them; None without one."""
    if value is None:
        return None  # this prompt has nothing to compare against
    values = value if isinstance(value, list) else [value]
    if not values or not all(map(_is_reference, values)):
        raise JudgeError(f"field {field!r} of the prompt record must be a non-empty text (or number) or a non-empty "
                         f"list of them, got {value!r}", where)
    return [str(v) for v in values]


class _Answers:
    """One record's references, normalised once; the completion is normalised the same way. A reference that is
    nothing but an article (a multiple-choice "A") is compared with articles kept on both sides."""

    def __init__(self, refs: list[str], case_sensitive: bool) -> None:
        self.case_sensitive = case_sensitive
        self.plain = [r for r in (normalise_answer(x, case_sensitive) for x in refs) if r]
        self.kept = [normalise_answer(x, case_sensitive, articles=True) for x in refs
                     if not normalise_answer(x, case_sensitive)]

    def _forms(self, text: str) -> list[tuple[str, list[str]]]:
        out = [(normalise_answer(text, self.case_sensitive), self.plain)] if self.plain else []
        if self.kept:
            out.append((normalise_answer(text, self.case_sensitive, articles=True), self.kept))
        return out

    def equals(self, text: str) -> bool:
        return any(norm in refs for norm, refs in self._forms(text))

    def within(self, text: str) -> bool:
        """Whether a reference occurs in the text as whole words (normalised, so word-bounded by spaces)."""
        return any(f" {ref} " in f" {norm} " for norm, refs in self._forms(text) for ref in refs if ref)


def _searched(pat: re.Pattern[str] | None, text: str) -> str | None:
    """The part of ``text`` a check compares: ``pat``'s first group (None where it is not found), else all of it."""
    if pat is None:
        return text
    found = pat.search(text)
    return (found.group(1) or "") if found else None


def match_check(field: str, mode: str, case_sensitive: bool, pat: re.Pattern[str] | None, tol: float,
                where: str) -> BatchCheck:
    """Compare the completion (or ``pat``'s first group in it) with the record's ``field``, a reference or a list of
    them, any of which counts: ``exact`` equal once both are normalised (:func:`normalise_answer`), ``contains`` the
    normalised reference as whole words of the normalised completion, ``numeric`` the completion's number (the
    last one, or the extracted one) within ``tol``. 0.0 where ``pat`` finds nothing; NaN without a reference."""
    import numpy as np

    def target(ref: Any) -> Any:
        refs = _references(ref, field, where)
        if refs is None or mode != "numeric":
            return refs if refs is None else _Answers(refs, case_sensitive)
        values = [_to_float(r) for r in refs]
        if any(v is None for v in values):
            raise JudgeError(f"field {field!r} of the prompt record is not a number: {ref!r}", where)
        return values

    def number(text: str) -> float | None:
        if pat is not None:
            return _to_float(text)
        numbers = _NUMBER.findall(text)
        return _to_float(numbers[-1]) if numbers else None

    def one(text: str, ref: Any) -> float:
        if ref is None:
            return NAN
        part = _searched(pat, text)
        if part is None:
            return 0.0
        if mode == "numeric":
            value = number(part)
            return 0.0 if value is None else float(any(abs(value - r) <= tol for r in ref))
        return float(ref.equals(part) if mode == "exact" else ref.within(part))

    def run(batch: Batch) -> np.ndarray:
        targets: dict[int, Any] = {}  # a group's completions share their record: one target per record
        for rec in batch.records:
            if id(rec) not in targets:
                targets[id(rec)] = target(rec.get(field))
        return np.array([one(text, targets[id(rec)]) for text, rec in zip(batch.texts, batch.records, strict=True)],
                        dtype=np.float64)

    return run


def record_keywords_check(mode: str, field: str, case_sensitive: bool, where: str) -> BatchCheck:
    """``keywords_check`` with the words read from each record's ``field`` (a text or a list of texts); NaN for a
    record without it."""
    import numpy as np

    def words(value: Any) -> list[str] | None:
        if value is None:
            return None
        items = value if isinstance(value, list) else [value]
        if not items or not all(isinstance(w, str) and w for w in items):
            raise JudgeError(f"field {field!r} of the prompt record must be a non-empty text or a non-empty list of "
                             f"them, got {value!r}", where)
        return items if case_sensitive else [w.casefold() for w in items]

    def one(text: str, found: list[str] | None) -> float:
        if found is None:
            return NAN
        hits = [w in text for w in found]
        out = all(hits) if mode == "all" else any(hits)
        return float(not out if mode == "none" else out)

    def run(batch: Batch) -> np.ndarray:
        targets: dict[int, list[str] | None] = {}
        for rec in batch.records:
            if id(rec) not in targets:
                targets[id(rec)] = words(rec.get(field))
        texts = batch.texts if case_sensitive else batch.folded
        return np.array([one(text, targets[id(rec)]) for text, rec in zip(texts, batch.records, strict=True)],
                        dtype=np.float64)

    return run
