"""Composing the Hydra config: rlkit's and the plugins' search paths, one-line errors, config paths."""

from __future__ import annotations

import contextlib
import importlib.resources
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from omegaconf import DictConfig

from rlkit.config.schemas import register_run_defaults
from rlkit.core.errors import ConfigError, PluginError, did_you_mean, yaml_syntax_error
from rlkit.core.package_files import resolve_path
from rlkit.core.registry import KINDS_BY_GROUP, Registry

CONFIG_MODULE = "rlkit.conf"
PRIMARY_CONFIG = "config"
HYDRA_VERSION_BASE = "1.3"


def plugin_search_paths(registry: Registry) -> list[str]:
    """Search-path entries contributed by plugins through ``rlkit_config_search_path``."""
    paths: list[str] = []
    for result in registry.plugin_manager.hook.rlkit_config_search_path():
        for entry in [result] if isinstance(result, str) else list(result or []):
            if entry not in paths:
                paths.append(entry)
    return paths


def search_path_override(registry: Registry, user: Sequence[str] = ()) -> list[str]:
    """The ``hydra.searchpath=[...]`` override: a user's own entries (``hydra.searchpath=`` on the command line, and
    ``--config-dir``) first, then the plugins' config dirs; empty if there are none."""
    paths = [*user, *(p for p in plugin_search_paths(registry) if p not in user)]
    if not paths:
        return []
    return ["hydra.searchpath=[" + ",".join(f"'{p}'" for p in paths) + "]"]


def refuse_shadowed_options(args: HydraArgs) -> None:
    """A user's folder (``-cd``, ``hydra.searchpath``) is searched after rlkit's own ``conf/``, as Hydra searches its
    primary config path first: a YAML named like one rlkit ships (``experiment/quick.yaml``) would never be read, and
    ``experiment=quick`` would quietly be rlkit's. Refused, naming both files and the flag or key that gave the
    folder."""
    shipped = Path(str(importlib.resources.files(CONFIG_MODULE)))
    for index, entry in enumerate(args.user_searchpath):
        try:
            folder = resolve_path(entry.rstrip("/"))
        except Exception:  # noqa: BLE001 - an entry Hydra resolves its own way is Hydra's to report
            continue
        if not folder.is_dir() or folder.resolve() == shipped.resolve():
            continue
        where = "--config-dir" if args.config_dir and index == 0 else "hydra.searchpath"
        for mine in sorted(folder.glob("*/*.yaml")):
            theirs = shipped / mine.parent.name / mine.name
            if theirs.is_file():
                raise ConfigError(f"{mine} is never read: rlkit's own {mine.parent.name}={mine.stem} ({theirs}) comes "
                                  "first in the config search path; give yours a name of its own", where)
        for mine in sorted(folder.glob("*.yaml")):
            # a primary config named like one of rlkit's (config.yaml, Hydra's usual name): -cn finds rlkit's first
            if (shipped / mine.name).is_file():
                raise ConfigError(f"{mine} is never read: rlkit's own primary config {shipped / mine.name} comes first "
                                  f"in the config search path (--config-name {mine.stem} picks it); give yours a name "
                                  "of its own", where)


_VALUED_FLAGS = {"cfg": "--cfg", "package": "--package", "config_path": "--config-path", "config_name": "--config-name",
                 "config_dir": "--config-dir", "experimental_rerun": "--experimental-rerun", "info": "--info"}
_SWITCHES = {"hydra_help": "--hydra-help", "version": "--version", "resolve": "--resolve", "run": "--run",
             "multirun": "--multirun", "shell_completion": "--shell-completion"}


@dataclass(frozen=True)
class HydraArgs:
    """A command line split as Hydra's own parser splits it: its flags (``--cfg job``, ``-cd DIR``, ``-m``, ...) and
    the overrides; a user's ``hydra.searchpath=[...]`` is taken out of the overrides and kept in ``searchpath``."""

    flags: list[str]
    overrides: list[str]
    config_dir: str | None = None
    config_name: str | None = None
    multirun: bool = False
    searchpath: tuple[str, ...] = ()
    shows_only: bool = False  # --cfg, --info, --hydra-help, --version, --shell-completion: nothing runs

    @property
    def user_searchpath(self) -> list[str]:
        """``--config-dir`` (as ``file://``) then the user's own ``hydra.searchpath`` entries."""
        first = [f"file://{Path(self.config_dir).resolve()}"] if self.config_dir else []
        return [*first, *self.searchpath]


