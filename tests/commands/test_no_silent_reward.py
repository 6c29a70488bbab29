"""No silent reward: each quiet failure a user met (a dimension never scored because the data names its field
otherwise, a judge that scored nothing, a run without a learning signal, a "held-out" table of training prompts)
now says so, with the exit status documented in docs/cli.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.testing.canned_chat import CannedChatServer


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- the record fields a rubric's checks read -----------------------------------------------------------------


@pytest.mark.parametrize("command", ["validate", "fit", "score"])
def test_records_without_the_field_a_check_reads_are_refused_before_any_work(tmp_path, capsys, command):
    """The issue's records: ``answer``, not ``reference``. Before, validate passed them, fit trained with correctness
    (weight 2) never scored, and score gave the wrong "12" reward 1.000 with exit 0."""
    if command == "score":
        data = _jsonl(tmp_path / "r.jsonl", [{"prompt": "3+4=", "completions": ["7", "12"]}])
    else:
        data = _jsonl(tmp_path / "r.jsonl", [{"prompt": "1+2=", "answer": "3"}, {"prompt": "3+4=", "answer": "7"}])
    code, out, err = _run(capsys, command, f"data.path={data}", "trainer.max_steps=1")
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"rlkit: error: {data}: no record has a 'reference' field")
    assert "dimension correctness" in err and "arithmetic.yaml: dimension correctness, checks[0] (match)" in err
    assert "the records have " in err and ("answer, prompt" in err or "completions, prompt" in err)
    assert not (tmp_path / "outputs").exists(), "nothing was started"


def test_records_some_of_which_lack_the_field_get_one_warning_line_with_the_count(tmp_path, capsys):
    data = _jsonl(tmp_path / "r.jsonl", [{"prompt": "1+2=", "reference": "3"}, {"prompt": "3+4=", "answer": "7"},
                                         {"prompt": "3+5=", "answer": "8"}])
    code, out, err = _run(capsys, "validate", f"data.path={data}")
    assert code == 0 and "config ok" in out
    (line,) = err.splitlines()
    assert line.startswith(f"rlkit: warning: {data}: 2 of 3 records have no 'reference' field (first: record 2)")
    assert "UserWarning" not in err, "one rlkit line, not Python's warning with its source line"


def test_a_dimension_another_judge_scores_needs_no_field_of_the_rule_judge(tmp_path, capsys):
    """hybrid routes correctness to the llm judge, which reads no field: only the rule judge's checks count."""
    data = _jsonl(tmp_path / "r.jsonl", [{"prompt": "1+2=", "answer": "3"}])
    code, out, err = _run(capsys, "validate", f"data.path={data}", "judge=hybrid",
                          "+judge.params.assign={correctness: llm}")
    assert code == 0, err
    code, _, err = _run(capsys, "validate", f"data.path={data}", "judge=ensemble")
    assert code == 2 and "no record has a 'reference' field" in err, "an ensemble's rule member still reads it"


# --- a judge that scored nothing ------------------------------------------------------------------------------


def test_score_exits_3_when_the_judge_scored_a_dimension_on_no_completion(tmp_path, capsys):
    """The llm judge on a server whose every answer is prose: 8 of 8 unscored was exit 0 with a Python warning."""
    data = _jsonl(tmp_path / "r.jsonl", [{"prompt": "3+4=", "reference": "7", "completions": ["7", "12"]},
                                         {"prompt": "1+1=", "reference": "2", "completions": ["2", "3"]}])
    with CannedChatServer(lambda messages: "17 + 25 = 32 / The answer is a JSON object.") as server:
        backend = f"{{name: openai, params: {{base_url: '{server.url}', model: x}}}}"
        code, out, err = _run(capsys, "score", f"data.path={data}", "judge=llm", f"++judge.params.backend={backend}")
    assert code == 3
    assert "unscored" in out, "the table is still printed"
    lines = err.splitlines()
    assert lines[0].startswith("rlkit: warning: judge llm: 100% of dimension scores could not be parsed")
    assert lines[-1] == ("rlkit: error: score: judge llm scored format, correctness, brevity, repetition on none of "
                         "the 4 completions (100% of its dimension scores in the last batch could not be parsed): "
                         "no reward could be made")
    assert "UserWarning" not in err and "Traceback" not in err


def test_score_exits_0_when_every_dimension_was_scored_somewhere(tmp_path, capsys):
    data = _jsonl(tmp_path / "r.jsonl", [{"prompt": "3+4=", "reference": "7", "completions": ["7", "12"]}])
    code, out, err = _run(capsys, "score", f"data.path={data}")
    assert code == 0, err


# --- a run that trains on nothing -----------------------------------------------------------------------------

FLAT_RUBRIC = """\
name: flat
version: "1"
dimensions:
  - name: anything
    description: Any completion at all passes.
    type: binary
    checks: [{type: length, max: 100000}]
"""


@pytest.mark.slow
def test_a_run_with_no_learning_signal_says_so_at_the_step_and_in_the_summary(tmp_path, capsys):
    """Every completion scores 1: every group's advantages are zero, and the run used to end on "final held-out
    mean normalised reward: 1.0000" as if it had succeeded."""
    rubric = tmp_path / "flat.yaml"
    rubric.write_text(FLAT_RUBRIC)
    code, out, err = _run(capsys, "fit", "model=tiny_random", f"rubric.path={rubric}", "logger=none",
                          "trainer.max_steps=4", "batch_size=2", "num_generations=2", "max_completion_length=4",
                          "data.heldout_fraction=0", f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 0, err
    assert "rlkit: warning: steps 0-2: no learning signal" in err, "said at the step it starts"
    assert "warning: no learning signal in 4 of 4 steps (the rewards trained nothing)" in out
    # no held-out split and no warm start: said once at start-up, and in the table's title
    assert err.count("rlkit: warning: no held-out split (data.heldout_fraction=0)") == 1
    assert err.count("rlkit: warning: the embedded policy starts from random weights") == 1
    assert "training prompts (no held-out split)" in out and "held-out, rubric" not in out
    assert "final training-prompt mean normalised reward: 1.0000" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert any(w.startswith("no learning signal in 4 of 4 steps") for w in summary["warnings"])


@pytest.mark.slow
def test_a_dimension_the_judge_never_scored_in_training_is_reported_and_not_counted_as_saturated(tmp_path, capsys):
    """An ``episode`` check on a single-turn run has nothing to read: the dimension is unscored every step."""
    rubric = tmp_path / "r.yaml"
    rubric.write_text(FLAT_RUBRIC + """\
  - name: tool_calls
    description: Calls a tool at most twice.
    type: binary
    checks: [{type: episode, key: tool_calls, max: 2}]
""")
    code, out, err = _run(capsys, "fit", "model=tiny_random", f"rubric.path={rubric}", "logger=csv",
                          "trainer.max_steps=2", "batch_size=2", "num_generations=2", "max_completion_length=4",
                          f"hydra.run.dir={tmp_path / 'run'}")
    assert code == 0, err
    assert "rlkit: warning: step 0: the judge scored dimension tool_calls on none of the step's completions" in err
    assert "warning: dimension tool_calls was scored on no completion in 2 of 2 steps" in out
    (metrics,) = (tmp_path / "run").glob("csv/version_0/metrics.csv")
    import csv

    rows = [r for r in csv.DictReader(metrics.open()) if r.get("rewards/tool_calls/unscored")]
    assert [float(r["rewards/tool_calls/unscored"]) for r in rows] == [1.0, 1.0]
    assert [float(r["rewards/tool_calls/saturated_groups"]) for r in rows] == [0.0, 0.0]
