"""Ctrl-C during ``rlkit fit`` (the phases and what each does: ``rlkit.core.interrupt``): the callback that ends
the fit loop after the step in which a Ctrl-C arrived, with a checkpoint there, and stops the end-of-run held-out
evaluation at its next batch when a Ctrl-C arrives during it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L

from rlkit.core.interrupt import InterruptGuard


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
            trainer.save_checkpoint(str(self.checkpoint))
            self.saved_at = trainer.global_step
            trainer.should_stop = True
            # Lightning evaluates once more on a loop told to stop (as for early stopping): minutes on a real model
            # that the Ctrl-C asked not to wait for; `fit` evaluates the end itself where eval_on_interrupt asks
            self._val_batches = trainer.limit_val_batches
            trainer.limit_val_batches = 0

    def on_train_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self._val_batches is not None:
            trainer.limit_val_batches, self._val_batches = self._val_batches, None

    def on_validation_batch_start(self, trainer: L.Trainer, *args: Any) -> None:
        if self.stops_evaluation and self.guard.requested and trainer.state.fn == "validate":
            raise EndEvaluationStopped
