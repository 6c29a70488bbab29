"""The plugin manager, and the registry that maps config names to factories (the kinds: ``rlkit.core.kinds``)."""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pluggy

from rlkit.core import hookspecs
from rlkit.core.errors import ConfigError, ParamError, PluginError, did_you_mean

# declared in rlkit.core.kinds; importable from here too, where the host and tests have always found them
from rlkit.core.kinds import KINDS, KINDS_BY_GROUP, KINDS_BY_KEY, PluginKind  # noqa: F401
from rlkit.core.refs import iter_refs

hookimpl = pluggy.HookimplMarker("rlkit")

ENTRY_POINT_GROUP = "rlkit"

BUILTIN_PACKAGE = "rlkit_plugins"


def builtin_plugin_modules() -> tuple[str, ...]:
    """Every module under ``rlkit_plugins/<kind>/``, sorted: the built-in plugins.

    Found by walking the package, so adding a built-in plugin means adding its module (and YAML), never
    editing a list here. They use only rlkit's public API, exactly as a third-party plugin would.
    """
    import pkgutil

    package = importlib.import_module(BUILTIN_PACKAGE)
    return tuple(sorted(info.name for info in pkgutil.walk_packages(package.__path__, f"{BUILTIN_PACKAGE}.")
                        if not info.ispkg))


@dataclass(frozen=True)
class PluginEntry:
    """A registered factory and who provides it."""

    kind: str
    name: str
    factory: Callable[[Any], Any]
    provider: str

    @property
    def schema(self) -> type | None:
        return getattr(self.factory, "Params", None)


def create_plugin_manager(*, entry_points: bool = True, extra: Iterable[object] = ()) -> pluggy.PluginManager:
    """Built-ins from ``rlkit_plugins``, then ``extra`` objects, then the ``rlkit`` entry points."""
    pm = pluggy.PluginManager("rlkit")
    pm.add_hookspecs(hookspecs)
    for module_name in builtin_plugin_modules():
        pm.register(importlib.import_module(module_name), name=module_name)
    for plugin in extra:
        pm.register(plugin)
    if entry_points:
        pm.load_setuptools_entrypoints(ENTRY_POINT_GROUP)
    # A misspelled hook name in any plugin fails here, not silently later.
    pm.check_pending()
    return pm


def _provider_names(pm: pluggy.PluginManager) -> dict[int, str]:
    names = {id(plugin): dist.project_name for plugin, dist in pm.list_plugin_distinfo()}
    for plugin in pm.get_plugins():
        if id(plugin) in names:
            continue
        plugin_name = pm.get_name(plugin) or ""
        if plugin_name.startswith(f"{BUILTIN_PACKAGE}."):
            names[id(plugin)] = "rlkit"
        elif plugin_name and not plugin_name.isdigit():
            names[id(plugin)] = plugin_name
        else:  # registered without a name: pluggy uses id(); the class says more
            cls = type(plugin)
            names[id(plugin)] = getattr(plugin, "__name__", f"{cls.__module__}.{cls.__qualname__}")
    return names


class Registry:
    """Every registered plugin by kind and name, collected once from a plugin manager."""

    def __init__(self, pm: pluggy.PluginManager) -> None:
        self.plugin_manager = pm
        self._entries: dict[str, dict[str, PluginEntry]] = {k.key: {} for k in KINDS}
        providers = _provider_names(pm)
        for kind in KINDS:
            hook = getattr(pm.hook, kind.hook)
            # Each implementation is called on its own so every name is tied to its provider.
            for impl in reversed(hook.get_hookimpls()):
                provider = providers.get(id(impl.plugin), impl.plugin_name)
                register = self._register_callback(kind, provider)
                kwargs = {"register": register}
                impl.function(**{a: kwargs[a] for a in impl.argnames})

    def _register_callback(self, kind: PluginKind, provider: str) -> Callable[..., None]:
        def register(name: str, factory: Callable[[Any], Any]) -> None:
            if not isinstance(name, str) or not name:
                raise PluginError(f"{provider} registered a {kind.key} with an invalid name {name!r}")
            if not callable(factory):
                raise PluginError(f"{provider} registered {kind.key} {name!r} with a non-callable factory")
            existing = self._entries[kind.key].get(name)
            if existing is not None:
                raise PluginError(
                    f"duplicate {kind.key} name {name!r}: registered by {existing.provider} "
                    f"and by {provider}"
                )
            self._entries[kind.key][name] = PluginEntry(kind.key, name, factory, provider)

        return register

    def kinds(self) -> tuple[PluginKind, ...]:
        return KINDS

    def entries(self, kind: str) -> list[PluginEntry]:
        return sorted(self._entries[kind].values(), key=lambda e: e.name)

    def names(self, kind: str) -> list[str]:
        return [e.name for e in self.entries(kind)]

    def available(self, kind: str) -> str:
        """``a (dist), b (dist)`` for error messages."""
        entries = self.entries(kind)
        return ", ".join(f"{e.name} ({e.provider})" for e in entries) or "none registered"

    def get(self, kind: str, name: str) -> PluginEntry:
        try:
            return self._entries[kind][name]
        except KeyError:
            label = KINDS_BY_KEY[kind].label
            raise PluginError(f"unknown {kind.replace('_', ' ')} {name!r}; available {label}: "
                              f"{self.available(kind)}{did_you_mean(name, self._entries.get(kind, {}))}") from None

    def validate_params(self, kind: str, name: str, params: dict[str, Any] | None, where: str) -> Any:
        """Bind ``params`` against the plugin's schema without building the plugin (references included)."""
        return self.bind(self.get(kind, name), params or {}, where)

    def bind(self, entry: PluginEntry, params: dict[str, Any], where: str) -> Any:
        """``bind_params``, then every ``PluginRef`` in the result looked up here and bound in turn, so a
        misspelled member or a bad member param fails at validation, naming its path."""
        bound = bind_params(entry, params, where)
        for path, ref in iter_refs(bound):
            ref.where = _within(where, path)
            try:
                member = self.get(ref.kind, ref.name)
            except PluginError as exc:
                raise ConfigError(exc.message, ref.where) from None
            ref.bound = self.bind(member, ref.params, _within(where, f"{path}.params"))
        return bound

    def create(self, kind: str, name: str, params: dict[str, Any] | None = None, where: str = "") -> Any:
        """Build a plugin: its params bound, each referenced member built first and handed in as ``ref.plugin``."""
        entry = self.get(kind, name)
        where = where or f"{KINDS_BY_KEY[kind].group}.params"
        bound = self.bind(entry, params or {}, where)
        self._build_members(bound)
        return check_declarations(entry, _built(entry, bound, where))

    def _build_members(self, bound: Any) -> None:
        for _, ref in iter_refs(bound):
            self._build_members(ref.bound)
            entry = self.get(ref.kind, ref.name)
            ref.plugin = check_declarations(entry, _built(entry, ref.bound, member_params_where(ref)))


