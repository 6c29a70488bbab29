"""The offline tiny judge knows only the default task's sums (operands 0 to 20): on a user's own records it calls
most right answers wrong (17+25= -> 42 scored incorrect), so `rlkit validate`, `fit` and `score` say so."""

from __future__ import annotations

import json

from rlkit.cli import main
from rlkit.core.package_files import resolve_path
from rlkit.core.rubric import load_rubric
from rlkit.judging.tiny_judge import tiny_judge_caveats
from rlkit.testing import offline_judge

ARITHMETIC = load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/arithmetic.yaml"))


def test_records_inside_the_default_task_raise_no_caveat():
    records = [{"prompt": f"{a}+{b}=", "reference": str(a + b)} for a in (0, 7, 20) for b in (3, 20)]
    assert tiny_judge_caveats(records, ARITHMETIC, "judge llm") == []


def test_records_outside_it_are_counted_with_the_first_named():
    records = [{"prompt": "3+4="}, {"prompt": "17+25="}, {"prompt": [{"role": "user", "content": "1+1="}]},
               {"prompt": "what is 2+2?"}]
    (line,) = tiny_judge_caveats(records, ARITHMETIC, "judge llm")
    assert "3 of 4 records are outside it (first: record 2, '17+25=')" in line
    assert "judge.params.backend=qwen_coder" in line


def test_another_rubric_is_a_caveat_of_its_own():
    chat = load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/chat_arithmetic.yaml"))
    (line,) = tiny_judge_caveats([{"prompt": "1+2="}], chat, "judge llm")
    assert "distilled on the arithmetic rubric, not chat_arithmetic" in line


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("rlkit: warning: judge llm: its backend is the "
                                                                   "offline tiny judge")]


def test_validate_warns_through_a_composite_and_stays_quiet_on_the_default_task(tmp_path, capsys):
    data = tmp_path / "mine.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{a}+{b}=", "reference": str(a + b)})
                              for a, b in [(17, 25), (3, 4)]) + "\n")
    assert main(["validate", *offline_judge("ensemble"), f"data.path={data}"]) == 0
    (line,) = _warnings(capsys.readouterr().err)
    assert "1 of 2 records are outside it (first: record 1, '17+25=')" in line
    assert main(["validate", *offline_judge("ensemble")]) == 0
    assert _warnings(capsys.readouterr().err) == []
    assert main(["validate", "judge=rule", f"data.path={data}"]) == 0
    assert _warnings(capsys.readouterr().err) == []
