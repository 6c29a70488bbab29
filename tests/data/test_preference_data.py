"""Preference data: listwise -> pairwise conversion, drops by reason, conflicts, length bias, bad lines, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.core.errors import DataError
from rlkit.data.pairs import (
    PreferencePair,
    listwise_to_pairs,
    pair_report,
    read_pairs,
    read_preference_records,
    write_pair_files,
)
from rlkit.text.similarity import char_ngram_jaccard


def _write(path: Path, *lines: object) -> Path:
    path.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    return path


def _ranked(prompt: str, *responses: tuple[str, int], domain: str | None = None) -> dict:
    record: dict = {"prompt": prompt, "responses": [{"text": t, "rank": r} for t, r in responses]}
    if domain is not None:
        record["domain"] = domain
    return record


FOUR_LEVELS = _ranked("q", ("alpha answer", 1), ("beta reply", 2), ("gamma text", 3), ("delta words", 4))


def _convert(tmp_path: Path, *lines: object, **kwargs):
    records, rejects = read_preference_records(_write(tmp_path / "in.jsonl", *lines))
    return records, rejects, listwise_to_pairs(records, **kwargs)


def test_all_pairs_every_two_ranks_best_first(tmp_path):
    _, _, result = _convert(tmp_path, FOUR_LEVELS)
    assert [(p.chosen[:5], p.rejected[:5]) for p in result.pairs] == [
        ("alpha", "beta "), ("alpha", "gamma"), ("alpha", "delta"),
        ("beta ", "gamma"), ("beta ", "delta"), ("gamma", "delta")]
    assert all(p.line == 1 for p in result.pairs)


def test_adjacent_pairs_neighbouring_levels_even_with_gaps(tmp_path):
    _, _, result = _convert(tmp_path, FOUR_LEVELS, mode="adjacent")
    assert [(p.chosen[:5], p.rejected[:5]) for p in result.pairs] == [
        ("alpha", "beta "), ("beta ", "gamma"), ("gamma", "delta")]
    gaps = _ranked("q", ("first one", 1), ("second one x", 5), ("third one yy", 9))
    _, _, result = _convert(tmp_path, gaps, mode="adjacent")
    assert [(p.chosen, p.rejected) for p in result.pairs] == [("first one", "second one x"),
                                                             ("second one x", "third one yy")]


def test_ties_identical_and_near_duplicates_are_dropped_and_counted(tmp_path):
    answer = "The answer to the question is forty-two."
    record = _ranked("q", (answer, 1), (" The  answer to the question is\nforty-two.", 2),  # identical
                     ("the answer to the question is forty-two!", 3),  # near-duplicate of the first two
                     ("no idea", 3),  # tied with the one above
                     ("completely different", 4))
    _, _, result = _convert(tmp_path, record)
    assert result.dropped["tie"] == 1
    assert result.dropped["identical"] == 1
    # the "!" one against each of the first two
    assert result.dropped["near_duplicate"] == 2
    texts = {(p.chosen, p.rejected) for p in result.pairs}
    # the whitespace variant's pairs with the last two repeat the first answer's
    assert result.dropped["duplicate"] == 2
    assert (answer, "no idea") in texts and len(result.pairs) == 10 - 1 - 1 - 2 - 2
    # a looser threshold keeps them
    _, _, loose = _convert(tmp_path, record, near_duplicate=1.0)
    assert loose.dropped["near_duplicate"] == 0


def test_similarity_is_case_and_whitespace_blind_and_bounded():
    assert char_ngram_jaccard("Hello  World", "hello world") == 1.0
    assert char_ngram_jaccard("abc", "xyz") == 0.0
    assert 0.0 < char_ngram_jaccard("the cat sat", "the cat sit") < 1.0
    assert char_ngram_jaccard("a", "a") == 1.0 and char_ngram_jaccard("a", "b") == 0.0


def test_pairwise_input_is_checked_and_deduplicated(tmp_path):
    pair = {"prompt": "p", "chosen": "good answer", "rejected": "bad reply"}
    _, _, result = _convert(tmp_path, pair, {**pair, "chosen": "good   answer "},
                            {"prompt": "p", "chosen": "same text", "rejected": "same text"})
    assert [(p.chosen, p.rejected) for p in result.pairs] == [("good answer", "bad reply")]
    assert result.dropped["duplicate"] == 1 and result.dropped["identical"] == 1


def test_one_question_as_chat_messages_as_user_text_and_bare_is_one_prompt(tmp_path):
    pair = {"chosen": "7", "rejected": "8"}
    _, _, result = _convert(tmp_path, {"prompt": [{"role": "user", "content": "3+4="}], **pair},
                            {"prompt": "user: 3+4=", **pair}, {"prompt": "3+4=", **pair})
    assert len(result.pairs) == 1 and result.dropped["duplicate"] == 2


def test_conflicting_labels_are_counted_listed_and_dropped(tmp_path):
    lines = [_ranked("q", ("first text", 1), ("second text", 2), ("third", 3)),
             {"prompt": "q", "chosen": "second text", "rejected": "first text"},
             {"prompt": "other prompt", "chosen": "second text", "rejected": "first text"}]  # another prompt: fine
    records, rejects, result = _convert(tmp_path, *lines)
    assert len(result.conflicts) == 1
    conflict = result.conflicts[0]
    assert (conflict["a"], conflict["b"]) == ("first text", "second text")
    assert conflict["a_better_on_lines"] == [1] and conflict["b_better_on_lines"] == [2]
    assert result.dropped["conflict"] == 2
    kept = {(p.prompt, p.chosen, p.rejected) for p in result.pairs}
    assert ("q", "first text", "second text") not in kept and ("q", "second text", "first text") not in kept
    assert ("other prompt", "second text", "first text") in kept and ("q", "first text", "third") in kept
    report = pair_report(records, rejects, result)
    assert report["conflicting_labels"] == 1 and report["conflict_examples"][0]["b_better_on_lines"] == [2]


def test_length_bias_share_and_domains(tmp_path):
    lines = [{"prompt": "a", "chosen": "a long chosen answer", "rejected": "short", "domain": "math"},
             {"prompt": "b", "chosen": "a long chosen answer too", "rejected": "tiny", "domain": "math"},
             {"prompt": "c", "chosen": "brief", "rejected": "a much longer rejected one", "domain": "code"},
             {"prompt": "d", "chosen": "abcd", "rejected": "wxyz"}]
    records, rejects, result = _convert(tmp_path, *lines)
    report = pair_report(records, rejects, result)
    assert report["length_bias"] == {"chosen_longer": 2, "chosen_shorter": 1, "same_length": 1,
                                     "chosen_longer_share": 0.5}
    assert report["domains"] == {"(no domain)": {"records": 1, "pairs": 1}, "code": {"records": 1, "pairs": 1},
                                 "math": {"records": 2, "pairs": 2}}
    no_domain = pair_report(records[3:], [], listwise_to_pairs(records[3:]))
    assert "domains" not in no_domain


BAD_LINES = [
    ("not json at all", "invalid JSON"),
    ({"prompt": "x", "responses": [{"text": "a", "rank": 1}]}, "at least 2 responses"),
    ({"prompt": "x", "responses": [{"text": "a", "rank": 0}, {"text": "b", "rank": 1}]},
     "responses[0].rank must be a positive integer"),
    ({"prompt": "x", "responses": [{"text": "a", "rank": 1}, {"text": "b", "rank": 1.5}]}, "responses[1].rank"),
    ({"prompt": "x", "responses": [{"text": 3, "rank": 1}, {"text": "b", "rank": 2}]}, "responses[0].text"),
    ({"prompt": "x", "chosen": "a"}, 'missing "rejected"'),
    ({"prompt": "x", "chosen": "a", "rejected": ["b"]}, '"rejected" must be a string'),
    ({"chosen": "a", "rejected": "b"}, 'missing "prompt"'),
    ({"prompt": "x", "answer": "a"}, 'expected "responses"'),
    ({"prompt": "x", "chosen": "a", "rejected": "b", "domain": 3}, '"domain" must be a string'),
    ([1, 2], "must be a JSON object"),
]


def test_bad_lines_are_reported_by_line_while_good_lines_convert(tmp_path):
    good = {"prompt": "ok", "chosen": "fine answer", "rejected": "poor reply"}
    lines = [good] + [line for line, _ in BAD_LINES]
    records, rejects = read_preference_records(_write(tmp_path / "in.jsonl", *lines))
    assert len(records) == 1
    assert [r.line for r in rejects] == list(range(2, len(BAD_LINES) + 2))
    for reject, (line, reason) in zip(rejects, BAD_LINES, strict=True):
        assert reason in reject.reason, reject
        assert reject.raw == (line if isinstance(line, str) else json.dumps(line))


def test_not_utf8_line_is_rejected(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(b'{"prompt": "\xff", "chosen": "a", "rejected": "b"}\n{"prompt": "p", "chosen": "aaa", '
                     b'"rejected": "bbb"}\n')
    records, rejects = read_preference_records(path)
    assert len(records) == 1 and rejects[0].line == 1 and "not UTF-8" in rejects[0].reason


def test_read_pairs_returns_typed_pairs_or_names_the_bad_line(tmp_path):
    path = _write(tmp_path / "pairs.jsonl", {"prompt": "p", "chosen": "a", "rejected": "b", "domain": "d"})
    assert read_pairs(path) == [PreferencePair("p", "a", "b", "d")]
    _write(path, {"prompt": "p", "chosen": "a", "rejected": "b"}, FOUR_LEVELS)
    with pytest.raises(DataError, match=r"pairs.jsonl:2: a listwise record"):
        read_pairs(path)


def test_outputs_are_written_atomically(tmp_path, monkeypatch):
    import rlkit.core.atomic

    out = tmp_path / "pairs.jsonl"
    out.write_text("previous\n")
    records, rejects, result = _convert(tmp_path, FOUR_LEVELS)

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(rlkit.core.atomic.os, "replace", crash)
    with pytest.raises(OSError, match="disk full"):
        write_pair_files(out, result, rejects, pair_report(records, rejects, result))
    assert out.read_text() == "previous\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jsonl", "pairs.jsonl"]  # no temp file left


def test_cli_end_to_end(capsys, tmp_path):
    source = _write(tmp_path / "ranked.jsonl", FOUR_LEVELS, "{oops",
                    _ranked("p2", ("yes it is", 1), ("no it is not", 2), domain="logic"),
                    {"prompt": "p3", "chosen": "x"})
    out = tmp_path / "out" / "pairs.jsonl"
    code = main(["data", "pairs", f"in={source}", f"out={out}", "mode=adjacent", "near_duplicate=0.95"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"{source}:2: invalid JSON" in captured.err and f'{source}:4: missing "rejected"' in captured.err
    assert "2 bad lines skipped" in captured.err
    assert "pairs written" in captured.out
    pairs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(pairs) == 4 and pairs[-1] == {"prompt": "p2", "chosen": "yes it is", "rejected": "no it is not",
                                             "domain": "logic"}
    report = json.loads((tmp_path / "out" / "pairs.report.json").read_text())
    assert report["records_read"] == 2 and report["rejected_lines"] == 2 and report["pairs_written"] == 4
    assert set(report["dropped"]) == {"tie", "identical", "near_duplicate", "duplicate", "conflict"}
    rejects = [json.loads(line) for line in (tmp_path / "out" / "pairs.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["raw"]) for r in rejects] == [(2, "{oops"), (4, '{"prompt": "p3", "chosen": "x"}')]


def test_cli_every_line_bad_fails_but_keeps_the_rejects(capsys, tmp_path):
    source = _write(tmp_path / "bad.jsonl", "nope", "[]")
    out = tmp_path / "pairs.jsonl"
    code = main(["data", "pairs", f"in={source}", f"out={out}"])
    err = capsys.readouterr().err
    assert code != 0 and "every line (2) is bad" in err
    assert not out.exists() and len((tmp_path / "pairs.rejects.jsonl").read_text().splitlines()) == 2


@pytest.mark.parametrize(("argv", "expected"), [
    (["data"], "rlkit data <tool>"),
    (["data", "pears"], "unknown data tool 'pears'"),
    (["data", "pairs", "in=x.jsonl"], "out: Field required"),
    (["data", "pairs", "in=x.jsonl", "out=y.jsonl", "mode=some"], "mode:"),
    (["data", "pairs", "in=x.jsonl", "out=y.jsonl", "near_duplicate=2"], "near_duplicate:"),
    (["data", "pairs", "in=x.jsonl", "out=y.jsonl", "colour=red"], "colour: unknown argument"),
    (["data", "pairs", "x.jsonl"], "expected key=value"),
    (["data", "pairs", "in=/does/not/exist.jsonl", "out=y.jsonl"], "no such data file"),
])
def test_cli_usage_errors(capsys, argv, expected):
    code = main(argv)
    assert code == 2 and expected in capsys.readouterr().err
