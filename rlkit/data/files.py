"""File conventions shared by the ``rlkit data`` tools: lines read with rejects, a report and a rejects file beside
the output, every file written atomically."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from rlkit.core.errors import DataError, no_such

T = TypeVar("T")


@dataclass(frozen=True)
class Reject:
    """A line that could not be used: its number, why, and the line itself as read (without the newline).

    ``unit`` says what ``line`` counts: ``"line"`` of a JSONL file (from 1), or ``"row"`` of a dataset (from 0).
    """

    line: int
    reason: str
    raw: str
    unit: str = "line"

    def to_json(self) -> dict[str, Any]:
        """The rejects-file record: ``{"line" (or "row"), "reason", "raw"}``."""
        return {self.unit: self.line, "reason": self.reason, "raw": self.raw}


def read_jsonl_records(path: str | Path, parse: Callable[[Any, int], T | str]) -> tuple[list[T], list[Reject]]:
    """``parse(json_value, line_number)`` of every non-blank line, which returns a record or the reason it is bad.

    Bad lines (not UTF-8, invalid JSON, refused by ``parse``) come back as ``Reject``s and never stop the good
    ones; raises ``DataError`` only when the file is missing or unreadable.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError(no_such(path, "data file"), str(path))
    records: list[T] = []
    rejects: list[Reject] = []
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            raw = raw.rstrip(b"\r\n")
            try:
                # Some editors start a UTF-8 file with a byte-order mark; it is not part of the JSON.
                text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                rejects.append(Reject(line_no, f"not UTF-8 (byte {exc.start})",
                                      raw.decode("utf-8", errors="backslashreplace")))
                continue
            if not text.strip():
                continue
            try:
                parsed = parse(json.loads(text), line_no)
            except json.JSONDecodeError as exc:
                parsed = f"invalid JSON ({exc.msg} at column {exc.colno})"
            if isinstance(parsed, str):
                rejects.append(Reject(line_no, parsed, text))
            else:
                records.append(parsed)
    return records, rejects


def sidecar_paths(out: Path) -> tuple[Path, Path]:
    """Where the report and the rejected lines go, beside ``out``: ``pairs.report.json``, ``pairs.rejects.jsonl``."""
    stem = out.name[:-len(".jsonl")] if out.name.endswith(".jsonl") else out.name
    return out.with_name(f"{stem}.report.json"), out.with_name(f"{stem}.rejects.jsonl")


def write_data_files(out: Path, records: Iterable[dict[str, Any]] | None, rejects: list[Reject],
                     report: dict[str, Any]) -> dict[str, Path]:
    """Write the records as JSONL (unless None), the report and the rejects beside ``out``, each atomically."""
    from rlkit.core.atomic import atomic_write_text

    report_path, rejects_path = sidecar_paths(out)
    written = {}
    if records is not None:
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
        written["records"] = atomic_write_text(out, text)
    if rejects:
        text = "".join(json.dumps(r.to_json(), ensure_ascii=False) + "\n" for r in rejects)
        written["rejects"] = atomic_write_text(rejects_path, text)
    else:
        rejects_path.unlink(missing_ok=True)  # a previous run's rejects would describe another input
    written["report"] = atomic_write_text(report_path, json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    return written


def source_fingerprint(path: Path) -> dict[str, Any]:
    """``{"size", "sha256"}`` of a data source: a file's bytes, or for a directory (a ``datasets`` save) every file
    under it, by relative path and content, so a changed or renamed shard changes the digest."""
    import hashlib

    path = Path(path)
    files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
    digest = hashlib.sha256()
    size = 0
    for file in files:
        if file is not path:
            digest.update(file.relative_to(path).as_posix().encode() + b"\0")
        with file.open("rb") as fh:
            for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                digest.update(block)
        size += file.stat().st_size
    return {"size": size, "sha256": digest.hexdigest()}
