"""Cheap text similarity for data tools: whitespace normalisation and character n-gram Jaccard."""

from __future__ import annotations

from functools import lru_cache


def normalize_whitespace(text: str) -> str:
    """``text`` with leading/trailing whitespace removed and every inner run collapsed to one space."""
    return " ".join(text.split())


@lru_cache(maxsize=4096)
def char_ngrams(text: str, n: int = 3) -> frozenset[str]:
    """The set of character ``n``-grams of the lower-cased, whitespace-normalised text.

    A text shorter than ``n`` is its own single gram, so two short texts compare by equality.
    """
    norm = normalize_whitespace(text).lower()
    if len(norm) < n:
        return frozenset([norm])
    return frozenset(norm[i:i + n] for i in range(len(norm) - n + 1))


def char_ngram_jaccard(a: str, b: str, n: int = 3) -> float:
    """Jaccard similarity |A ∩ B| / |A ∪ B| of the two texts' character ``n``-gram sets, in [0, 1].

    Linear in the texts' length (``difflib``'s ratio is quadratic), insensitive to case and whitespace,
    and 1.0 for texts that differ only there. Word-order changes score high, which for spotting the same
    answer written twice is what we want.
    """
    ga, gb = char_ngrams(a, n), char_ngrams(b, n)
    union = len(ga | gb)
    return len(ga & gb) / union if union else 1.0
