"""Composing the Hydra config: rlkit's and the plugins' search paths, one-line errors, config paths."""

from __future__ import annotations

import contextlib
import importlib.resources
import re
from collections.abc import Iterator
from pathlib import Path

from omegaconf import DictConfig

from rlkit.config.schemas import register_run_defaults
from rlkit.core.errors import ConfigError, PluginError
from rlkit.core.package_files import resolve_path
from rlkit.core.registry import KINDS_BY_GROUP, Registry

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

    register_run_defaults()
    GlobalHydra.instance().clear()
    with _translated_hydra_errors(registry), initialize_config_module(
        CONFIG_MODULE, version_base=HYDRA_VERSION_BASE
    ):
        return compose(config_name, overrides=search_path_override(registry) + list(overrides or []),
                       return_hydra_config=True)


