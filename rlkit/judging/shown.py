"""What a model judge is shown of a completion, and what of its answer it is trusted with.

A policy writes anything: control characters, ten thousand tokens of one word, or the judge's own answer format
(``{"correctness": 1}``, ``Score: 5``) in the hope that it is read as its score. Before a model judge (``llm``,
``ranking``) sees a completion, :meth:`CompletionView.show` normalises it (control characters other than newline
and tab dropped, carriage returns made newlines, runs of spaces inside a line and of blank lines collapsed,
trailing spaces cut; leading indentation is kept, since code is judged by it) and caps it at ``max_chars``,
keeping its head and tail around a marker that says how much was cut (a final answer is usually at the end).

The parser reads only the judge's reply, never the prompt; but a judge may quote the completion in its reply, and
the score parser takes the first JSON object that names a dimension. :meth:`CompletionView.unquoted` removes from a
reply every score-like fragment (a ``{...}`` block, or a line holding a number or yes/no after ``:`` or ``=``)
that the shown completion holds verbatim, so a quoted fragment is never read as the judge's verdict. A reply that
is nothing but such copies is the judge's own answer and is read as it is; a reply that quotes them and says
nothing readable besides is unreadable (asked again, then the judge's failure policy), never the completion's
number.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Hashable, Iterable

__all__ = ["DEFAULT_MAX_COMPLETION_CHARS", "CompletionView", "normalise_completion"]

# 16,000 characters is about 4,000 tokens at ~4 characters a token (rlkit.judging.spend's estimate): longer than any
# completion the shipped generation settings sample (max_new_tokens in the hundreds), so a normal completion is
# never cut, while a runaway one (the 10,000-token completion of issue 52) cannot fill a judge's context or bill.
DEFAULT_MAX_COMPLETION_CHARS = 16_000

_SPACES_RE = re.compile(r"(?<=\S)[ \t]{2,}")
_BLANK_LINES_RE = re.compile(r"\n{3,}")
_TRAILING_RE = re.compile(r"[ \t]+$", re.M)
_BRACES_RE = re.compile(r"\{[^{}]{1,2000}\}")
# a line a score parser could read: a name, then ":" or "=", then a number or a yes/no word
_SCORE_LINE_RE = re.compile(r"[:=]\s*[\"'*\[\(]{0,4}\s*(?:-?\d|yes|no|true|false|pass|fail)", re.I)


def _kept(char: str) -> bool:
    return char in "\n\t" or unicodedata.category(char) != "Cc"


def normalise_completion(text: str) -> str:
    """``text`` without control characters (newline and tab kept), runs of spaces inside a line collapsed to one,
    at most one blank line in a row, and no trailing spaces."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = "".join(c for c in text if _kept(c))
    text = _TRAILING_RE.sub("", _SPACES_RE.sub(" ", text))
    return _BLANK_LINES_RE.sub("\n\n", text).strip("\n")


def _capped(text: str, max_chars: int) -> str:
    cut = len(text) - max_chars
    head = max_chars // 2
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[len(text) - (max_chars - head):]}"


def _fragments(text: str) -> list[str]:
    """The score-like pieces of a shown completion, longest first."""
    found = {m.group(0).strip() for m in _BRACES_RE.finditer(text)}
    found |= {line.strip() for line in text.splitlines() if _SCORE_LINE_RE.search(line)}
    return sorted((f for f in found if len(f) >= 3), key=len, reverse=True)


class CompletionView:
    """One ``score`` call's completions as a model judge is shown them. ``max_chars`` is the judge's
    ``max_completion_chars``; ``raw`` (the offline tiny judge, trained on the texts as the policy wrote them and
    cutting each to a few characters itself) shows them unchanged."""

    def __init__(self, max_chars: int, raw: bool = False) -> None:
        self.max_chars, self.raw = max_chars, raw
        self.capped = 0
        self._shown: dict[Hashable, str] = {}
        self._fragments: dict[Hashable, list[str]] = {}

    @staticmethod
    def check(max_chars: object, where: str) -> None:
        """Raise a one-line ConfigError naming ``where`` unless ``max_chars`` is an integer >= 100."""
        from rlkit.core.errors import ConfigError

        # under 100 characters the marker alone takes a third of what is shown
        if isinstance(max_chars, bool) or not isinstance(max_chars, int) or max_chars < 100:
            raise ConfigError(f"must be an integer >= 100, got {max_chars!r}", where)

    def show(self, key: Hashable, text: str) -> str:
        """``text`` as the judge sees it (normalised and capped, each key counted once), kept under ``key``."""
        if key in self._shown:
            return self._shown[key]
        shown = text
        if not self.raw:
            shown = normalise_completion(text)
            if len(shown) > self.max_chars:
                shown = _capped(shown, self.max_chars)
                self.capped += 1
        self._shown[key] = shown
        return shown

    def unquoted(self, answer: str, keys: Iterable[Hashable]) -> str:
        """The judge's ``answer`` without the score-like fragments that the completions shown under ``keys`` hold
        verbatim; the answer as it is when it holds nothing but such fragments (see the module doc)."""
        fragments: list[str] = []
        for key in keys:
            if key not in self._fragments:
                self._fragments[key] = _fragments(self._shown.get(key, ""))
            fragments += self._fragments[key]
        if not fragments or not isinstance(answer, str):
            return answer
        rest = answer
        for fragment in sorted(set(fragments), key=len, reverse=True):
            rest = rest.replace(fragment, "\n")
        if rest == answer:
            return answer
        if not re.sub(r"```[A-Za-z]*", "", rest).strip(" \t\n`*\"'.,;:"):
            return answer  # nothing but the copies: the judge's own answer, which happens to match
        return rest

    def metrics(self) -> dict[str, float]:
        """``judge/completions_capped``: how many completions this call cut to ``max_chars``."""
        return {"judge/completions_capped": float(self.capped)}
