"""``rubric.schedule``: a staged rubric, the automatic form of "start with a few dimensions, add more as they
saturate" (the rubric design note, 000 §6 / 004 §2.2).

Stage *k* trains on the dimensions of stages 1..k; the rest weigh 0 (the judge still scores them, so their metrics
and samples keep reporting what it said). The switch to stage *k+1* uses the one saturation signal rlkit already has:
``rewards/<dimension>/saturated_groups`` (:func:`rlkit.reward.diagnostics.saturation_share`: the share of a step's
groups whose completions all score alike on the dimension), averaged over the stage's last ``window`` steps, above
``min_share`` for **every** active dimension. Those are the thresholds ``rlkit rubric tighten`` and the doctor's
zero-advantage check use (window 10, share 0.5), so a stage ends exactly where tighten would call its dimensions
saturated. A dimension flat at its floor counts too: it gives no signal either, and the next stage's dimensions
do. The last stage stays.

Each stage is a version of the rubric: the same dimensions with the inactive ones at weight 0, versioned
``<version>+stage.<k>`` with its own content hash. What a checkpoint keeps (:meth:`StagedRubric.state_dict`): the
stage, the step it started at and its window of saturated shares, so a resumed run switches at the step the
uninterrupted one does. Held-out and golden-set scoring keep the whole rubric, so start and end stay comparable.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlkit.core.errors import ConfigError
from rlkit.core.rubric import Rubric

if TYPE_CHECKING:
    import torch

WHERE = "rubric.schedule.stages"


def check_stages(stages: Sequence[Sequence[str]], rubric: Rubric, where: str = WHERE) -> None:
    """``ConfigError`` naming the stage key for a schedule ``rubric`` cannot run: an empty stage, an unknown or
    repeated dimension, a dimension in no stage, a first stage that weighs nothing, a single stage."""
    names = rubric.dimension_names
    if len(stages) == 1:
        raise ConfigError("a schedule needs at least two stages (one stage is the rubric itself); leave it empty "
                          "for no schedule", where)
    seen: dict[str, int] = {}
    for k, stage in enumerate(stages):
        if not stage:
            raise ConfigError(f"stage {k + 1} is empty: list the dimensions it adds", f"{where}[{k}]")
        for name in stage:
            if name not in names:
                raise ConfigError(f"unknown dimension {name!r}; rubric {rubric.name} has {', '.join(names)}",
                                  f"{where}[{k}]")
            if name in seen:
                raise ConfigError(f"dimension {name!r} is already in stage {seen[name] + 1}", f"{where}[{k}]")
            seen[name] = k
    missing = [n for n in names if n not in seen]
    if stages and missing:
        raise ConfigError(f"dimension(s) {', '.join(missing)} of rubric {rubric.name} are in no stage: add them to "
                          "one (the last, to train on them at the end)", where)
    if stages and all(d.weight == 0 for d in rubric.dimensions if d.name in stages[0]):
        raise ConfigError("the first stage's dimensions all weigh 0 in the rubric: it would train on nothing",
                          f"{where}[0]")


def check_rubric_schedule(result: Any) -> None:
    """``rlkit validate``'s check of ``rubric.schedule`` on a checked config (``rlkit.config.CheckedConfig``): the
    stages against the rubric, and a judge that scores the rubric's own dimensions."""
    schedule = result.schedule
    if schedule is None or not schedule.stages:
        return
    check_stages(schedule.stages, result.rubric)
    if result.scored_rubric.dimension_names != result.rubric.dimension_names:
        raise ConfigError(f"judge={result.plugin_names.get('judge')} scores its own dimensions "
                          f"({', '.join(result.scored_rubric.dimension_names)}), not the rubric's: a schedule of the "
                          "rubric's dimensions has nothing to stage", WHERE)


