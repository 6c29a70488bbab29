"""Errors a user can act on. The CLI prints them as one line and exits non-zero."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

T = TypeVar("T")


class RlkitError(Exception):
    """Base of every error caused by user input (config, rubric, data, plugin choice).

    ``where`` names the file, field or line the user has to fix; it leads the message.
    """

    exit_code = 2

    def __init__(self, message: str, where: str | None = None) -> None:
        self.message = message
        self.where = where
        super().__init__(f"{where}: {message}" if where else message)


class ConfigError(RlkitError):
    """A composed config, a plugin's params, or a command-line override is wrong."""


class ParamError(ConfigError):
    """A plugin's own params are wrong: ``key`` is the param's path inside the plugin's params (``permutations``,
    ``backend.params.model``), so the plugin never types where it is configured. The host names the real path: the
    registry when it builds the plugin, a composite judge's members helper when a member refuses a rubric, so a
    member's mistake reads ``judge.params.judges.llm.params.permutations``. Until then ``where`` is the path of a
    top-level plugin of ``group`` (``judge.params.permutations``)."""

    def __init__(self, message: str, key: str, group: str = "judge") -> None:
        self.key = key
        self.rooted = False  # True once the host has named the real path: a parent composite leaves it as it is
        super().__init__(message, f"{group}.params.{key}")

    def at(self, params_where: str) -> ParamError:
        """This error at the plugin's real params path (``judge.params.judges.llm.params``, maybe followed by
        `` (conf/judge/x.yaml)``); the same error once rooted, or when ``params_where`` is unknown (empty)."""
        if self.rooted or not params_where:
            return self
        head, sep, tail = params_where.partition(" (")
        rooted = ParamError(self.message, self.key)
        rooted.where = f"{head}.{self.key}{sep}{tail}"
        rooted.args = (f"{rooted.where}: {self.message}",)
        rooted.rooted = True
        return rooted


class PluginError(RlkitError):
    """A plugin name is unknown, registered twice, or a plugin misbehaves."""


class RubricError(RlkitError):
    """A rubric file cannot be read or does not validate."""


class DataError(RlkitError):
    """A data file is missing, empty, or has bad lines."""


class JudgeError(RlkitError):
    """A judge produced output that breaks its contract (wrong shape, out of range)."""


class UnscoredError(JudgeError):
    """The work ran, but the judge scored a dimension on none of the completions: what it made cannot be used as a
    reward. Exit status 3 tells it from bad input (2) in scripts."""

    exit_code = 3


class EngineError(RlkitError):
    """An engine rlkit started (a llama.cpp judge server) could not start, or stopped for good mid-run."""


class GeneratorError(RlkitError):
    """A generator could not sample: an inference engine stopped answering or refused a weight sync mid-run."""


class TrainingError(RlkitError):
    """Training cannot go on from what it computes: the loss or gradient was not finite step after step. Exit status 4
    tells it from bad input (2) and unusable scores (3) in scripts."""

    exit_code = 4


class StorageError(RlkitError):
    """The disk refused a write (full, over quota, over a file-size limit): the file being written is named and
    the one it would have replaced is left as it was. Exit status 5 tells it from bad input (2) in scripts."""

    exit_code = 5


class ConfigErrors(ConfigError):
    """Several independent problems in one config, found in one pass (torchtune's validate reports them all): each is
    one line of its own. ``errors`` keeps them in the order they were found."""

    def __init__(self, errors: list[RlkitError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.message, first.where)
        self.exit_code = max(e.exit_code for e in self.errors)

    def __str__(self) -> str:
        return "\n".join(str(e) for e in self.errors)


def error_lines(exc: RlkitError) -> list[str]:
    """What the command line prints for ``exc``: one line per problem."""
    return [str(e) for e in exc.errors] if isinstance(exc, ConfigErrors) else [str(exc)]


class Problems:
    """Collects the one-line errors of independent checks, so a config with three mistakes is told all three:
    ``problems.attempt(check)`` runs a check and keeps its ``RlkitError``; ``raise_if_any()`` raises them together
    before checks that depend on these run."""

    def __init__(self) -> None:
        self.errors: list[RlkitError] = []

    def attempt(self, check: Callable[[], T]) -> T | None:
        try:
            return check()
        except ConfigErrors as exc:
            self.errors.extend(exc.errors)
        except RlkitError as exc:
            self.errors.append(exc)
        return None

    def raise_if_any(self) -> None:
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise ConfigErrors(self.errors)


def did_you_mean(given: object, choices: Iterable[str]) -> str:
    """``"; did you mean 'weight'?"`` when ``given`` is close to one of ``choices`` (a typo, a case slip), else ``""``:
    the suffix every "unknown key" and "unknown name" message ends with."""
    import difflib

    if not isinstance(given, str):
        return ""
    options = list(choices)
    by_lower = {c.lower(): c for c in options}
    close = difflib.get_close_matches(given.lower(), list(by_lower), n=1, cutoff=0.75)
    return f"; did you mean {by_lower[close[0]]!r}?" if close and by_lower[close[0]] != given else ""


def yaml_syntax_error(exc: Exception, path: object = None) -> tuple[str, str]:
    """(message, where) for a YAML file that does not parse: where is ``file:line:column`` of the problem (PyYAML's
    marks count from 0; editors from 1), the file taken from the mark when the parser was reading one."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    name = getattr(mark, "name", None)
    source = str(path) if path is not None else name if name and not name.startswith("<") else "a config YAML"
    where = f"{source}:{mark.line + 1}:{mark.column + 1}" if mark is not None else source
    context, context_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
    detail = f" ({context} at line {context_mark.line + 1})" if context and context_mark is not None else ""
    return f"YAML syntax error: {problem}{detail}", where


def no_such(path: object, what: str, *, directory: bool = False) -> str:
    """What to say of ``path`` when it is not the ``what`` (``rubric file``, ``run directory``) a command expected:
    ``no such rubric file``, or, when it is there but the other kind, ``is a directory, expected a rubric file``
    (``is a file, expected a run directory``): "no such file" said of a folder that exists sends a user looking for
    a typo that is not there."""
    from pathlib import Path

    there = Path(str(path)).expanduser()
    if directory and there.is_file():
        return f"is a file, expected a {what}"
    if not directory and there.is_dir():
        return f"is a directory, expected a {what}"
    return f"no such {what}"
