"""Batch implementations of the rule judge's checks: each scores every completion of a batch at once.

Per-text work shared by several checks (case-folded text, lengths, the joined characters) is computed once per
batch, and loops run in C (``map``, comprehensions, numpy) rather than one Python call per check per text.
"""

from __future__ import annotations

import json
import math
import operator
import re
from collections.abc import Callable
from functools import cached_property, lru_cache
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


def match_check(field: str, numeric: bool, case_sensitive: bool, pat: re.Pattern[str] | None, tol: float,
                where: str) -> BatchCheck:
    """Compare the text with the record's ``field``: exactly, or its number within ``tol``; NaN without one."""
    import numpy as np
    fold: Callable[[str], str] = (lambda s: s) if case_sensitive else str.casefold

    def target(ref: Any) -> Any:
        if ref is None:
            return None  # this prompt has nothing to compare against
        if not numeric:
            return fold(str(ref).strip())
        value = None if isinstance(ref, bool) else _to_float(str(ref))
        if value is None:
            raise JudgeError(f"field {field!r} of the prompt record is not a number: {ref!r}", where)
        return value

    def number(found: re.Match[str] | None, text: str) -> float | None:
        if pat is not None:
            return _to_float(found.group(1) or "") if found else None
        numbers = _NUMBER.findall(text)
        return _to_float(numbers[-1]) if numbers else None

    def run(batch: Batch) -> np.ndarray:
        keys = list(map(id, batch.records))
        targets: dict[int, Any] = {}  # a group's completions share their record: one target per record
        for key, rec in zip(keys, batch.records, strict=True):
            if key not in targets:
                targets[key] = target(rec.get(field))
        refs = [targets[key] for key in keys]
        if not numeric:
            return np.array([NAN if ref is None else fold(text.strip()) == ref
                             for text, ref in zip(batch.texts, refs, strict=True)], dtype=np.float64)
        found = map(pat.search, batch.texts) if pat is not None else repeat(None)
        return np.array([NAN if ref is None else 0.0 if (value := number(m, text)) is None else abs(value - ref) <= tol
                         for text, m, ref in zip(batch.texts, found, refs, strict=False)], dtype=np.float64)

    return run


@lru_cache(maxsize=4096)
def _whole_words(texts: tuple[str, ...], flags: int) -> re.Pattern[str]:
    """A pattern finding any of ``texts`` as a whole word or phrase (no word character on either side)."""
    # longest first, so a phrase is tried before a word it starts with
    return re.compile(r"(?<!\w)(?:" + "|".join(map(re.escape, sorted(texts, key=len, reverse=True))) + r")(?!\w)",
                      flags)


def contains_check(field: str, case_sensitive: bool, pat: re.Pattern[str] | None, where: str) -> BatchCheck:
    """1.0 where the record's ``field`` (a text, or a list of texts: any of them) occurs in the completion as a whole
    word or phrase, searched in ``pat``'s first group where given (0.0 where ``pat`` is not found); NaN without one."""
    import numpy as np
    flags = 0 if case_sensitive else re.IGNORECASE

    def target(value: Any) -> re.Pattern[str] | None:
        if value is None:
            return None  # this prompt has nothing to look for
        texts = value if isinstance(value, list) else [value]
        if not texts or not all(isinstance(t, str) and t.strip() for t in texts):
            raise JudgeError(f"field {field!r} of the prompt record must be a non-empty text or a non-empty list of "
                             f"them, got {value!r}", where)
        return _whole_words(tuple(sorted({t.strip() for t in texts})), flags)

    def run(batch: Batch) -> np.ndarray:
        targets: dict[int, re.Pattern[str] | None] = {}  # a group's completions share their record
        out = np.empty(batch.size, dtype=np.float64)
        for i, (text, rec) in enumerate(zip(batch.texts, batch.records, strict=True)):
            if id(rec) not in targets:
                targets[id(rec)] = target(rec.get(field))
            found = targets[id(rec)]
            if found is None:
                out[i] = NAN
                continue
            part = pat.search(text) if pat is not None else None
            searched = text if pat is None else (part.group(1) or "") if part else None
            out[i] = 0.0 if searched is None else float(found.search(searched) is not None)
        return out

    return run
