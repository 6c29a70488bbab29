"""The rlkit cache's builds: a folder is whole or absent, and two processes asking for one folder build it once."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from rlkit.lm.model_cache import _SAVED_FILES, build_cached


def _write_whole(folder: Path) -> None:
    for name in _SAVED_FILES:
        (folder / name).write_text("{}")


def test_a_second_builder_waits_for_the_first_and_uses_its_folder(tmp_path, capfd):
    # flock locks belong to an open file, so two threads opening the lock file contend as two processes do
    target = tmp_path / "model-abc"
    started, release = threading.Event(), threading.Event()
    calls: list[str] = []

    def first(folder: Path) -> None:
        calls.append("first")
        started.set()
        assert release.wait(30)
        _write_whole(folder)

    def second(folder: Path) -> None:
        calls.append("second")
        _write_whole(folder)

    err = ""
    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(build_cached, target, first)
        assert started.wait(30)
        two = pool.submit(build_cached, target, second)
        deadline = time.monotonic() + 30
        while "waiting for another process" not in err and time.monotonic() < deadline:
            time.sleep(0.05)
            err += capfd.readouterr().err
        assert not two.done(), "the second build did not wait for the first"
        release.set()
        assert one.result(30) == two.result(30) == target
    assert calls == ["first"]
    assert f"rlkit: waiting for another process building {target}" in err
    assert [p.name for p in tmp_path.iterdir()] == ["model-abc"], "no lock file or half-built folder left"


def test_a_lock_file_left_by_a_killed_builder_does_not_block_the_next_build(tmp_path):
    target = tmp_path / "model-abc"
    (tmp_path / ".model-abc.lock").write_text("")  # a builder killed with SIGKILL leaves its file, not its lock
    assert build_cached(target, _write_whole) == target
    assert [p.name for p in tmp_path.iterdir()] == ["model-abc"]


def test_a_failed_build_leaves_nothing_and_the_next_one_builds(tmp_path):
    target = tmp_path / "model-abc"

    def broken(folder: Path) -> None:
        (folder / "config.json").write_text("{}")
        raise RuntimeError("killed mid-build")

    with pytest.raises(RuntimeError, match="killed mid-build"):
        build_cached(target, broken)
    assert list(tmp_path.iterdir()) == []
    assert build_cached(target, _write_whole) == target
    assert sorted(p.name for p in target.iterdir()) == sorted(_SAVED_FILES)


def test_after_a_failed_build_the_one_waiting_builds_under_the_lock_file_now_there(tmp_path, capfd):
    """The failed builder removed the file the waiter had locked; the waiter locks the path's file before building,
    so a process arriving now waits for it rather than building beside it."""
    target = tmp_path / "model-abc"
    started, release = threading.Event(), threading.Event()

    def failing(folder: Path) -> None:
        started.set()
        assert release.wait(30)
        raise RuntimeError("killed mid-build")

    built: list[str] = []

    def second(folder: Path) -> None:
        built.append("second")
        _write_whole(folder)

    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(build_cached, target, failing)
        assert started.wait(30)
        two = pool.submit(build_cached, target, second)
        err, deadline = "", time.monotonic() + 30
        while "waiting for another process" not in err and time.monotonic() < deadline:
            time.sleep(0.05)
            err += capfd.readouterr().err
        release.set()
        with pytest.raises(RuntimeError, match="killed mid-build"):
            one.result(30)
        assert two.result(30) == target
    assert built == ["second"]
    assert [p.name for p in tmp_path.iterdir()] == ["model-abc"]
