"""``tools``: multi-turn episodes in which the policy may call Python tools.

After each policy turn the tool calls are read in the chat template's own format: the tokenizer's
``response_template`` (transformers' ``parse_response``; a params override for tokenizers without one), with the
tools' JSON schemas (from their signatures and docstrings, transformers' ``get_json_schema``). A turn without a
tool call is the final answer and ends the episode. Each call runs in a worker process with a timeout, its result
goes back as a ``tool`` message, and the policy takes the next turn. A call that cannot be parsed, names an unknown
tool, passes arguments the tool refuses, raises or times out is an observation (``error: ...``), never a crash;
``info`` counts ``tool_calls`` and ``tool_errors``.

Tools are named by import path (``module:function``); the worker process imports them, so they must be importable
where rlkit runs.
"""

from __future__ import annotations

import importlib
import multiprocessing
from dataclasses import dataclass, field
from typing import Any

from rlkit.plugin import ConfigError, EnvStep, hookimpl


def import_tool(path: str) -> Any:
    module, _, name = path.partition(":")
    try:
        tool = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise ConfigError(f"cannot import the tool {path!r}: {exc}", "environment.params.tools") from None
    if not callable(tool):
        raise ConfigError(f"the tool {path!r} is not callable", "environment.params.tools")
    return tool


def _call(path: str, arguments: dict[str, Any]) -> str:
    """Runs in the worker: the tool's result as text, or the error it raised."""
    try:
        return str(import_tool(path)(**arguments))
    except Exception as exc:  # noqa: BLE001 - whatever a tool raises is the policy's observation
        return f"error: {type(exc).__name__}: {exc}"


class ToolWorkers:
    """A pool of worker processes that run tool calls; one that times out is killed and the pool replaced."""

    def __init__(self, workers: int, timeout_s: float) -> None:
        self.workers, self.timeout_s = workers, timeout_s
        self._pool: Any = None

    def run(self, calls: list[tuple[str, dict[str, Any]]]) -> list[str]:
        if not calls:
            return []
        if self._pool is None:
            # fork where there is one (as the data loader's workers): spawn would re-import the trainer's __main__,
            # which fails for a script read from stdin or a notebook. The tools run no torch, so the threads a fork
            # leaves behind hold no lock they need.
            methods = multiprocessing.get_all_start_methods()
            self._pool = multiprocessing.get_context("fork" if "fork" in methods else "spawn").Pool(self.workers)
        pending = [self._pool.apply_async(_call, call) for call in calls]
        results, timed_out = [], False
        for job in pending:
            try:
                results.append(job.get(timeout=self.timeout_s))
            except multiprocessing.TimeoutError:
                results.append(f"error: the tool took longer than {self.timeout_s:g} s")
                timed_out = True
        if timed_out:
            self.close()
        return results

    def close(self) -> None:
        if self._pool is not None:
            self._pool.terminate()
            self._pool.join()
            self._pool = None


