"""Preemption (issue 52): a SIGTERM that lands after the step's own checkpoint hook still saves a checkpoint the run
resumes from exactly; under SLURM the requeue signal (SIGUSR1, Lightning's; SIGUSR2, submitit's) is answered as
SIGTERM is, the job is requeued through ``scontrol requeue`` (a real executable on PATH here, standing in for
SLURM's, that writes down its arguments), and the requeued job resumes in its run folder as if never stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

RLKIT = [sys.executable, "-m", "rlkit"]
QUICK = ["logger=csv", "batch_size=4", "num_generations=4", "trainer.max_steps=4"]


def _rewards(run_dir: Path) -> dict[int, float]:
    path = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []
    return {r["step"]: r["metrics"]["reward/mean"] for r in rows if "reward/mean" in r["metrics"]}


def _policy(run_dir: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted((run_dir / "policy").glob("*.safetensors")) for k, v in load_file(f).items()}


def _same_policy(a: Path, b: Path) -> bool:
    import torch

    x, y = _policy(a), _policy(b)
    return bool(x) and x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


@pytest.fixture(scope="module")
def straight(tmp_path_factory) -> Path:
    """The uninterrupted 4-step run the resumed ones are compared with."""
    run = tmp_path_factory.mktemp("straight") / "run"
    subprocess.run([*RLKIT, "fit", *QUICK, f"hydra.run.dir={run}"], check=True, capture_output=True)
    return run


LATE_SIGNAL = """
import os, signal, sys
from lightning.pytorch.callbacks import ModelCheckpoint
from rlkit.cli import main

hook, sent = ModelCheckpoint.on_train_batch_end, []


def late_signal(self, trainer, *args, **kwargs):
    # Lightning runs ModelCheckpoint's hook last: a signal here comes after rlkit's own hook of the step, and
    # Lightning's SIGTERM handler ends the loop before the next step
    if trainer.global_step == 2 and not sent:
        sent.append(os.kill(os.getpid(), signal.SIGTERM))
    return hook(self, trainer, *args, **kwargs)


ModelCheckpoint.on_train_batch_end = late_signal
sys.exit(main(["fit", *sys.argv[1:]]))
"""


COUNT_EVALUATED_STEPS = """
import sys
from rlkit.cli import main
from rlkit.train.module import RubricRLModule

steps, evaluate = set(), RubricRLModule.validation_step


def counted(self, *args, **kwargs):
    steps.add(self.global_step)
    return evaluate(self, *args, **kwargs)


RubricRLModule.validation_step = counted
code = main(["fit", *sys.argv[1:]])
print(f"held-out evaluations at steps {sorted(steps)}", file=sys.stderr)
sys.exit(code)
"""


def test_sigterm_after_the_steps_checkpoint_hook_still_saves_and_resumes_exactly(tmp_path, straight):
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-c", LATE_SIGNAL, *QUICK, f"hydra.run.dir={run}"], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 143, done.stderr[-2000:]
    assert "Traceback" not in done.stderr and "resume with: " in done.stderr, done.stderr[-2000:]
    checkpoint = run / "checkpoints" / "interrupted.ckpt"
    assert f"ckpt_path={checkpoint}" in done.stderr and json.loads((run / "summary.json").read_text())[
        "interrupted"] == {"step": 2, "checkpoint": str(checkpoint), "exit_code": 143}
    resumed = tmp_path / "resumed"
    again = subprocess.run([sys.executable, "-c", COUNT_EVALUATED_STEPS, *QUICK, f"ckpt_path={checkpoint}",
                            f"hydra.run.dir={resumed}"], capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-2000:]
    # the start evaluation is not run again on resume (minutes on a real model): the checkpoint's start is reported
    assert "held-out evaluations at steps [4]" in again.stderr, again.stderr[-2000:]
    assert json.loads((resumed / "summary.json").read_text())["start"] == \
        json.loads((straight / "summary.json").read_text())["start"]
    assert _rewards(resumed) == {s: r for s, r in _rewards(straight).items() if s >= 2}
    assert _same_policy(resumed, straight)


SIGNAL_AT_STEP_ONE = """
import os, sys
from lightning.pytorch.callbacks import ModelCheckpoint
from rlkit.cli import main


