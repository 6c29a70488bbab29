"""``keyword_stuffing``: the completion with the rubric's own words appended (each dimension's keyword checks and
its top anchor's text and positive examples). A judge that checks only that words are present rewards it."""

from __future__ import annotations

from typing import Any

from rlkit.plugin import Rubric, hookimpl


def rubric_words(rubric: Rubric) -> list[str]:
    """The words a presence-minded judge looks for, in rubric order, each once."""
    words: list[str] = []
    for dim in rubric.dimensions:
        for check in dim.checks or []:
            if check.get("type") == "keywords":
                words += [*check.get("any", []), *check.get("all", [])]
        if dim.anchors:
            top = dim.anchors[max(dim.anchors)]  # the level a policy is pushed towards
            words += [top.text, *top.positive]
    return list(dict.fromkeys(w.strip() for w in words if w and w.strip()))


class KeywordStuffing:
    """Appends the rubric's keywords and top-anchor phrases to the completion."""

    description = "the rubric's keywords and top-anchor phrases appended to the answer"

    def __init__(self, params: Any = None) -> None:
        pass

    def game(self, record: dict[str, Any], rubric: Rubric) -> str | None:
        words = rubric_words(rubric)
        if not words:
            return None
        # appended, not prepended: the answer itself stays first, so only the stuffing can change the score
        return f"{record['completion']}\n{' '.join(words)}"


@hookimpl
def rlkit_register_audit_probes(register):
    register("keyword_stuffing", KeywordStuffing)
