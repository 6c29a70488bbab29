"""The config's blocks bound to their schemas, and which plugin each group names: checks that read nothing but
the composed config (milliseconds)."""

from __future__ import annotations

from typing import Any

import pydantic
from omegaconf import DictConfig, OmegaConf

from rlkit.config.compose import config_source
from rlkit.config.schemas import (
    GROUP_SCHEMAS,
    PASS_THROUGH_KEYS,
    TRAINER_ARGUMENTS,
    TRAINER_KEYS_RLKIT_SETS,
    RunConfig,
)
from rlkit.core.errors import ConfigError, Problems, did_you_mean
from rlkit.core.registry import KINDS_BY_GROUP, Registry


def choice(cfg: DictConfig, group: str) -> str | None:
    choices = OmegaConf.select(cfg, "hydra.runtime.choices", default=None)
    if choices is None:  # inside @hydra.main the hydra node lives in HydraConfig, not in cfg
        from hydra.core.hydra_config import HydraConfig

        choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    value = choices.get(group)
    return None if value in (None, "null") else str(value)


def config_where(registry: Registry, cfg: DictConfig, group: str, field_name: str = "") -> str:
    key = f"{group}.{field_name}" if field_name else group
    return f"{key} ({config_source(registry, group, choice(cfg, group), cfg)})"


_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"),
           "less_than": ("<", "lt")}


def schema_message(err: Any, schema: type[pydantic.BaseModel] | None = None) -> str:
    """One pydantic error as rlkit says it: the rule broken and the value given (``must be >= 1, got 0``)."""
    kind, given = err["type"], err.get("input")
    if kind == "extra_forbidden":
        if schema is None:
            return "unknown key"
        return (f"unknown key; valid keys: {', '.join(schema.model_fields)}"
                f"{did_you_mean(err['loc'][-1] if err.get('loc') else None, schema.model_fields)}")
    if kind == "missing":
        return "required value is missing"
    if kind in _BOUNDS:
        sign, key = _BOUNDS[kind]
        return f"must be {sign} {err['ctx'][key]}, got {given!r}"
    if kind == "finite_number":
        return f"must be a finite number, got {given!r}"
    if kind == "literal_error":
        return f"must be one of {err['ctx']['expected']}, got {given!r}"
    if kind == "value_error":
        return str(err["ctx"]["error"])
    text = f"{err['msg'][:1].lower()}{err['msg'][1:]}"
    return text if " got " in text else f"{text}, got {given!r}"


def check_block(schema: type[pydantic.BaseModel], node: Any, where: str) -> Any:
    """``node`` bound to ``schema``; each problem is a ``ConfigError`` naming ``where.<field>`` and the
    rule. Every block of the config (the run's keys, ``score``, ``serve``, ``eval``, ...) is checked this one way."""
    try:
        return schema.model_validate(node if node is not None else {})
    except pydantic.ValidationError as exc:
        problems = Problems()
        for err in exc.errors():  # every field's problem, one line each
            loc = [str(p) for p in err["loc"]]
            owner = schema
            for part in loc[:-1]:  # the model that owns the failing field, so "unknown key" can list its valid keys
                field = owner.model_fields.get(part) if isinstance(owner, type) else None
                inner = field.annotation if field is not None else None
                owner = inner if isinstance(inner, type) and issubclass(inner, pydantic.BaseModel) else None
            path = ".".join(p for p in [where, *loc] if p)
            problems.errors.append(ConfigError(schema_message(err, owner), path))
        problems.raise_if_any()
        raise  # unreachable: a ValidationError holds at least one error


def check_group_schema(registry: Registry, cfg: DictConfig, group: str, schema: type[pydantic.BaseModel]) -> Any:
    node = OmegaConf.to_container(cfg[group], resolve=True) if cfg.get(group) is not None else {}
    try:
        validated = schema.model_validate(node)
        return validated.root if isinstance(validated, pydantic.RootModel) else validated
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        loc = list(err["loc"])
        if isinstance(node, dict) and loc and loc[0] == node.get("name"):
            loc = loc[1:]  # a discriminated union puts the variant's name first
        field_name = ".".join(str(p) for p in loc)
        raise ConfigError(schema_message(err), config_where(registry, cfg, group, field_name)) from None


def run_keys(cfg: DictConfig) -> dict[str, Any]:
    """The composed config's top-level keys that :class:`RunConfig` checks (every key but groups and pass-throughs)."""
    groups = set(GROUP_SCHEMAS) | set(KINDS_BY_GROUP) | set(PASS_THROUGH_KEYS)
    return {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
            for k, v in cfg.items() if k not in groups}


def check_trainer(cfg: DictConfig) -> dict[str, Any]:
    """``trainer.*`` are ``lightning.Trainer``'s own arguments: each must be one it takes and rlkit does not set, and
    the step counts must make sense; Lightning checks the values it alone understands when the trainer is built."""
    node = cfg.get("trainer")
    container = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    if not isinstance(container, dict):
        raise ConfigError("must be a mapping of lightning.Trainer arguments", "trainer")
    takes = set(TRAINER_ARGUMENTS)
    for key in container:
        if key in TRAINER_KEYS_RLKIT_SETS:
            raise ConfigError(f"set by rlkit itself; leave it out (rlkit sets: {', '.join(TRAINER_KEYS_RLKIT_SETS)})",
                              f"trainer.{key}")
        if key not in takes:
            allowed = sorted(takes - set(TRAINER_KEYS_RLKIT_SETS))
            raise ConfigError(f"unknown key: not an argument of lightning.Trainer (it takes: {', '.join(allowed)})"
                              f"{did_you_mean(key, allowed)}", f"trainer.{key}")
    for key, low in (("max_steps", -1), ("log_every_n_steps", 1)):
        value = container.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ConfigError(f"must be an integer >= {low}" + (" (-1: no limit)" if low < 0 else "") +
                              f", got {value!r}", f"trainer.{key}")
    return container


def check_run(cfg: DictConfig) -> RunConfig:
    """The top-level keys and blocks bound to :class:`RunConfig` (milliseconds: nothing is built)."""
    return check_block(RunConfig, run_keys(cfg), "")


def plugin_node(registry: Registry, cfg: DictConfig, group: str) -> tuple[str, dict[str, Any]] | None:
    node = cfg.get(group)
    if node is None:
        return None
    where = config_where(registry, cfg, group)
    container = OmegaConf.to_container(node, resolve=True)
    if not isinstance(container, dict):
        raise ConfigError("must be a mapping with `name` and `params`", where)
    extra = sorted(set(container) - {"name", "params"})
    if extra:
        raise ConfigError(f"unknown key {extra[0]!r}; a plugin node has only `name` and `params`", where)
    name = container.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("missing plugin `name`", where)
    params = container.get("params") or {}
    if not isinstance(params, dict):
        raise ConfigError("`params` must be a mapping", config_where(registry, cfg, group, "params"))
    return name, params


def check_known_plugin(registry: Registry, cfg: DictConfig, kind: Any) -> None:
    """The plugin a group names is registered (the registry's one line lists what exists)."""
    selected = plugin_node(registry, cfg, kind.group)
    if selected is not None:
        registry.get(kind.key, selected[0])
