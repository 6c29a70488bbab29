"""rlkit.core.digest.file_sha256: the one file hash, read in pieces, equal to hashing the bytes at once."""

from __future__ import annotations

import hashlib

from rlkit.core.digest import file_sha256


def test_a_file_larger_than_one_piece_hashes_as_its_bytes_and_a_moved_copy_the_same(tmp_path):
    data = bytes(range(256)) * (5 * 4096 + 3)  # 5 MiB and 768 bytes: more than one 4 MiB piece
    first = tmp_path / "a.gguf"
    first.write_bytes(data)
    moved = tmp_path / "elsewhere" / "b.bin"
    moved.parent.mkdir()
    moved.write_bytes(data)
    assert file_sha256(first) == hashlib.sha256(data).hexdigest() == file_sha256(moved)
    first.write_bytes(data[:-1] + b"\0")
    assert file_sha256(first) != file_sha256(moved)