def _hydra_spelling(flag: str, following: str | None) -> str:
    """What to write instead of an argparse-style ``--key value`` (``--max_steps 5``): the Hydra override."""
    from rlkit.config.schemas import TRAINER_ARGUMENTS, TRAINER_KEYS_RLKIT_SETS, RunConfig

    key, _, value = flag[2:].partition("=")
    key = key.replace("-", "_")
    value = value or (following if following is not None and not following.startswith("-") else "VALUE")
    trainer_keys = set(TRAINER_ARGUMENTS) - set(TRAINER_KEYS_RLKIT_SETS)  # what `trainer.*` takes (check_trainer)
    path = key if key in RunConfig.model_fields or "." in key else f"trainer.{key}" if key in trainer_keys else None
    if path is None:
        return f"not a Hydra flag or an override: {flag}; overrides are key=value (`rlkit fit --help` lists the keys)"
    return f"{flag} is not a flag; overrides are Hydra's key=value: write {path}={value}"


def parse_hydra_args(args: Sequence[str]) -> HydraArgs:
    """Split ``args`` with Hydra's own argument parser; a flag Hydra does not know, or one without its value, is one
    ``ConfigError`` naming it."""
    import argparse

    from hydra._internal.utils import get_args_parser

    parser = get_args_parser()
    known = {flag for action in parser._actions for flag in action.option_strings}
    for index, arg in enumerate(args):
        if arg.startswith("--") and arg.split("=")[0] not in known:
            raise ConfigError(_hydra_spelling(arg, args[index + 1] if index + 1 < len(args) else None), "command line")

    def refuse(message: str) -> None:
        raise ConfigError(message.replace("unrecognized arguments", "not a Hydra flag or an override"),
                          "command line")

    parser.error = refuse  # type: ignore[method-assign]
    try:
        # intermixed: `-m seed=1,2 -cd DIR experiment=mine` is one list of overrides, as a user means it (argparse
        # alone ends the overrides at the first flag and calls the rest unrecognised)
        ns = parser.parse_intermixed_args([a for a in args if a not in ("-h", "--help")])
    except argparse.ArgumentError as exc:
        raise ConfigError(str(exc), "command line") from None
    flags: list[str] = []
    for key, flag in _VALUED_FLAGS.items():
        if getattr(ns, key, None) is not None:
            flags += [flag, str(getattr(ns, key))]
    flags += [flag for key, flag in _SWITCHES.items() if getattr(ns, key, False)]
    overrides, searchpath = [], []
    for override in ns.overrides:
        key, _, value = override.partition("=")
        if key.lstrip("+") == "hydra.searchpath":
            searchpath += [v.strip().strip("'\"") for v in value.strip().strip("[]").split(",") if v.strip()]
        else:
            overrides.append(override)
    if ns.config_dir is not None and not Path(ns.config_dir).is_dir():
        raise ConfigError(f"{ns.config_dir} is not a folder", "--config-dir")
    _refuse_conflicting_modes(ns)
    shows = ns.cfg is not None or ns.info is not None or any(
        getattr(ns, key, False) for key in ("hydra_help", "version", "shell_completion"))
    return HydraArgs(flags, overrides, ns.config_dir, ns.config_name, bool(ns.multirun), tuple(searchpath),
                     bool(shows))


def _refuse_conflicting_modes(ns: object) -> None:
    """Hydra does one thing per command (run, sweep, print the config, show info) and says so with a traceback
    when given two; said here as one line naming the flags, as Hydra's own check counts them."""
    modes = [flag for flag, given in (("--run", getattr(ns, "run", False)),
                                      ("-m/--multirun", getattr(ns, "multirun", False)),
                                      ("--cfg", getattr(ns, "cfg", None) is not None),
                                      ("--info", getattr(ns, "info", None) is not None),
                                      ("--shell-completion", getattr(ns, "shell_completion", False))) if given]
    if len(modes) > 1:
        raise ConfigError(f"{' and '.join(modes)} cannot be given together: a command runs, sweeps, prints its "
                          "config or shows info, one of them (--cfg job without -m prints a job's config)",
                          "command line")
    if getattr(ns, "resolve", False) and getattr(ns, "cfg", None) is None:
        raise ConfigError("--resolve goes with --cfg (job, hydra or all): it resolves the config --cfg prints",
                          "command line")


