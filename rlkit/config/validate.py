"""Validating every part of a composed config without building anything heavy.

:func:`check_config` runs the checks of :mod:`rlkit.config.checks` (one module per concern) in order: first
those that depend on nothing else; then the plugins are built (their constructors are lazy: no weights, no engine, no
port), each whatever the others say; then the checks of the rubric, the plugins and the records against each other.
Every failure is kept and told at the end, one line each (torchtune's validate does the same): a check that reads a
part whose own check failed is skipped, since its cause is told already and what it would add is not so.
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
from rlkit.config.schemas import GROUP_SCHEMAS, RunConfig
from rlkit.core.errors import ConfigError, Problems
from rlkit.core.package_files import resolve_path
from rlkit.core.registry import KINDS, Registry
from rlkit.core.rubric import load_rubric
from rlkit.reward.rubric_schedule import check_rubric_schedule

__all__ = [
    "PRETRAINED_LR_LIMIT", "REWARD_CONFIG_KEYS", "CheckedConfig", "check_block", "check_learning_rate",
    "check_model_path", "check_run", "check_trainer", "is_group_relative", "read_chat_format", "run_keys",
    "schema_message", "check_config", "validate_monitors",
]


class _Failed(set):
    """The parts whose own check failed (``run``, ``rubric``, ``model``, ``model_path``, ``data``, ``data_file``,
    ``records``, ``trainer``, ``scored_rubric``, a plugin's kind key): a later check that reads one is skipped, its
    cause told already, so every independent mistake is one line and none is told twice."""

    def allow(self, *parts: str) -> bool:
        return self.isdisjoint(parts)


def _independent_parts(cfg: DictConfig, registry: Registry, read_data: bool, problems: Problems,
                       failed: _Failed) -> tuple[Any, dict[str, Any], Any]:
    """The run's keys, every group's block, each plugin name, the rubric, the model path and the data file: checked
    whatever the others say (milliseconds: nothing is built)."""

    def attempt(part: str, check: Any) -> Any:
        errors = len(problems.errors)
        value = problems.attempt(check)
        if len(problems.errors) > errors:
            failed.add(part)
        return value

    run = attempt("run", lambda: check_run(cfg))
    attempt("trainer", lambda: check_trainer(cfg))
    parts = {group: attempt(group, lambda group=group, schema=schema: check_group_schema(registry, cfg, group,
                                                                                          schema))
             for group, schema in GROUP_SCHEMAS.items()}
    for kind in KINDS:  # every plugin name exists (built next)
        if not kind.many:
            attempt(kind.key, lambda kind=kind: check_known_plugin(registry, cfg, kind))
    rubric = attempt("rubric", lambda: load_rubric(resolve_path(parts["rubric"].path))) if parts["rubric"] else None
    if parts["model"] is not None:
        attempt("model_path", lambda: check_model_path(parts["model"]))
    data_file = parts["data"].path if parts["data"] is not None else None
    if data_file is not None and read_data:
        attempt("data_file", lambda: check_data_file(resolve_path(data_file)))
    return run, parts, rubric


def _build_plugins(cfg: DictConfig, registry: Registry, result: CheckedConfig, problems: Problems,
                   failed: _Failed) -> None:
    """Each selected plugin built from its bound params and checked against the rubric (``check_rubric``, which the
    kind's protocol declares): a constructor keeps what is heavy (a model, an engine, a connection) for first use.
    Each plugin is built whatever the others say; one that fails is left out and named in ``failed``."""
    for kind in KINDS:
        if kind.many or not failed.allow(kind.key):
            continue  # lists of plugins (monitors) are validated below; an unknown name is told already
        errors = len(problems.errors)
        problems.attempt(lambda kind=kind: _build_plugin(cfg, registry, result, kind, failed))
        if len(problems.errors) > errors:
            failed.add(kind.key)
            if kind.key == "judge":
                failed.add("scored_rubric")  # a judge may derive what the scores follow: unknown without it
    rubric = result.scored_rubric if failed.allow("rubric", "scored_rubric") else None
    monitors = problems.attempt(lambda: validate_monitors(registry, cfg, rubric))  # {key: monitor}
    if monitors is None:
        failed.add("monitor")
    result.plugins["monitor"] = monitors or {}
    if result.plugins["monitor"]:
        result.plugin_names["monitor"] = ", ".join(result.plugins["monitor"])


def _build_plugin(cfg: DictConfig, registry: Registry, result: CheckedConfig, kind: Any, failed: _Failed) -> None:
    selected = plugin_node(registry, cfg, kind.group)
    if selected is None:
        return
    name, params = selected
    entry = registry.get(kind.key, name)
    try:
        plugin = registry.create(kind.key, name, params, where=config_where(registry, cfg, kind.group, "params"))
    except (ValueError, TypeError) as exc:
        raise ConfigError(str(exc), config_where(registry, cfg, kind.group, "params")) from None
    rubric = result.rubric if failed.allow("rubric") else None
    check = getattr(plugin, "check_rubric", None)
    # the judge checks the rubric it is asked with; every later part, what the scores follow (once it is known)
    if kind.key == "judge" and rubric is not None:
        if check is not None:
            check(rubric)
        if rubric.per_record and not getattr(plugin, "scores_per_record", False):
            raise ConfigError(f"rubric {rubric.name} is per_record (each record scored against its own rubric); "
                              f"judge={entry.name} does not score that way: use judge=rule or judge=llm", "judge")
        derive = getattr(plugin, "scored_rubric", None)
        result.scored_rubric = derive(rubric) if callable(derive) else rubric
    elif kind.key != "judge" and check is not None and rubric is not None and failed.allow("scored_rubric"):
        check(result.scored_rubric)
    result.plugins[kind.key] = plugin
    result.plugin_names[kind.key] = entry.name


def _dependent_checks(cfg: DictConfig, registry: Registry, result: CheckedConfig, problems: Problems,
                      failed: _Failed, *, read_data: bool, need_completions: bool) -> None:
    """The checks that read built plugins and each other's results; each runs where the parts it reads passed their
    own checks, so a config with several independent mistakes is told all of them."""
    run, model, data = result.run, result.model, result.data

    def check(parts: tuple[str, ...], rule: Any) -> None:
        if failed.allow(*parts):
            problems.attempt(rule)

    def warn(parts: tuple[str, ...], rule: Any) -> None:
        if failed.allow(*parts) and (line := rule()) is not None:
            warnings.warn(line, stacklevel=4)

    heldout = ("rubric", "scored_rubric", "judge", "aggregator")
    check(("run",), lambda: check_audit_probes(registry, run))
    check(("run", "rubric", "scored_rubric"), lambda: check_debias(run.debias, result.scored_rubric))
    check(heldout, lambda: check_heldout_judge(registry, cfg, result))
    if failed.allow("objective") and "objective" not in result.plugins:
        problems.attempt(lambda: _no_objective(registry))
        failed.add("objective")
    result.objective = result.plugins.get("objective")
    objective = ("objective", "advantage_estimator", "preference_constructor")
    check(objective, lambda: check_objective_parts(registry, cfg, result))
    check(("run", "aggregator", *objective), lambda: check_group_size(run, result))
    warn(("run", "aggregator", *objective), lambda: small_group_warning(run, result))
    check(("model", "objective", "monitor"), lambda: check_reference(registry, cfg, model, result))
    check(("model", "objective", "monitor", "generator"), lambda: check_engine_reference(registry, cfg, model, result))
    if run is not None and failed.allow("run") and run.ckpt_path is not None:
        check(("rubric", "model"), lambda: check_checkpoint(resolve_path(run.ckpt_path), result.rubric, model))
    check(("objective", "advantage_estimator", "aggregator"), lambda: check_reward_path(result))
    warn(("run", "model", "model_path"), lambda: check_learning_rate(model, run.optim.lr))
    check(("rubric", "judge", "environment", "generator", "objective", "model", "model_path"),
          lambda: check_environment(result))
    # the accelerator, devices and memory this machine has (rlkit.config.machine)
    check(("trainer", "model", "model_path"), lambda: check_machine(cfg, result.model))
    check(("rubric", "judge"), lambda: check_rubric_evolution(result))
    check(("rubric", "scored_rubric", "judge"), lambda: check_rubric_schedule(result))
    errors = len(problems.errors)
    check(("data", "data_file"), lambda: check_data_source(registry, cfg, result, read_data=read_data,
                                                           need_completions=need_completions))
    if len(problems.errors) > errors or not failed.allow("data", "data_file"):
        failed.add("records")
    check(("model", "data", "objective", "records"), lambda: check_demonstrations(result, data))
    check(("rubric", "judge", "data", "records"), lambda: check_record_fields(result, data))
    records = run_records(result, data) if failed.allow("data", "records") else None
    check(("rubric", "judge", "data", "records"), lambda: check_records(result, records))
    check(("rubric", "judge", "records"), lambda: check_judge_scope(result, records))
    check(("run", "model", "model_path", "judge"), lambda: check_judge_is_not_the_policy(result))
    check(("model", "model_path", "data", "records"), lambda: check_instruct_on_plain_prompts(result, records))
    check(("run", "prompt_sampler", "records"), lambda: check_prompt_sampler(run, result, records))


def _no_objective(registry: Registry) -> None:
    raise ConfigError(f"select an objective, e.g. objective=policy_gradient (available: "
                      f"{registry.available('objective')})", "objective")


def check_config(cfg: DictConfig, registry: Registry, *, read_data: bool = True,
                 need_completions: bool = False) -> CheckedConfig:
    """Check every part of a composed config and build its plugins (cheaply). Every independent mistake is told, one
    ``rlkit: error:`` line each naming its key (``ConfigErrors``; one mistake alone is its own ``RlkitError``); a
    check that reads a part whose own check failed is skipped."""
    problems, failed = Problems(), _Failed()
    run, parts, rubric = _independent_parts(cfg, registry, read_data, problems, failed)
    block = parts["rubric"]
    result = CheckedConfig(cfg=cfg, rubric=rubric, run=run if run is not None else RunConfig(), model=parts["model"],
                           data=parts["data"], debias=run.debias if run is not None else None, scored_rubric=rubric,
                           evolve=block.evolve if block is not None else None,
                           rubric_dropout=block.dropout if block is not None else 0.0,
                           schedule=block.schedule if block is not None else None)
    _build_plugins(cfg, registry, result, problems, failed)
    _dependent_checks(cfg, registry, result, problems, failed, read_data=read_data,
                      need_completions=need_completions)
    problems.raise_if_any()
    return result
