"""The sha256 of a file's bytes: one helper for every place rlkit names a file by its content (an imported GGUF, a
golden set's rows, a benchmark's resume marker)."""

from __future__ import annotations

import hashlib
from pathlib import Path

_CHUNK = 1 << 22  # read in 4 MiB pieces: a GGUF of several GiB is never held whole


def file_sha256(path: Path) -> str:
    """Hex sha256 of ``path``'s bytes (a renamed or moved copy hashes the same)."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()
