"""Checks of the judge and the rubric it scores: held-out scoring, record fields, rubric evolution, debiasing,
monitors and audit probes."""

from __future__ import annotations

import warnings
from typing import Any

from omegaconf import DictConfig

from rlkit.config.checks.outcome import CheckedConfig, is_group_relative
from rlkit.config.compose import config_source
from rlkit.config.schemas import (
    DataConfig,
    DebiasConfig,
)
from rlkit.core.errors import ConfigError, DataError, PluginError, RlkitError
from rlkit.core.registry import Registry
from rlkit.core.rubric import Rubric


def check_heldout_judge(registry: Registry, cfg: DictConfig, result: CheckedConfig) -> None:
    """A training judge that only ranks within groups cannot score a lone held-out completion: build the
    ``heldout_judge`` that will, on the user's rubric. A training aggregator that only ranks within groups needs the
    held-out aggregator and weights (an absolute yardstick) but not another judge."""
    if result.scored_rubric is result.rubric:
        if is_group_relative(result.plugins.get("aggregator")):
            build_heldout_reward(registry, cfg, result)
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
    build_heldout_reward(registry, cfg, result)


def build_heldout_reward(registry: Registry, cfg: DictConfig, result: CheckedConfig) -> None:
    for key, kind in (("heldout_aggregator", "aggregator"), ("heldout_weights", "weight_scheduler")):
        chosen = cfg.get(key)
        if not isinstance(chosen, str) or not chosen:
            raise ConfigError(f"name the {kind.replace('_', ' ')} of held-out scores (available: "
                              f"{registry.available(kind)})", key)
        try:
            result.plugins[key] = registry.create(kind, chosen, {}, where=key)
        except RlkitError as exc:
            raise ConfigError(exc.message, key) from None
        result.plugin_names[key] = chosen


def check_record_fields(result: CheckedConfig, data: DataConfig) -> None:
    """Every record field the judge's scoring reads (its ``record_fields``) is in the data: none of the records
    having it is an error (the dimension would never be scored, and a weighted reward would be made of the others
    in silence); some lacking it, a warning with the count."""
    fields = getattr(result.plugins.get("judge"), "record_fields", None)
    if result.records is None or not result.records or not callable(fields):
        return
    records = result.records
    for used in fields(result.rubric):
        lacking = [i for i, record in enumerate(records, 1) if record.get(used.field) is None]
        if len(lacking) == len(records):
            present = sorted({key for record in records for key in record})
            raise DataError(f"no record has a {used.field!r} field, which dimension {used.dimension} is scored from "
                            f"({used.where}), so it would never be scored; the records have "
                            f"{', '.join(present)}: rename the field in the data, or name one they have in the "
                            "check's `field:`", str(data.path))
        if lacking:
            warnings.warn(f"{data.path}: {len(lacking)} of {len(records)} records have no {used.field!r} field "
                          f"(first: record {lacking[0]}); dimension {used.dimension} ({used.where}) is not scored "
                          "on their completions", stacklevel=3)


def check_records(result: CheckedConfig, records: list[dict[str, Any]] | None) -> None:
    """The judge's ``check_records``: what scoring these records would refuse (each record's own rubric under
    ``rubric=per_record``) is refused here, as ``fit`` would refuse it, before any model is loaded."""
    check = getattr(result.plugins.get("judge"), "check_records", None)
    if not callable(check) or not records:
        return
    try:
        check(records, result.rubric)
    except RlkitError as exc:
        if result.data.path is None or not str(exc.where or "").startswith("record "):
            raise
        # a rubric given inline in a record: name the data file the record is in
        raise type(exc)(exc.message, f"{result.data.path}: {exc.where}") from None


def check_judge_scope(result: CheckedConfig, records: list[dict[str, Any]] | None) -> None:
    """Warn with each of the judge's ``scope_caveats``: the offline tiny judge, which knows only the default task's
    sums, scores a user's own records as if it knew them (on sums of 0-99 it calls most right answers wrong)."""
    caveats = getattr(result.plugins.get("judge"), "scope_caveats", None)
    if not callable(caveats) or not records:
        return
    for line in caveats(records, result.rubric):
        warnings.warn(line, stacklevel=3)


def check_rubric_evolution(result: CheckedConfig) -> None:
    """``rubric.evolve.every > 0`` needs per-record rubrics (the evolved criteria join each record's own) and a judge
    whose backend is a model that can write criteria (``rlkit.evaluation.rubric_evolution``)."""
    from rlkit.core.templates import template_path

    evolve = result.evolve
    if evolve is None or not evolve.every:
        return
    where = "rubric.evolve.every"
    name = result.plugin_names.get("judge")
    backend = getattr(result.plugins.get("judge"), "backend", None)
    if backend is None or not callable(getattr(backend, "get", None)):
        raise ConfigError(f"judge={name} has no model backend to write new criteria; use judge=llm with "
                          "judge.params.backend=openai (or hf with a model), or set it to 0", where)
    if getattr(backend, "offline", False):
        raise ConfigError(f"judge={name}'s backend is the offline tiny judge, which cannot write criteria; point "
                          "judge.params.backend at a real model, or set it to 0", where)
    if not result.rubric.per_record:
        raise ConfigError(f"evolving criteria join each record's own rubric: use rubric=per_record (rubric "
                          f"{result.rubric.name} is not per_record), or set it to 0", where)
    template_path(evolve.template, "rubric.evolve.template")


def check_debias(debias: DebiasConfig, rubric: Rubric) -> None:
    from rlkit.reward.debias import FEATURES, default_dimensions, threshold_dimensions

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


def validate_monitors(registry: Registry, cfg: Any, rubric: Rubric | None) -> dict[str, Any]:
    """Build every monitor of the ``monitors`` node (``{key: {name, params}}``), checked against the rubric (None: a
    rubric that failed its own check, told already)."""
    from omegaconf import OmegaConf

    node = cfg.get("monitors")
    if node is None:
        return {}
    container = OmegaConf.to_container(node, resolve=True)
    if not isinstance(container, dict):
        raise ConfigError("must be selected as a list, e.g. monitors=[length_drift,reward_collapse]", "monitors")
    built: dict[str, Any] = {}
    for key, entry in container.items():
        name = entry.get("name") if isinstance(entry, dict) else None
        where = f"monitors.{key} ({config_source(registry, 'monitors', name or str(key), cfg)})"
        if not isinstance(entry, dict) or not isinstance(name, str) or not name:
            raise ConfigError("must be a mapping with `name` and `params`", where)
        extra = sorted(set(entry) - {"name", "params"})
        if extra:
            raise ConfigError(f"unknown key {extra[0]!r}; a monitor node has only `name` and `params`", where)
        params = entry.get("params") or {}
        if not isinstance(params, dict):
            raise ConfigError("`params` must be a mapping", f"monitors.{key}.params")
        try:
            monitor = registry.create("monitor", name, params, where=f"monitors.{key}.params")
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), f"monitors.{key}.params") from None
        check = getattr(monitor, "check_rubric", None)
        if check is not None and rubric is not None:
            check(rubric)
        built[str(key)] = monitor
    return built


def check_audit_probes(registry: Registry, run: Any) -> None:
    """``audit.probes`` names registered probes: a misspelled one fails here, not only once ``rlkit rubric audit``
    builds them."""
    for name in run.audit.probes or []:
        try:
            registry.get("audit_probe", name)
        except PluginError as exc:
            raise ConfigError(exc.message, "audit.probes") from None
