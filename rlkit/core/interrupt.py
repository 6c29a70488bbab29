"""Ctrl-C for every command: one line, exit 130, never a traceback, and never lost.

The command line installs an :class:`InterruptGuard` before it does anything else; ``rlkit fit`` nests one of its
own whose phases say what a Ctrl-C does (``rlkit.train.interrupt``):

* During start-up (nothing trained yet) the first Ctrl-C stops at once.
* During training the first one lets the current step finish, saves a checkpoint, the policy and the summary, and
  prints the resume command; the end-of-run held-out evaluation is skipped unless ``eval_on_interrupt`` asks for it.
  During the end of the run it stops the held-out evaluation at its next batch, skips the report and still writes
  the policy and summary.
* A second Ctrl-C stops at once.

SIGTERM (a SLURM preemption, a Kubernetes eviction, ``timeout``) is answered as a Ctrl-C is, in every phase, and the
command then exits with 143 (128 + SIGTERM) instead of 130, so a scheduler's script can tell a preemption from a
person. Under SLURM (``SLURM_JOB_ID`` set) SIGUSR1 (``#SBATCH --signal=USR1@90``, Lightning's requeue signal) and
SIGUSR2 (submitit's) are a preemption notice answered the same way, exit 128 + the signal; ``rlkit fit`` then
requeues the job (``rlkit.train.interrupt``). During ``rlkit fit`` Lightning adds its own SIGTERM handler in front
of this one; it stops the loop after the step, which ``rlkit fit`` then treats as the end of training
(``rlkit.train.fit``). Lightning's SIGUSR1 handler (a checkpoint mid-step, which could not resume exactly) is not
installed where one is there already, as the guard's is in a SLURM job.

Stopping at once raises :class:`RunInterrupted`, a ``BaseException`` but not a ``KeyboardInterrupt``, for three
reasons. Lightning answers a ``KeyboardInterrupt`` inside ``fit`` or ``validate`` with its own message and
``sys.exit(1)`` (and ignores SIGINT from then on), while other exceptions it tears down and re-raises. CPython marks
a ``KeyboardInterrupt`` that passes through C code running Python source (``PyRun_String``, as some extensions do at
import) as unhandled for good, and then ends the process by SIGINT (status -2) even after the command caught it and
exited 130. And an exception a signal handler raises inside a ``__del__`` is printed and dropped ("Exception ignored
in ..."), so the guard also remembers the Ctrl-C and raises it again where start-up hands over to training, or the
command line reports it when the command returns.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Literal

Phase = Literal["startup", "training", "finishing"]
EXIT_CODE = 130  # 128 + SIGINT, the shell's convention
TERM_EXIT_CODE = 143  # 128 + SIGTERM
SIGNALS = (signal.SIGINT, signal.SIGTERM)
# a SLURM job's notice of preemption or of its time limit: Lightning's SLURMEnvironment waits for SIGUSR1, submitit
# sends SIGUSR2 (its `--signal=USR2@<signal_delay_s>`)
REQUEUE_SIGNALS = (signal.SIGUSR1, signal.SIGUSR2)


def under_slurm() -> bool:
    """Whether this process is a SLURM job's (a batch job, an srun step, a submitit job)."""
    return "SLURM_JOB_ID" in os.environ


def handled_signals() -> tuple[signal.Signals, ...]:
    """The signals a guard answers: Ctrl-C and SIGTERM, and the requeue signals in a SLURM job (elsewhere they keep
    their default, and Lightning does not handle them off SLURM either)."""
    return SIGNALS + REQUEUE_SIGNALS if under_slurm() else SIGNALS