def _search_roots(registry: Registry, cfg: DictConfig | None = None) -> list[Path]:
    """Where Hydra looked for group YAMLs, in its order: the search path recorded in ``cfg`` (a user's ``-cd``
    folder and ``hydra.searchpath`` entries included) when there is one, else rlkit's and the plugins' folders."""
    roots = []
    for source in _config_sources(cfg):
        scheme, path = source.get("schema"), source.get("path")
        with contextlib.suppress(Exception):
            if scheme == "file" and path:
                roots.append(Path(path))
            elif scheme == "pkg" and path and path != "hydra.conf":
                roots.append(Path(str(importlib.resources.files(path))))
    if roots:
        return roots
    roots = [Path(str(importlib.resources.files(CONFIG_MODULE)))]
    for entry in plugin_search_paths(registry):
        with contextlib.suppress(Exception):
            roots.append(resolve_path(entry.rstrip("/")))
    return roots


def _config_sources(cfg: DictConfig | None) -> list:
    """``hydra.runtime.config_sources`` of a composed config; inside ``@hydra.main`` the hydra node lives in
    HydraConfig, not in ``cfg``."""
    from omegaconf import OmegaConf

    if cfg is None:
        return []
    sources = OmegaConf.select(cfg, "hydra.runtime.config_sources", default=None)
    if sources is None:
        from hydra.core.hydra_config import HydraConfig

        sources = HydraConfig.get().runtime.config_sources if HydraConfig.initialized() else []
    return list(sources or [])


def config_source(registry: Registry, group: str, option: str | None, cfg: DictConfig | None = None) -> str:
    """The YAML file that provided ``group=option``, for error messages; with the composed ``cfg``, a file of the
    user's own folder (``-cd``) is found too."""
    if option:
        for root in _search_roots(registry, cfg):
            candidate = root / group / f"{option}.yaml"
            if candidate.is_file():
                return str(candidate)
    return f"config group {group!r}"


def group_options(registry: Registry, group: str, user: Sequence[str] = ()) -> list[str]:
    """Every YAML option of a config group across rlkit's and the plugins' search paths, and the ``user``'s own
    entries (``-cd``, ``hydra.searchpath``)."""
    options: set[str] = set()
    roots = _search_roots(registry)
    for entry in user:
        with contextlib.suppress(Exception):
            roots.append(resolve_path(entry.rstrip("/")))
    for root in roots:
        options.update(p.stem for p in (root / group).glob("*.yaml"))
    return sorted(options)


def _one_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return " ".join(ln for ln in lines if not ln.startswith(("Config search path", "provider=")))[:500]


# "load" is what Hydra says for an option inside a list (monitors=[nope])
_MISSING_OPTION = re.compile(r"Could not (?:find|load) '([^']+)/([^'/]+)'")
_NOT_IN_STRUCT = re.compile(r"Could not override '([^']+)'.\s*To append to your config use")


@contextlib.contextmanager
def _translated_hydra_errors(registry: Registry, user: Sequence[str] = ()) -> Iterator[None]:
    import yaml
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    try:
        yield
    except yaml.YAMLError as exc:  # a group YAML of a user's folder (-cd) that does not parse: Hydra lets it through
        message, where = yaml_syntax_error(exc)
        raise ConfigError(message, where) from None
    except (HydraException, OmegaConfBaseException) as exc:
        match = _MISSING_OPTION.search(str(exc))
        if match:
            group, option = match.groups()
            kind = KINDS_BY_GROUP.get(group)
            if kind is not None:
                # a user's folder adds options of its own (judge/strict_rule.yaml): named beside the plugins
                mine = sorted(set(group_options(registry, group, user)) - set(group_options(registry, group)))
                raise PluginError(
                    f"unknown {kind.key.replace('_', ' ')} {option!r}; available {kind.label}: "
                    f"{registry.available(kind.key)}"
                    + (f"; in your config folder: {', '.join(mine)}" if mine else "")
                    + did_you_mean(option, [*(e.name for e in registry.entries(kind.key)), *mine])
                ) from None
            options = group_options(registry, group, user)
            raise ConfigError(
                f"no option {option!r} in config group {group!r}; available: {', '.join(options) or 'none'}"
                f"{did_you_mean(option, options)}"
            ) from None
        text = str(exc)
        override = _NOT_IN_STRUCT.search(text)
        if override:
            key = override.group(1)
            # Hydra says the same when the key is missing and when a mapping value brings keys the
            # (empty) mapping in the config does not have: ++ covers both.
            raise NotInConfig(key) from None
        raise ConfigError(_one_line(exc)) from None


