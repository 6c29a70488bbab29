"""Hydra's own flags through ``rlkit``: ``--cfg``, ``--info``, ``--config-dir``/``-cd`` with a user's folder of
presets, a user's ``hydra.searchpath``; flags Hydra does not take are one line; a sweep is validated job by job
before the first one trains."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlkit.cli import main

MINE = """\
# @package _global_
batch_size: 4
num_generations: 4
trainer:
  max_steps: 2
"""


@pytest.fixture(autouse=True)
def _logging_restored():
    """Hydra's --cfg and --info set up its own logging on the streams pytest captures for the test, and leave its
    run config behind; later tests of the session would log to those closed streams and read that config. A command
    of its own never meets either."""
    import logging

    loggers = [logging.getLogger(), *(logging.getLogger(name) for name in ("hydra", "hydra.core.utils"))]
    saved = [(lg, lg.handlers[:], lg.level, lg.propagate) for lg in loggers]
    yield
    for lg, handlers, level, propagate in saved:
        lg.handlers[:] = handlers
        lg.setLevel(level)
        lg.propagate = propagate
    # --cfg leaves Hydra's run config behind without a run directory, which later in-process code would read
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    HydraConfig.instance().cfg = None  # type: ignore[assignment]
    GlobalHydra.instance().clear()


@pytest.fixture
def myconf(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "myconf" / "experiment").mkdir(parents=True)
    (tmp_path / "myconf" / "experiment" / "mine.yaml").write_text(MINE)
    return tmp_path / "myconf"


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cfg_job_prints_the_composed_config_and_runs_nothing(capsys, myconf):
    code, out, err = _run(capsys, "fit", "--cfg", "job", "trainer.max_steps=3")
    assert code == 0, err
    assert "max_steps: 3" in out and "judge:" in out
    assert not (myconf.parent / "outputs").exists()


def test_a_users_config_folder_joins_rlkits_groups(capsys, myconf):
    code, out, err = _run(capsys, "fit", "-cd", str(myconf), "experiment=mine", "--cfg", "job")
    assert code == 0, err
    assert out.startswith("seed: 42\nbatch_size: 4\nnum_generations: 4\n")
    code, out, err = _run(capsys, "validate", "-cd", str(myconf), "experiment=mine")
    assert code == 0 and "config ok" in out, err
    code, out, err = _run(capsys, "validate", f"hydra.searchpath=[file://{myconf}]", "experiment=mine")
    assert code == 0, "a user's own hydra.searchpath is kept beside the plugins'"
    code, out, err = _run(capsys, "fit", "--info", "searchpath", "-cd", str(myconf))
    assert code == 0 and f"file://{Path(myconf).resolve()}" in out


@pytest.mark.parametrize("command", [["fit", "--cfg", "job"], ["validate"]])
def test_a_users_yaml_named_like_one_rlkit_ships_is_refused_not_ignored(capsys, myconf, command):
    """Hydra searches rlkit's conf/ first: a user's experiment/quick.yaml would quietly lose to rlkit's."""
    (myconf / "experiment" / "quick.yaml").write_text("# @package _global_\nbatch_size: 6\n")
    code, out, err = _run(capsys, command[0], "-cd", str(myconf), "experiment=quick", *command[1:])
    assert code == 2 and "batch_size" not in out, err
    assert err.startswith(f"rlkit: error: --config-dir: {myconf / 'experiment' / 'quick.yaml'} is never read: "
                          "rlkit's own experiment=quick (") and err.count("\n") == 1, err
    code, out, err = _run(capsys, "validate", f"hydra.searchpath=[file://{myconf}]", "experiment=quick")
    assert code == 2 and err.startswith("rlkit: error: hydra.searchpath: "), "named by the key that gave the folder"


def test_a_users_primary_config_named_like_rlkits_is_refused(capsys, myconf):
    """conf/config.yaml is rlkit's primary config, and config.yaml Hydra's usual name for one: `-cn config` with a
    folder of one's own would quietly compose rlkit's."""
    (myconf / "config.yaml").write_text("defaults:\n  - _self_\nbatch_size: 6\n")
    code, out, err = _run(capsys, "fit", "-cd", str(myconf), "-cn", "config", "--cfg", "job")
    assert code == 2 and "batch_size" not in out, err
    assert err.startswith(f"rlkit: error: --config-dir: {myconf / 'config.yaml'} is never read: rlkit's own primary "
                          "config ") and err.count("\n") == 1, err


@pytest.mark.parametrize("args, expected", [
    (["--frob"], "rlkit: error: command line: not a Hydra flag or an override: --frob"),
    (["--cfg", "jobb"], "rlkit: error: command line: argument --cfg/-c: invalid choice: 'jobb'"),
    (["-cd", "/no/such/folder"], "rlkit: error: --config-dir: /no/such/folder is not a folder"),
    (["--max_steps", "5"], "rlkit: error: command line: --max_steps is not a flag; overrides are Hydra's key=value: "
                           "write trainer.max_steps=5"),
    (["--batch-size=4"], "rlkit: error: command line: --batch-size=4 is not a flag; overrides are Hydra's "
                         "key=value: write batch_size=4"),
])
def test_a_flag_hydra_does_not_take_is_one_line(capsys, myconf, args, expected):
    code, out, err = _run(capsys, "fit", *args)
    assert code == 2 and err.startswith(expected) and err.count("\n") == 1, err


