"""What Lightning prints on rlkit's console: under SLURM, its auto-requeue line once per run, though Lightning's
signal connector logs it at each trainer.validate and .fit (a run's start evaluation, training, end evaluation)."""

from __future__ import annotations

import logging
import signal

import lightning as L

from rlkit.runs.lightning import quiet_lightning

SLURM_JOB = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "rlkit-fit", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0", "SLURM_NODEID": "0"}


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_the_slurm_requeue_line_is_said_once_a_run_and_the_handlers_are_still_set(monkeypatch):
    for key, value in SLURM_JOB.items():
        monkeypatch.setenv(key, value)
    from lightning.fabric.plugins.environments import SLURMEnvironment

    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False, enable_progress_bar=False)
    assert isinstance(trainer._accelerator_connector.cluster_environment, SLURMEnvironment)
    connector = trainer._signal_connector
    lines = _Lines()
    logger = logging.getLogger(connector.__module__)
    logger.addHandler(lines)
    before = signal.getsignal(signal.SIGTERM)
    try:
        for run in range(2):
            quiet_lightning()  # what each `rlkit fit` does first
            for _ in range(3):  # start evaluation, training, end evaluation
                connector.register_signal_handlers()
                assert signal.getsignal(signal.SIGTERM) is not before, "Lightning's SIGTERM handler is set each time"
                connector.teardown()
            assert sum("SLURM auto-requeueing enabled" in line for line in lines.lines) == run + 1
    finally:
        logger.removeHandler(lines)
        signal.signal(signal.SIGTERM, before)
