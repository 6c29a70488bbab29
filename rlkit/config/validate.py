"""Validating every part of a composed config without building anything heavy.

:func:`check_config` runs the checks of :mod:`rlkit.config.checks` (one module per concern) in order: first
those that depend on nothing else, all of them, so every independent mistake is told at once; then the plugins are
built (their constructors are lazy: no weights, no engine, no port) and checked against the rubric and each other.
The names below stay importable from here, where commands and tests have always found them.
"""

from __future__ import annotations

import warnings
from typing import Any

from omegaconf import DictConfig

from rlkit.config.checkpoints import check_checkpoint
from rlkit.config.checks.blocks import (
    check_block,
    check_group_schema,
    check_known_plugin,
    check_run,
    check_trainer,
    config_where,
    plugin_node,
    run_keys,
    schema_message,
)
from rlkit.config.checks.data import check_data_file, check_data_source, check_demonstrations, run_records
from rlkit.config.checks.judge import (
    check_audit_probes,
    check_debias,
    check_heldout_judge,
    check_judge_scope,
    check_record_fields,
    check_records,
    check_rubric_evolution,
    validate_monitors,
)
from rlkit.config.checks.model import (
    PRETRAINED_LR_LIMIT,
    check_engine_reference,
    check_instruct_on_plain_prompts,
    check_judge_is_not_the_policy,
    check_learning_rate,
    check_model_path,
    check_reference,
    read_chat_format,
)
from rlkit.config.checks.objective import (
    check_environment,
    check_group_size,
    check_objective_parts,
    check_prompt_sampler,
    check_reward_path,
    small_group_warning,
)
from rlkit.config.checks.outcome import REWARD_CONFIG_KEYS, CheckedConfig, is_group_relative
from rlkit.config.machine import check_machine
from rlkit.config.schemas import GROUP_SCHEMAS
from rlkit.core.errors import ConfigError, Problems
from rlkit.core.package_files import resolve_path
from rlkit.core.registry import KINDS, Registry
from rlkit.core.rubric import load_rubric

__all__ = [
    "PRETRAINED_LR_LIMIT", "REWARD_CONFIG_KEYS", "CheckedConfig", "check_block", "check_learning_rate",
    "check_model_path", "check_run", "check_trainer", "is_group_relative", "read_chat_format", "run_keys",
    "schema_message", "check_config", "validate_monitors",
]


def _independent_parts(cfg: DictConfig, registry: Registry, read_data: bool) -> tuple[Any, dict[str, Any], Any]:
    """The run's keys, every group's block, each plugin name, the rubric, the model path and the data file: checked
    whatever the others say, so a config with several independent mistakes is told all of them (one line each)."""
    problems = Problems()
    run = problems.attempt(lambda: check_run(cfg))  # milliseconds: nothing is built, no file is read
    problems.attempt(lambda: check_trainer(cfg))
    parts = {group: problems.attempt(lambda group=group, schema=schema: check_group_schema(registry, cfg, group,
                                                                                           schema))
             for group, schema in GROUP_SCHEMAS.items()}
    for kind in KINDS:  # every plugin name exists (built once the blocks above hold)
        if not kind.many:
            problems.attempt(lambda kind=kind: check_known_plugin(registry, cfg, kind))
    rubric = problems.attempt(lambda: load_rubric(resolve_path(parts["rubric"].path))) if parts["rubric"] else None
    if parts["model"] is not None:
        problems.attempt(lambda: check_model_path(parts["model"]))
    data_file = parts["data"].path if parts["data"] is not None else None
    if data_file is not None and read_data:
        problems.attempt(lambda: check_data_file(resolve_path(data_file)))
    problems.raise_if_any()
    return run, parts, rubric


def _build_plugins(cfg: DictConfig, registry: Registry, result: CheckedConfig) -> None:
    """Each selected plugin built from its bound params and checked against the rubric (``check_rubric``, which the
    kind's protocol declares): a constructor keeps what is heavy (a model, an engine, a connection) for first use."""
    rubric = result.rubric
    for kind in KINDS:
        if kind.many:
            continue  # lists of plugins (monitors) are validated below
        selected = plugin_node(registry, cfg, kind.group)
        if selected is None:
            continue
        name, params = selected
        entry = registry.get(kind.key, name)
        try:
            plugin = registry.create(kind.key, name, params, where=config_where(registry, cfg, kind.group, "params"))
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), config_where(registry, cfg, kind.group, "params")) from None
        check = getattr(plugin, "check_rubric", None)
        if check is not None:
            # the judge checks the rubric it is asked with; every later part, what the scores follow
            check(rubric if kind.key == "judge" else result.scored_rubric)
        if kind.key == "judge":
            if rubric.per_record and not getattr(plugin, "scores_per_record", False):
                raise ConfigError(f"rubric {rubric.name} is per_record (each record scored against its own rubric); "
                                  f"judge={entry.name} does not score that way: use judge=rule or judge=llm", "judge")
            derive = getattr(plugin, "scored_rubric", None)
            result.scored_rubric = derive(rubric) if callable(derive) else rubric
        result.plugins[kind.key] = plugin
        result.plugin_names[kind.key] = entry.name
    result.plugins["monitor"] = validate_monitors(registry, cfg, result.scored_rubric)  # {key: monitor}
    if result.plugins["monitor"]:
        result.plugin_names["monitor"] = ", ".join(result.plugins["monitor"])


def check_config(cfg: DictConfig, registry: Registry, *, read_data: bool = True,
                 need_completions: bool = False) -> CheckedConfig:
    """Check every part of a composed config: independent mistakes together (``ConfigErrors``, one line each), then
    the checks that build on them, the first problem a one-line ``RlkitError``."""
    run, parts, rubric = _independent_parts(cfg, registry, read_data)
    model = parts["model"]
    result = CheckedConfig(cfg=cfg, rubric=rubric, run=run, model=model, data=parts["data"], debias=run.debias,
                           scored_rubric=rubric, evolve=parts["rubric"].evolve,
                           rubric_dropout=parts["rubric"].dropout)
    _build_plugins(cfg, registry, result)
    check_audit_probes(registry, run)
    check_debias(run.debias, result.scored_rubric)
    check_heldout_judge(registry, cfg, result)
    if "objective" not in result.plugins:
        raise ConfigError(f"select an objective, e.g. objective=policy_gradient (available: "
                          f"{registry.available('objective')})", "objective")
    result.objective = result.plugins["objective"]
    check_objective_parts(registry, cfg, result)
    check_group_size(run, result)
    if (group_warning := small_group_warning(run, result)) is not None:
        warnings.warn(group_warning, stacklevel=2)
    check_reference(registry, cfg, model, result)
    check_engine_reference(registry, cfg, model, result)
    if run.ckpt_path is not None:
        check_checkpoint(resolve_path(run.ckpt_path), result.rubric, model)
    check_reward_path(result)
    if (lr_warning := check_learning_rate(model, run.optim.lr)) is not None:
        warnings.warn(lr_warning, stacklevel=2)
    check_environment(result)
    check_machine(cfg, result.model)  # the accelerator, devices and memory this machine has (rlkit.config.machine)
    check_rubric_evolution(result)
    check_data_source(registry, cfg, result, read_data=read_data, need_completions=need_completions)
    check_demonstrations(result, result.data)
    check_record_fields(result, result.data)
    records = run_records(result, result.data)
    check_records(result, records)
    check_judge_scope(result, records)
    check_judge_is_not_the_policy(result)
    check_instruct_on_plain_prompts(result, records)
    check_prompt_sampler(run, result, records)
    return result