class ToolEnvironment:
    """Episodes of up to ``max_turns`` policy turns; tool results come back as ``tool`` messages."""

    @dataclass
    class Params:
        # Import paths (module:function) of the tools; each function's signature and docstring become its schema.
        tools: list[str] = field(default_factory=lambda: ["rlkit_plugins.environments.calculator:calc"])
        max_turns: int = 3
        # The episode's token budget after the prompt (policy and tool tokens); null: max_completion_length per turn.
        max_tokens: int | None = None
        timeout_s: float = 5.0
        workers: int = 2
        # transformers' response_template that reads tool calls; null: the tokenizer's own.
        response_template: dict[str, Any] | None = None

    def __init__(self, params: Params) -> None:
        if params.max_turns < 1:
            raise ConfigError(f"must be >= 1, got {params.max_turns}", "environment.params.max_turns")
        if params.max_tokens is not None and params.max_tokens < 1:
            raise ConfigError(f"must be >= 1 or null, got {params.max_tokens}", "environment.params.max_tokens")
        if params.timeout_s <= 0 or params.workers < 1:
            raise ConfigError("timeout_s must be > 0 and workers >= 1", "environment.params")
        if not params.tools:
            raise ConfigError("name at least one tool (module:function)", "environment.params.tools")
        self.params = params
        self.max_turns, self.max_tokens = params.max_turns, params.max_tokens
        from transformers.utils import get_json_schema

        self._paths: dict[str, str] = {}
        self._schemas = []
        for path in params.tools:
            tool = import_tool(path)
            try:
                schema = get_json_schema(tool)
            except Exception as exc:  # noqa: BLE001 - transformers raises its own error types for bad docstrings
                raise ConfigError(f"the tool {path!r} has no usable schema: {exc}",
                                  "environment.params.tools") from None
            self._paths[schema["function"]["name"]] = path
            self._schemas.append(schema)
        self._workers = ToolWorkers(params.workers, params.timeout_s)
        self._tokenizer: Any = None
        self._template = params.response_template

    def tools(self) -> list[dict[str, Any]]:
        return list(self._schemas)

    def setup(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer
        if self._template is None:
            self._template = getattr(tokenizer, "response_template", None)
        if self._template is None:
            raise ConfigError("environment=tools reads tool calls with the tokenizer's response_template, and this "
                              "tokenizer has none: set model.response_template, or environment.params."
                              "response_template", "environment.params.response_template")

    def reset(self, record: dict[str, Any]) -> Any:
        return record["prompt"]

    def parse(self, messages: list[dict[str, Any]], completion: str) -> list[dict[str, Any]] | str:
        """The turn's tool calls (``[{"name", "arguments"}]``, empty for a final answer), or why they cannot be read."""
        from transformers.utils.chat_parsing import parse_response

        prefix = ""
        if self._tokenizer is not None and getattr(self._tokenizer, "chat_template", None):
            prefix = self._tokenizer.apply_chat_template(messages, tools=self._schemas, tokenize=False,
                                                         add_generation_prompt=True)
        try:
            parsed = parse_response(completion, self._template, prefix=prefix, tools=self._schemas)
        except Exception as exc:  # noqa: BLE001 - a malformed call is the policy's observation, whatever the parser says
            return f"error: the tool call could not be read: {str(exc).splitlines()[0]}"
        calls = []
        for call in parsed.get("tool_calls") or []:
            function = call.get("function", call) if isinstance(call, dict) else {}
            calls.append({"name": function.get("name"), "arguments": function.get("arguments")})
        return calls

    def step(self, messages: list[dict[str, Any]], completion: str) -> EnvStep:
        calls = self.parse(messages, completion)
        if isinstance(calls, str):
            return EnvStep([{"role": "tool", "name": "error", "content": calls}], done=False,
                           info={"tool_calls": 1, "tool_errors": 1})
        if not calls:
            return EnvStep([], done=True)
        replies: list[dict[str, Any]] = []
        runnable: list[tuple[int, tuple[str, dict[str, Any]]]] = []
        for call in calls:
            name, arguments = call["name"], call["arguments"]
            if name not in self._paths:
                replies.append({"role": "tool", "name": str(name),
                                "content": f"error: no tool named {name!r}; tools: {', '.join(self._paths)}"})
            elif not isinstance(arguments, dict):
                replies.append({"role": "tool", "name": name, "content": "error: arguments must be named values"})
            else:
                replies.append({"role": "tool", "name": name, "content": ""})
                runnable.append((len(replies) - 1, (self._paths[name], arguments)))
        for (at, _), result in zip(runnable, self._workers.run([call for _, call in runnable]), strict=True):
            replies[at]["content"] = result
        errors = sum(reply["content"].startswith("error:") for reply in replies)
        return EnvStep(replies, done=False, info={"tool_calls": len(calls), "tool_errors": errors})

    def close(self) -> None:
        self._workers.close()


@hookimpl
def rlkit_register_environments(register):
    register("tools", ToolEnvironment)
