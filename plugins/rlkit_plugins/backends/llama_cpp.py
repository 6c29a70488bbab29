"""The ``llama_cpp`` judge backend: a real judge model, kept quantised, served by a llama.cpp engine rlkit starts.

What ``judge=llm`` asks by default. The engine is llama.cpp's server from the ``xllamacpp`` wheel (the
``judge-server`` extra: 34 MB, nothing compiled), run as a child process (:class:`rlkit.plugin.LlamaServer`): rlkit
picks its port (the system's free one on 127.0.0.1) and its slots, starts it on the first request (never in
``rlkit validate``), waits for ``/health``, restarts it once if it dies, and stops it when the command ends; a second
death is one :class:`~rlkit.plugin.EngineError` line with the engine's last log lines.

* ``model``: a GGUF file, or a ``parts://`` reference; null is the best judge installed
  (:func:`rlkit.plugin.installed_judge_model`: Qwen2.5-Coder-1.5B-Instruct Q4_K_M from ``pip install
  'rlkit[qwen-judge]'``); none installed fails ``rlkit validate``, ``score`` and ``fit`` in one line naming that
  command.
* Speed: the engine answers ``slots`` requests at once, decoded in one batch (llama.cpp's continuous batching), and
  rlkit sends that many concurrently. Every judge prompt starts with the same instructions and rubric
  (``judge/rubric_scores.jinja``), so llama.cpp's prompt cache serves that prefix from the KV of a slot's previous
  request; the answers' ``usage.prompt_tokens_details.cached_tokens`` count it (``judge/tokens_cached``).
* Everything on the wire is the ``openai`` backend's (structured outputs through ``response_format``, level
  probabilities from ``top_logprobs``, retries, usage), pointed at the engine. Since the engine always returns the
  probabilities, the backend declares ``expected_by_default``: the ``llm`` judge's ``scoring: auto`` scores by them.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from rlkit.plugin import (
    Completion,
    ConfigError,
    EngineError,
    LlamaServer,
    LlamaServerSettings,
    hookimpl,
    installed_judge_model,
    is_parts_ref,
    resolve_path,
)
from rlkit_plugins.backends.openai import OpenAIBackend

WHERE = "judge.params.backend.params"
INSTALL_ENGINE = "pip install 'rlkit[judge-server]'"


class LlamaCppBackend:
    """A GGUF judge served by a llama.cpp engine that this backend starts and stops."""

    # The engine is rlkit's own and always returns top_logprobs, so the llm judge's `scoring: auto` weighs each level
    # by its probability here (G-Eval's way): unlike a user's server, nothing can be missing or billed.
    expected_by_default = True

    @dataclass
    class Params:
        model: str | None = None
        """A GGUF file or ``parts://`` reference; null: the best judge model installed."""
        slots: int = 2
        """Requests the engine decodes at once (llama.cpp's ``--parallel``); rlkit sends that many concurrently."""
        context: int = 2048
        """Each slot's context in tokens: the longest judge prompt plus its answer."""
        threads: int | None = None
        """CPU threads the engine computes with; null: every core this process may use."""
        max_tokens: int = 64
        temperature: float = 0.0
        timeout: float = 600.0
        """Seconds one request may take, queueing behind the others in the engine included."""
        max_retries: int = 1
        response_format: Literal["json_schema", "none"] = "json_schema"
        top_logprobs: int = 20
        ready_timeout: float = 300.0
        """Seconds the engine may take to load the model and answer ``/health``."""
        prompt_cache: bool = True
        """Serve the prompt prefix a request shares with a slot's previous one from its KV (off: for measuring)."""

    def __init__(self, params: LlamaCppBackend.Params | None = None) -> None:
        p = params or LlamaCppBackend.Params()
        for name, low in (("slots", 1), ("context", 64), ("max_tokens", 1)):
            value = getattr(p, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ConfigError(f"must be an integer >= {low}, got {value!r}", f"{WHERE}.{name}")
        if p.threads is not None and (isinstance(p.threads, bool) or not isinstance(p.threads, int) or p.threads < 1):
            raise ConfigError(f"must be an integer >= 1 or null (every core), got {p.threads!r}", f"{WHERE}.threads")
        if not (isinstance(p.ready_timeout, int | float) and math.isfinite(p.ready_timeout) and p.ready_timeout > 0):
            raise ConfigError(f"must be a number of seconds > 0, got {p.ready_timeout!r}", f"{WHERE}.ready_timeout")
        if p.response_format not in ("json_schema", "none"):
            raise ConfigError(f"must be json_schema or none, got {p.response_format!r}", f"{WHERE}.response_format")
        self.params = p
        if p.model is None:
            chosen = installed_judge_model(WHERE)
            self._ref, self._name = chosen.ref, chosen.name
        else:
            self._ref, self._name = p.model, Path(p.model.partition("#")[2] or p.model).name
            if not is_parts_ref(p.model):
                _check_gguf(resolve_path(p.model), p.model)
        # the wire: the openai backend's checks and request shape, against a placeholder URL until the engine listens
        self._wire_params = OpenAIBackend.Params(
            base_url="http://127.0.0.1:1/v1", model=self._name, max_tokens=p.max_tokens, temperature=p.temperature,
            timeout=p.timeout, max_retries=p.max_retries, concurrency=p.slots, response_format=p.response_format,
            # no waiting for an engine that stopped answering: rlkit is its supervisor, and restarts it (below)
            top_logprobs=p.top_logprobs, unavailable_timeout=0)
        self._wire = OpenAIBackend(self._wire_params)
        self._server: LlamaServer | None = None

    @property
    def structured_outputs(self) -> bool:
        return self._wire.structured_outputs

    @property
    def level_probs_outputs(self) -> bool:
        return self._wire.level_probs_outputs

    @property
    def max_answer_tokens(self) -> int:
        return self.params.max_tokens

    @property
    def server(self) -> LlamaServer | None:
        """The engine's handle once a request has started it (None before)."""
        return self._server

    def identity(self) -> dict[str, Any]:
        """Model and decoding settings (never the port, which changes every run): part of every cache key."""
        p = self.params
        return {"backend": "llama_cpp", "model": self._ref, "max_tokens": p.max_tokens, "temperature": p.temperature,
                "response_format": p.response_format}

    def check_ready(self) -> None:
        """The engine can be started: its wheel is installed. Nothing is started here (``rlkit validate`` loads no
        model); the model file was checked when the backend was built."""
        if importlib.util.find_spec("xllamacpp") is None:
            raise ConfigError(f"the llama.cpp engine is not installed: {INSTALL_ENGINE} (34 MB, no dependencies)",
                              f"{WHERE}.model")

    def start(self) -> str:
        """Start the engine now (it otherwise starts on the first request); its base URL."""
        if self._server is None:
            self.check_ready()
            from rlkit.plugin import model_file

            threads = self.params.threads or len(os.sched_getaffinity(0))
            settings = LlamaServerSettings(model=str(model_file(self._ref)), slots=self.params.slots,
                                           context=self.params.context, threads=threads, alias=self._name,
                                           prompt_cache=self.params.prompt_cache)
            self._server = LlamaServer(settings, f"{WHERE}.model", ready_timeout=self.params.ready_timeout)
        return self._server.ensure_running()

    def _point_wire(self, url: str) -> None:
        if self._wire.params.base_url != f"{url}/v1":
            self._wire_params.base_url = f"{url}/v1"
            self._wire = OpenAIBackend(self._wire_params)

    def complete(self, prompts: Sequence[Sequence[dict[str, str]]], schema: dict[str, Any] | None = None,
                 level_probs: bool = False) -> list[Completion]:
        """The ``openai`` backend's answers from the engine. Requests lost because the engine died are asked again
        once it is restarted (once; a second death raises)."""
        if not prompts:
            return []
        self._point_wire(self.start())
        try:
            answers = self._wire.complete(prompts, schema=schema, level_probs=level_probs)
        except EngineError as exc:  # the engine did not answer: restarted if it died, else it hangs
            if self._server is None or self._server.running:
                raise EngineError(f"the llama.cpp engine stopped answering: {exc.message}", f"{WHERE}.model") from None
            self._point_wire(self._server.ensure_running())
            return self._wire.complete(prompts, schema=schema, level_probs=level_probs)
        lost = [i for i, a in enumerate(answers) if a.text is None]
        if lost and self._server is not None and not self._server.running:
            self._point_wire(self._server.ensure_running())
            again = self._wire.complete([prompts[i] for i in lost], schema=schema, level_probs=level_probs)
            for i, answer in zip(lost, again, strict=True):
                answers[i] = answer
        return answers

    def close(self) -> None:
        """Stop the engine (a later request starts it again)."""
        if self._server is not None:
            self._server.stop()
            self._server = None


def _check_gguf(path: Path, given: str) -> None:
    """A file that is not there, or does not open with GGUF's magic bytes, fails when the backend is built."""
    try:
        with path.open("rb") as file:
            magic = file.read(4)
    except OSError:
        raise ConfigError(f"no GGUF file at {given}", f"{WHERE}.model") from None
    if magic != b"GGUF":
        raise ConfigError(f"{given} is not a GGUF file (it does not begin with the bytes GGUF)", f"{WHERE}.model")


@hookimpl
def rlkit_register_judge_backends(register: Callable[..., None]) -> None:
    """Register the ``llama_cpp`` judge backend."""
    register("llama_cpp", LlamaCppBackend)
