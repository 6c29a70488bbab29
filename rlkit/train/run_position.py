"""Where a run stands in its data, its random numbers and its wall time: what a checkpoint saves so that a resumed
run reads the prompts, and draws the sampling noise, that the uninterrupted run would have, and reports the wall time
of every ``rlkit fit`` invocation that trained it."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from rlkit.core.rng import restore_rng_state


@dataclass
class RunClock:
    """The run's wall time across the ``rlkit fit`` invocations that trained it. ``started``: when this invocation
    began (``time.monotonic()``). ``earlier_s`` and ``earlier_invocations``: the invocations before this one, as the
    checkpoint it resumed from saved them; ``earlier_invocations`` is None where that checkpoint predates them (their
    wall time unknown, ``earlier_s`` 0).

    A checkpoint saves the time up to its own saving: what an earlier invocation spent after its last checkpoint (the
    steps a crash lost, or its end evaluation, report and policy save) is not in the total, which is therefore a
    lower bound on the run's cost whenever it was resumed."""

    started: float = field(default_factory=time.monotonic)
    earlier_s: float = 0.0
    earlier_invocations: int | None = 0

    @property
    def invocations(self) -> int | None:
        """How many invocations trained the run, this one included; None when the earlier ones are unknown."""
        return None if self.earlier_invocations is None else self.earlier_invocations + 1

    def total_s(self) -> float:
        """The earlier invocations' seconds (as checkpointed) and this one's so far."""
        return self.earlier_s + (time.monotonic() - self.started)

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint saved now carries: the run's wall time up to this moment and the invocations in it."""
        return {"seconds": self.total_s(), "invocations": self.invocations}

    def resume_from(self, state: dict[str, Any] | None) -> None:
        """Take a checkpoint's ``state_dict`` as the earlier invocations' (None: a checkpoint that predates it)."""
        known = isinstance(state, dict) and state.get("invocations") is not None
        self.earlier_s = float(state["seconds"]) if known else 0.0
        self.earlier_invocations = int(state["invocations"]) if known else None


@dataclass
class RunPosition:
    """``data``: (epoch, prompts the loader yielded in it), where the data sampler resumes from a checkpoint.
    ``sampling``: (epoch, prompts read in it) of the prompts a filtering step draws, extra rounds included: ahead of
    ``data`` once a step draws more; None until the first such step. ``rng_to_restore``: a checkpoint's random
    generators, put back at the first step after a resume. ``clock``: the run's wall time over its invocations."""

    data: tuple[int, int] = (0, 0)
    sampling: tuple[int, int] | None = None
    rng_to_restore: dict[str, Any] | None = None
    clock: RunClock = field(default_factory=RunClock)

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
