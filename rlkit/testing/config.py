"""Composing and validating rlkit's config from a plugin's own tests, without reaching into the host."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


def plugin_names(kind: str, *, plugins: Iterable[object] = ()) -> list[str]:
    """Every registered name of ``kind`` (``judge``, ``aggregator``, ...): built-ins, installed entry points and
    ``plugins`` registered on the spot."""
    from rlkit.core.registry import Registry, create_plugin_manager

    return Registry(create_plugin_manager(extra=plugins)).names(kind)


def validate_overrides(overrides: Sequence[str] = (), *, plugins: Iterable[object] = (),
                       read_data: bool = True) -> Any:
    """``rlkit validate <overrides>`` as a function: the composed and validated config (a ``CheckedConfig``:
    ``.plugins``, ``.plugin_names``, ``.rubric``), or the one-line ``rlkit.RlkitError`` the command would print.
    ``plugins`` are registered on the run's plugin manager, as a test plugin that is not installed would be."""
    from rlkit.config import check_config, compose_config
    from rlkit.core.registry import Registry, create_plugin_manager

    registry = Registry(create_plugin_manager(extra=plugins))
    return check_config(compose_config(registry, list(overrides)), registry, read_data=read_data)


def one_error_line(code: int, err: str) -> str:
    """Assert that a command refused bad input as rlkit promises (exit status 2, one ``rlkit: error:`` line on stderr,
    no traceback) and return that line. ``rlkit: warning:`` lines about the config beside it (a group of two, say)
    are advice, not a second error, and are let through."""
    lines = [line for line in err.splitlines() if line.strip() and not line.startswith("rlkit: warning: ")]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("rlkit: error: "), err
    return lines[0]


# The config lines that make a shipped judge's model member the offline tiny judge (``backend: tiny``): what a test
# of the model-judge code paths needs, since ``judge=llm`` and the composites ask a real judge model by default.
_OFFLINE_MEMBER = "{name: llm, params: {backend: tiny}}"
OFFLINE_JUDGE_OVERRIDES: dict[str, tuple[str, ...]] = {
    "llm": ("judge=llm", "judge.params.backend=tiny"),
    "hybrid": ("judge=hybrid", f"judge.params.judges.llm={_OFFLINE_MEMBER}"),
    "ensemble": ("judge=ensemble", f"judge.params.members=[{{name: rule}}, {_OFFLINE_MEMBER}]"),
    "cascade": ("judge=cascade", f"judge.params.expensive={_OFFLINE_MEMBER}"),
}


def offline_judge(name: str) -> list[str]:
    """``judge=<name>`` with its model judge the offline tiny one (``llm``, ``hybrid``, ``ensemble``, ``cascade``)."""
    return list(OFFLINE_JUDGE_OVERRIDES[name])
