"""The default ``torch_threads`` (the cores other jobs leave, ``rlkit.train.threads``) and the one-line warning when
steps slow down because the cores are shared (issue 49)."""

from __future__ import annotations

import pytest

from rlkit.train.threads import SharedCoresWarning, default_torch_threads, threads_for


@pytest.mark.parametrize(("cores", "load1", "own", "default", "expected"), [
    (2, 0.1, 0.0, 2, 2),     # an idle machine: torch's default
    (2, 1.05, 0.05, 2, 1),   # another job holds a core: the one left
    (2, 3.0, 0.0, 2, 1),     # oversubscribed: never fewer than one
    (2, 1.9, 1.0, 2, 1),     # this process's own share is not another job's
    (16, 4.2, 0.2, 8, 8),    # 12 free, capped at torch's default (its physical cores)
    (16, 10.6, 0.6, 16, 6),
    (4, 1.4, 0.0, 4, 3),     # rounded: 2.6 free
])
def test_threads_follow_the_cores_other_jobs_leave(cores, load1, own, default, expected):
    assert threads_for(cores, load1, own, default) == expected


def test_omp_num_threads_set_by_hand_keeps_torchs_default(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert default_torch_threads(3).threads == 3 and default_torch_threads(3).reason is None


def test_the_chosen_number_is_said_when_it_is_below_torchs_default(monkeypatch):
    import os

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "getloadavg", lambda: (7.5, 0.0, 0.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    choice = default_torch_threads(8)
    assert 1 <= choice.threads < 8
    assert choice.reason is not None and "load average is 7.5" in choice.reason and "torch_threads=N" in choice.reason


def test_slow_steps_on_shared_cores_warn_once():
    watch = SharedCoresWarning(threads=2, cores=2)
    first = [30.0, 10.0, 11.0, 12.0]  # the first step warms up; the baseline is the fastest of the next three
    assert watch.check(4, first, load1=3.1) is None  # no step after the baseline yet
    assert watch.check(5, [*first, 25.0], load1=3.1) is None  # 2.5x: completions' lengths can do that
    assert watch.check(5, [*first, 120.0], load1=1.5) is None  # slow, but the cores are not oversubscribed
    line = watch.check(5, [*first, 120.0], load1=3.1)
    assert line is not None and "12x the run's first steps (10.0 s)" in line and "torch_threads=1" in line
    assert watch.check(6, [*first, 120.0, 130.0], load1=3.1) is None  # once
