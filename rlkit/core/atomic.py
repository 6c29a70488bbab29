"""Atomic file writes: a temp file (or folder) in the target's folder, then ``os.replace``, and appends of whole
lines; a crash or a full disk leaves no partial file and no partial line."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
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


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the whole new one, never a part."""
    return _write_atomically(path, lambda fh: fh.write(data))


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save(obj)`` to ``path`` atomically, streamed to the temp file: tensors go from their own memory to
    the file, never through an in-memory copy of the whole archive (Lightning's own save buffers one)."""
    import torch

    return _write_atomically(path, lambda fh: torch.save(obj, fh))


def append_lines(path: str | Path, lines: Iterable[str]) -> Path:
    """Append ``lines`` (each without its newline) to ``path``: all of them, or, where the disk refuses the write
    (StorageError), none, the file cut back to its size before, so a reader never meets half a line."""
    path = Path(path)
    data = memoryview("".join(f"{line}\n" for line in lines).encode("utf-8"))
    if not data:
        return path
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except OSError as exc:
        _raise_storage_error(exc, path, APPENDED)
        raise
    try:
        size = os.fstat(fd).st_size
        try:
            while data:  # a full disk first takes what fits (a short write), then refuses the rest
                data = data[os.write(fd, data):]
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            _raise_storage_error(exc, path, APPENDED)
            raise
    finally:
        os.close(fd)
    return path


@contextlib.contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """A temp folder beside ``path`` to fill; renamed to ``path`` when the block ends, replacing the folder there,
    or removed (StorageError where the disk refused a write), so ``path`` holds a whole old or a whole new folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp"))
    except OSError as exc:
        _raise_storage_error(exc, path)
        raise
    try:
        yield tmp
        if path.exists():  # a folder cannot be renamed over a non-empty one: the old one steps aside first
            old = Path(tempfile.mkdtemp(dir=path.parent, prefix=f".{path.name}.", suffix=".old"))
            os.replace(path, old / path.name)
            os.replace(tmp, path)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        _raise_storage_error(exc, path)
        raise


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


REPLACED = "while writing it; the file it would have replaced is unchanged"
APPENDED = "while appending to it; none of the lines was written, the file holds every line before them"


def _raise_storage_error(exc: BaseException, path: Path, what: str = REPLACED) -> None:
    """One line naming ``path`` (StorageError) where the disk refused the write; otherwise return."""
    code = _storage_errno(exc)
    if code is not None:
        raise StorageError(f"{STORAGE_ERRNOS[code]} {what}", str(path)) from None


def storage_error(exc: BaseException, where: str) -> StorageError | None:
    """The one-line StorageError for ``exc`` where the disk refused a write a library made (``where`` names the
    folder it wrote in: a library's OSError rarely names its file); None for any other exception."""
    code = _storage_errno(exc)
    if code is None:
        return None
    return StorageError(f"{STORAGE_ERRNOS[code]} while writing in it", where)


def _storage_errno(exc: BaseException | None) -> int | None:
    """The disk's errno behind ``exc``: torch.save reports a failed write as a RuntimeError ("unexpected pos")
    raised while the file object's OSError is handled, so the chain is read too."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, OSError) and exc.errno in STORAGE_ERRNOS:
            return exc.errno
        if not isinstance(exc, OSError):  # safetensors' Rust writer: "I/O error: No space left on device (os error 28)"
            for code in STORAGE_ERRNOS:
                if str(exc).endswith(f"(os error {code})"):
                    return code
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None
