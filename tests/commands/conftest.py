"""Fixtures of the labelling page's tests: a labelling file (three completions and one group on the arithmetic rubric)
and ``rlkit label serve`` started for real, as a labeller's machine runs it."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rlkit.config import resolve_path
from rlkit.core.rubric import load_rubric
from rlkit.evaluation.labelling import group_line, labelling_line, write_lines

ARITHMETIC = load_rubric(resolve_path("pkg://rlkit.conf/rubrics/arithmetic.yaml"))


def labelling_lines() -> list[dict]:
    """Three completions to label and one group of four to rank; the judge's numbers are ones no page may show."""
    singles = [labelling_line(prompt=f"{a}+{b}=", completion=text, reference=str(a + b), rubric=ARITHMETIC, step=10,
                              window=10, judge={"correctness": 0.123456, "brevity": 4.56789}, reward=0.987654)
               for a, b, text in [(2, 2, "4"), (3, 3, "The answer is 7"), (5, 5, "10, since five and five make ten")]]
    group = group_line(prompt="7+1=", completions=["8", "It is 8.", "9", "eight"], reference="8", rubric=ARITHMETIC,
                       step=10, window=10, rewards=[0.987654, 0.5, 0.1, 0.3])
    return [*singles, group]


@pytest.fixture
def arithmetic():
    return ARITHMETIC


@pytest.fixture
def make_lines():
    """A fresh copy of :func:`labelling_lines` per call."""
    return labelling_lines


@pytest.fixture
def labelling(tmp_path) -> Path:
    path = tmp_path / "labelling" / "step_0000010.jsonl"
    write_lines(path, labelling_lines())
    return path


@dataclass
class PageServer:
    """A running ``rlkit label serve``: its base URL, its token and what it printed."""

    proc: subprocess.Popen
    url: str
    token: str
    printed: str

    @property
    def page(self) -> str:
        return f"{self.url}/#token={self.token}"

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # what Ctrl-C sends
        code = self.proc.wait(timeout=30)
        if self.proc.stdout is not None:  # left open, its collection warns in whichever test runs then
            self.proc.stdout.close()
        return code


def start_page(path: Path, *options: str, env: dict[str, str] | None = None) -> PageServer:
    """``rlkit label serve <path> port=0 ...`` in a child process; returns once it printed its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "rlkit", "label", "serve", str(path), "port=0", *options],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, **(env or {})})
    deadline, printed = time.monotonic() + 60, ""
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        printed += line
        found = re.search(r"open (http://127\.0\.0\.1:\d+)/#token=(\S+)", line)
        if found:
            printed += proc.stdout.readline()
            return PageServer(proc, found.group(1), found.group(2), printed)
    proc.kill()
    code = proc.wait()
    proc.stdout.close()
    raise AssertionError(f"rlkit label serve printed no URL (exit {code}):\n{printed}")


@pytest.fixture
def serve_page() -> Iterator:
    """``serve_page(path, *options)``: start a page server; every one started is stopped after the test."""
    started: list[PageServer] = []

    def start(path: Path, *options: str, env: dict[str, str] | None = None) -> PageServer:
        started.append(start_page(path, *options, env=env))
        return started[-1]

    yield start
    for server in started:
        server.stop()
