"""Jinja prompt templates for model-based judges: shipped ones under ``templates/`` (``rlkit.templates``)
or a user's file; each is identified by its content hash, which enters every cached response's key."""

from __future__ import annotations

import functools
import hashlib
import importlib.resources
from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError


def template_path(name: str | Path, where: str = "judge.params.template") -> Path:
    """A shipped template (``judge/rubric_scores.jinja``) or a path to the user's own file."""
    shipped = Path(str(importlib.resources.files("rlkit.templates"))) / name
    if shipped.is_file():
        return shipped
    path = Path(name).expanduser()
    if path.is_file():
        return path
    raise ConfigError(f"no template {str(name)!r} (neither shipped under templates/ nor a file)", where)


def chosen_template(param: str | None, rubric: Any, judge: str, default: str) -> str:
    """The template a judge renders: its ``template`` param, else the one the rubric names for it (versioned
    with the rubric, see :attr:`rlkit.core.rubric.Rubric.templates`), else the judge's default."""
    if param is not None:
        return param
    named = rubric.template_path(judge) if hasattr(rubric, "template_path") else None
    return str(named) if named is not None else default


@functools.lru_cache(maxsize=32)
def _source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def template_hash(name: str | Path) -> str:
    return hashlib.sha256(_source(template_path(name)).encode()).hexdigest()


@functools.lru_cache(maxsize=32)
def _compiled(path: Path) -> Any:
    import jinja2

    env = jinja2.Environment(undefined=jinja2.StrictUndefined, keep_trailing_newline=False, autoescape=False)
    return env.from_string(_source(path))


def render_file(name: str | Path, where: str = "judge.params.template", **variables: Any) -> str:
    """Render a shipped template or the user's file with ``variables``; a template error names ``where``."""
    import jinja2

    path = template_path(name, where)
    try:
        return _compiled(path).render(**variables)
    except jinja2.TemplateError as exc:
        raise ConfigError(f"template {name}: {exc}", where) from None


def render_template(name: str, *, rubric: Any, prompt: str, completion: str = "", dimensions: Any = None,
                    **extra: Any) -> str:
    """Render with the rubric, its dimensions (in the given order, for permutations), prompt and completion."""
    dims = list(dimensions if dimensions is not None else rubric.dimensions)
    reason = (lambda d: f'"{d.name}_reason": "<one line: why>", ') if extra.get("reasons") else (lambda d: "")
    example = "{" + ", ".join(f'{reason(d)}"{d.name}": {int(d.high)}' for d in dims) + "}"
    return render_file(name, rubric=rubric, dimensions=dims, prompt=prompt, completion=completion, example=example,
                       **extra)