class NotInConfig(ConfigError):
    """An override sets a key the composed config does not have (Hydra wants ``+key=`` for that)."""

    def __init__(self, key: str) -> None:
        # Hydra says the same when the key is missing and when a mapping value brings keys the (empty) mapping in the
        # config does not have: ++ covers both.
        super().__init__(f"cannot set {key!r}: it, or a key inside the mapping given, is not in the config; use "
                         f"+{key}=... to add a key, or ++{key}=... to add or replace", "command line")
        self.key = key


def _settable(overrides: list[str], key: str) -> list[str] | None:
    """``overrides`` with ``key=...`` turned into ``++key=...``, or None where that is not for rlkit to decide:
    Hydra's own keys (rlkit does not check them, so a typo there would pass unseen), or no such plain override."""
    if key.split(".")[0] == "hydra":
        return None
    for i, override in enumerate(overrides):
        if not override.startswith(("+", "~")) and override.split("=", 1)[0] == key:
            return [*overrides[:i], "++" + override, *overrides[i + 1:]]
    return None


def with_declared_keys(overrides: Sequence[str], declared: Collection[str]) -> list[str]:
    """``overrides`` with every key composition had to add (``declared``: a schema's field, a plugin's param, a
    Lightning argument the YAML leaves out) written ``++key=``, as Hydra wants them when it composes the job."""
    return [f"++{o}" if not o.startswith(("+", "~", "-")) and o.split("=", 1)[0] in declared else o
            for o in overrides]


@dataclass(frozen=True)
class Composed:
    """A composed config and the keys its composition added (``declared``): keys set without ``+`` that the YAML
    leaves out but rlkit validates, composed as ``++key=`` so a schema-declared key needs no ``+`` and one nobody
    declares is answered by validation with the valid keys. The command hands them on to Hydra's own job."""

    cfg: DictConfig
    declared: frozenset[str] = frozenset()


def compose(registry: Registry, args: HydraArgs, config_name: str = PRIMARY_CONFIG) -> Composed:
    """Compose ``conf/<config_name>.yaml`` with ``args`` (parsed once, by the command); errors become one-line
    ``ConfigError``s. ``args`` may hold ``--config-dir`` (a folder whose group YAMLs join rlkit's), ``--config-name``
    (a primary config there) and a ``hydra.searchpath`` of the user's own; other Hydra flags are left to the command.

    The result keeps ``hydra.runtime.choices`` so messages can name the YAML each part came from.
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    refuse_shadowed_options(args)
    register_run_defaults()
    given, declared = list(args.overrides), set()
    while True:
        GlobalHydra.instance().clear()
        try:
            with _translated_hydra_errors(registry, args.user_searchpath), initialize_config_module(
                CONFIG_MODULE, version_base=HYDRA_VERSION_BASE
            ):
                cfg = hydra_compose(args.config_name or config_name,
                                    overrides=search_path_override(registry, args.user_searchpath) + given,
                                    return_hydra_config=True)
                return Composed(cfg, frozenset(declared))
        except NotInConfig as exc:
            rewritten = _settable(given, exc.key)
            if rewritten is None:
                raise
            declared.add(exc.key)
            given = rewritten


def compose_config(registry: Registry, overrides: Sequence[str] | HydraArgs | None = None,
                   config_name: str = PRIMARY_CONFIG) -> DictConfig:
    """:func:`compose`'s config, from a command line's arguments (parsed here) or from ``HydraArgs`` a command
    parsed already."""
    args = overrides if isinstance(overrides, HydraArgs) else parse_hydra_args(list(overrides or []))
    return compose(registry, args, config_name).cfg
