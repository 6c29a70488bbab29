"""Fixtures of the labelling and comparison pages' tests: a labelling file (three completions and one group on the
arithmetic rubric), two run folders with held-out answers, ``rlkit label serve`` and ``rlkit compare serve`` started
for real, as a labeller's machine runs them, and a headless Chromium to open them in."""

from __future__ import annotations

import os
import re
import shutil
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

ARITHMETIC = load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/arithmetic.yaml"))


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


def start_page(path: Path, *options: str, env: dict[str, str] | None = None,
               command: tuple[str, ...] = ("label", "serve")) -> PageServer:
    """``rlkit label serve <path> port=0 ...`` (or another ``command`` that serves a page) in a child process;
    returns once it printed its URL."""
    proc = subprocess.Popen([sys.executable, "-m", "rlkit", *command, str(path), "port=0", *options],
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
    raise AssertionError(f"rlkit {' '.join(command)} printed no URL (exit {code}):\n{printed}")


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


# --- blind comparison (rlkit compare) ------------------------------------------------------------------------------

PROMPTS = [(f"{a}+{b}=", str(a + b)) for a, b in [(2, 2), (3, 4), (5, 5), (6, 7), (9, 9), (12, 5)]]


def write_run(root: Path, name: str, start: list[str], end: list[str], prompts=PROMPTS) -> Path:
    """A run folder holding only what `rlkit compare` reads: held-out answers before and after, written by the
    writer `rlkit fit` uses (``rlkit.runs.heldout_answers``)."""
    from rlkit.runs.heldout_answers import answer_rows, append_heldout_samples

    run = root / "outputs" / name
    run.mkdir(parents=True, exist_ok=True)
    records = [{"prompt": p, "reference": r} for p, r in prompts]
    dims = ["correctness", "brevity"]
    for texts, step in ((start, 0), (end, 4)):
        scores = [[float(text == r), 5.0] for text, (_, r) in zip(texts, prompts, strict=True)]
        append_heldout_samples(run, answer_rows(records, texts, [s[0] for s in scores], scores, dims, step))
    return run


@pytest.fixture
def two_runs(tmp_path) -> tuple[Path, Path]:
    """Two runs answering the same six prompts (their names, which no page may show: alpha-run and beta-run); at
    their end alpha is right on all but the last, beta says some of it in words."""
    alpha = write_run(tmp_path, "alpha-run", start=["5", "7", "11", "13", "19", "17"],
                      end=["4", "7", "10", "13", "18", "16"])
    beta = write_run(tmp_path, "beta-run", start=["5", "7", "11", "13", "19", "17"],
                     end=["4", "The answer is 7", "10 (five and five)", "13", "eighteen", "17"])
    return alpha, beta


@pytest.fixture
def serve_compare() -> Iterator:
    """``serve_compare(file, *options)``: ``rlkit compare serve FILE port=0`` for real; stopped after the test."""
    started: list[PageServer] = []

    def start(path: Path, *options: str) -> PageServer:
        started.append(start_page(path, *options, command=("compare", "serve")))
        return started[-1]

    yield start
    for server in started:
        server.stop()


# --- a real browser -------------------------------------------------------------------------------------------------

CHROMIUM = Path("/usr/bin/chromium")
# a fresh profile and nothing reaching out: the machine may be offline
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


@pytest.fixture
def browser_page(tmp_path):
    """A Playwright page in a fresh Chromium profile."""
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in rlkit[dev]: pip install -e .[dev]")
    if not CHROMIUM.is_file():
        if shutil.which("apt-get") is None:
            pytest.skip("no /usr/bin/chromium and no apt-get to install it (.ci/run installs Debian's chromium)")
        pytest.fail("no /usr/bin/chromium: `apt-get install -y chromium` (as .ci/run does)")
    with sync_api.sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"), executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900})
        try:
            page = context.new_page()
            page.set_default_timeout(20_000)
            yield page
        finally:
            context.close()