def signal_at_step_one(self, trainer, *args, **kwargs):
    if trainer.global_step == 1:
        os.kill(os.getpid(), {signum})


ModelCheckpoint.on_train_batch_start = signal_at_step_one
sys.exit(main(["fit", *sys.argv[1:]]))
"""

FAKE_SCONTROL = """#!/bin/sh
echo "$@" >> "{log}"
"""


@pytest.mark.parametrize("signum", [signal.SIGUSR1, signal.SIGUSR2])
def test_a_slurm_requeue_signal_saves_requeues_and_the_requeued_job_resumes_exactly(tmp_path, straight, signum):
    bin_dir, log = tmp_path / "bin", tmp_path / "scontrol.log"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(FAKE_SCONTROL.format(log=log))
    (bin_dir / "scontrol").chmod(0o755)
    # what a SLURM batch job of one task sees (Lightning reads these as a SLURM environment as well)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
           "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "rlkit-fit", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
           "SLURM_NODEID": "0"}
    run = tmp_path / "run"  # a job's run folder is fixed (hydra.run.dir, or the launcher's sweep folder)
    # the signal is sent from inside the job as its second step starts: sent from here after the first step's
    # metrics, a fast machine had finished all four steps before it landed (CI saw "assert 4 < 4")
    signalled = subprocess.run([sys.executable, "-c", SIGNAL_AT_STEP_ONE.format(signum=int(signum)), *QUICK,
                                f"hydra.run.dir={run}"], capture_output=True, text=True, env=env, timeout=240)
    err = signalled.stderr
    assert signalled.returncode == 128 + signum, err[-2000:]
    assert "Traceback" not in err and f"rlkit: {signal.Signals(signum).name}: finishing this step" in err
    assert "rlkit: requeued SLURM job 4242" in err
    # Lightning logs it at each of the run's start evaluation and training: said once
    assert err.count("SLURM auto-requeueing enabled") == 1
    assert f"rlkit: preempted (SLURM's {signal.Signals(signum).name}; the job is requeued) after step" in err
    assert log.read_text().split() == ["requeue", "4242"]
    assert json.loads((run / "summary.json").read_text())["interrupted"]["step"] == 2
    # SLURM starts the job again: same command, same folder, SLURM_RESTART_COUNT set
    command = [*RLKIT, "fit", *QUICK, f"hydra.run.dir={run}"]
    again = subprocess.run(command, capture_output=True, text=True, env={**env, "SLURM_RESTART_COUNT": "1"},
                           timeout=240)
    assert again.returncode == 0, again.stderr[-2000:]
    assert f"resuming from {run / 'checkpoints' / 'interrupted.ckpt'}" in again.stderr
    assert again.stderr.count("SLURM auto-requeueing enabled") == 1, "training and the end evaluation: once"
    assert _rewards(run) == _rewards(straight), "the steps before the stop and the resumed ones, as never stopped"
    assert _same_policy(run, straight)
    assert log.read_text().split() == ["requeue", "4242"], "a run that finished asks for no requeue"


def test_off_slurm_the_requeue_signals_keep_their_default():
    from rlkit.core.interrupt import InterruptGuard

    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    with pytest.MonkeyPatch.context() as mp:
        for key in set(os.environ) - set(env):
            mp.delenv(key)
        before = signal.getsignal(signal.SIGUSR1)
        with InterruptGuard():
            assert signal.getsignal(signal.SIGUSR1) is before
        mp.setenv("SLURM_JOB_ID", "7")
        with InterruptGuard() as guard:
            assert getattr(signal.getsignal(signal.SIGUSR1), "__self__", None) is guard
        assert signal.getsignal(signal.SIGUSR1) is before
