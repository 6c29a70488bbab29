"""Ctrl-C during ``rlkit fit`` (issue 40), and SIGTERM as a preemption sends it (issue 52, exit 143): one line and
exit 130, never a traceback; mid-run it finishes the step,
saves a checkpoint, the policy and the summary and prints the command that resumes, which continues exactly; during
the end of the run it still writes the policy and the summary; a second Ctrl-C stops at once."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlkit.cli import main

RLKIT = [sys.executable, "-m", "rlkit"]
QUICK = ["logger=csv", "batch_size=4", "num_generations=4"]


def _interruptible() -> None:
    # a job a script starts in the background inherits SIGINT ignored (POSIX), and so would the run: a terminal's
    # Ctrl-C is what is tested, so the run starts as a terminal starts it
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture
def ctrl_c_reaches_this_process():
    """SIGINT raises KeyboardInterrupt here, as in a terminal, whatever the test runner inherited; put back after."""
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield signal.default_int_handler
    signal.signal(signal.SIGINT, before)


def _start(run_dir: Path, *overrides: str) -> subprocess.Popen:
    return subprocess.Popen([*RLKIT, "fit", *QUICK, *overrides, f"hydra.run.dir={run_dir}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=_interruptible)


def _wait_for(condition, proc: subprocess.Popen, timeout: float = 240.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"exited early: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _trained_steps(run_dir: Path) -> list[int]:
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [r["step"] for r in rows if "reward/mean" in r.get("metrics", {})]


def _rewards(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {r["step"]: r["metrics"]["reward/mean"] for r in rows if "reward/mean" in r.get("metrics", {})}


@pytest.fixture(scope="module")
def straight_run(tmp_path_factory):
    """The uninterrupted 6-step run the resumed ones are compared with."""
    straight = tmp_path_factory.mktemp("straight")
    subprocess.run([*RLKIT, "fit", *QUICK, "trainer.max_steps=6", f"hydra.run.dir={straight}"], check=True,
                   capture_output=True)
    return straight


@pytest.mark.parametrize(("signum", "code", "said", "line_start"), [
    (signal.SIGINT, 130, "rlkit: interrupt: finishing this step", "rlkit: interrupted after step"),
    # a preemption (SLURM, Kubernetes, `timeout`): the same finish, its own exit status
    (signal.SIGTERM, 143, "rlkit: SIGTERM: finishing this step", "rlkit: terminated (SIGTERM) after step")])
def test_a_signal_mid_run_saves_what_was_trained_and_the_printed_command_resumes_exactly(
        tmp_path, straight_run, signum, code, said, line_start):
    run = tmp_path / "run"
    proc = _start(run, "trainer.max_steps=6")
    _wait_for(lambda: len(_trained_steps(run)) >= 2, proc)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == code, err[-2000:]
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert said in err
    line = next(x for x in err.splitlines() if x.startswith(line_start))
    summary = json.loads((run / "summary.json").read_text())
    stopped = summary["interrupted"]["step"]
    assert 2 <= stopped < 6 and summary["steps"] == stopped
    assert (run / "policy" / "config.json").is_file() and "final held-out" in out
    checkpoint = run / "checkpoints" / "interrupted.ckpt"
    assert checkpoint.is_file() and f"ckpt_path={checkpoint}" in line
    # the printed command, run as printed (into a folder of its own), continues where the run stopped
    command = shlex.split(line.split("resume with: ", 1)[1])
    assert command[:2] == ["rlkit", "fit"]
    resumed = tmp_path / "resumed"
    subprocess.run([*RLKIT, *command[1:], f"hydra.run.dir={resumed}"], check=True, capture_output=True,
                   preexec_fn=_interruptible)
    after = _rewards(resumed)
    assert sorted(after) == list(range(stopped, 6))
    assert after == {step: reward for step, reward in _rewards(straight_run).items() if step >= stopped}


def test_sigterm_during_start_up_stops_at_once_with_its_own_status(tmp_path):
    early = tmp_path / "early"
    proc = _start(early, "trainer.max_steps=200")
    _wait_for(early.is_dir, proc)  # Hydra made the run folder: the job has begun, no step has trained
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 143 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("rlkit: terminated (SIGTERM)")
    assert _trained_steps(early) == []


def test_ctrl_c_during_start_up_stops_at_once(tmp_path):
    early = tmp_path / "early"
    proc = _start(early, "trainer.max_steps=200")
    _wait_for(early.is_dir, proc)  # Hydra made the run folder: the job has begun, no step has trained
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 130 and "Traceback" not in err, err[-2000:]
    assert err.strip().splitlines()[-1].startswith("rlkit: interrupted")
    assert _trained_steps(early) == []


def test_a_second_ctrl_c_stops_at_once(tmp_path, monkeypatch, capsys, ctrl_c_reaches_this_process):
    from rlkit.train.module import RubricRLModule

    training_step = RubricRLModule.training_step

    def twice_in_step_two(self, *args, **kwargs):
        if self.trainer.global_step == 1:
            os.kill(os.getpid(), signal.SIGINT)  # real signals; Python runs the handler before the next line
            os.kill(os.getpid(), signal.SIGINT)
        return training_step(self, *args, **kwargs)

    monkeypatch.setattr(RubricRLModule, "training_step", twice_in_step_two)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exited:
        main(["fit", *QUICK, "trainer.max_steps=50", f"hydra.run.dir={run}"])
    assert exited.value.code == 130
    err = capsys.readouterr().err
    assert "rlkit: interrupted again: stopped at once" in err and "Traceback" not in err
    assert not (run / "policy").exists() and not (run / "summary.json").exists()
    assert signal.getsignal(signal.SIGINT) is ctrl_c_reaches_this_process, "the handler is put back"


def test_ctrl_c_while_the_run_finishes_still_writes_the_policy_and_the_summary(tmp_path, monkeypatch, capsys,
                                                                              ctrl_c_reaches_this_process):
    import rlkit.train.fit as fit_module

    agree = fit_module.check_replicas_agree

    def interrupted_while_finishing(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGINT)  # a real SIGINT, delivered to this (the main) thread
        return agree(*args, **kwargs)

    monkeypatch.setattr(fit_module, "check_replicas_agree", interrupted_while_finishing)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exited:
        main(["fit", *QUICK, "trainer.max_steps=2", f"hydra.run.dir={run}"])
    assert exited.value.code == 130
    err = capsys.readouterr().err
    assert "skipping the run report" in err and "Traceback" not in err
    assert f"rlkit report {run} builds it" in err
    assert (run / "policy" / "config.json").is_file()
    assert json.loads((run / "summary.json").read_text())["interrupted"] == {"step": 2, "checkpoint": None,
                                                                          "exit_code": 130}
    assert not (run / "report").exists()
    assert signal.getsignal(signal.SIGINT) is ctrl_c_reaches_this_process, "the handler is put back"


def test_a_run_started_with_ctrl_c_ignored_keeps_ignoring_it_and_still_answers_sigterm():
    # `nohup rlkit fit &` from a script: Ctrl-C is ignored, a scheduler's SIGTERM must still stop the run in one line
    # (once the guard installed nothing at all here, and SIGTERM killed the process outright)
    from rlkit.core.interrupt import InterruptGuard, RunInterrupted

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with pytest.raises(RunInterrupted) as stop, InterruptGuard("interrupted during start-up"):
            assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here, at once
        assert stop.value.exit_code == 143 and str(stop.value).startswith("terminated (SIGTERM) during start-up")
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, before)


class _SwallowsSigterm:
    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowing, shown
def test_with_ctrl_c_ignored_a_swallowed_sigterm_still_stops_the_nested_guard():
    from rlkit.core.interrupt import InterruptGuard, RunInterrupted

    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with InterruptGuard("interrupted during start-up") as outer:
            _SwallowsSigterm()
            assert outer.stopped
            with pytest.raises(RunInterrupted) as stop, InterruptGuard():  # fit's own guard, entered after
                pass
        assert stop.value.exit_code == 143
    finally:
        signal.signal(signal.SIGINT, before)


class _SwallowsCtrlC:
    """Where a Ctrl-C lands inside a destructor, Python prints "Exception ignored" and carries on."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGINT)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowing, shown
