"""Composing the Hydra config and validating every part of it without building anything heavy."""

from __future__ import annotations

import contextlib
import importlib.resources
import re
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from omegaconf import DictConfig, OmegaConf

from rlkit.errors import ConfigError, DataError, PluginError, RlkitError
from rlkit.registry import KINDS, KINDS_BY_GROUP, Registry
from rlkit.rubric import Rubric, load_rubric

CONFIG_MODULE = "rlkit.conf"
PRIMARY_CONFIG = "fit"
HYDRA_VERSION_BASE = "1.3"


def plugin_search_paths(registry: Registry) -> list[str]:
    """Search-path entries contributed by plugins through ``rlkit_config_search_path``."""
    paths: list[str] = []
    for result in registry.plugin_manager.hook.rlkit_config_search_path():
        for entry in [result] if isinstance(result, str) else list(result or []):
            if entry not in paths:
                paths.append(entry)
    return paths


def search_path_override(registry: Registry) -> list[str]:
    """The ``hydra.searchpath=[...]`` override that adds plugin config dirs (empty if none)."""
    paths = plugin_search_paths(registry)
    if not paths:
        return []
    return ["hydra.searchpath=[" + ",".join(f"'{p}'" for p in paths) + "]"]


def _search_roots(registry: Registry) -> list[Path]:
    roots = [Path(str(importlib.resources.files(CONFIG_MODULE)))]
    for entry in plugin_search_paths(registry):
        with contextlib.suppress(Exception):
            roots.append(resolve_path(entry.rstrip("/")))
    return roots


def config_source(registry: Registry, group: str, option: str | None) -> str:
    """The YAML file that provided ``group=option``, for error messages."""
    if option:
        for root in _search_roots(registry):
            candidate = root / group / f"{option}.yaml"
            if candidate.is_file():
                return str(candidate)
    return f"config group {group!r}"


def group_options(registry: Registry, group: str) -> list[str]:
    """Every YAML option of a config group across rlkit's and the plugins' search paths."""
    options: set[str] = set()
    for root in _search_roots(registry):
        options.update(p.stem for p in (root / group).glob("*.yaml"))
    return sorted(options)


def _one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return " ".join(ln for ln in lines if not ln.startswith(("Config search path", "provider=")))[:500]


# "load" is what Hydra says for an option inside a list (monitors=[nope])
_MISSING_OPTION = re.compile(r"Could not (?:find|load) '([^']+)/([^'/]+)'")
_NOT_IN_STRUCT = re.compile(r"Could not override '([^']+)'.\s*To append to your config use")


@contextlib.contextmanager
def _translated_hydra_errors(registry: Registry) -> Iterator[None]:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        yield
    except (HydraException, OmegaConfBaseException) as exc:
        match = _MISSING_OPTION.search(str(exc))
        if match:
            group, option = match.groups()
            kind = KINDS_BY_GROUP.get(group)
            if kind is not None:
                raise PluginError(
                    f"unknown {kind.key.replace('_', ' ')} {option!r}; available {kind.label}: "
                    f"{registry.available(kind.key)}"
                ) from None
            raise ConfigError(
                f"no option {option!r} in config group {group!r}; available: "
                f"{', '.join(group_options(registry, group)) or 'none'}"
            ) from None
        text = str(exc)
        override = _NOT_IN_STRUCT.search(text)
        if override:
            key = override.group(1)
            # Hydra says the same when the key is missing and when a mapping value brings keys the
            # (empty) mapping in the config does not have: ++ covers both.
            raise ConfigError(f"cannot set {key!r}: it, or a key inside the mapping given, is not in the config; "
                              f"use +{key}=... to add a key, or ++{key}=... to add or replace",
                              "command line") from None
        raise ConfigError(_one_line(exc)) from None


