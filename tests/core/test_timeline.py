"""The opt-in trace (``RLKIT_TIMELINE``): nothing without it, one well-formed JSON line per span with it."""

from __future__ import annotations

import json
import os
import time

import pytest

from rlkit.core import timeline


def test_off_by_default_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.delenv(timeline.ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    assert timeline.timeline_path() is None
    with timeline.span("trainer", "policy backward"):
        pass
    timeline.record("server", "decode", 1.0, 2.0)
    assert list(tmp_path.iterdir()) == []
    # an empty value is off too
    monkeypatch.setenv(timeline.ENV, "")
    with timeline.span("trainer", "judge"):
        pass
    assert list(tmp_path.iterdir()) == []


def test_on_writes_well_formed_spans_from_both_sides(tmp_path, monkeypatch):
    trace = tmp_path / "trace.jsonl"
    monkeypatch.setenv(timeline.ENV, str(trace))
    before = time.time()
    with timeline.span("trainer", "policy forward"):
        time.sleep(0.01)
    with pytest.raises(RuntimeError), timeline.span("server", "decode", rows=16, tokens=32):
        raise RuntimeError("the span still ends")
    timeline.record("server", "build answer", before, before + 0.5)
    after = time.time()

    lines = trace.read_text().splitlines()
    assert len(lines) == 3
    spans = [json.loads(line) for line in lines]
    assert spans == timeline.read_spans(trace)
    for s in spans:
        assert {"proc", "name", "start", "end", "pid", "thread"} <= set(s)
        assert s["proc"] in ("trainer", "server") and s["pid"] == os.getpid()
        assert before <= s["start"] <= s["end"]
    forward, decode, built = spans
    assert forward["name"] == "policy forward" and forward["end"] - forward["start"] >= 0.009
    assert forward["end"] <= after
    assert decode["name"] == "decode" and decode["rows"] == 16 and decode["tokens"] == 32
    assert built["end"] == before + 0.5


def test_a_torn_last_line_is_skipped(tmp_path):
    trace = tmp_path / "trace.jsonl"
    trace.write_text('{"proc": "server", "name": "decode", "start": 1.0, "end": 2.0}\n{"proc": "trai')
    assert [s["name"] for s in timeline.read_spans(trace)] == ["decode"]
