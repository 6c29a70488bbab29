"""The prompt records a monitor samples at each measurement (``prompts: FILE``, the first ``limit``), read when the
run is validated so a missing or empty file fails before training: shared by ``gold_judge`` and
``self_internalisation``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlkit.plugin import ConfigError, read_records, resolve_path


def read_monitor_prompts(prompts: str, limit: int, where: str,
                         keep: Callable[[dict[str, Any]], bool] | None = None,
                         none_left: str = "holds no records") -> list[dict[str, Any]]:
    """The records of ``prompts`` that ``keep`` accepts (all by default), the first ``limit`` of them (0: all); a
    missing file, or none left, is a ``ConfigError`` at ``where`` (``<path> <none_left>``)."""
    path = resolve_path(prompts)
    if not path.exists():
        raise ConfigError(f"no prompts file {path}", where)
    records = [r for r in read_records(path) if keep is None or keep(r)]
    records = records[:limit] if limit else records
    if not records:
        raise ConfigError(f"{path} {none_left}", where)
    return records
