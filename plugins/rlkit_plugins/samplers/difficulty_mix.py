"""``difficulty_mix``: every batch mixes prompts by difficulty in a fixed ratio.

The rubric design note (§5.1, on building the prompt set) asks for a difficulty gradient rather than all easy or all
hard prompts: easy ones let the policy consolidate what it can do, hard ones push it to explore, and it suggests
easy : medium : hard = 3 : 5 : 2, the default ``mix`` here (``rlkit data prepare mix=...`` samples a file to the same
ratio once; this sampler holds every batch to it).

A prompt's level is its record's ``mix_field`` (``difficulty``), compared as text, when every training record has
one; the batches then depend on the seed and the step alone, so a generator may sample them ahead. When no record
has it, the level is measured: a prompt's running pass rate on ``dimension`` (a completion succeeds when its raw
score reaches ``threshold``; an exponential moving average of each step's share) makes it ``easy`` at ``easy_from``
or above, ``hard`` at ``hard_below`` or below, ``medium`` otherwise and until it is first scored; ``mix`` then names
exactly those three levels.

Each level's places in a batch of B are B × its share, rounded by largest remainder (ties to the level listed first);
a level without prompts gives its share to the others in proportion. A level's places go first to the prompts of
that level the epoch shuffle proposes, in its order, then to the level's other prompts in an order drawn from
(seed, step); places a level cannot fill go to the rest of the proposal, then to any prompt.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlkit.plugin import ConfigError, DataError, Rubric, allocate_shares, hookimpl, prompt_text
from rlkit_plugins.samplers.outcomes import (
    check_dimension,
    check_length,
    draw_order,
    mean_rate,
    success_shares,
    update_rate,
)

if TYPE_CHECKING:
    import torch

BANDS = ("easy", "medium", "hard")


class DifficultyMixSampler:
    """Each batch mixes difficulty levels in a fixed ratio (easy : medium : hard = 3 : 5 : 2 by default), by a
    record field or by measured pass-rate bands."""

    @dataclass
    class Params:
        mix: dict[str, float] = field(default_factory=lambda: {"easy": 3.0, "medium": 5.0, "hard": 2.0})
        """Level -> weight: each batch's share of each level (the rubric design note's 3 : 5 : 2)."""
        mix_field: str = "difficulty"
        """The record field that holds a prompt's level; without it in any record, levels are measured."""
        dimension: str = "correctness"
        """Measured levels: the rubric dimension whose raw score says whether a completion succeeded."""
        threshold: float = 1.0
        """Measured levels: a completion succeeds when its raw score on `dimension` is at least this."""
        easy_from: float = 0.8
        """Measured levels: a running pass rate at or above this makes a prompt easy."""
        hard_below: float = 0.2
        """Measured levels: a running pass rate at or below this makes a prompt hard."""
        smoothing: float = 0.5
        """Weight of the newest step in a prompt's running pass rate (an exponential moving average)."""

    def __init__(self, params: Params) -> None:
        p = params
        if not p.mix:
            raise ConfigError("name at least one level, e.g. {easy: 3, medium: 5, hard: 2}", "sampler.params.mix")
        for level, weight in p.mix.items():
            if not (math.isfinite(weight) and weight > 0):
                raise ConfigError(f"weight of {level!r} must be a positive number, got {weight!r}",
                                  "sampler.params.mix")
        if not 0 <= p.hard_below < p.easy_from <= 1:
            raise ConfigError(f"need 0 <= hard_below < easy_from <= 1, got {p.hard_below} and {p.easy_from}",
                              "sampler.params.easy_from")
        if not 0 < p.smoothing <= 1:
            raise ConfigError(f"must be in (0, 1], got {p.smoothing!r}", "sampler.params.smoothing")
        self.params = p
        self.seed = 0
        self.levels: list[str] | None = None  # from the records; None: measured
        self.rate: list[float | None] = []
        self.adaptive = False

    def check_rubric(self, rubric: Rubric) -> None:
        check_dimension(rubric, self.params.dimension, "sampler.params.dimension")

    def setup(self, records: list[dict[str, Any]], seed: int) -> None:
        p = self.params
        self.seed, self.rate = seed, [None] * len(records)
        having = [p.mix_field in r for r in records]
        if all(having) and records:
            self.levels = [str(r[p.mix_field]) for r in records]
            unknown = next((i for i, level in enumerate(self.levels) if level not in p.mix), None)
            if unknown is not None:
                raise DataError(f"a training record has {p.mix_field}={self.levels[unknown]!r}, not a level of "
                                f"sampler.params.mix ({', '.join(p.mix)}): "
                                f"{prompt_text(records[unknown]['prompt'])[:60]!r}", "sampler.params.mix")
        elif any(having):
            missing = having.index(False)
            raise DataError(f"some training records have a {p.mix_field!r} field and some do not, e.g. "
                            f"{prompt_text(records[missing]['prompt'])[:60]!r}; give every record one, or none to "
                            "measure levels by pass rate", "sampler.params.mix_field")
        else:
            if set(p.mix) != set(BANDS):
                raise ConfigError(f"no record has a {p.mix_field!r} field, so levels are measured pass-rate bands: "
                                  f"mix must name exactly easy, medium and hard, got {', '.join(p.mix)}",
                                  "sampler.params.mix")
            self.levels = None
        self.adaptive = self.levels is None

    def level(self, i: int) -> str:
        if self.levels is not None:
            return self.levels[i]
        rate = self.rate[i]
        if rate is None:
            return "medium"
        return "easy" if rate >= self.params.easy_from else "hard" if rate <= self.params.hard_below else "medium"

    def pick(self, draw: int, proposed: list[int]) -> list[int]:
        n, size = len(self.rate), len(proposed)
        levels = [self.level(i) for i in range(n)]
        present = {level: w for level, w in self.params.mix.items() if level in set(levels)}
        places = allocate_shares(present, size)
        order = draw_order(self.seed, draw, n)
        batch: list[int] = []
        taken: set[int] = set()
        for level, count in places.items():
            own = [i for i in proposed if levels[i] == level] + [i for i in order if levels[i] == level]
            for i in own:
                if count == 0:
                    break
                if i not in taken:
                    batch.append(i)
                    taken.add(i)
                    count -= 1
        for i in [*proposed, *order]:  # places a level could not fill
            if len(batch) >= size:
                break
            if i not in taken:
                batch.append(i)
                taken.add(i)
        return batch

    def observe(self, draw: int, indices: list[int], raw_scores: torch.Tensor, rubric: Rubric) -> None:
        p = self.params
        for i, share in zip(indices, success_shares(raw_scores, rubric, p.dimension, p.threshold), strict=True):
            if share is not None:
                self.rate[i] = update_rate(self.rate[i], share, p.smoothing)

    def metrics(self) -> dict[str, float]:
        n = max(len(self.rate), 1)
        out = {f"{level}_frac": sum(self.level(i) == level for i in range(len(self.rate))) / n
               for level in self.params.mix}
        if any(r is not None for r in self.rate):
            out["pass_rate_mean"] = mean_rate(self.rate)
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"rate": list(self.rate)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_length(state, "rate", len(self.rate), "difficulty_mix sampler")
        self.rate = [None if r is None else float(r) for r in state["rate"]]


@hookimpl
def rlkit_register_prompt_samplers(register: Callable[..., None]) -> None:
    register("difficulty_mix", DifficultyMixSampler)
