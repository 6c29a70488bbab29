"""``pass_rate``: stop spending samples on prompts the policy already solves.

A group whose completions all succeed has zero advantage under every group-relative estimator, so its generation
and judge calls teach nothing; open-instruct stops resampling prompts that are always solved for this reason. After
each step the sampler reads every prompt's share of successful completions on one rubric dimension (a completion
succeeds when its raw score reaches ``threshold``, e.g. ``correctness >= 1``) and keeps, per prompt:

* a running pass rate (an exponential moving average of those shares, weight ``smoothing`` on the newest);
* whether the prompt was solved at its latest step (a share of at least ``solved_share``), and how many steps in a row.

A prompt solved ``retire_after`` steps in a row is retired for ``retire_for`` steps: picked at none of them, it comes
back afterwards (with its streak reset, so it must be solved ``retire_after`` times again to leave again).

Each step's batch starts from what the epoch shuffle proposes, minus retired prompts; the free places go to the
other active prompts in an order drawn from (seed, step). Then, while fewer than ``min_unsolved`` of the batch are
unsolved prompts (never scored, or not solved at their latest step) and unsolved prompts are left outside the batch,
the last solved prompt of the batch gives its place to the next of them. When fewer active prompts exist than a
batch holds, the prompts that return soonest fill it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlkit.plugin import ConfigError, Rubric, hookimpl
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


class PassRateSampler:
    """Per-prompt running success on one dimension; prompts solved K steps in a row are retired for a while, and
    each batch keeps a minimum share of unsolved prompts."""

    adaptive = True

    @dataclass
    class Params:
        dimension: str = "correctness"
        """The rubric dimension whose raw score says whether a completion succeeded."""
        threshold: float = 1.0
        """A completion succeeds when its raw score on `dimension` is at least this (a binary dimension: 1)."""
        solved_share: float = 1.0
        """A step solves a prompt when at least this share of its scored completions succeed (1.0: all of them)."""
        retire_after: int = 2
        """Solved this many steps in a row (K), a prompt is retired."""
        retire_for: int = 50
        """Steps a retired prompt sits out before it may be picked again."""
        min_unsolved: float = 0.5
        """The least share of each batch that goes to unsolved prompts (never scored, or not solved at their latest
        step), while there are any outside it."""
        smoothing: float = 0.5
        """Weight of the newest step in a prompt's running pass rate (an exponential moving average)."""

    def __init__(self, params: Params) -> None:
        p = params
        for key, value, ok in (("threshold", p.threshold, math.isfinite(p.threshold)),
                               ("solved_share", p.solved_share, 0 < p.solved_share <= 1),
                               ("retire_after", p.retire_after, p.retire_after >= 1),
                               ("retire_for", p.retire_for, p.retire_for >= 0),
                               ("min_unsolved", p.min_unsolved, 0 <= p.min_unsolved <= 1),
                               ("smoothing", p.smoothing, 0 < p.smoothing <= 1)):
            if not ok:
                rule = {"threshold": "a finite number", "solved_share": "in (0, 1]", "retire_after": ">= 1",
                        "retire_for": ">= 0", "min_unsolved": "in [0, 1]", "smoothing": "in (0, 1]"}[key]
                raise ConfigError(f"must be {rule}, got {value!r}", f"sampler.params.{key}")
        self.params = p
        self.seed = 0
        self.n = 0
        self.rate: list[float | None] = []
        self.streak: list[int] = []
        self.solved: list[bool] = []  # solved at its latest scored step
        self.back_at: list[int] = []  # the first draw a prompt may be picked at again (0: never retired)
        self._last_draw = -1

    def check_rubric(self, rubric: Rubric) -> None:
        check_dimension(rubric, self.params.dimension, "sampler.params.dimension")

    def setup(self, records: list[dict[str, Any]], seed: int) -> None:
        self.seed, self.n = seed, len(records)
        self.rate, self.streak = [None] * self.n, [0] * self.n
        self.solved, self.back_at = [False] * self.n, [0] * self.n

    def unsolved(self, i: int) -> bool:
        return not self.solved[i]

    def pick(self, draw: int, proposed: list[int]) -> list[int]:
        size = len(proposed)
        active = [self.back_at[i] <= draw for i in range(self.n)]
        batch = [i for i in proposed if active[i]]
        taken = set(batch)
        spare = [i for i in draw_order(self.seed, draw, self.n) if active[i] and i not in taken]
        fill, spare = spare[:size - len(batch)], spare[size - len(batch):]
        batch += fill
        # the minimum unsolved share: the last solved prompts give way to unsolved ones from outside
        wanted = math.ceil(self.params.min_unsolved * len(batch) - 1e-9)
        outside = [i for i in spare if self.unsolved(i)]
        have = sum(self.unsolved(i) for i in batch)
        for pos in range(len(batch) - 1, -1, -1):
            if have >= wanted or not outside:
                break
            if not self.unsolved(batch[pos]):
                batch[pos] = outside.pop(0)
                have += 1
        if len(batch) < size:  # fewer active prompts than a batch: those that come back soonest
            taken = set(batch)
            waiting = sorted((i for i in range(self.n) if i not in taken), key=lambda i: (self.back_at[i], i))
            batch += waiting[:size - len(batch)]
        return batch

    def observe(self, draw: int, indices: list[int], raw_scores: torch.Tensor, rubric: Rubric) -> None:
        p = self.params
        self._last_draw = draw
        for i, share in zip(indices, success_shares(raw_scores, rubric, p.dimension, p.threshold), strict=True):
            if share is None:  # nothing scored: no evidence either way
                continue
            self.rate[i] = update_rate(self.rate[i], share, p.smoothing)
            self.solved[i] = share >= p.solved_share
            self.streak[i] = self.streak[i] + 1 if self.solved[i] else 0
            if self.streak[i] >= p.retire_after:
                self.back_at[i], self.streak[i] = draw + 1 + p.retire_for, 0

    def metrics(self) -> dict[str, float]:
        nxt = self._last_draw + 1
        return {"retired": float(sum(b > nxt for b in self.back_at)),
                "unsolved_frac": sum(not s for s in self.solved) / max(self.n, 1),
                "seen_frac": sum(r is not None for r in self.rate) / max(self.n, 1),
                **({"pass_rate_mean": mean_rate(self.rate)} if any(r is not None for r in self.rate) else {})}

    def state_dict(self) -> dict[str, Any]:
        return {"rate": list(self.rate), "streak": list(self.streak), "solved": list(self.solved),
                "back_at": list(self.back_at), "last_draw": self._last_draw}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_length(state, "rate", self.n, "pass_rate sampler")
        self.rate = [None if r is None else float(r) for r in state["rate"]]
        self.streak = [int(s) for s in state["streak"]]
        self.solved = [bool(s) for s in state["solved"]]
        self.back_at = [int(b) for b in state["back_at"]]
        self._last_draw = int(state.get("last_draw", -1))


@hookimpl
def rlkit_register_prompt_samplers(register: Callable[..., None]) -> None:
    register("pass_rate", PassRateSampler)