def test_a_ctrl_c_a_destructor_swallowed_during_start_up_still_stops_the_run(ctrl_c_reaches_this_process):
    from rlkit.core.interrupt import InterruptGuard, RunInterrupted

    with InterruptGuard("interrupted during start-up") as guard:
        _SwallowsCtrlC()
        assert guard.stopped
        with pytest.raises(RunInterrupted, match="interrupted during start-up"):
            guard.phase = "training"
    with InterruptGuard() as outer:
        _SwallowsCtrlC()
        with pytest.raises(RunInterrupted), InterruptGuard():  # fit's own guard, entered after the swallowed one
            pass
    assert outer.stopped and signal.getsignal(signal.SIGINT) is ctrl_c_reaches_this_process


def test_a_stop_that_other_code_turned_into_another_error_is_still_the_stop():
    # CI saw a SIGTERM land inside an import in lightning, whose machinery turned the guard's RunInterrupted into
    # "TypeError: expected a message argument": Hydra printed it and the run exited 1 instead of 143
    from rlkit.core.interrupt import InterruptGuard, RunInterrupted

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterrupted) as stop, InterruptGuard("interrupted during start-up; nothing was trained"):
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here, at once
        except RunInterrupted as exc:
            raise TypeError("expected a message argument") from exc
    assert stop.value.exit_code == 143 and str(stop.value).startswith("terminated (SIGTERM) during start-up")
    assert signal.getsignal(signal.SIGTERM) is before
    with pytest.raises(TypeError), InterruptGuard():  # an error with no stop behind it stays itself
        raise TypeError("a real error")


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # the swallowing, shown
def test_a_command_whose_ctrl_c_was_swallowed_still_exits_130(monkeypatch, capsys, ctrl_c_reaches_this_process):
    import rlkit.cli

    def swallowing_command(argv):
        _SwallowsCtrlC()
        return 0

    monkeypatch.setattr(rlkit.cli, "_main", swallowing_command)
    assert main(["plugins"]) == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == "rlkit: interrupted"
    assert signal.getsignal(signal.SIGINT) is ctrl_c_reaches_this_process


