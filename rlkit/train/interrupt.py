"""Ctrl-C during ``rlkit fit`` (the phases and what each does: ``rlkit.core.interrupt``): the callback that ends
the fit loop after the step in which a Ctrl-C arrived, with a checkpoint there, and stops the end-of-run held-out
evaluation at its next batch when a Ctrl-C arrives during it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import lightning as L

from rlkit.core.interrupt import InterruptGuard, say


class EndEvaluationStopped(Exception):  # noqa: N818 (a Ctrl-C answered, not an error)
    """A Ctrl-C arrived during the end-of-run held-out evaluation: ``fit`` goes on to the policy and the summary."""


class StopOnInterrupt(L.Callback):
    """Ends the fit loop after the step in which a Ctrl-C arrived, saving ``checkpoint`` there first: at the point
    in the loop where ``ModelCheckpoint`` saves, so resuming from it continues exactly as an uninterrupted run.

    The step itself is finished, not cut short: a checkpoint mid-step (after some completions were sampled, before
    the update) could not resume exactly. Where ``stops_evaluation`` is set (``fit`` sets it for the end-of-run
    evaluation when no Ctrl-C came before it), a Ctrl-C stops that evaluation before its next batch."""

    def __init__(self, guard: InterruptGuard, checkpoint: Path) -> None:
        self.guard, self.checkpoint = guard, checkpoint
        self.saved_at: int | None = None  # the global step the interrupt's checkpoint holds
        self.stops_evaluation = False
        self._val_batches: int | float | None = None  # limit_val_batches while the stopping loop must not evaluate

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self.guard.requested and self.saved_at is None:
            self.save(trainer)
            trainer.should_stop = True
            # Lightning evaluates once more on a loop told to stop (as for early stopping): minutes on a real model
            # that the Ctrl-C asked not to wait for; `fit` evaluates the end itself where eval_on_interrupt asks
            self._val_batches = trainer.limit_val_batches
            trainer.limit_val_batches = 0

    def save(self, trainer: L.Trainer) -> None:
        """The interrupt's checkpoint, at the step the loop is at."""
        trainer.save_checkpoint(str(self.checkpoint), weights_only=False)  # the optimiser too: a resume point
        self.saved_at = trainer.global_step

    def stopped_between_steps(self, trainer: L.Trainer) -> None:
        """Lightning's own SIGTERM handler ended the loop (``SIGTERMException``) after this callback's hook of the
        last step had run: the signal came after it, in the step's last hooks. The step is whole, the next one not
        begun: its checkpoint is saved here, unless training was done (``max_steps`` reached: nothing to resume)."""
        done = 0 <= trainer.max_steps <= trainer.global_step
        if self.guard.requested and self.saved_at is None and not done:
            self.save(trainer)

    def on_train_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self._val_batches is not None:
            trainer.limit_val_batches, self._val_batches = self._val_batches, None

    def on_validation_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self.stops_evaluation and self.guard.requested and trainer.state.fn == "validate":
            raise EndEvaluationStopped


def requeue_at_exit(guard: InterruptGuard) -> None:
    """Where SLURM's requeue signal stopped the run (``guard.requeue``), ask SLURM to run the job again once this
    process has written everything (at interpreter exit: after the policy and summary): ``scontrol requeue``, as
    Lightning's ``SLURMEnvironment(auto_requeue=True)`` issues it. The requeued job resumes in the same run folder
    (:func:`requeued_checkpoint`)."""
    import atexit

    if guard.requeue and "SLURM_JOB_ID" in os.environ:
        atexit.register(_requeue, slurm_job_id())


def slurm_job_id() -> str:
    """This job's id as ``scontrol`` names it: an array task's is ``<array job>_<task>``."""
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    return f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array else os.environ["SLURM_JOB_ID"]


def _requeue(job: str) -> None:
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        say(f"warning: could not requeue SLURM job {job} (scontrol requeue: {exc}); resume it by hand")
        return
    if done.returncode:
        say(f"warning: scontrol requeue {job} failed ({done.stderr.strip() or done.returncode}); resume it by hand")
    else:
        say(f"requeued SLURM job {job}: it resumes from its checkpoint in the same run folder")


def requeued_checkpoint(run_dir: Path) -> Path | None:
    """In a SLURM job that runs again (``SLURM_RESTART_COUNT`` ≥ 1: requeued after a preemption or a node failure)
    with no ``ckpt_path`` of its own: the newest whole checkpoint the job's earlier run left in ``run_dir`` (its
    ``interrupted.ckpt`` or ``last.ckpt``), to resume from; None elsewhere."""
    from rlkit.config.checkpoints import read_checkpoint_metadata
    from rlkit.core.errors import RlkitError

    if int(os.environ.get("SLURM_RESTART_COUNT") or 0) < 1:
        return None
    found: list[tuple[int, int, Path]] = []
    # at the same step the interrupt's own checkpoint is preferred: it is the one the stop said it wrote
    for rank, path in enumerate((run_dir / "checkpoints" / "last.ckpt", run_dir / "checkpoints" / "interrupted.ckpt")):
        try:
            found.append((int(read_checkpoint_metadata(path, verify=True)["global_step"]), rank, path))
        except (RlkitError, KeyError, OSError, ValueError):  # absent or not whole: the other one, or none
            continue
    return max(found)[2] if found else None
