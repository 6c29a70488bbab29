"""``PluginRef``: a plugin named inside another plugin's params, resolved by the host against the run's registry.

A composite judge declares its members as references (``JudgeRef`` is ``PluginRef.of("judge")``) instead of
building them itself::

    @dataclass
    class Params:
        members: list[JudgeRef] = field(default_factory=lambda: [PluginRef.to("judge", "rule")])

In YAML a reference is a name (``rule``) or a mapping ``{name: llm, params: {...}}``. Binding the params
(``rlkit validate`` and every run) looks the name up in the same registry that holds the parent, binds the
member's params against its schema (references inside them too) and, when the parent is built, builds each
member first and hands it in as ``ref.plugin``. A plugin therefore never builds a registry of its own, and a
member registered only on the run's plugin manager is as good as an installed one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any, ClassVar

import pydantic


class PluginRef:
    """A reference to a plugin of kind ``kind``: its ``name``, its raw ``params``, and once the host has built
    it, ``plugin`` (the member object) and ``where`` (the config path, for the parent's own messages)."""

    kind: ClassVar[str] = ""
    _by_kind: ClassVar[dict[str, type[PluginRef]]] = {}

    def __init__(self, name: str, params: dict[str, Any] | None = None) -> None:
        self.name = name
        self.params = dict(params or {})
        self.bound: Any = None   # the member's validated params, set by the host at binding
        self.plugin: Any = None  # the member itself, set by the host when the parent is built
        self.where = ""

    @classmethod
    def of(cls, kind: str) -> type[PluginRef]:
        """The reference type for one plugin kind (one class per kind, cached): ``JudgeRef = PluginRef.of("judge")``."""
        if kind not in cls._by_kind:
            cls._by_kind[kind] = type(f"PluginRef[{kind}]", (PluginRef,), {"kind": kind, "__module__": __name__})
        return cls._by_kind[kind]

    @classmethod
    def to(cls, kind: str, name: str, params: dict[str, Any] | None = None) -> PluginRef:
        """A reference written in code (a schema's default)."""
        return cls.of(kind)(name, params)

    @classmethod
    def coerce(cls, value: Any) -> PluginRef:
        """A name or ``{name, params}`` as a reference of this class's kind; anything else is refused."""
        if isinstance(value, PluginRef):
            if cls.kind and value.kind != cls.kind:
                raise ValueError(f"expected a reference to a {cls.kind}, got one to a {value.kind}")
            return cls(value.name, value.params)
        if isinstance(value, str) and value:
            return cls(value)
        if isinstance(value, dict) and isinstance(value.get("name"), str) and value["name"] \
                and not set(value) - {"name", "params"} and isinstance(value.get("params") or {}, dict):
            return cls(value["name"], value.get("params") or {})
        raise ValueError(f"a {cls.kind or 'plugin'} reference is a name or {{name: <{cls.kind or 'plugin'}>, "
                         f"params: {{...}}}}, got {value!r}")

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_plain_validator_function(cls.coerce)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, PluginRef) and (self.kind, self.name, self.params)
                == (other.kind, other.name, other.params))

    def __hash__(self) -> int:
        return hash((self.kind, self.name))

    def __repr__(self) -> str:
        return f"PluginRef[{self.kind!r}]({self.name!r}, {self.params!r})"


def iter_refs(value: Any, path: str = "") -> Iterator[tuple[str, PluginRef]]:
    """Every reference in validated params (dataclasses, pydantic models, dicts, lists), with its path
    (``.members[1]``); the params inside a reference are its own and are walked when it is bound."""
    if isinstance(value, PluginRef):
        yield path, value
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        for f in dataclasses.fields(value):
            yield from iter_refs(getattr(value, f.name), f"{path}.{f.name}")
    elif isinstance(value, pydantic.BaseModel):
        for name in type(value).model_fields:
            yield from iter_refs(getattr(value, name), f"{path}.{name}")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from iter_refs(item, f"{path}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            yield from iter_refs(item, f"{path}[{i}]")


JudgeRef = PluginRef.of("judge")
AggregatorRef = PluginRef.of("aggregator")
WeightSchedulerRef = PluginRef.of("weight_scheduler")
BackendRef = PluginRef.of("judge_backend")
