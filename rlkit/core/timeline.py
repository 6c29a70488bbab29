"""An opt-in trace of what each process spends its time on, on one clock: set ``RLKIT_TIMELINE=/path/file.jsonl``
and the trainer and the inference server append one JSON line per span of work,
``{"proc": "trainer"|"server", "name": ..., "start": time.time(), "end": ..., "pid": ..., "thread": ...}``
(plus any fields a span adds), to the same file. A ``span`` adds ``cpu``: the process's CPU seconds inside it, all
its threads together, so a span of one-threaded work whose ``cpu`` falls short of its wall time waited, for I/O or
for a core another process held. Unset (the default), nothing is written and a span costs one environment lookup.

Processes share the file: each line goes out in one ``write`` on a descriptor opened with ``O_APPEND``, which a
local file system never interleaves with another process's line. ``benchmarks/server_timeline.py`` draws it.
"""

from __future__ import annotations

import json
import os
import threading
import time
from contextlib import AbstractContextManager, nullcontext
from typing import Any

ENV = "RLKIT_TIMELINE"
_OFF: AbstractContextManager[None] = nullcontext()


def timeline_path() -> str | None:
    """The file spans go to, or None when tracing is off."""
    return os.environ.get(ENV) or None


def record(proc: str, name: str, start: float, end: float, **fields: Any) -> None:
    """Append one span (``start``/``end`` from ``time.time()``) when tracing is on; nothing otherwise."""
    path = os.environ.get(ENV)
    if not path:
        return
    line = json.dumps({"proc": proc, "name": name, "start": start, "end": end, "pid": os.getpid(),
                       "thread": threading.current_thread().name, **fields}) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


class _Span:
    __slots__ = ("proc", "name", "fields", "start", "cpu")

    def __init__(self, proc: str, name: str, fields: dict[str, Any]) -> None:
        self.proc, self.name, self.fields = proc, name, fields

    def __enter__(self) -> None:
        self.start, self.cpu = time.time(), time.process_time()

    def __exit__(self, *exc: object) -> None:
        record(self.proc, self.name, self.start, time.time(), cpu=time.process_time() - self.cpu, **self.fields)


def span(proc: str, name: str, **fields: Any) -> AbstractContextManager[None]:
    """``with span("trainer", "policy backward"):`` records the block's start and end when tracing is on (an
    exception still ends the span); a shared no-op otherwise."""
    if not os.environ.get(ENV):
        return _OFF
    return _Span(proc, name, fields)


def read_spans(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every span in a trace file, in the order written (a torn last line, from a process killed mid-write, is
    skipped)."""
    spans = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                spans.append(json.loads(line))
            except ValueError:
                continue
    return spans