_SIGNALS = ("advantages", "pairs", "demonstrations")


def check_declarations(entry: PluginEntry, plugin: Any) -> Any:
    """``plugin`` when it has everything its kind's protocol requires (``PluginKind.declares``; an objective's
    ``signal`` one of :data:`_SIGNALS`, and ``pair_targets`` for ``pairs``), else a ``PluginError`` naming it."""
    kind = KINDS_BY_KEY[entry.kind]
    label = f"{entry.kind.replace('_', ' ')} {entry.name!r} (from {entry.provider})"
    where = f"the {kind.hook} contract: docs/plugin-api.md"
    missing = [name for name in kind.declares if not hasattr(plugin, name)]
    if entry.kind == "objective" and not missing:
        signal = plugin.signal
        if signal not in _SIGNALS:
            raise PluginError(f"{label} declares signal {signal!r}; it must be one of {', '.join(_SIGNALS)}", where)
        if signal == "pairs" and not hasattr(plugin, "pair_targets"):
            missing.append("pair_targets")
    if missing:
        raise PluginError(f"{label} does not declare {', '.join(missing)}, which every {kind.label[:-1]} must "
                          f"have (rlkit.plugin.{kind.protocol.__name__})", where)
    return plugin


def _built(entry: PluginEntry, bound: Any, params_where: str) -> Any:
    """``entry.factory(bound)``; a ``ParamError`` it raises names its key under ``params_where``, where the plugin is
    configured."""
    try:
        return entry.factory(bound)
    except ParamError as exc:
        raise exc.at(params_where) from None


def member_params_where(ref: Any) -> str:
    """Where a member's own params are configured (``judge.params.judges.llm.params``); empty for a reference the
    registry has not bound."""
    return _within(ref.where, ".params") if ref.where else ""


def _within(where: str, path: str) -> str:
    """``judge.params (conf/judge/x.yaml)`` + ``.members[1]`` → ``judge.params.members[1] (conf/judge/x.yaml)``."""
    head, sep, tail = where.partition(" (")
    return f"{head}{path}{sep}{tail}"


def bind_params(entry: PluginEntry, params: dict[str, Any], where: str) -> Any:
    """Validate ``params`` against ``entry.schema``; unknown keys and bad types name the key."""
    import pydantic

    schema = entry.schema
    label = f"{entry.kind.replace('_', ' ')} {entry.name!r}"
    if schema is None:
        if params:
            raise ConfigError(f"{label} takes no params, got: {', '.join(sorted(params))}", where)
        return None
    if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
        known = set(schema.model_fields)
    elif dataclasses.is_dataclass(schema):
        known = {f.name for f in dataclasses.fields(schema)}
    else:
        raise PluginError(f"{label}: Params must be a dataclass or a pydantic model, got {schema!r}")
    unknown = sorted(set(params) - known)
    if unknown:
        raise ConfigError(
            f"unknown key {unknown[0]!r} for {label}; valid keys: {', '.join(sorted(known)) or 'none'}"
            f"{did_you_mean(unknown[0], known)}",
            where,
        )
    try:
        return pydantic.TypeAdapter(schema).validate_python(dict(params))
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        message = err["msg"].removeprefix("Value error, ")  # pydantic's prefix for a validator's own ValueError
        raise ConfigError(f"{label}: {field}: {message}" if field else f"{label}: {message}", where) from None


def load_registry() -> Registry:
    """Built-ins plus every installed ``rlkit`` entry point; callers hold on to the result."""
    return Registry(create_plugin_manager())
