"""Experiment loggers from the ``logger`` group, shared by ``rlkit fit`` and ``rlkit calibrate``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rlkit.core.logger_settings import LoggerSettings


def logger_name(cfg: DictConfig) -> str:
    return LoggerSettings.of(cfg).name


def make_logger(settings: LoggerSettings | DictConfig, run_dir: Path, job_type: str | None = None) -> Any:
    """Lightning logger from the ``logger`` group (False for ``none``); W&B runs offline unless configured
    otherwise, its files under ``run_dir/wandb``. ``job_type`` tells W&B runs of different commands apart. A command
    that holds only a composed config may pass it; ``rlkit fit`` passes the settings validation read."""
    if not isinstance(settings, LoggerSettings):
        settings = LoggerSettings.of(settings)
    if settings.name == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        from rlkit.runs.sweep import sweep_identity

        # a multirun's jobs: each run named from its overrides, grouped by the sweep
        extra = {"job_type": job_type} if job_type else {}
        extra.update(sweep_identity())
        return WandbLogger(project=settings.project, save_dir=str(run_dir), offline=settings.mode == "offline",
                           config=dict(settings.recorded), **extra)
    if settings.name == "csv":
        from lightning.pytorch.loggers import CSVLogger

        return CSVLogger(save_dir=str(run_dir), name="csv")
    return False


def is_wandb(logger: Any) -> bool:
    from lightning.pytorch.loggers import WandbLogger

    return isinstance(logger, WandbLogger)


def log_report(logger: Any, metrics: Mapping[str, float],
               tables: Mapping[str, tuple[Sequence[str], Sequence[Sequence[Any]]]] | None = None,
               images: Mapping[str, Path] | None = None) -> None:
    """Log a one-off report as one step: scalars to any logger; ``tables`` (key → columns, rows) and
    ``images`` (key → PNG path) to W&B only, as ``wandb.Table`` and ``wandb.Image``."""
    if not logger:
        return
    payload: dict[str, Any] = dict(metrics)
    if is_wandb(logger):
        import wandb

        for key, (columns, rows) in (tables or {}).items():
            payload[key] = wandb.Table(columns=list(columns), data=[list(r) for r in rows])
        for key, path in (images or {}).items():
            payload[key] = wandb.Image(str(path))
    logger.log_metrics(payload)


def finish_logger(logger: Any) -> None:
    """Flush what a logger buffers; finish a W&B run, so the next run in this process (a multirun's next
    job, another command) starts its own."""
    if not logger:
        return
    if is_wandb(logger):
        import wandb

        wandb.finish()
    elif hasattr(logger, "save"):
        logger.save()
