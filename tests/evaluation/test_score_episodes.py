"""``rlkit score`` on episode records: conversations with tool results between the assistant's turns, scored by the
rule judge with the step-scoped ``calculator_steps`` rubric (values checked by hand)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.commands.common import compose_and_check
from rlkit.evaluation.episode_records import with_episodes
from rlkit.evaluation.scoring import score_records
from rlkit.reward.episodes_io import conversation_episode

PROMPT = [{"role": "user", "content": "37*14"}]
CALL, RESULT = {"role": "assistant", "content": '[calc(e="37*14")]'}, {"role": "tool", "name": "calc", "content": "518"}
GOOD = [CALL, RESULT, {"role": "assistant", "content": "518"}]
# a call the environment could not read: its error is the tool message, and the answer is not a bare number
BROKEN = [{"role": "assistant", "content": "[calc(e=37*14)]"},
          {"role": "tool", "name": "error", "content": "error: the tool call could not be read"},
          {"role": "assistant", "content": "518 is it"}]
RECORDS = [
    {"id": "good", "prompt": PROMPT, "reference": "518", "completion": GOOD},
    {"id": "messages", "messages": [*PROMPT, *BROKEN], "reference": "518"},
    {"id": "text", "prompt": "37*14", "reference": "518", "completion": "518"},
]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _score(capsys, data: Path, out: Path | None = None, *extra: str) -> tuple[int, list[dict], str]:
    code = main(["score", "judge=rule", "rubric=calculator_steps", f"data.path={data}",
                 *([f"score.output={out}"] if out else []), *extra])
    err = capsys.readouterr().err
    return code, [json.loads(line) for line in out.read_text().splitlines()] if out and code == 0 else [], err


def test_episode_records_get_step_scores_and_inferred_counts(capsys, tmp_path):
    code, rows, err = _score(capsys, _write(tmp_path / "eps.jsonl", RECORDS), tmp_path / "out.jsonl")
    assert code == 0, err
    good, messages, text = rows
    # a well-formed call, then a bare number: both turns well formed, the tool ran, the answer is right
    assert good["steps"] == {"well_formed_turn": [1.0, 1.0]}
    assert good["scores"] == {"tool_use": 1.0, "correctness": 1.0, "well_formed_turn": 1.0}
    assert good["episode"] == {"turns": 2, "tool_calls": 1, "tool_errors": 0}
    assert good["completion"] == GOOD and good["reward"] == 1.0  # the conversation as given
    # `messages`: the prompt is the turns before the first assistant turn; the error counts against tool_use
    assert messages["prompt"] == PROMPT and messages["completion"] == BROKEN and "messages" not in messages
    assert messages["steps"] == {"well_formed_turn": [0.0, 0.0]}
    assert messages["episode"] == {"turns": 2, "tool_calls": 1, "tool_errors": 1}
    assert messages["scores"] == {"tool_use": 0.0, "correctness": 1.0, "well_formed_turn": 0.0}
    # a text completion stays single-turn: no episode, so the episode checks do not apply; one step
    assert text["scores"] == {"tool_use": None, "correctness": 1.0, "well_formed_turn": 1.0}
    assert text["steps"] == {"well_formed_turn": [1.0]} and "episode" not in text


def test_a_step_scores_mean_is_the_dimension_score(tmp_path):
    half = [CALL, RESULT, {"role": "assistant", "content": "518 it is"}]
    validated = compose_and_check(["judge=rule", "rubric=calculator_steps",
                                  f"data.path={_write(tmp_path / 'd.jsonl', [{**RECORDS[0], 'completion': half}])}"],
                                 need_completions=True)
    result = score_records(replace(validated, records=with_episodes(validated.data.path, validated.records)))
    assert result.details[0]["steps"] == {"well_formed_turn": [1.0, 0.0]}
    assert result.raw_scores[0].tolist() == [1.0, 1.0, 0.5]  # correctness: "518 it is" starts with the product


def test_episode_and_text_records_score_alike_in_any_batch(tmp_path):
    data = _write(tmp_path / "d.jsonl", [RECORDS[2], RECORDS[0], RECORDS[2], RECORDS[1], RECORDS[2]])
    validated = compose_and_check(["judge=rule", "rubric=calculator_steps", f"data.path={data}"],
                                  need_completions=True)
    validated = replace(validated, records=with_episodes(data, validated.records))
    one, many = score_records(validated, batch_size=1), score_records(validated, batch_size=64)
    assert one.raw_scores.nan_to_num(-1).tolist() == many.raw_scores.nan_to_num(-1).tolist()
    assert one.details == many.details
    assert [d.get("episode", {}).get("turns") for d in many.details] == [None, 2, None, 2, None]


def test_completions_with_an_episode_make_the_record_an_episode_record(tmp_path):
    record = {"prompt": PROMPT, "reference": "518", "completions": [GOOD, "518"]}
    data = _write(tmp_path / "d.jsonl", [record])
    validated = compose_and_check(["judge=rule", "rubric=calculator_steps", f"data.path={data}"],
                                  need_completions=True)
    result = score_records(replace(validated, records=with_episodes(data, validated.records)))
    # the text is a one-turn episode that called no tool, as an environment answered at once plays it
    assert result.raw_scores.tolist() == [[1.0, 1.0, 1.0], [0.0, 1.0, 1.0]]
    assert [d["episode"]["turns"] for d in result.details] == [2, 1]


def test_conversation_episode_infers_turns_and_tool_counts():
    episode = conversation_episode(PROMPT, [*BROKEN[:2], CALL, RESULT, {"role": "assistant", "content": None}])
    assert episode.turns == ("[calc(e=37*14)]", '[calc(e="37*14")]', "")
    assert episode.info == {"tool_calls": 2, "tool_errors": 1} and episode.first_turn == 1
    assert episode.messages[:1] == tuple(PROMPT)


@pytest.mark.parametrize(("record", "needle"), [
    ({"prompt": "x", "completion": [CALL, RESULT]}, '"completion": an episode must end with the assistant\'s turn'),
    ({"prompt": "x", "completion": [CALL, {"role": "tool", "content": 518}, CALL]},
     '"completion": message 1\'s content must be text, got int'),
    ({"prompt": "x", "completions": ["1", [CALL, {"role": "", "content": "1"}, CALL]]},
     '"completions"[1]: message 1 needs a role'),
    ({"messages": [CALL, RESULT, CALL, {"role": "user", "content": "ok"}, CALL]},
     '"messages": has no turn before the first assistant turn'),
])
def test_a_bad_episode_line_is_one_error_naming_file_and_line(capsys, tmp_path, record, needle):
    # with the reference the rubric's match check reads, so the line's own fault is all there is to say
    data = _write(tmp_path / "bad.jsonl", [RECORDS[0], {**record, "reference": "518"}])
    code, _, err = _score(capsys, data)
    assert code == 2
    assert f"{data}:2: {needle}" in err and len(err.strip().splitlines()) == 1


def test_records_without_episodes_score_as_before(capsys, tmp_path):
    """A rubric without step-scoped dimensions and text completions: the scored lines have no new keys."""
    data = _write(tmp_path / "d.jsonl", [{"prompt": "3+4=", "reference": "7", "completions": ["7", "8"]},
                                         {"messages": [{"role": "user", "content": "1+1="},
                                                       {"role": "assistant", "content": "2"}], "reference": "2"}])
    out = tmp_path / "out.jsonl"
    assert main(["score", "judge=rule", f"data.path={data}", f"score.output={out}"]) == 0, capsys.readouterr().err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [set(r) for r in rows] == [{"prompt", "reference", "completion", "scores", "reward", "rank", "rubric"}] * 3
    assert [r["completion"] for r in rows] == ["7", "8", "2"]