@pytest.mark.parametrize("args, expected", [
    (["-m", "seed=1,2", "--cfg", "job"], "rlkit: error: command line: -m/--multirun and --cfg cannot be given "
                                         "together"),
    (["--info", "searchpath", "--cfg", "job"], "rlkit: error: command line: --cfg and --info cannot be given together"),
    (["--resolve"], "rlkit: error: command line: --resolve goes with --cfg"),
])
def test_two_of_hydras_modes_at_once_are_one_line(capsys, myconf, args, expected):
    """Hydra itself answers these with a 20-line ValueError traceback."""
    code, out, err = _run(capsys, "fit", *args)
    assert code == 2 and err.startswith(expected) and err.count("\n") == 1, err
    assert not (myconf.parent / "multirun").exists() and not (myconf.parent / "outputs").exists()


BROKEN = "name: rule\nparams: [case_sensitive\n  other: 1\n"  # a flow sequence never closed


@pytest.mark.parametrize("command", [["validate"], ["fit"], ["fit", "--cfg", "job"], ["fit", "-m", "seed=1,2"],
                                     ["score"]])
def test_a_yaml_syntax_error_in_a_users_folder_is_one_line_naming_file_line_and_column(capsys, myconf, command):
    (myconf / "judge").mkdir()
    (myconf / "judge" / "mine.yaml").write_text(BROKEN)
    code, out, err = _run(capsys, command[0], *command[1:], "-cd", str(myconf), "judge=mine")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{myconf / 'judge' / 'mine.yaml'}:3:8: YAML syntax error: expected ',' or ']', but got ':'" in err, err
    assert not (myconf.parent / "outputs").exists() and not (myconf.parent / "multirun").exists()


def test_an_error_in_a_users_own_group_yaml_names_that_file(capsys, myconf):
    """A mistake in judge/mine.yaml of a -cd folder once said `(config group 'judge')`, not which file."""
    (myconf / "judge").mkdir()
    (myconf / "judge" / "mine.yaml").write_text("name: rule\nparams:\n  case_sensitiv: true\n")
    code, out, err = _run(capsys, "validate", "-cd", str(myconf), "judge=mine")
    assert code == 2 and err.startswith(f"rlkit: error: judge.params ({myconf / 'judge' / 'mine.yaml'}): unknown key "
                                        "'case_sensitiv'"), err
    code, out, err = _run(capsys, "validate", "-cd", str(myconf), "judge=mien")
    assert code == 2 and "; in your config folder: mine; did you mean 'mine'?" in err, err


@pytest.mark.parametrize("sweep, expected", [
    ("optim.lr=1e-4,-1", "rlkit: error: job 1 of 2 (optim.lr=-1): optim.lr: must be >= 0.0, got -1"),
    ("judge=rule,rul", "rlkit: error: job 1 of 2 (judge=rul): unknown judge 'rul'; available judges:"),
])
def test_a_sweep_with_a_bad_second_job_fails_before_the_first_trains(capsys, myconf, sweep, expected):
    code, out, err = _run(capsys, "fit", "-m", sweep, "trainer.max_steps=1", "logger=none")
    assert code == 2 and err.startswith(expected) and err.count("\n") == 1, err
    assert not (myconf.parent / "multirun").exists(), "no job ran"


def test_a_sweep_jobs_several_mistakes_are_a_line_each_naming_the_job(capsys, myconf):
    code, out, err = _run(capsys, "fit", "-m", "seed=1,2", "data.num_prompts=0", "judge.params.case_sensitive=maybe")
    lines = err.splitlines()
    assert code == 2 and len(lines) == 2, err
    assert lines[0].startswith("rlkit: error: job 0 of 2 (seed=1): data.num_prompts (")
    assert lines[1].startswith("rlkit: error: job 0 of 2 (seed=1): judge.params (")
    assert not (myconf.parent / "multirun").exists(), "no job ran"


def test_sweep_jobs_are_the_product_of_the_sweeps():
    from rlkit.commands.training import sweep_jobs

    jobs = sweep_jobs(["-m", "seed=1,2", "judge=rule,llm", "batch_size=4"])
    assert jobs == [["seed=1", "judge=rule", "batch_size=4"], ["seed=1", "judge=llm", "batch_size=4"],
                    ["seed=2", "judge=rule", "batch_size=4"], ["seed=2", "judge=llm", "batch_size=4"]]


def test_fit_takes_a_declared_key_without_plus_through_hydra(tmp_path, capsys):
    """Validation composes `trainer.min_steps=1` (a Lightning argument no YAML sets) as `++`; Hydra's own run is
    handed the same, so the job trains instead of failing in Hydra's override parser."""
    run = tmp_path / "run"
    assert main(["fit", "trainer.min_steps=1", "trainer.max_steps=1", "batch_size=2", "num_generations=2",
                 "logger=none", f"hydra.run.dir={run}"]) == 0
    assert (run / "policy").is_dir()
    assert "trainer.min_steps=1" in (run / ".hydra" / "overrides.yaml").read_text()
