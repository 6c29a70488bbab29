"""Checks of the run's data: the file is there, the records a run reads, demonstrations where the objective needs
them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rlkit.config.checks.blocks import config_where
from rlkit.config.checks.outcome import CheckedConfig
from rlkit.config.schemas import DataConfig
from rlkit.core.errors import ConfigError, DataError
from rlkit.core.package_files import resolve_path
from rlkit.core.registry import Registry


def check_data_file(path: Path) -> None:
    """``data.path`` names a file or a datasets directory that is there (what is in it is read and checked later,
    by ``rlkit.data.records.read_jsonl``, which says the same of a missing one)."""
    if not path.exists():
        raise DataError("no such data file or datasets directory", str(path))


def check_data_source(registry: Registry, cfg: DictConfig, result: CheckedConfig, *, read_data: bool,
                      need_completions: bool) -> None:
    """The run's prompts come from a data file (read into ``result.records`` when ``read_data``) or a synthetic task
    that exists; the synthetic task's own keys are not set beside a data file."""
    from rlkit.data.records import SYNTHETIC_TASKS, read_jsonl

    data = result.data
    if data.path is not None:
        # a file of completions (rlkit score) is judged as it is: no prompt is rendered, so a chat preset's
        # synthetic-task keys (experiment=smollm2_arithmetic's data.chat) mean nothing there and are no error
        if (data.chat or data.instruction is not None) and not need_completions:
            key = "data.chat" if data.chat else "data.instruction"
            raise ConfigError("shapes the synthetic task's prompts; a data file's records are read as they are (write "
                              "its prompts as chat messages, TRL's conversational format, to have them rendered with "
                              "the chat template)", key)
        if read_data:
            result.records = read_jsonl(resolve_path(data.path), need_completions=need_completions)
    elif need_completions:
        raise DataError("set data.path to a JSONL file of records with completions", "data.path")
    elif data.task not in SYNTHETIC_TASKS:
        raise ConfigError(f"unknown synthetic task {data.task!r}; available: {', '.join(SYNTHETIC_TASKS)}",
                          config_where(registry, cfg, "data", "task"))


def run_records(result: CheckedConfig, data: DataConfig) -> list[dict[str, Any]] | None:
    """The records the run reads: the data file's, else a synthetic task's (built here), else None."""
    from rlkit.data.records import SYNTHETIC_TASKS

    if result.records is None and data.path is None and data.task in SYNTHETIC_TASKS:
        return data.synthetic_records()
    return result.records


def check_demonstrations(result: CheckedConfig, data: DataConfig) -> None:
    """An objective that learns from demonstrations needs one in every record (the synthetic tasks have a reference);
    a record without is named before any training. A warm start is of the embedded policy, on the synthetic task."""
    from rlkit.lm.sampling import demonstration_text

    model = result.model
    warm = model is not None and model.warm_start.steps > 0
    if warm and model.name_or_path is not None:
        raise ConfigError("warm-starts only the embedded tiny policy (model.name_or_path: null); train a policy of "
                          "your own with `rlkit sft` and pass its policy/ folder instead", "model.warm_start.steps")
    if warm and data.path is not None:
        raise ConfigError("a warm start learns from draws of the synthetic task the run does not use; with "
                          "data.path, warm-start with `rlkit sft` on demonstrations of your own",
                          "model.warm_start.steps")
    demonstrations = getattr(result.objective, "signal", None) == "demonstrations"
    if not demonstrations or result.records is None:
        return
    missing = [i for i, record in enumerate(result.records, 1) if demonstration_text(record) is None]
    if missing:
        raise DataError(f"objective={result.plugin_names['objective']} learns from demonstrations, and record "
                        f"{missing[0]} has neither a `completion` nor a `reference`"
                        + (f" ({len(missing) - 1} more)" if len(missing) > 1 else ""), str(data.path))
