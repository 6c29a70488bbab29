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

    with ThreadPoolExecutor(2) as pool:
        one = pool.submit(build_cached, target, first)
        assert started.wait(30)
        two = pool.submit(build_cached, target, second)
        time.sleep(0.5)
        assert not two.done(), "the second build did not wait for the first"
        release.set()
        assert one.result(30) == two.result(30) == target
    assert calls == ["first"]
    assert f"rlkit: waiting for another process building {target}" in capfd.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["model-abc"], "no lock file or half-built folder left"


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
