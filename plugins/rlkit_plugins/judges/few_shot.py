"""The ``llm`` judge's few-shot examples: k labelled completions per rubric dimension, from a labelling file
(``judge.params.examples``), shown in the prompt right after the rubric.

Which k, per dimension (``examples_rule``), each draw seeded by ``examples_seed`` and the dimension's name, so the
same file, rubric and seed give the same examples on every machine and every run:

* ``stratified`` (default): spread over the levels the file has for the dimension: with k at most the number of
  levels L, the k levels evenly spaced from the lowest to the highest (k = 2: the lowest and the highest; k = 1 the
  middle one); with k > L every level, then again from the lowest, until k. Within a level, a seeded draw. A level
  with no example left gives its place to the next example of a seeded draw over all levels.
* ``random``: k drawn at random (seeded) from all of the dimension's examples.

Shown in ``examples_order``: ``ascending`` (default) lowest level first, so the judge reads them as a scale;
``descending`` highest first; ``shuffled`` a seeded order. Small models lean toward the labels they read last in a
few-shot prompt (recency bias: Zhao et al. 2021, "Calibrate Before Use", arXiv 2102.09690), and in ascending order the
label read last before the scored completion is always the top one: the other two orders are there to measure that.

**Never the prompt being judged.** The choice is made once for the run; a completion whose prompt (whitespace
normalised) is the prompt of one of the chosen examples is judged with that example left out and the next of the
same seeded order in its place: no completion is ever judged beside a labelled answer to its own question (a judge
would copy the label), and every other completion sees the very same examples. That is also why the exclusion is per
completion rather than by picking from prompts outside the run's data: ``rlkit calibrate`` on the labelling file the
examples come from stays honest line by line (see docs/judges.md for how to hold the example lines out entirely).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from rlkit.plugin import LabelledExample

Rule = Literal["stratified", "random"]
Order = Literal["ascending", "descending", "shuffled"]
# an example's prompt and completion are each cut to this many characters (head and tail): k examples a dimension
# must leave the judge's context room for the completion it scores (a 2,048-token llama.cpp slot by default)
EXAMPLE_CHARS = 400


def same_prompt_key(text: str) -> str:
    """A prompt as compared for the exclusion: whitespace runs collapsed."""
    return " ".join(text.split())


def _cut(text: str) -> str:
    if len(text) <= EXAMPLE_CHARS:
        return text
    half = EXAMPLE_CHARS // 2
    return f"{text[:half]} […] {text[-half:]}"


def spread_levels(levels: Sequence[float], k: int) -> list[float]:
    """The levels k stratified examples are drawn at (``levels`` sorted, distinct): evenly spaced, or cycled."""
    n = len(levels)
    if not n or k <= 0:
        return []
    if k > n:
        return [levels[i % n] for i in range(k)]
    if k == 1:
        return [levels[(n - 1) // 2]]
    return [levels[int(i * (n - 1) / (k - 1) + 0.5)] for i in range(k)]


def _seeded(items: list[LabelledExample], seed: int, name: str, salt: str = "") -> list[LabelledExample]:
    out = list(items)
    random.Random(f"{seed}:{name}:{salt}").shuffle(out)  # a str seed is hashed (sha512): the same on every machine
    return out


@dataclass
class FewShot:
    """The examples of every dimension: chosen once, and per judged prompt without that prompt's own."""

    pool: dict[str, list[LabelledExample]]
    k: int
    rule: Rule
    seed: int
    order: Order = "ascending"

    def __post_init__(self) -> None:
        # the seeded draws, over each dimension's whole pool: leaving an example out later moves no other one
        self._drawn = {name: _seeded(items, self.seed, name) for name, items in self.pool.items()}
        self._levels = {name: sorted({e.level for e in items}) for name, items in self.pool.items()}
        self._queues = {name: {level: _seeded([e for e in items if e.level == level], self.seed, name, f"{level:g}")
                               for level in self._levels[name]} for name, items in self.pool.items()}
        self._chosen = {name: self._pick(name, set()) for name in self.pool}
        self._prompts = {same_prompt_key(e.prompt) for chosen in self._chosen.values() for e in chosen}

    def _pick(self, name: str, excluded: set[str]) -> list[LabelledExample]:
        """k examples of dimension ``name`` by the rule, none whose prompt is in ``excluded``."""
        def allowed(e: LabelledExample) -> bool:
            return same_prompt_key(e.prompt) not in excluded

        if self.rule == "random":
            return self._ordered(name, [e for e in self._drawn[name] if allowed(e)][:self.k])
        queues = {level: [e for e in queue if allowed(e)] for level, queue in self._queues[name].items()}
        taken: list[LabelledExample] = []
        for level in spread_levels(self._levels[name], self.k):
            if queues[level]:
                taken.append(queues[level].pop(0))
        # a level with no example left: its place goes to the next of the seeded draw over every level
        rest = [e for e in self._drawn[name] if allowed(e) and e not in taken]
        taken += rest[:self.k - len(taken)]
        return self._ordered(name, taken)

    def _ordered(self, name: str, examples: list[LabelledExample]) -> list[LabelledExample]:
        """``examples`` in the order the prompt shows them: by level (stable, so ties keep the draw's order), or a
        draw seeded by the dimension and the examples themselves (a prompt's substitute reorders only its own)."""
        if self.order == "shuffled":
            salt = "order:" + "|".join(sorted(f"{e.level:g}:{e.prompt}:{e.completion}" for e in examples))
            return _seeded(examples, self.seed, name, salt)
        return sorted(examples, key=lambda e: e.level, reverse=self.order == "descending")

    def shortfall(self) -> dict[str, int]:
        """Dimensions with fewer than k examples in the file, and how many they have."""
        return {name: len(items) for name, items in self.pool.items() if len(items) < self.k}

    def chosen(self, prompts: Sequence[str] = ()) -> dict[str, list[LabelledExample]]:
        """The examples a completion of these prompts (its record's prompt, the prompt the judge is shown) is
        judged with: the run's fixed choice unless one of them is a chosen example's prompt."""
        keys = {same_prompt_key(p) for p in prompts}
        if not keys & self._prompts:
            return self._chosen
        return {name: self._pick(name, keys) for name in self.pool}


def rendered(chosen: dict[str, list[LabelledExample]], dimensions: Sequence[Any]) -> list[dict[str, Any]]:
    """The template's ``examples``: per shown dimension (in the prompt's order), its examples, texts cut."""
    return [{"dimension": d.name, "items": [{"prompt": _cut(e.prompt), "completion": _cut(e.completion),
                                             "level": e.level} for e in chosen.get(d.name, [])]}
            for d in dimensions if chosen.get(d.name)]


def digest(blocks: list[dict[str, Any]]) -> str:
    """What the examples add to a cached answer's key (the same examples, the same key)."""
    return hashlib.sha256(json.dumps(blocks, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]