def _ctrl_c_in_step(monkeypatch, step: int) -> list[int]:
    """Send one real SIGINT at the start of training step ``step``; return the list every held-out batch's global
    step is appended to."""
    from rlkit.train.module import RubricRLModule

    training_step, validation_step = RubricRLModule.training_step, RubricRLModule.validation_step
    evaluated: list[int] = []

    def interrupted_in_step(self, *args, **kwargs):
        if self.trainer.global_step == step:
            os.kill(os.getpid(), signal.SIGINT)
        return training_step(self, *args, **kwargs)

    def counted(self, *args, **kwargs):
        evaluated.append(self.trainer.global_step)
        return validation_step(self, *args, **kwargs)

    monkeypatch.setattr(RubricRLModule, "training_step", interrupted_in_step)
    monkeypatch.setattr(RubricRLModule, "validation_step", counted)
    return evaluated


def test_ctrl_c_mid_run_skips_the_end_of_run_evaluation_unless_asked(tmp_path, monkeypatch, capsys,
                                                                     ctrl_c_reaches_this_process):
    evaluated = _ctrl_c_in_step(monkeypatch, 1)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exited:
        main(["fit", *QUICK, "trainer.max_steps=50", f"hydra.run.dir={run}"])
    assert exited.value.code == 130
    out, err = capsys.readouterr()
    assert "end-of-run held-out evaluation is skipped (eval_on_interrupt=true runs it)" in err
    assert "not evaluated" in out and (run / "policy").is_dir()
    assert set(evaluated) == {0}, "only the start was evaluated"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"]["step"] == 2 and set(summary["end"].values()) == {None}
    assert all(v is not None for v in summary["start"].values())

    evaluated.clear()
    asked = tmp_path / "asked"
    with pytest.raises(SystemExit):
        main(["fit", *QUICK, "trainer.max_steps=50", "eval_on_interrupt=true", f"hydra.run.dir={asked}"])
    assert set(evaluated) == {0, 2}
    assert None not in json.loads((asked / "summary.json").read_text())["end"].values()


def test_ctrl_c_during_the_end_of_run_evaluation_stops_it_at_the_next_batch(tmp_path, monkeypatch, capsys,
                                                                            ctrl_c_reaches_this_process):
    from rlkit.train.module import RubricRLModule

    validation_step = RubricRLModule.validation_step
    evaluated: list[int] = []

    def interrupted_at_the_end(self, *args, **kwargs):
        evaluated.append(self.trainer.global_step)
        if self.trainer.global_step == 2 and len([s for s in evaluated if s == 2]) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return validation_step(self, *args, **kwargs)

    monkeypatch.setattr(RubricRLModule, "validation_step", interrupted_at_the_end)
    run = tmp_path / "run"
    with pytest.raises(SystemExit) as exited:  # 64 held-out prompts, evaluated 32 at a time: 2 batches
        main(["fit", *QUICK, "model=tiny_random", "data.num_prompts=512", "trainer.max_steps=2",
              f"hydra.run.dir={run}"])
    assert exited.value.code == 130
    err = capsys.readouterr().err
    assert "stopping the held-out evaluation" in err and "Traceback" not in err
    assert evaluated == [0, 0, 2], "the end's second batch is not sampled"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["interrupted"] == {"step": 2, "checkpoint": None, "exit_code": 130}
    assert set(summary["end"].values()) == {None}
    assert (run / "policy" / "config.json").is_file()
