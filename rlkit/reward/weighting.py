"""A base for weight schedulers whose weights depend on the batches they have seen.

The host calls ``weights(step, scores, rubric)`` once per training step, but may call it again for
the same step (``rlkit score`` scores chunk by chunk at step 0). :class:`StepRecordScheduler` keeps
the state as of the last finished step apart from the current step's record: a call for a later step
first commits the pending record, a call for the same (or an earlier) step replaces it. A step thus
counts once, with the last batch it saw, and the state is plain data that survives
``torch.load(weights_only=True)`` for exact resume.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from rlkit.core.errors import ConfigError
from rlkit.core.rubric import Rubric

if TYPE_CHECKING:
    import torch


class StepRecordScheduler:
    """Subclasses set ``self.params`` (with a ``fixed: list[str]`` of dimensions they must leave alone)
    and implement :meth:`advance`, which returns the new record with at least ``weights``."""

    params: Any

    def __init__(self) -> None:
        self._committed: dict[str, Any] | None = None  # state after the last finished step
        self._pending: dict[str, Any] | None = None    # the current step's record, replaced on a repeat
        self._checked: list[str] | None = None

    def check_rubric(self, rubric: Rubric) -> None:
        unknown = sorted(set(self.params.fixed) - set(rubric.dimension_names))
        if unknown:
            raise ConfigError(f"fixed names unknown dimensions {unknown}; the rubric has {rubric.dimension_names}",
                              "weights.params.fixed")
        self._checked = rubric.dimension_names

    def advance(self, step: int, scores: torch.Tensor, rubric: Rubric,
                previous: dict[str, Any] | None) -> dict[str, Any]:
        """The record after ``step`` given the last finished step's record (None at the start)."""
        raise NotImplementedError

    @property
    def latest(self) -> dict[str, Any] | None:
        return self._pending

    def weights(self, step: int, scores: torch.Tensor, rubric: Rubric) -> torch.Tensor:
        import torch
        if self._checked != rubric.dimension_names:
            self.check_rubric(rubric)
        names = rubric.dimension_names
        if self._pending is not None and self._pending["dimensions"] != names:
            raise ConfigError(f"the scheduler's state is for dimensions {self._pending['dimensions']}, the rubric "
                              f"has {names}", "weights")
        if self._pending is not None and step > self._pending["step"]:
            self._committed = self._pending
        step = step if self._pending is None else max(step, self._pending["step"])
        record = self.advance(step, scores, rubric, self._committed)
        self._pending = {**record, "step": step, "dimensions": names}
        return torch.tensor(self._pending["weights"], dtype=torch.float32)

    def state_dict(self) -> dict[str, Any]:
        return {"committed": copy.deepcopy(self._committed), "pending": copy.deepcopy(self._pending)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._committed = copy.deepcopy(state.get("committed"))
        self._pending = copy.deepcopy(state.get("pending"))
