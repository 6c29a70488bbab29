"""The config reference page, generated from the schemas so it cannot drift from what ``rlkit validate`` checks:
:class:`~rlkit.config.schemas.RunConfig` and the plugin-less groups, then every registered plugin's ``Params``."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import json
import textwrap
import typing
from typing import Any

import pydantic
from pydantic.fields import FieldInfo

from rlkit.config.schemas import GROUP_SCHEMAS, TRAINER_KEYS_RLKIT_SETS, RunConfig
from rlkit.core.registry import KINDS, Registry

_BOUND_SIGNS = {"ge": ">=", "gt": ">", "le": "<=", "lt": "<", "min_length": "length >=", "max_length": "length <="}


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _type_name(annotation: Any) -> str:
    if annotation is None or annotation is type(None):
        return "null"
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        return " \\| ".join(_type_name(a) for a in typing.get_args(annotation))
    if origin in (list, tuple, dict):
        args = ", ".join(_type_name(a) for a in typing.get_args(annotation))
        return f"{origin.__name__}[{args}]"
    if isinstance(annotation, type):
        in_config = issubclass(annotation, pydantic.BaseModel) and annotation.__module__.startswith("rlkit.config")
        return "mapping" if in_config else annotation.__name__
    return str(annotation).replace("typing.", "")


def _rules(field: FieldInfo) -> str:
    rules = []
    for item in field.metadata:
        for attr, sign in _BOUND_SIGNS.items():
            value = getattr(item, attr, None)
            if value is not None:
                rules.append(f"{sign} {value}")
        if getattr(item, "allow_inf_nan", None) is False:
            rules.append("finite")
    return ", ".join(rules)


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.get_default(call_default_factory=True)
    if isinstance(value, pydantic.BaseModel) and value.__class__.__module__.startswith("rlkit.config"):
        return "see below"
    return _literal(value)


def _literal(value: Any) -> str:
    if isinstance(value, pydantic.BaseModel):
        value = value.model_dump(mode="json")
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    return f"`{json.dumps(value, default=_plain)}`"


def _plain(value: Any) -> Any:
    # a plugin reference is written as the config writes it
    if hasattr(value, "name") and hasattr(value, "params"):
        return {"name": value.name, "params": value.params}
    return str(value)


def _model_table(model: type[pydantic.BaseModel], prefix: str) -> tuple[list[str], list[tuple[str, type]]]:
    lines = ["| key | type | default | rule | description |", "|---|---|---|---|---|"]
    nested: list[tuple[str, type]] = []
    for name, field in model.model_fields.items():
        key = f"{prefix}{name}"
        annotation = field.annotation
        if (isinstance(annotation, type) and issubclass(annotation, pydantic.BaseModel)
                and annotation.__module__.startswith("rlkit.config")):
            nested.append((key, annotation))
        lines.append(f"| `{key}` | {_type_name(annotation)} | {_default(field)} | {_rules(field)} | "
                     f"{_cell(field.description or '')} |")
    return lines, nested


def _model_section(model: type[pydantic.BaseModel], prefix: str, title: str, level: int = 2) -> list[str]:
    doc = inspect.getdoc(model) or ""
    lines, nested = _model_table(model, prefix)
    out = [f"{'#' * level} {title}", "", _cell(doc), "", *lines, ""]
    for key, inner in nested:
        out += _model_section(inner, f"{key}.", f"`{key}`", level + 1)
    return out


def attribute_docs(cls: type) -> dict[str, str]:
    """The string literal under each annotated attribute of a class body (PEP 257 attribute docstrings)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for node, after in zip(body, body[1:], strict=False):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant) and isinstance(after.value.value, str)):
            docs[node.target.id] = after.value.value
    return docs


def _params_rows(schema: type, where: str) -> list[str]:
    if isinstance(schema, type) and issubclass(schema, pydantic.BaseModel):
        return _model_table(schema, f"{where}.")[0]
    docs = attribute_docs(schema)
    hints = typing.get_type_hints(schema) if dataclasses.is_dataclass(schema) else {}
    lines = ["| key | type | default | description |", "|---|---|---|---|"]
    for f in dataclasses.fields(schema):
        if f.default is not dataclasses.MISSING:
            default = _literal(f.default)
        elif f.default_factory is not dataclasses.MISSING:
            default = _literal(f.default_factory())
        else:
            default = "required"
        lines.append(f"| `{where}.{f.name}` | {_type_name(hints.get(f.name, f.type))} | {default} | "
                     f"{_cell(docs.get(f.name, ''))} |")
    return lines


def _plugins_section(registry: Registry) -> list[str]:
    out = ["## Plugins", "", "Each plugin kind is chosen by its config group (`judge=ensemble`); its `params` are "
           "bound to the plugin's own schema, listed here for every plugin installed when this page was built.", ""]
    for kind in KINDS:
        selector = kind.selected_by or (f"{kind.group}=[<name>, ...]" if kind.many else f"{kind.group}=<name>")
        out += [f"### {kind.label.capitalize()}", "", f"Selected by `{selector}`.", ""]
        for entry in registry.entries(kind.key):
            where = f"{kind.selected_by or kind.group}.params" if not kind.many else f"{kind.group}.<key>.params"
            doc = (inspect.getdoc(entry.factory) or inspect.getdoc(inspect.getmodule(entry.factory)) or "")
            doc = doc.split("\n\n")[0]
            out += [f"#### `{entry.name}` ({entry.provider})", "", _cell(doc), ""]
            schema = entry.schema
            out += (_params_rows(schema, where) if schema is not None else ["No params."]) + [""]
    return out


def config_reference_markdown(registry: Registry | None = None) -> str:
    """Markdown for ``docs/config-reference.md``: every key of ``conf/config.yaml`` with its type, default and rule,
    then every registered plugin's params."""
    if registry is None:
        from rlkit.core.registry import load_registry

        registry = load_registry()
    out = ["# Config reference", "",
           "Generated from `rlkit/config/schemas.py` and each plugin's `Params` when the docs are built (and printed "
           "by `rlkit config-reference`): these are "
           "exactly the keys and rules `rlkit validate` checks. Set any key on the command line "
           "(`rlkit fit batch_size=4 optim.lr=1e-4`), in an experiment preset, or in a YAML of the group.", ""]
    out += _model_section(RunConfig, "", "Top-level keys")
    for group, schema in GROUP_SCHEMAS.items():
        out += _model_section(schema, f"{group}.", f"`{group}` (`{group}=<option>` under `conf/{group}/`)")
    out += ["## `trainer` (`trainer=<option>` under `conf/trainer/`)", "",
            "`trainer.*` is passed to `lightning.Trainer` (`conf/trainer/cpu.yaml`, `ddp.yaml`, `fsdp.yaml`): any of "
            "its own arguments but those rlkit sets itself (" +
            ", ".join(f"`{k}`" for k in TRAINER_KEYS_RLKIT_SETS) + "). `max_steps` counts optimiser steps "
            "(an integer >= -1, -1 for no limit); `log_every_n_steps` is an integer >= 1.", ""]
    out += _plugins_section(registry)
    return "\n".join(out).rstrip() + "\n"
