"""Where a run stands in its data and its random numbers: what a checkpoint saves so that a resumed run reads the
prompts, and draws the sampling noise, that the uninterrupted run would have."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlkit.core.rng import restore_rng_state


@dataclass
class RunPosition:
    """``data``: (epoch, prompts the loader yielded in it), where the data sampler resumes from a checkpoint.
    ``sampling``: (epoch, prompts read in it) of the prompts a filtering step draws, extra rounds included: ahead of
    ``data`` once a step draws more; None until the first such step. ``rng_to_restore``: a checkpoint's random
    generators, put back at the first step after a resume."""

    data: tuple[int, int] = (0, 0)
    sampling: tuple[int, int] | None = None
    rng_to_restore: dict[str, Any] | None = None

    def begin_step(self, epoch: int, global_prompts: int) -> None:
        """A step of ``global_prompts`` (every process's) in ``epoch``: restore a resumed run's generators, then count
        the step's prompts. Restored here, not at load time: nothing between the checkpointed step and this one draws
        random numbers in an uninterrupted run, but Lightning's setup on resume might."""
        if self.rng_to_restore is not None:
            restore_rng_state(self.rng_to_restore)
            self.rng_to_restore = None
        was_epoch, done = self.data
        if self.sampling is None:
            self.sampling = (was_epoch, done)
        self.data = (epoch, (done if was_epoch == epoch else 0) + global_prompts)

    @property
    def next_sampling(self) -> tuple[int, int]:
        """Where a filtering step reads its first prompts."""
        return self.sampling or self.data
