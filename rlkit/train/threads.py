"""How many threads torch computes with when ``torch_threads`` is null, and the warning when the cores turn out shared.

On a shared machine torch's default (every physical core) competes with the other jobs for each core: on 2 cores with
another job running, ``experiment=smollm2_arithmetic`` took 106–146 s a step with torch's default threads and
10–15 s with one (issue 49). The rule, read once at start-up:

    threads = round(cores − others), between 1 and torch's default
    cores   = the CPUs this process may run on (``os.sched_getaffinity``)
    others  = max(0, 1-minute load average − this process's own share of it)
    own     = 1 − exp(−cpu_seconds / 60): the load average is an exponential mean over a minute, so a process that has
              computed for t seconds has added about that much of one runnable thread to it

``OMP_NUM_THREADS`` set by hand wins (torch's default follows it), as does ``torch_threads`` set in the config.
The load can change after start-up; :class:`SharedCoresWarning` says so once when steps run far slower than the
run's own first ones while the load average exceeds the cores."""

from __future__ import annotations

import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import lightning as L

SLOWDOWN = 3.0  # a step this many times the run's first ones: completions' lengths alone rarely explain it
FIRST_STEPS = 3  # the baseline: the fastest of these (after the first, which warms caches and compiles)


def threads_for(cores: int, load1: float, own: float, default: int) -> int:
    """The rule above: the cores the other jobs leave, rounded, at least 1 and at most torch's ``default``."""
    others = max(0.0, load1 - own)
    return max(1, min(default, int(cores - others + 0.5)))


def available_cores() -> int:
    """The CPUs this process may run on (its affinity mask: a container's or ``taskset``'s limit)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # macOS and Windows have no affinity mask
        return os.cpu_count() or 1


def own_load() -> float:
    """This process's share of the 1-minute load average so far (see the module docstring)."""
    return 1.0 - math.exp(-time.process_time() / 60.0)


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    reason: str | None  # why fewer than torch's default, said once at start-up; None when it is torch's default


def default_torch_threads(default: int) -> ThreadChoice:
    """``torch_threads`` when the config leaves it null; ``default`` is torch's own (its physical cores)."""
    if os.environ.get("OMP_NUM_THREADS"):
        return ThreadChoice(default, None)
    try:
        load1 = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average (Windows): torch's default
        return ThreadChoice(default, None)
    cores, own = available_cores(), own_load()
    threads = threads_for(cores, load1, own, default)
    if threads >= default:
        return ThreadChoice(threads, None)
    return ThreadChoice(threads, f"torch uses {threads} thread{'s' * (threads > 1)} of {cores} cores: the 1-minute "
                                 f"load average is {load1:.1f}, so other jobs use about {max(0.0, load1 - own):.1f} "
                                 "(torch_threads=N sets it)")


class SharedCoresWarning(L.Callback):
    """Says once, on the console, when a step takes ``SLOWDOWN`` times the run's first steps while the machine's
    load exceeds its cores: another job is sharing them and fewer torch threads may be many times faster."""

    def __init__(self, threads: int, cores: int | None = None) -> None:
        self.threads, self.cores = threads, cores or available_cores()
        self.durations: list[float] = []
        self.warned = False
        self._started: float | None = None

    def on_train_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self._started is None or self.warned:
            return  # once: the console is for the run's own progress
        self.durations.append(time.perf_counter() - self._started)
        try:
            load1 = os.getloadavg()[0]
        except (AttributeError, OSError):
            return
        line = self.check(trainer.global_step, self.durations, load1)
        if line is not None and trainer.is_global_zero:
            print(f"rlkit: warning: {line}", file=sys.stderr, flush=True)

    def check(self, step: int, durations: list[float], load1: float) -> str | None:
        """The warning for the latest of ``durations`` (seconds per step, in order), or None."""
        if self.warned or len(durations) <= FIRST_STEPS:
            return None
        baseline = min(durations[1:FIRST_STEPS + 1])
        latest = durations[-1]
        if latest < SLOWDOWN * baseline or load1 < self.cores + 0.5:
            return None
        self.warned = True
        fewer = f"torch_threads={max(1, self.threads // 2)}" if self.threads > 1 else "fewer jobs on this machine"
        return (f"step {step} took {latest:.0f} s, {latest / baseline:.0f}x the run's first steps ({baseline:.1f} s), "
                f"with a 1-minute load average of {load1:.1f} on {self.cores} cores and {self.threads} torch "
                f"thread{'s' * (self.threads > 1)}: another job shares the cores; {fewer} may be many times faster")
