"""benchmarks/definitions_examples.py: an answer whose example uses the word is told from one that only names it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))

import definitions_examples as de  # noqa: E402

FORMS = ["busy", "busier", "busiest"]


def test_the_example_using_the_word_is_told_from_one_that_names_it():
    read = [de.read_answer(a, FORMS) for a in (
        'Busy means having a lot to do. An example sentence using "busy" is: "The shop is busy today."',
        'Busy means having a lot to do. An example sentence using "busy" is: "The shop has a lot of work."',
        'Busy means having a lot to do. An example sentence with the word busy is: "I am tired."',
        "Busy means having a lot to do. I am busier than you.",
        "Busy means having a lot to do.")]
    assert [r["example_uses_it"] for r in read] == [True, False, False, True, False]
    assert [r["names_the_word"] for r in read] == [False, True, True, False, False]
    assert [r["scaffolded"] for r in read] == [True, True, True, False, False]


def test_the_table_reads_each_finished_arm_at_its_start_and_end(tmp_path, capsys):
    record = {"id": "define-busy", "word": "busy", "forms": FORMS}
    for arm, end in (("tightened-seed1", "Busy means full. I am busy."),
                     ("unchanged-seed1", 'Busy means full. An example sentence using "busy": "I ran."')):
        run = tmp_path / "after-seed1" / arm
        run.mkdir(parents=True)
        (run / "summary.json").write_text("{}")
        rows = [{"step": 0, "completion": 'Busy means full. Example: "busy" is a word.', "record": record},
                {"step": 20, "completion": end, "record": record}]
        (run / "heldout_samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "after-seed1" / "tightened-seed2").mkdir()  # unfinished: no summary.json, not read
    assert de.main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "| tightened-seed1 | 1 | 1.000 → 0.000 | 1.000 → 0.000 | 0.000 → 1.000 |" in out
    assert "| unchanged-seed1 | 1 | 1.000 → 1.000 | 1.000 → 1.000 | 0.000 → 0.000 |" in out
    assert "tightened-seed2" not in out and de.main([str(tmp_path / "none")]) == 1