def compose_config(registry: Registry, overrides: list[str] | None = None,
                   config_name: str = PRIMARY_CONFIG) -> DictConfig:
    """Compose ``conf/fit.yaml`` with ``overrides``; errors become one-line ``ConfigError``s.

    The result keeps ``hydra.runtime.choices`` so messages can name the YAML each part came from.
    """
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
    with _translated_hydra_errors(registry), initialize_config_module(
        CONFIG_MODULE, version_base=HYDRA_VERSION_BASE
    ):
        return compose(config_name, overrides=search_path_override(registry) + list(overrides or []),
                       return_hydra_config=True)


def resolve_path(path: str) -> Path:
    """A path from config: ``pkg://module/relative/file`` inside an installed package, else a file path."""
    if path.startswith("pkg://"):
        module, _, rel = path[len("pkg://"):].partition("/")
        try:
            base = Path(str(importlib.resources.files(module)))
        except ModuleNotFoundError:
            raise ConfigError(f"no installed package {module!r}", path) from None
        return base / rel if rel else base
    if path.startswith("file://"):
        path = path[len("file://"):]
    return Path(path).expanduser()


# --- schemas of the groups that are not plugins -------------------------------------------------


class _Schema(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


class LoraConfig(_Schema):
    """peft LoRA on the policy; ``r: 0`` trains the full model."""

    r: int = pydantic.Field(default=0, ge=0)
    alpha: float | None = pydantic.Field(default=None, gt=0)  # None: 2·r, a common choice
    dropout: float = pydantic.Field(default=0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"
    save: Literal["merged", "adapter"] = "merged"

    @property
    def enabled(self) -> bool:
        return self.r > 0


class ModelConfig(_Schema):
    name_or_path: str | None = None
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "float32"
    reference: Literal["frozen", "adapter_off", "ema", "none"] = "frozen"
    ema_decay: float = pydantic.Field(default=0.99, ge=0, lt=1)  # reference=ema: ref ← d·ref + (1 − d)·policy
    lora: LoraConfig = pydantic.Field(default_factory=LoraConfig)
    gradient_checkpointing: bool = False


class DataConfig(_Schema):
    path: str | None = None
    task: str | None = "arithmetic"
    num_prompts: int | None = pydantic.Field(default=256, gt=0)
    heldout_fraction: float = pydantic.Field(default=0.125, ge=0, lt=1)
    seed: int = 0


class PolicyGradientObjective(_Schema):
    name: Literal["policy_gradient"]
    beta: float = pydantic.Field(default=0.04, ge=0)
    epsilon: float = pydantic.Field(default=0.2, gt=0)
    epsilon_high: float | None = None
    num_iterations: int = pydantic.Field(default=1, ge=1)
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = "grpo"
    mask_truncated_completions: bool = False


class GroupDpoObjective(_Schema):
    """Preference pairs from each group, trained with a DPO-family loss (see conf/objective/group_dpo.yaml)."""

    name: Literal["group_dpo"]
    loss_type: Literal["sigmoid", "ipo", "simpo"] = "sigmoid"
    beta: float = pydantic.Field(default=0.1, gt=0)
    label_smoothing: float = pydantic.Field(default=0.0, ge=0, lt=0.5)
    simpo_gamma: float = 0.5
    sft_weight: float = pydantic.Field(default=0.0, ge=0)
    min_gap: float = pydantic.Field(default=0.1, ge=0)
    mask_saturated: bool = True
    auto_lexicographic: bool = False
    conflict_threshold: float = pydantic.Field(default=0.2, ge=0, le=1)
    conflict_window: int = pydantic.Field(default=50, ge=1)
    num_iterations: int = pydantic.Field(default=1, ge=1)
    mask_truncated_completions: bool = False


OBJECTIVES: dict[str, type[_Schema]] = {"policy_gradient": PolicyGradientObjective, "group_dpo": GroupDpoObjective}


class ObjectiveConfig(pydantic.RootModel[Annotated[PolicyGradientObjective | GroupDpoObjective,
                                                   pydantic.Field(discriminator="name")]]):
    """The ``objective`` group: one schema per objective, picked by ``name``."""


class RubricConfig(_Schema):
    path: str


class OptimConfig(_Schema):
    lr: float = pydantic.Field(default=2e-3, ge=0)
    weight_decay: float = pydantic.Field(default=0.0, ge=0)
    warmup_steps: int = pydantic.Field(default=0, ge=0)
    gradient_clip_val: float | None = pydantic.Field(default=1.0, gt=0)
    gradient_accumulation_steps: int = pydantic.Field(default=1, ge=1)
    length_buckets: int = pydantic.Field(default=1, ge=1)


class DebiasConfig(_Schema):
    """Length/format bias correction of judge scores (``rlkit/debias.py``); off by default."""

    enabled: bool = False
    features: list[str] = pydantic.Field(default_factory=lambda: ["length", "newlines", "markdown"])
    dimensions: list[str] | None = None  # None: every dimension but gates and condition targets
    window: int = pydantic.Field(default=512, ge=1)
    min_samples: int = pydantic.Field(default=64, ge=2)
    ridge: float = pydantic.Field(default=1e-3, ge=0)


GROUP_SCHEMAS: dict[str, type[pydantic.BaseModel]] = {
    "model": ModelConfig,
    "data": DataConfig,
    "objective": ObjectiveConfig,
    "rubric": RubricConfig,
    "optim": OptimConfig,
    "debias": DebiasConfig,
}


def _choice(cfg: DictConfig, group: str) -> str | None:
    choices = OmegaConf.select(cfg, "hydra.runtime.choices", default=None)
    if choices is None:  # inside @hydra.main the hydra node lives in HydraConfig, not in cfg
        from hydra.core.hydra_config import HydraConfig

        choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    value = choices.get(group)
    return None if value in (None, "null") else str(value)


def _where(registry: Registry, cfg: DictConfig, group: str, field_name: str = "") -> str:
    key = f"{group}.{field_name}" if field_name else group
    return f"{key} ({config_source(registry, group, _choice(cfg, group))})"


def _check_schema(registry: Registry, cfg: DictConfig, group: str, schema: type[pydantic.BaseModel]) -> Any:
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
        if err["type"] == "union_tag_invalid":
            raise ConfigError(f"unknown objective {node.get('name')!r}; available: {', '.join(OBJECTIVES)}",
                              _where(registry, cfg, group, "name")) from None
        msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
        if err["type"] == "missing":
            msg = "required value is missing"
        raise ConfigError(msg, _where(registry, cfg, group, field_name)) from None


@dataclass
class ValidatedConfig:
    """The outcome of validation: every plugin built (cheaply) and the rubric loaded."""

    cfg: DictConfig
    rubric: Rubric
    plugins: dict[str, Any] = field(default_factory=dict)
    # What the judge's scores follow: the rubric itself, unless the judge derives its own (scored_rubric).
    reward_rubric: Rubric = None  # type: ignore[assignment]  # set by validate_config
    plugin_names: dict[str, str] = field(default_factory=dict)
    records: list[dict[str, Any]] | None = None
    model: ModelConfig | None = None
    data: DataConfig | None = None
    objective: Any = None
    debias: DebiasConfig | None = None


def _plugin_node(registry: Registry, cfg: DictConfig, group: str) -> tuple[str, dict[str, Any]] | None:
    node = cfg.get(group)
    if node is None:
        return None
    where = _where(registry, cfg, group)
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
        raise ConfigError("`params` must be a mapping", _where(registry, cfg, group, "params"))
    return name, params


def check_model_path(model: ModelConfig) -> None:
    """The model must be a local directory with a Hugging Face config, or a hub id in the local HF cache."""
    from rlkit.models import locate_model

    if model.name_or_path is not None:
        locate_model(model.name_or_path)


def _check_reward_path(cfg: DictConfig, result: ValidatedConfig) -> None:
    from rlkit.rewards import SCORE_NORMALIZATIONS

    normalization = cfg.get("score_normalization", "range")
    if normalization not in SCORE_NORMALIZATIONS:
        raise ConfigError(f"must be one of {', '.join(SCORE_NORMALIZATIONS)}, got {normalization!r}",
                          "score_normalization")
    estimator = result.plugins.get("advantage_estimator")
    aggregator = result.plugin_names.get("aggregator")
    if getattr(estimator, "ignores_aggregator", False) and aggregator not in (None, "weighted_sum"):
        warnings.warn(f"advantage={result.plugin_names['advantage_estimator']} forms advantages from the "
                      f"dimensions directly; aggregator={aggregator} only feeds the logged reward", stacklevel=2)


def _check_torch_threads(cfg: DictConfig) -> None:
    threads = cfg.get("torch_threads")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ConfigError(f"must be null (torch's default) or an integer >= 1, got {threads!r}", "torch_threads")


def _check_heldout_judge(registry: Registry, cfg: DictConfig, result: ValidatedConfig) -> None:
    """A training judge that only ranks within groups cannot score a lone held-out completion: build the
    ``heldout_judge`` that will, on the user's rubric."""
    if result.reward_rubric is result.rubric:
        return
    name = cfg.get("heldout_judge")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"judge={result.plugin_names['judge']} ranks completions within their group and cannot score "
                          f"held-out completions alone; name a per-dimension judge, e.g. heldout_judge=rule "
                          f"(available: {registry.available('judge')})", "heldout_judge")
    try:
        judge = registry.create("judge", name, {}, where="heldout_judge")
    except RlkitError as exc:
        raise ConfigError(exc.message, "heldout_judge") from None
    if callable(getattr(judge, "scored_rubric", None)):
        raise ConfigError(f"judge {name!r} cannot score held-out completions alone either; use a per-dimension "
                          "judge such as rule", "heldout_judge")
    check = getattr(judge, "check_rubric", None)
    if check is not None:
        check(result.rubric)
    result.plugins["heldout_judge"] = judge
    result.plugin_names["heldout_judge"] = name


def _check_reference(registry: Registry, cfg: DictConfig, model: ModelConfig, objective: Any) -> None:
    where = _where(registry, cfg, "model", "reference")
    if model.reference == "none":
        if objective.name == "policy_gradient" and objective.beta > 0:
            raise ConfigError(f"model.reference=none leaves no reference for the KL term of objective.beta="
                              f"{objective.beta}; set objective.beta=0 or a reference (frozen, adapter_off, ema)",
                              where)
        if objective.name == "group_dpo" and objective.loss_type != "simpo":
            raise ConfigError(f"model.reference=none: objective.loss_type={objective.loss_type} compares the policy "
                              "with a reference; use loss_type=simpo (reference-free) or a reference", where)
    if model.reference == "adapter_off" and not model.lora.enabled:
        raise ConfigError("adapter_off needs LoRA adapters to switch off; set model.lora.r > 0 or use frozen", where)


def _check_objective_parts(registry: Registry, cfg: DictConfig, objective: Any, result: ValidatedConfig) -> None:
    if objective.name == "group_dpo" and "preference_constructor" not in result.plugins:
        raise ConfigError("objective=group_dpo builds preference pairs: select a constructor, e.g. "
                          f"preference=best_worst (available: {registry.available('preference_constructor')})",
                          "preference")


def _check_debias(debias: DebiasConfig, rubric: Rubric) -> None:
    from rlkit.debias import FEATURES, default_dimensions, threshold_dimensions

    for key, names, known, what in (("features", debias.features, list(FEATURES), "available:"),
                                    ("dimensions", debias.dimensions or [], rubric.dimension_names,
                                     f"rubric {rubric.name} has")):
        unknown = [n for n in names if n not in known]
        if unknown:
            singular = key[:-1]
            raise ConfigError(f"unknown {singular} {unknown[0]!r}; {what} {', '.join(known)}", f"debias.{key}")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"{twice[0]!r} is listed twice", f"debias.{key}")
    if not debias.features:
        raise ConfigError(f"name at least one feature; available: {', '.join(FEATURES)}", "debias.features")
    # A corrected score is fractional; a gate or a condition threshold compares exact levels.
    threshold = [n for n in debias.dimensions or [] if n in threshold_dimensions(rubric)]
    if threshold:
        raise ConfigError(f"{threshold[0]!r} is a gate or another dimension's condition; its threshold compares "
                          "exact levels, which a corrected score would miss. Leave it out", "debias.dimensions")
    if debias.min_samples > debias.window:
        raise ConfigError(f"{debias.min_samples} exceeds debias.window={debias.window}; the fit would never start",
                          "debias.min_samples")
    chosen = default_dimensions(rubric) if debias.dimensions is None else debias.dimensions
    if debias.enabled and not chosen:
        why = "the list is empty" if debias.dimensions is not None else \
            "every dimension of the rubric is a gate or another dimension's condition"
        raise ConfigError(f"no dimension to correct: {why}", "debias.dimensions")


