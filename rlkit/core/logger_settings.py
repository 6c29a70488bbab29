"""The ``logger`` block of a run, read once: which experiment logger, where W&B writes, and the config it records."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class LoggerSettings:
    """``name`` ``none | csv | wandb``; W&B's ``mode`` (``offline`` unless configured otherwise) and ``project``;
    ``recorded``: the run's whole config as W&B records it (only read for ``wandb``)."""

    name: str = "none"
    mode: str = "offline"
    project: str = "rlkit"
    recorded: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, cfg: Any) -> LoggerSettings:
        """From a composed config (its ``logger`` node, and for W&B everything but the ``hydra`` node, which a
        composed config still carries with values only Hydra's own run can resolve)."""
        from omegaconf import OmegaConf

        node = cfg.get("logger")
        if node is None:
            return cls()
        name = str(node.get("name", "none"))
        recorded: dict[str, Any] = {}
        if name == "wandb":
            keys = [key for key in cfg if key != "hydra"]
            container = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=True)
            assert isinstance(container, dict)
            recorded = {str(k): v for k, v in container.items()}
        return cls(name, str(node.get("mode", "offline")), str(node.get("project", "rlkit")), recorded)
