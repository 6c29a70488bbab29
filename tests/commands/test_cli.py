"""The CLI: each bad input gives one line on stderr and a non-zero exit; good input works."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlkit.cli import main

GOOD_RUBRIC = """\
name: t
version: "1"
dimensions:
  - name: has_number
    type: binary
    checks: [{type: regex, pattern: '\\d'}]
"""


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(code: int, err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code != 0
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("rlkit: error: ")
    return lines[0]


@pytest.fixture
def rubric_file(tmp_path: Path) -> Path:
    path = tmp_path / "rubric.yaml"
    path.write_text(GOOD_RUBRIC)
    return path


def test_plugins_lists_kinds_and_providers(capsys):
    code, out, _ = _run(capsys, "plugins")
    assert code == 0
    for text in ("judge", "aggregator", "advantage_estimator", "preference_constructor", "weight_scheduler",
                 "rule", "weighted_sum", "grpo", "constant", "anchor_overlap", "rlkit-example-plugin"):
        assert text in out, text


def test_validate_default(capsys):
    code, out, err = _run(capsys, "validate")
    assert code == 0, err
    assert "config ok: rubric arithmetic" in out


def test_unknown_judge(capsys):
    line = _one_error_line(*_run(capsys, "validate", "judge=does_not_exist")[::2])
    assert "unknown judge 'does_not_exist'; available judges: anchor_overlap (rlkit-example-plugin), " in line
    assert "llm (rlkit)" in line and "rule (rlkit)" in line


@pytest.mark.parametrize("value", ["0", "two", "true"])
def test_torch_threads_must_be_null_or_a_positive_integer(capsys, value):
    line = _one_error_line(*_run(capsys, "validate", f"torch_threads={value}")[::2])
    assert line.startswith("rlkit: error: torch_threads: ")
    assert ">= 1, got 0" in line if value == "0" else "valid integer" in line
    assert _run(capsys, "validate", "torch_threads=1")[0] == 0


def test_bad_param(capsys):
    line = _one_error_line(*_run(capsys, "validate", "+aggregator.params.scale=2")[::2])
    assert "aggregator.params" in line and "weighted_sum.yaml" in line and "'scale'" in line


def test_invalid_rubric(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD_RUBRIC.replace("type: binary", "type: binary\n    weight: -1"))
    line = _one_error_line(*_run(capsys, "validate", f"rubric.path={bad}")[::2])
    assert f"{bad}: dimensions[0](has_number).weight" in line


def test_rubric_yaml_syntax_error(capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: t\nversion: '1'\ndimensions: [\n  {name: a\n")
    line = _one_error_line(*_run(capsys, "validate", f"rubric.path={bad}")[::2])
    assert f"{bad}:" in line and "YAML syntax error" in line


def test_rubric_the_judge_cannot_score(capsys, tmp_path):
    bad = tmp_path / "nochecks.yaml"
    bad.write_text("name: t\nversion: '1'\ndimensions:\n  - {name: tone, type: binary}\n")
    line = _one_error_line(*_run(capsys, "validate", f"rubric.path={bad}")[::2])
    assert "dimensions[0](tone).checks" in line


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b'{"prompt": "a"}\n{"prompt": "b",\n', ":2: invalid JSON"),
        (b'{"prompt": "a"}\n{"question": "b"}\n', ':2: missing "prompt"'),
        (b'{"prompt": "a"}\n{"prompt": "\xff\xfe"}\n', ":2: not UTF-8"),
        (b"", "no records"),
    ],
    ids=["invalid-json", "missing-prompt", "not-utf8", "empty"],
)
def test_bad_data(capsys, tmp_path, rubric_file, content, expected):
    data = tmp_path / "prompts.jsonl"
    data.write_bytes(content)
    line = _one_error_line(*_run(capsys, "validate", f"data.path={data}", f"rubric.path={rubric_file}")[::2])
    assert str(data) in line and expected in line


def test_missing_data_file(capsys, tmp_path):
    line = _one_error_line(*_run(capsys, "validate", f"data.path={tmp_path}/nope.jsonl")[::2])
    assert "no such data file" in line


def test_missing_model_path(capsys, tmp_path):
    line = _one_error_line(*_run(capsys, "validate", f"model.name_or_path={tmp_path}/nope")[::2])
    assert "model.name_or_path" in line and "no such model directory" in line


def test_bad_override_syntax(capsys):
    _one_error_line(*_run(capsys, "validate", "judge=[")[::2])


def test_unknown_command(capsys):
    code, _, err = _run(capsys, "fly")
    assert code != 0 and "unknown command 'fly'" in err


def test_debug_shows_traceback(capsys):
    from rlkit import PluginError

    with pytest.raises(PluginError):
        main(["validate", "--debug", "judge=does_not_exist"])


def test_third_party_judge_selected_by_config_alone(capsys):
    code, out, err = _run(capsys, "validate", "judge=anchor_overlap")
    assert code == 0, err
    assert "judge: anchor_overlap" in out


def test_score_writes_scores_and_table(capsys, tmp_path, rubric_file):
    data = tmp_path / "recs.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in [
        {"prompt": "p1", "completions": ["a1", "none"]},
        {"prompt": "p2", "completion": "22"},
    ]) + "\n")
    out_path = tmp_path / "out" / "scored.jsonl"
    code, out, err = _run(capsys, "score", f"data.path={data}", f"rubric.path={rubric_file}",
                          f"score.output={out_path}")
    assert code == 0, err
    assert "has_number" in out and "reward" in out and "wrote 3 scored completions" in out
    rows = [json.loads(line) for line in out_path.read_text().splitlines()]
    assert [r["completion"] for r in rows] == ["a1", "none", "22"]
    assert [r["scores"]["has_number"] for r in rows] == [1.0, 0.0, 1.0]
    assert [r["reward"] for r in rows] == [1.0, 0.0, 1.0]
    assert rows[0]["rubric"]["name"] == "t" and len(rows[0]["rubric"]["hash"]) == 64


def test_score_bad_line_writes_nothing(capsys, tmp_path, rubric_file):
    data = tmp_path / "recs.jsonl"
    data.write_text('{"prompt": "p1", "completion": "a1"}\n{"prompt": "p2"}\n')
    out_path = tmp_path / "scored.jsonl"
    line = _one_error_line(*_run(capsys, "score", f"data.path={data}", f"rubric.path={rubric_file}",
                                 f"score.output={out_path}")[::2])
    assert f"{data}:2" in line and "completion" in line
    assert not out_path.exists() and list(tmp_path.glob(".scored*")) == []


def test_console_script_exit_code_and_one_line():
    proc = subprocess.run([str(Path(sys.executable).with_name("rlkit")), "validate", "judge=does_not_exist"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "available judges" in proc.stderr


def test_plugins_say_what_each_is_and_tell_the_two_gdpos_apart():
    from rlkit.commands.inspect import plugin_summary
    from rlkit.core.registry import load_registry

    registry = load_registry()
    gdpo = plugin_summary(registry.get("advantage_estimator", "gdpo").factory)
    group_dpo = plugin_summary(registry.get("objective", "group_dpo").factory)
    assert "NVIDIA" in gdpo and "objective=group_dpo" in gdpo
    assert "note's GDPO" in group_dpo and "advantage=gdpo" in group_dpo
    assert plugin_summary(registry.get("environment", "single_turn").factory).startswith("single_turn")


def test_plugins_piped_is_one_plain_line_a_plugin_and_kind_filters(capsys):
    code, out, _ = _run(capsys, "plugins", "--kind", "judge")
    assert code == 0
    lines = out.strip().splitlines()
    assert len(lines) >= 9 and all(line.startswith("judge ") for line in lines)
    rule = next(line for line in lines if "judge=rule " in line)
    assert "(rlkit)" in rule and "``" not in out and "\\[" not in out
    code, out, _ = _run(capsys, "plugins", "--kind=monitors")
    assert code == 0 and "monitors=[template_phrases]" in out and "judge=" not in out
    code, _, err = _run(capsys, "plugins", "--kind", "judges")
    assert code == 2 and "unknown kind 'judges'" in err and "did you mean 'judge'?" in err


@pytest.mark.parametrize("argv", [
    ("rubric", "diff", "conf/rubric/arithmetic.yaml"), ("rubric", "hash"), ("rubric", "diff", "a", "b", "c"),
    ("rubric", "nosuchtool"), ("label",), ("report",), ("calibrate", "sample"), ("model", "path"), ("new", "plugin"),
    ("new", "plugin", "x"), ("data", "pairs"), ("data", "prepare"), ("data", "from-labels"),
])
def test_a_tool_missing_an_argument_says_so_in_one_line(capsys, argv):
    code, _, err = _run(capsys, *argv)
    assert code == 2
    line = _one_error_line(code, err)
    assert f"rlkit {argv[0]}" in line or "usage: rlkit" in line, line
