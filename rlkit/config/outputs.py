"""Output paths checked before any work starts, so a run never computes something it then cannot write."""

from __future__ import annotations

import tempfile
from pathlib import Path

from rlkit.core.errors import ConfigError


def check_writable(path: str | Path, where: str, *, folder: bool = False) -> Path:
    """``path`` (a file, or a folder with ``folder=True``) can be created or replaced; else a one-line
    ``ConfigError`` naming ``where``. It creates nothing: a probe file in the nearest existing folder is removed."""
    target = Path(path).expanduser()
    if target.exists():
        if folder and not target.is_dir():
            raise ConfigError(f"{target} exists and is not a folder", where)
        if not folder and target.is_dir():
            raise ConfigError(f"{target} is a folder; name a file", where)
    ancestor = target if folder and target.is_dir() else target.parent
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if not ancestor.is_dir():
        raise ConfigError(f"cannot create {target}: {ancestor} is not a folder", where)
    try:
        # A real write, not os.access: root passes every permission check but not a read-only file system.
        with tempfile.TemporaryFile(dir=ancestor):
            pass
    except OSError as exc:
        raise ConfigError(f"cannot write {target}: {ancestor}: {exc.strerror or exc}", where) from None
    return target
