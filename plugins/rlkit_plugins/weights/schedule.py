"""``schedule``: per-dimension weight curricula over training steps, fixed in config.

Each entry of ``params.curricula`` maps a dimension name to one curriculum; a dimension without
one keeps its rubric weight. Curricula (values are absolute weights, steps are training steps):

* ``{type: linear, start: 0.0, end: 1.0, steps: 100, delay: 0}``: ``start`` until step ``delay``,
  then a straight ramp reaching ``end`` at step ``delay + steps``, ``end`` afterwards.
* ``{type: cosine, start, end, steps, delay}``: the same ramp shaped as a half cosine (flat at both
  ends), ``start + (end - start) * (1 - cos(pi * p)) / 2`` with ``p`` the ramp's progress in [0, 1].
* ``{type: step, milestones: {0: 1.0, 50: 2.0}}``: the value of the last milestone reached; the
  rubric weight before the first one.

The weights depend on the step alone, so there is no state and a repeated step is harmless.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlkit.plugin import ConfigError, Rubric, hookimpl

if TYPE_CHECKING:
    import torch

_WHERE = "weights.params.curricula"
_KEYS = {
    "linear": ({"type", "start", "end", "steps"}, {"delay"}),
    "cosine": ({"type", "start", "end", "steps"}, {"delay"}),
    "step": ({"type", "milestones"}, set()),
}


def _number(value: Any, where: str, *, minimum: float = 0.0) -> float:
    # bool is an int to Python; `start: true` is a typo, not a weight of 1
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < minimum:
        raise ConfigError(f"expected a finite number >= {minimum:g}, got {value!r}", where)
    return float(value)


def _step(value: Any, where: str, *, minimum: int) -> int:
    # milestone keys come back as text from some command-line overrides ({'50': 2.0})
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"expected a whole number of steps >= {minimum}, got {value!r}", where)
    return value


@dataclass(frozen=True)
class Curriculum:
    """One dimension's curriculum, validated; ``value(step, rubric_weight)`` is its weight."""

    kind: str
    start: float = 0.0
    end: float = 0.0
    steps: int = 1
    delay: int = 0
    milestones: tuple[tuple[int, float], ...] = ()

    @classmethod
    def parse(cls, spec: Any, where: str) -> Curriculum:
        if not isinstance(spec, dict):
            raise ConfigError(f"a curriculum is a mapping with a type ({', '.join(_KEYS)}), got {spec!r}", where)
        kind = spec.get("type")
        if kind not in _KEYS:
            raise ConfigError(f"unknown curriculum type {kind!r}; available: {', '.join(_KEYS)}", f"{where}.type")
        required, optional = _KEYS[kind]
        unknown = sorted(set(spec) - required - optional)
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r} for a {kind} curriculum; valid keys: "
                              f"{', '.join(sorted(required | optional))}", where)
        missing = sorted(required - set(spec))
        if missing:
            raise ConfigError(f"a {kind} curriculum needs {', '.join(missing)}", where)
        if kind == "step":
            raw = spec["milestones"]
            if not isinstance(raw, dict) or not raw:
                raise ConfigError(f"milestones map steps to weights, e.g. {{0: 1.0, 50: 2.0}}, got {raw!r}",
                                  f"{where}.milestones")
            pairs = {_step(k, f"{where}.milestones", minimum=0): _number(v, f"{where}.milestones.{k}")
                     for k, v in raw.items()}
            return cls(kind, milestones=tuple(sorted(pairs.items())))
        return cls(kind, start=_number(spec["start"], f"{where}.start"), end=_number(spec["end"], f"{where}.end"),
                   steps=_step(spec["steps"], f"{where}.steps", minimum=1),
                   delay=_step(spec.get("delay", 0), f"{where}.delay", minimum=0))

    def value(self, step: int, rubric_weight: float) -> float:
        if self.kind == "step":
            current = rubric_weight
            for at, weight in self.milestones:
                if step < at:
                    break
                current = weight
            return current
        progress = min(max((step - self.delay) / self.steps, 0.0), 1.0)
        if self.kind == "cosine":
            progress = (1.0 - math.cos(math.pi * progress)) / 2.0
        return self.start + (self.end - self.start) * progress

    def breakpoints(self) -> list[int]:
        """Steps where the curve changes shape; between them it is linear or constant, or a cosine
        segment that only vanishes when both of its ends do."""
        if self.kind == "step":
            return [at for at, _ in self.milestones]
        return [self.delay, self.delay + self.steps]


class ScheduleWeights:
    """Weights that follow per-dimension curricula over steps; see the module docstring."""

    @dataclass
    class Params:
        curricula: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __init__(self, params: Params) -> None:
        self.params = params
        self.curricula = {name: Curriculum.parse(spec, f"{_WHERE}.{name}") for name, spec in params.curricula.items()}
        self._checked: list[str] | None = None

    def check_rubric(self, rubric: Rubric) -> None:
        unknown = sorted(set(self.curricula) - set(rubric.dimension_names))
        if unknown:
            raise ConfigError(f"curricula given for unknown dimensions {unknown}; the rubric has "
                              f"{rubric.dimension_names}", _WHERE)
        # Every curve is linear, constant or a cosine segment between breakpoints, so if all weights
        # vanish anywhere they vanish at one of these steps: checking them catches it before training.
        for at in sorted({0, *(b for c in self.curricula.values() for b in c.breakpoints())}):
            if not any(w > 0 for w in self._values(at, rubric)):
                raise ConfigError(f"every dimension weight is 0 at step {at}; no reward could be formed", _WHERE)
        self._checked = rubric.dimension_names

    def _values(self, step: int, rubric: Rubric) -> list[float]:
        return [self.curricula[d.name].value(step, d.weight) if d.name in self.curricula else d.weight
                for d in rubric.dimensions]

    def weights(self, step: int, scores: torch.Tensor, rubric: Rubric) -> torch.Tensor:
        import torch
        if self._checked != rubric.dimension_names:
            self.check_rubric(rubric)
        return torch.tensor(self._values(step, rubric), dtype=torch.float32)

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass


@hookimpl
def rlkit_register_weight_schedulers(register: Callable[..., None]) -> None:
    register("schedule", ScheduleWeights)
