"""Ctrl-C during ``rlkit fit`` (the phases and what each does: ``rlkit.core.interrupt``): the callback that ends
the fit loop after the step in which a Ctrl-C arrived, with a checkpoint there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L

from rlkit.core.interrupt import InterruptGuard


class StopOnInterrupt(L.Callback):
    """Ends the fit loop after the step in which a Ctrl-C arrived, saving ``checkpoint`` there first: at the point
    in the loop where ``ModelCheckpoint`` saves, so resuming from it continues exactly as an uninterrupted run."""

    def __init__(self, guard: InterruptGuard, checkpoint: Path) -> None:
        self.guard, self.checkpoint = guard, checkpoint
        self.saved_at: int | None = None  # the global step the interrupt's checkpoint holds

    def on_train_batch_end(self, trainer: L.Trainer, *args: Any) -> None:
        if self.guard.requested and self.saved_at is None:
            trainer.save_checkpoint(str(self.checkpoint))
            self.saved_at = trainer.global_step
            trainer.should_stop = True
