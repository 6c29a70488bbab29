"""``rlkit <command> --help``: each command's own help, generated from the registry and schemas; a closed pipe ends
the output quietly."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rlkit.cli import main


def _help(capsys, *args: str) -> str:
    assert main([*args, "--help"]) == 0
    return capsys.readouterr().out


def test_fit_help_lists_its_groups_with_their_options_and_its_keys(capsys):
    out = _help(capsys, "fit")
    assert out.startswith("usage: rlkit fit [-m] [overrides]")
    judges = next(line for line in out.splitlines() if line.startswith("  judge: "))
    assert {"rule", "llm", "ensemble", "ranking"} <= set(judges.split(": ")[1].split(", "))
    assert "  experiment: " in out and "smollm2_arithmetic" in out
    assert "  batch_size (default 8): Prompts per optimisation step" in out and "  optim.*: " in out
    assert "example: rlkit fit " in out


@pytest.mark.parametrize("command, expected", [
    (("score",), ["score.batch_size (default 64)", "exits 3 when a dimension"]),
    (("serve",), ["serve.port (default 8000)"]),
    (("rubric", "audit"), ["usage: rlkit rubric audit [--fail-under X]", "--fail-under X: the trust score",
                           "audit.records (default None)"]),
])
def test_each_config_command_names_its_own_block(capsys, command, expected):
    out = _help(capsys, *command)
    for text in expected:
        assert text in out, text


@pytest.mark.parametrize("command", [("plugins",), ("train-grm",), ("label",), ("compare",), ("report",), ("data",),
                                     ("data", "pairs"), ("data", "from-labels"), ("model",), ("export",),
                                     ("model", "path"), ("new",),
                                     ("rubric",), ("rubric", "diff"), ("rubric", "generate")])
def test_every_command_answers_help_with_its_own_usage_and_runs_nothing(capsys, tmp_path, monkeypatch, command):
    monkeypatch.chdir(tmp_path)  # `train-grm --help` once trained a GRM here, writing outputs/ and wandb/
    out = _help(capsys, *command)
    assert "commands:" not in out  # not the global list
    assert f"rlkit {command[0]}" in out
    assert not list(tmp_path.iterdir())


def test_every_command_has_help():
    from rlkit.cli import COMMANDS
    from rlkit.commands.help import HELP, SELF_HELPED

    assert set(COMMANDS) == {name.split()[0] for name in HELP} | set(SELF_HELPED)


def test_a_closed_pipe_ends_the_output_without_a_traceback():
    proc = subprocess.Popen([sys.executable, "-c", "import sys; from rlkit.cli import main; "
                             "sys.exit(main(['fit', '--help']))"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # the reader is gone before the first line, as after `| head -0`
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141, err
    assert "Traceback" not in err and "BrokenPipe" not in err


@pytest.mark.parametrize("command", [("fit",), ("validate",), ("score",), ("rubric", "audit")])
def test_a_config_commands_help_names_the_command_that_prints_every_key(capsys, command):
    """docs/config-reference.md is generated on build and never in a clone: --help names what prints it."""
    out = _help(capsys, *command)
    assert "Every key, with its default and constraint: rlkit config-reference." in out
    assert "docs/config-reference.md" not in out


@pytest.mark.parametrize("command", [("doctor",), ("report",), ("plugins",), ("label",), ("compare",)])
def test_a_command_that_takes_no_overrides_does_not_mention_them(capsys, command):
    out = _help(capsys, *command)
    assert "Overrides" not in out and "overrides" not in out and "config-reference" not in out, out


def test_config_reference_prints_the_page_the_docs_site_builds(capsys):
    from rlkit.commands.common import run_registry
    from rlkit.config.reference import config_reference_markdown

    assert main(["config-reference"]) == 0
    out = capsys.readouterr().out
    assert out == config_reference_markdown(run_registry())
    assert out.startswith("# Config reference\n") and "| `batch_size` | int | `8` | >= 1, <= 65536 |" in out
    assert main(["config-reference", "extra"]) == 2
    assert capsys.readouterr().err == "rlkit: error: rlkit config-reference: takes no arguments, got extra\n"