def validate_config(cfg: DictConfig, registry: Registry, *, read_data: bool = True,
                    need_completions: bool = False) -> ValidatedConfig:
    """Check every part of a composed config; the first problem raises a one-line ``RlkitError``."""
    from rlkit.data import SYNTHETIC_TASKS, read_jsonl

    parts = {group: _check_schema(registry, cfg, group, schema) for group, schema in GROUP_SCHEMAS.items()}
    rubric = load_rubric(resolve_path(parts["rubric"].path))
    result = ValidatedConfig(cfg=cfg, rubric=rubric, model=parts["model"], data=parts["data"],
                             objective=parts["objective"], debias=parts["debias"], reward_rubric=rubric)
    for kind in KINDS:
        if kind.many:
            continue  # lists of plugins (monitors) are validated below
        selected = _plugin_node(registry, cfg, kind.group)
        if selected is None:
            continue
        name, params = selected
        entry = registry.get(kind.key, name)
        try:
            plugin = registry.create(kind.key, name, params, where=_where(registry, cfg, kind.group, "params"))
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), _where(registry, cfg, kind.group, "params")) from None
        check = getattr(plugin, "check_rubric", None)
        if check is not None:
            # the judge checks the rubric it is asked with; every later part, what the scores follow
            check(rubric if kind.key == "judge" else result.reward_rubric)
        if kind.key == "judge":
            derive = getattr(plugin, "scored_rubric", None)
            result.reward_rubric = derive(rubric) if callable(derive) else rubric
        result.plugins[kind.key] = plugin
        result.plugin_names[kind.key] = entry.name
    from rlkit.monitoring import validate_monitors

    result.plugins["monitor"] = validate_monitors(registry, cfg, result.reward_rubric)  # {key: monitor}
    if result.plugins["monitor"]:
        result.plugin_names["monitor"] = ", ".join(result.plugins["monitor"])
    _check_debias(parts["debias"], result.reward_rubric)
    _check_heldout_judge(registry, cfg, result)
    _check_torch_threads(cfg)
    check_model_path(parts["model"])
    _check_reference(registry, cfg, parts["model"], parts["objective"])
    _check_objective_parts(registry, cfg, parts["objective"], result)
    _check_reward_path(cfg, result)
    data: Any = parts["data"]
    if data.path is not None:
        if read_data:
            result.records = read_jsonl(resolve_path(data.path), need_completions=need_completions)
    elif need_completions:
        raise DataError("set data.path to a JSONL file of records with completions", "data.path")
    elif data.task not in SYNTHETIC_TASKS:
        raise ConfigError(f"unknown synthetic task {data.task!r}; available: {', '.join(SYNTHETIC_TASKS)}",
                          _where(registry, cfg, "data", "task"))
    return result
