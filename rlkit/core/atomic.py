"""Atomic file writes: a temp file in the target's folder, then ``os.replace``; a crash leaves no partial file."""

from __future__ import annotations

import errno
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rlkit.core.errors import StorageError

# the disk, not the data: the same write succeeds once space is freed (RLIMIT_FSIZE's limit gives EFBIG)
STORAGE_ERRNOS = {errno.ENOSPC: "no space left on the device", errno.EDQUOT: "disk quota exceeded",
                  errno.EFBIG: "file too large for the file system or the process's file-size limit"}


def atomic_write_text(path: str | Path, text: str, *, temp_dir: str | Path | None = None) -> Path:
    """Write ``text`` (UTF-8) to ``path`` so that readers see the old file or the whole new one, never a part.

    ``temp_dir`` (same file system as ``path``) holds the temp file, so a killed writer's leftover lands
    where its owner cleans up; by default the target's own folder.
    """
    return _write_atomically(path, lambda fh: fh.write(text), temp_dir, text=True)


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically, streamed to the temp file: tensors go from their own memory to
    the file, never through an in-memory copy of the whole archive (Lightning's own save buffers one)."""
    import torch

    return _write_atomically(path, lambda fh: torch.save(obj, fh))


def _write_atomically(path: str | Path, write: Callable[[Any], object], temp_dir: str | Path | None = None, *,
                      text: bool = False) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd, tmp = tempfile.mkstemp(dir=temp_dir or path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:  # a file system out of inodes refuses even the empty temp file
        _raise_storage_error(exc, path)
        raise
    try:
        with os.fdopen(fd, "w", encoding="utf-8") if text else os.fdopen(fd, "wb") as fh:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fh.fileno(), 0o666 & ~umask)  # mkstemp creates 0600; outputs are ordinary files
            write(fh)
            fh.flush()
            # without fsync a power cut after the rename can leave an empty file under the final name
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        _raise_storage_error(exc, path)
        raise
    return path


def _raise_storage_error(exc: BaseException, path: Path) -> None:
    """One line naming ``path`` (StorageError) where the disk refused the write; otherwise return."""
    code = _storage_errno(exc)
    if code is not None:
        raise StorageError(f"{STORAGE_ERRNOS[code]} while writing it; the file it would have replaced is unchanged",
                           str(path)) from None


def _storage_errno(exc: BaseException | None) -> int | None:
    """The disk's errno behind ``exc``: torch.save reports a failed write as a RuntimeError ("unexpected pos")
    raised while the file object's OSError is handled, so the chain is read too."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
            return exc.errno
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None
