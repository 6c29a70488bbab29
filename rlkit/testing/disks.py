"""A small disk for full-disk faults: a tmpfs mounted on a folder (root only) and filled the way another job would,
shared by the tests and ``benchmarks/faults.py``."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def mount_tmpfs(folder: Path, size_kb: int) -> str | None:
    """Mount a tmpfs of ``size_kb`` on ``folder`` (made if absent); None, or why it could not (not root, refused)."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return "mounting a tmpfs needs root"
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(folder)],
                          capture_output=True, text=True)
    return f"mounting a tmpfs is not permitted here: {done.stderr.strip()}" if done.returncode else None


def unmount(folder: Path) -> None:
    subprocess.run(["umount", "-l", str(folder)], check=False)


def fill_disk(folder: Path) -> None:
    """Take every byte left on ``folder``'s file system, as another job writing there would."""
    for name, chunk in (("filler", 64 * 1024), ("filler-last", 64)):  # then the bytes under one chunk
        try:
            with open(folder / name, "wb", buffering=0) as fh:
                while True:
                    fh.write(bytes(chunk))
        except OSError:
            pass
