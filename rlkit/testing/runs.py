"""Helpers for tests that run ``rlkit fit`` as a user would: in a process of its own, killed as a crash would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path


def fit_killed_at_first_checkpoint(overrides: Sequence[str], run_dir: Path, *, timeout: float = 180.0) -> Path:
    """Start ``rlkit fit`` with ``overrides`` (and ``trainer.max_steps=500``, so it is still running) in its own
    process, SIGKILL it as soon as ``run_dir/checkpoints/last.ckpt`` exists, and return that checkpoint: what a resume
    test starts from, as after a crash or a pre-emption. ``PYTHONHASHSEED`` is fixed so the killed run and the one
    it is compared with hash alike. Fails with the run's last stderr when no checkpoint came within ``timeout``
    seconds (a loaded CI machine can take a minute to reach the first one)."""
    proc = subprocess.Popen([sys.executable, "-m", "rlkit", "fit", *overrides, "trainer.max_steps=500",
                             f"hydra.run.dir={run_dir}"], env={**os.environ, "PYTHONHASHSEED": "0"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    ckpt = run_dir / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + timeout
    while not ckpt.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate()
    assert ckpt.exists(), f"no checkpoint before the kill: {err.decode()[-2000:]}"
    return ckpt
