"""``rlkit label`` driven through a pseudo-terminal: levels saved after every answer, bad input asked again, quit
and resume where it stopped, skip, a named labeller's answers kept apart as the page keeps them, and a bad file as one
error line. Ranking groups in the terminal: ``test_label_ranking_terminal.py``."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlkit.core.rubric import rubric_from_dict
from rlkit.evaluation.labelling import labelling_line, read_labelling, write_lines

RUBRIC = rubric_from_dict({"name": "toy", "version": "1", "dimensions": [
    {"name": "correct", "type": "binary", "anchors": {0: "Wrong sum", 1: "Right sum"}},
    {"name": "brevity", "range": [1, 5], "anchors": {1: "Rambling", 5: "A bare number"}}]})
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


class Terminal:
    """``rlkit label`` on a pseudo-terminal: what it prints is read back, answers are typed."""

    def __init__(self, *args: str) -> None:
        master, slave = pty.openpty()
        env = {**os.environ, "COLUMNS": "100", "LINES": "50", "TERM": "xterm"}
        self.proc = subprocess.Popen([sys.executable, "-m", "rlkit", *args], stdin=slave, stdout=slave, stderr=slave,
                                     env=env, close_fds=True)
        os.close(slave)
        self.fd, self.seen = master, ""

    def expect(self, text: str, timeout: float = 60.0) -> str:
        """Read until ``text`` appears after what earlier calls consumed; return what came before it."""
        deadline = time.monotonic() + timeout
        while text not in self.seen:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"{text!r} not shown; the terminal shows:\n{self.seen[-2000:]}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    chunk = os.read(self.fd, 65536).decode("utf-8", "replace")
                except OSError:  # the child closed the terminal
                    chunk = ""
                if not chunk and self.proc.poll() is not None:
                    raise AssertionError(f"exited ({self.proc.returncode}) before {text!r}:\n{self.seen[-2000:]}")
                self.seen += ANSI.sub("", chunk).replace("\r", "")
        before, _, self.seen = self.seen.partition(text)
        return before

    def type(self, answer: str) -> None:
        os.write(self.fd, (answer + "\n").encode())

    def wait(self) -> int:
        code = self.proc.wait(timeout=60)
        os.close(self.fd)
        return code


@pytest.fixture
def labelling(tmp_path) -> Path:
    path = tmp_path / "step_0000010.jsonl"
    write_lines(path, [labelling_line(prompt="2+2=", completion="4", reference="4", rubric=RUBRIC, step=10, window=10,
                                      judge={"correct": 1.0, "brevity": 5.0}, reward=0.9),
                       labelling_line(prompt="3+3=", completion="The answer is 7", rubric=RUBRIC, step=10, window=10,
                                      judge={"correct": 0.0, "brevity": 2.0}, reward=0.2)])
    return path


def test_label_saves_every_answer_and_resumes_where_it_stopped(labelling):
    term = Terminal("label", str(labelling))
    shown = term.expect("correct level (0–1; s skip, q quit)")
    assert "line 1 of 2" in shown and "2+2=" in shown and "reference" in shown and "Right sum" in shown
    assert "0.9" not in shown, "the judge's scores are never shown to the labeller"
    term.type("1")
    shown = term.expect("brevity level (1–5; s skip, q quit)")
    assert "A bare number" in shown
    assert read_labelling(labelling)[0]["labels"] == {"correct": 1, "brevity": None}  # saved before the next ask
    term.type("7")  # not a level: asked again, nothing saved
    term.expect("brevity level")
    term.type("5")
    term.expect("line 2 of 2")
    term.expect("correct level")
    term.type("q")
    term.expect("saved; run `rlkit label")
    assert term.wait() == 0
    first, second = read_labelling(labelling)
    assert first["labels"] == {"correct": 1, "brevity": 5} and second["labels"] == {"correct": None, "brevity": None}

    term = Terminal("label", str(labelling))  # resumes at the first pending dimension
    shown = term.expect("correct level")
    assert "line 2 of 2" in shown and "line 1 of 2" not in shown and "The answer is 7" in shown
    term.type("s")
    term.expect("brevity level")
    term.type("2")
    term.expect("all 2 lines labelled")
    assert term.wait() == 0
    second = read_labelling(labelling)[1]
    assert second["labels"] == {"correct": None, "brevity": 2} and second["skipped"] == ["correct"]
    # a labelled file reads as rlkit calibrate's labels
    from rlkit.evaluation.calibration import read_labels

    assert [r["labels"] for r in read_labels(labelling, RUBRIC)][0] == {"correct": 1, "brevity": 5}


def test_a_bad_labelling_file_is_one_error_line(tmp_path, capsys):
    from rlkit.cli import main

    path = tmp_path / "bad.jsonl"
    line = labelling_line(prompt="p", completion="c", rubric=RUBRIC, step=0, window=0)
    line["labels"]["brevity"] = 9
    path.write_text(json.dumps(line) + "\n", encoding="utf-8")
    assert main(["label", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rlkit: error: {path}:1: \"labels.brevity\": 9 is not a whole level in [1, 5]"]
    assert main(["label", str(tmp_path / "missing.jsonl")]) == 2
    assert "no such labelling file" in capsys.readouterr().err


def test_a_named_labeller_answers_as_on_the_page(labelling):
    term = Terminal("label", str(labelling), "labeller=ann")
    term.expect("correct level")
    term.type("1")
    term.expect("brevity level")
    term.type("s")
    term.expect("line 2 of 2")
    term.expect("correct level")
    term.type("q")
    term.expect(f"saved; run `rlkit label {labelling} labeller=ann` to go on")
    assert term.wait() == 0
    first = read_labelling(labelling)[0]
    assert first["labellers"] == {"ann": {"correct": 1, "brevity": None}} and first["labelled_by"] == {"correct": "ann"}
    assert first["labels"] == {"correct": 1, "brevity": None} and "skipped" not in first

    term = Terminal("label", str(labelling), "labeller=bob")  # ann's answers are hers: bob is asked everything
    shown = term.expect("correct level")
    assert "line 1 of 2" in shown
    term.type("q")
    assert term.wait() == 0