class RunInterrupted(BaseException):  # noqa: N818 (a Ctrl-C, not an error)
    """Ctrl-C (or SIGTERM) that stops the command; its message is the one line said, ``exit_code`` the status."""

    def __init__(self, message: str = "", exit_code: int = EXIT_CODE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class InterruptGuard:
    """Handles SIGINT for the duration of a ``with`` block in the main thread (elsewhere it installs nothing: only the
    main thread receives signals). ``phase`` is set by the run as it moves on; ``requested`` is true once a Ctrl-C
    asked the run to finish early; ``stopped`` once a Ctrl-C asked to stop at once (even where the exception it
    raised was swallowed)."""

    def __init__(self, startup_message: str = "interrupted") -> None:
        self.startup_message = startup_message
        self.requested = False
        self.signum: int | None = None  # the signal that asked first
        self._phase: Phase = "startup"
        self._previous: dict[int, Any] = {}
        self._installed = False
        self._stop: tuple[str, int] | None = None  # the stop-at-once raised by a signal: its message and status

    @property
    def stopped(self) -> bool:
        """Whether a signal asked to stop at once (even where the exception it raised was swallowed)."""
        return self._stop is not None

    @property
    def terminated(self) -> bool:
        """Whether a signal other than a Ctrl-C (SIGTERM, a SLURM requeue signal) asked the command to stop."""
        return self.signum is not None and self.signum != signal.SIGINT

    @property
    def requeue(self) -> bool:
        """Whether SLURM's requeue signal asked the command to stop: the job is to run again."""
        return self.signum in REQUEUE_SIGNALS

    @property
    def exit_code(self) -> int:
        return 128 + int(self.signum) if self.terminated else EXIT_CODE  # 143 for SIGTERM, as a shell says

    def _said(self, message: str) -> str:
        if not self.terminated:
            return message
        return message.replace("interrupted", f"terminated ({signal.Signals(self.signum).name})", 1)

    @property
    def phase(self) -> Phase:
        return self._phase

    @phase.setter
    def phase(self, phase: Phase) -> None:
        if self._phase == "startup" and self._stop is not None:  # a start-up Ctrl-C that a __del__ swallowed
            raise RunInterrupted(*self._stop)
        self._phase = phase

    def __enter__(self) -> InterruptGuard:
        if threading.current_thread() is not threading.main_thread():
            return self
        for signum in handled_signals():
            outer = getattr(signal.getsignal(signum), "__self__", None)
            if isinstance(outer, InterruptGuard) and outer._stop is not None:
                # the outer guard's stop was swallowed on the way here (found behind any signal it answers: with
                # Ctrl-C ignored it holds SIGTERM only)
                raise RunInterrupted(*outer._stop)
        for signum in handled_signals():
            # a process started with one ignored keeps ignoring it: `nohup rlkit fit &` from a script ignores Ctrl-C
            # but is still stopped by SIGTERM (a scheduler, `timeout`), which it answers with a checkpoint
            if signal.getsignal(signum) is not signal.SIG_IGN:
                self._previous[signum] = signal.signal(signum, self._handle)
        self._installed = True
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if self._installed:
            for signum, previous in self._previous.items():
                signal.signal(signum, previous)
            self._previous, self._installed = {}, False
        if self._stop is not None and exc is not None and not isinstance(exc, RunInterrupted):
            # the stop's RunInterrupted landed in code that turned it into another error (a SIGTERM during an import
            # inside lightning once came out as scipy's "TypeError: expected a message argument"): it is still the
            # stop, with its one line and status, not a traceback
            raise RunInterrupted(*self._stop) from None

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is None:
            self.signum = signum
        if self._phase == "startup":
            self._stop = (self._said(self.startup_message), self.exit_code)
            raise RunInterrupted(*self._stop)
        if self.requested:
            self._stop = ("interrupted again: stopped at once; the last saved checkpoint, if any, is in the run "
                          "folder's checkpoints/", self.exit_code)
            raise RunInterrupted(*self._stop)
        self.requested = True
        what, again = (signal.Signals(signum).name, "a second signal") if signum != signal.SIGINT else \
            ("interrupt", "Ctrl-C again")
        if self._phase == "training":
            say(f"{what}: finishing this step, then saving a checkpoint, the policy and the summary "
                f"({again} to stop at once)")
        else:
            say(f"{what}: stopping the held-out evaluation, writing the policy and the summary, skipping the run "
                f"report ({again} to stop at once)")


def say(line: str) -> None:
    print(f"rlkit: {line}", file=sys.stderr, flush=True)
