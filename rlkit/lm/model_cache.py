"""The rlkit cache: where built and imported models go (``$RLKIT_CACHE``) and how a folder is built there whole.

Every builder (the tiny policy, a GGUF import, an adapter's merge, a warm start, a file joined from parts) writes
through :func:`build_cached`, so none imports another to reach the cache.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

_SAVED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")

# Where warm starts (rlkit.lm.warm_start) go when set, instead of beside their base in the rlkit cache: many caches
# (each test's own, say) can then share the one that took a while to train, while what builds in a second stays in each.
WARM_START_CACHE_ENV = "RLKIT_WARM_START_CACHE"
# Where the offline tiny judges (rlkit.judging.tiny_judge) are built and found when set, for the same reason: their
# build takes minutes of CPU, and every cache that asks for one can share it.
TINY_JUDGE_CACHE_ENV = "RLKIT_TINY_JUDGE_CACHE"


def default_cache_dir() -> Path:
    """``$RLKIT_CACHE`` if set, else ``~/.cache/rlkit``."""
    return Path(os.environ.get("RLKIT_CACHE") or Path.home() / ".cache" / "rlkit").expanduser()


def _is_complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in _SAVED_FILES)


def build_cached(target: Path, write: Callable[[Path], None],
                 is_complete: Callable[[Path], bool] = _is_complete) -> Path:
    """``target`` if it holds a complete save (``is_complete``), else ``write(folder)`` into a fresh folder beside
    it, renamed into place: a killed build never leaves a half-written folder. A process asking for a folder another
    one is building waits for that build and uses its folder (a lock file beside the target; a killed builder's lock
    goes with it) rather than training the same model beside it."""
    if is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with _build_lock(target):
        if is_complete(target):  # built while this process waited
            return target
        return _build(target, write, is_complete)


@contextmanager
def _build_lock(target: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``.<name>.lock`` beside ``target``, held for one build. Where there is no lock to be
    had (no ``fcntl``, a filesystem without ``flock``, a lock file this user cannot open) the build runs unlocked, as
    before there was one: concurrent builds then each finish whole, and one wins the rename."""
    path = target.parent / f".{target.name}.lock"
    fd = _lock(path, target)
    try:
        yield
    finally:
        if fd is not None:
            # Removed while held, so the cache keeps only whole folders; a process waiting on the removed file finds
            # it gone when it gets the lock and takes the path's new one (_lock).
            path.unlink(missing_ok=True)
            os.close(fd)


def _lock(path: Path, target: Path) -> int | None:
    """The descriptor of ``path``, opened and locked, once it is the file at ``path``; None where no lock can be had."""
    try:
        import fcntl
    except ImportError:
        return None
    said = False
    while True:
        try:
            # read-only: flock needs no write access, so another user's lock file in a shared cache still locks
            fd = os.open(path, os.O_RDONLY | os.O_CREAT, 0o666)
        except OSError:
            return None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if not said:
                    print(f"rlkit: waiting for another process building {target}", file=sys.stderr, flush=True)
                    said = True
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:  # ENOLCK, EOPNOTSUPP: no locks on this filesystem
            os.close(fd)
            return None
        held = os.fstat(fd)
        try:
            current = os.stat(path)
        except FileNotFoundError:
            current = None
        if current is not None and (current.st_dev, current.st_ino) == (held.st_dev, held.st_ino):
            return fd
        # the holder before removed the file it locked (its build ended): lock the file now at the path, so that
        # every process building at once holds the same one
        os.close(fd)


def _build(target: Path, write: Callable[[Path], None], is_complete: Callable[[Path], bool]) -> Path:
    from transformers.utils import logging as hf_logging

    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    os.chmod(tmp, 0o755)  # mkdtemp's 0700 would keep a shared cache's folders from its other users
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a shard bar for a sub-megabyte file is noise
    try:
        write(tmp)
        if target.exists() and not is_complete(target):
            shutil.rmtree(target)  # left by something other than this function, which only renames whole folders
        try:
            os.replace(tmp, target)
        except OSError:
            if not is_complete(target):  # else a concurrent build won the rename; its folder is as good
                raise
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        shutil.rmtree(tmp, ignore_errors=True)
    return target
