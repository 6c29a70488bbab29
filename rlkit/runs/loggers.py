"""Experiment loggers from the ``logger`` group, shared by ``rlkit fit`` and ``rlkit calibrate``."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf


def logger_name(cfg: DictConfig) -> str:
    return str(cfg.logger.get("name", "none")) if cfg.get("logger") is not None else "none"


def run_config(cfg: DictConfig) -> dict[str, Any]:
    """The config a run records: everything but the ``hydra`` node, which a composed config still carries
    (with values only Hydra's own run can resolve)."""
    keys = [key for key in cfg if key != "hydra"]
    container = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=True)
    assert isinstance(container, dict)
    return {str(k): v for k, v in container.items()}


def make_logger(cfg: DictConfig, run_dir: Path, job_type: str | None = None) -> Any:
    """Lightning logger from the ``logger`` group (False for ``none``); W&B runs offline unless configured
    otherwise, its files under ``run_dir/wandb``. ``job_type`` tells W&B runs of different commands apart."""
    name = logger_name(cfg)
    if name == "wandb":
        from lightning.pytorch.loggers import WandbLogger

        from rlkit.runs.sweep import sweep_identity

        mode = cfg.logger.get("mode", "offline")
        # a multirun's jobs: each run named from its overrides, grouped by the sweep
        extra = {"job_type": job_type} if job_type else {}
        extra.update(sweep_identity())
        return WandbLogger(project=cfg.logger.get("project", "rlkit"), save_dir=str(run_dir),
                           offline=mode == "offline", config=run_config(cfg), **extra)
    if name == "csv":
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