def stage_rubric(rubric: Rubric, active: Sequence[str], stage: int) -> Rubric:
    """``rubric`` as stage ``stage`` (1-based) trains on it: the dimensions not in ``active`` at weight 0, the
    version ``<version>+stage.<stage>``."""
    dims = [d if d.name in active else d.model_copy(update={"weight": 0.0}) for d in rubric.dimensions]
    return rubric.model_copy(update={"dimensions": dims, "version": f"{rubric.version}+stage.{stage}"})


@dataclass(frozen=True)
class StageChange:
    """One switch: at the end of ``step`` the schedule moved from stage ``old`` to ``new`` (1-based)."""

    step: int
    old: int
    new: int
    added: list[str]
    shares: dict[str, float]  # each active dimension's windowed saturated share that made the switch
    rubric: Rubric            # the new stage's rubric

    def row(self) -> dict[str, Any]:
        """The change as a line of ``rubrics/schedule.jsonl``."""
        return {"step": self.step, "stage": self.new, "version": self.rubric.version, "hash": self.rubric.content_hash,
                "added": self.added, "saturated_shares": {k: round(v, 6) for k, v in self.shares.items()}}


@dataclass
class StagedRubric:
    """The schedule's state and what the reward pipeline reads of it: the current stage's rubric and mask."""

    rubric: Rubric
    stages: list[list[str]]
    min_share: float = 0.5
    window: int = 10
    stage: int = 1                                  # 1-based
    started: int = 0                                # the first step of the current stage
    shares: list[dict[str, float]] = field(default_factory=list)  # the stage's last `window` steps, oldest first

    def __post_init__(self) -> None:
        check_stages(self.stages, self.rubric)
        self._current = stage_rubric(self.rubric, self.active, self.stage)

    @property
    def active(self) -> list[str]:
        """The dimensions trained on now: stages 1..stage."""
        return [n for stage in self.stages[:self.stage] for n in stage]

    @property
    def current(self) -> Rubric:
        """The current stage's rubric (inactive dimensions at weight 0)."""
        return self._current

    def mask(self) -> torch.Tensor:
        """``float [D]``: 1 for an active dimension, 0 for one a later stage adds."""
        import torch

        active = set(self.active)
        return torch.tensor([1.0 if n in active else 0.0 for n in self.rubric.dimension_names])

    def observe(self, step: int, shares: Mapping[str, float]) -> StageChange | None:
        """Step ``step``'s saturated share per dimension (``rewards/<d>/saturated_groups``); the change when the
        active dimensions are all saturated over the stage's last ``window`` steps, else None."""
        self.shares = [*self.shares, {n: float(shares[n]) for n in self.active}][-self.window:]
        if self.stage >= len(self.stages) or len(self.shares) < self.window:
            return None
        means = {n: statistics.fmean(s[n] for s in self.shares) for n in self.active}
        if not all(v > self.min_share for v in means.values()):
            return None
        old = self.stage
        self.stage, self.started, self.shares = old + 1, step + 1, []
        self._current = stage_rubric(self.rubric, self.active, self.stage)
        return StageChange(step, old, self.stage, list(self.stages[old]), means, self._current)

    def metrics(self) -> dict[str, float]:
        """``rubric/stage`` and ``rubric/active_dimensions``, logged every step."""
        return {"rubric/stage": float(self.stage), "rubric/active_dimensions": float(len(self.active))}

    def state_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "started": self.started, "shares": [dict(s) for s in self.shares],
                "stages": [list(s) for s in self.stages], "rubric_hash": self.rubric.content_hash}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """A checkpoint's stage; ``ConfigError`` when it was saved under another schedule (its stages differ)."""
        saved = state.get("stages")
        if saved is not None and [list(s) for s in saved] != self.stages:
            raise ConfigError(f"the checkpoint was trained with the schedule {saved}, this run's is {self.stages}",
                              WHERE)
        self.stage, self.started = int(state.get("stage", 1)), int(state.get("started", 0))
        self.shares = [dict(s) for s in state.get("shares", [])]
        self._current = stage_rubric(self.rubric, self.active, self.stage)


__all__ = ["WHERE", "StageChange", "StagedRubric", "check_rubric_schedule", "check_stages", "stage_rubric"]
