"""Prompt records: JSONL reading with file:line errors, and the synthetic arithmetic task."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

import rlkit
from rlkit.data.records import MAX_REPORTED_LINES, arithmetic_task, prompt_text, read_jsonl

GOOD = {"prompt": "2+2=", "reference": "4"}
CHAT = {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+3="}]}


def write_lines(tmp_path: Path, lines: list[Any], name: str = "data.jsonl") -> Path:
    """One line per item: dicts and lists as JSON, strings as written."""
    path = tmp_path / name
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    path.write_text(text, encoding="utf-8")
    return path


def error_for(path: Path, **kwargs: Any) -> str:
    with pytest.raises(rlkit.DataError) as info:
        read_jsonl(path, **kwargs)
    return str(info.value)


# --- good files --------------------------------------------------------------------------------


def test_reads_text_and_chat_prompts_in_order(tmp_path: Path) -> None:
    records = [
        {"prompt": "first", "id": 1},
        CHAT,
        {"prompt": "third", "reference": "3", "extra": {"nested": True}},
    ]
    path = write_lines(tmp_path, ["", records[0], "   ", records[1], "\t", "", records[2], ""])
    assert read_jsonl(path) == records


def test_accepts_str_path_and_crlf(tmp_path: Path) -> None:
    path = tmp_path / "crlf.jsonl"
    path.write_bytes(b'{"prompt": "a"}\r\n\r\n{"prompt": "b"}\r\n')
    assert [r["prompt"] for r in read_jsonl(str(path))] == ["a", "b"]


def test_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text('{"prompt": "a"}\n{"prompt": "b"}', encoding="utf-8")
    assert [r["prompt"] for r in read_jsonl(path)] == ["a", "b"]


def test_unicode_prompt(tmp_path: Path) -> None:
    path = write_lines(tmp_path, [{"prompt": "café ≠ cafe 🙂"}])
    assert read_jsonl(path)[0]["prompt"] == "café ≠ cafe 🙂"


def test_completions_accepted_when_needed(tmp_path: Path) -> None:
    lines = [
        {"prompt": "a", "completion": "x"},
        {"prompt": "b", "completions": ["y", "z"]},
        {**CHAT, "completion": ""},
    ]
    path = write_lines(tmp_path, lines)
    assert read_jsonl(path, need_completions=True) == lines


def test_completions_not_needed_by_default(tmp_path: Path) -> None:
    path = write_lines(tmp_path, [{"prompt": "a"}, {"prompt": "b", "completions": "not checked"}])
    assert len(read_jsonl(path)) == 2


# --- one bad line: file:LINE -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ('{"prompt": "unterminated}', "invalid JSON"),
        ("{'prompt': 'single quotes'}", "invalid JSON"),
        ({"reference": "4"}, 'missing "prompt"'),
        (["prompt", "a list"], "JSON object"),
        ('"just a string"', "JSON object"),
        ("42", "JSON object"),
        ("null", "JSON object"),
        ({"prompt": ""}, "empty"),
        ({"prompt": "   \n "}, "empty"),
        ({"prompt": None}, "chat messages"),
        ({"prompt": 7}, "chat messages"),
        ({"prompt": []}, "chat messages"),
        ({"prompt": [{"role": "user"}]}, "chat messages"),
        ({"prompt": [{"content": "hi"}]}, "chat messages"),
        ({"prompt": [{"role": "user", "content": 3}]}, "content must be text, got int"),
        ({"prompt": ["user: hi"]}, "chat messages"),
        ({"prompt": [{"role": "user", "content": "ok"}, "stray"]}, "chat messages"),
    ],
)
def test_single_bad_line_names_file_and_line(tmp_path: Path, bad: Any, fragment: str) -> None:
    path = write_lines(tmp_path, [GOOD, "", bad, GOOD])
    message = error_for(path)
    assert f"{path}:3:" in message
    assert fragment in message
    assert "bad lines" not in message


def test_not_utf8_line(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"prompt": "fine"}\n\xff\xfe{"prompt": "x"}\n{"prompt": "also fine"}\n')
    message = error_for(path)
    assert f"{path}:2:" in message
    assert "UTF-8" in message


def test_latin1_text_in_line(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"prompt": "a"}\n{"prompt": "b"}\n{"prompt": "caf\xe9"}\n')
    message = error_for(path)
    assert f"{path}:3:" in message
    assert "UTF-8" in message


@pytest.mark.parametrize(
    ("bad", "fragment"),
    [
        ({"prompt": "a"}, 'missing "completion"'),
        ({"prompt": "a", "completion": 5}, '"completion" must be a string'),
        ({"prompt": "a", "completion": None}, '"completion" must be a string'),
        ({"prompt": "a", "completions": "xy"}, '"completions" must be'),
        ({"prompt": "a", "completions": []}, '"completions" must be'),
        ({"prompt": "a", "completions": ["x", 2]}, '"completions" must be'),
        ({"prompt": "a", "completions": [["x"]]}, '"completions" must be'),
        ({"prompt": "a", "completions": None}, '"completions" must be'),
    ],
)
def test_bad_completion_when_needed(tmp_path: Path, bad: dict[str, Any], fragment: str) -> None:
    path = write_lines(tmp_path, [{"prompt": "ok", "completion": "fine"}, bad])
    message = error_for(path, need_completions=True)
    assert f"{path}:2:" in message
    assert fragment in message


def test_prompt_problem_reported_before_completion_problem(tmp_path: Path) -> None:
    path = write_lines(tmp_path, [{"prompt": ""}])
    message = error_for(path, need_completions=True)
    assert f"{path}:1:" in message
    assert "empty" in message


# --- several bad lines -------------------------------------------------------------------------


def test_several_bad_lines_in_one_message(tmp_path: Path) -> None:
    lines = [GOOD, "not json", GOOD, {"no": "prompt"}, "", {"prompt": ""}, GOOD]
    path = write_lines(tmp_path, lines)
    message = error_for(path)
    assert message.startswith(f"{path}: ")
    assert "3 bad lines" in message
    for n in (2, 4, 6):
        assert f"line {n}:" in message
    for n in (1, 3, 5, 7):
        assert f"line {n}:" not in message
    assert "more" not in message


def test_exactly_max_reported_bad_lines_has_no_more(tmp_path: Path) -> None:
    path = write_lines(tmp_path, ["{"] * MAX_REPORTED_LINES)
    message = error_for(path)
    assert f"{MAX_REPORTED_LINES} bad lines" in message
    assert "more" not in message


def test_more_than_ten_bad_lines_are_summarised(tmp_path: Path) -> None:
    assert MAX_REPORTED_LINES == 10
    path = write_lines(tmp_path, [GOOD] + ["{bad"] * 13)
    message = error_for(path)
    assert message.startswith(f"{path}: ")
    assert "13 bad lines" in message
    shown = [int(n) for n in re.findall(r"line (\d+):", message)]
    assert shown == list(range(2, 12))
    assert "and 3 more" in message


# --- empty and missing files -------------------------------------------------------------------


def test_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    message = error_for(path)
    assert str(path) in message
    assert "no records" in message


def test_whitespace_only_file(tmp_path: Path) -> None:
    path = tmp_path / "blank.jsonl"
    path.write_text("\n   \n\t\n\n", encoding="utf-8")
    message = error_for(path)
    assert str(path) in message
    assert "no records" in message


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.jsonl"
    message = error_for(path)
    assert str(path) in message


def test_directory_is_not_a_data_file(tmp_path: Path) -> None:
    assert str(tmp_path) in error_for(tmp_path)


def test_data_error_is_rlkit_error(tmp_path: Path) -> None:
    with pytest.raises(rlkit.RlkitError):
        read_jsonl(tmp_path / "missing.jsonl")


# --- prompt_text -------------------------------------------------------------------------------


def test_prompt_text() -> None:
    assert prompt_text("2+2=") == "2+2="
    assert prompt_text(CHAT["prompt"]) == "system: Be brief.\nuser: 2+3="


# --- arithmetic_task ---------------------------------------------------------------------------


def operands(prompt: str) -> tuple[int, int]:
    match = re.fullmatch(r"(\d+)\+(\d+)=", prompt)
    assert match, prompt
    return int(match[1]), int(match[2])


def test_arithmetic_deterministic_for_seed() -> None:
    assert arithmetic_task(20, seed=3) == arithmetic_task(20, seed=3)


def test_arithmetic_differs_across_seeds() -> None:
    a = [r["prompt"] for r in arithmetic_task(20, seed=3)]
    b = [r["prompt"] for r in arithmetic_task(20, seed=4)]
    assert a != b


def test_arithmetic_reference_is_sum() -> None:
    records = arithmetic_task(50, seed=0, max_operand=30)
    assert len(records) == 50
    for record in records:
        a, b = operands(record["prompt"])
        assert 0 <= a <= 30
        assert 0 <= b <= 30
        assert record["reference"] == str(a + b)


def test_arithmetic_ids_unique_and_records_valid(tmp_path: Path) -> None:
    records = arithmetic_task(10, seed=1)
    assert len({r["id"] for r in records}) == 10
    path = write_lines(tmp_path, records)
    assert read_jsonl(path) == records


def test_arithmetic_zero_prompts() -> None:
    assert arithmetic_task(0, seed=0) == []


@pytest.mark.parametrize(("bad", "expected"), [
    ('{"prompt": "2+2=", "reference": "4"', "Expecting ',' delimiter at column 36"),  # cut short: just past its end
    ('{"prompt": "2+2=" "reference": "4"}', "Expecting ',' delimiter at column 19"),  # the second key's quote
    ('{"prompt": "é+ü=", "reference" "4"}', "Expecting ':' delimiter at column 32"),  # characters, not bytes
])
def test_invalid_json_names_the_column_within_its_line(tmp_path, bad, expected):
    """The column counts from 1 within the bad line, wherever it sits in the file: a line cut short once said
    column 1 (json counted the line's newline as the start of a next line)."""
    path = write_lines(tmp_path, [GOOD, bad, GOOD])
    assert error_for(path) == f"{path}:2: invalid JSON ({expected})"


def test_json_lines_names_the_first_bad_line_and_skips_blank_ones(tmp_path):
    from rlkit.data.records import json_lines

    good = tmp_path / "good.jsonl"
    good.write_bytes(b'\xef\xbb\xbf{"a": 1}\n\n  \n[2]\n')  # a byte-order mark and blank lines
    assert list(json_lines(good)) == [(1, {"a": 1}), (4, [2])]
    for raw, problem, line in ((b'{"a": 1}\n{"a": \n', "invalid JSON", 2), (b'{"a": 1}\n"\xff"\n', "not UTF-8", 2)):
        bad = tmp_path / "bad.jsonl"
        bad.write_bytes(raw)
        with pytest.raises(rlkit.DataError, match=problem) as exc:
            list(json_lines(bad))
        assert exc.value.where == f"{bad}:{line}"
