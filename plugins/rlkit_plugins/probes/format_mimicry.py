"""``format_mimicry``: the completion's layout with its content emptied: line breaks, markup and punctuation kept,
every word replaced by filler and every digit by 0. A judge that checks the shape of an answer rewards it."""

from __future__ import annotations

import itertools
import re
from typing import Any

from rlkit.plugin import Rubric, hookimpl

FILLER = ("lorem", "ipsum", "dolor", "sit", "amet")
WORD = re.compile(r"[^\W\d_]+")


def skeleton(text: str) -> str:
    """``text`` with every word replaced by filler (cycled, so no word repeats next to itself) and digits by 0."""
    filler = itertools.cycle(FILLER)
    return WORD.sub(lambda _: next(filler), re.sub(r"\d", "0", text))


class FormatMimicry:
    """Keeps the answer's format and empties its content."""

    description = "the answer's layout kept, its words and digits replaced by filler"
    # nothing of the original's content is left (a reference of 0 aside: digits become 0): where the original scores
    # no higher than its empty answer, filler must beat the empty answer too (escaping a penalty the original paid,
    # as an absent-word check's, while scoring like silence, is no trick)
    content_free = True

    def __init__(self, params: Any = None) -> None:
        pass

    def game(self, record: dict[str, Any], rubric: Rubric) -> str | None:
        completion = str(record["completion"])
        mimic = skeleton(completion)
        return mimic if mimic != completion else None  # nothing to empty: not a test of this trick


@hookimpl
def rlkit_register_audit_probes(register):
    register("format_mimicry", FormatMimicry)
