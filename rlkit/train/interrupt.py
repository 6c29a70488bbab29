"""Ctrl-C during ``rlkit fit``: finish what was trained, then stop, and say where to resume.

* During start-up (nothing trained yet) the first Ctrl-C stops at once.
* During training the first one lets the current step finish, stops the loop (``trainer.should_stop``), saves
  ``checkpoints/last.ckpt``, evaluates the held-out split, writes ``policy/`` and ``summary.json`` as a finished run
  would, skips the end-of-run report (``rlkit report RUN`` builds it later), and prints the resume command.
* During that finishing work a first Ctrl-C skips the report; the policy and summary are still written.
* A second Ctrl-C stops at once.

Stopping at once raises :class:`RunInterrupted`, a ``BaseException`` but not a ``KeyboardInterrupt``: Lightning answers
a ``KeyboardInterrupt`` inside ``fit`` or ``validate`` with its own message and ``sys.exit(1)`` (and ignores SIGINT
from then on), while other exceptions it tears down and re-raises, so the command line can say one line and exit 130
(128 + SIGINT, the shell's convention) with no traceback.
"""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path
from typing import Any, Literal

import lightning as L

Phase = Literal["startup", "training", "finishing"]
EXIT_CODE = 130  # 128 + SIGINT


class RunInterrupted(BaseException):  # noqa: N818 (a Ctrl-C, not an error)
    """Ctrl-C that stops the command at once; its message is the one line said."""


class InterruptGuard:
    """Handles SIGINT for the duration of a ``with`` block in the main thread (elsewhere it installs nothing: only the
    main thread receives signals). ``phase`` is set by the run as it moves on; ``requested`` is true once a Ctrl-C
    asked the run to finish early."""

    def __init__(self) -> None:
        self.phase: Phase = "startup"
        self.requested = False
        self._previous: Any = None
        self._installed = False

    def __enter__(self) -> InterruptGuard:
        # a process started with SIGINT ignored (`nohup rlkit fit &` from a script) keeps ignoring it
        if threading.current_thread() is threading.main_thread() and \
                signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            self._previous = signal.signal(signal.SIGINT, self._handle)
            self._installed = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)
            self._installed = False

    def _handle(self, signum: int, frame: Any) -> None:
        if self.phase == "startup":
            raise RunInterrupted("interrupted during start-up; nothing was trained")
        if self.requested:
            raise RunInterrupted("interrupted again: stopped at once; the last saved checkpoint, if any, is in the "
                                 "run folder's checkpoints/")
        self.requested = True
        if self.phase == "training":
            say("interrupt: finishing this step, then saving a checkpoint, the policy and the summary "
                "(Ctrl-C again to stop at once)")
        else:
            say("interrupt: writing the policy and the summary, skipping the run report (Ctrl-C again to stop at "
                "once)")


def say(line: str) -> None:
    print(f"rlkit: {line}", file=sys.stderr, flush=True)


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
