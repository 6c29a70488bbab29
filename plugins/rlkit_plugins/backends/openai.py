"""The built-in ``openai`` judge backend: any server speaking OpenAI's chat-completions API over HTTP.

That covers OpenAI itself and the usual self-hosted servers (vLLM, SGLang, llama.cpp, TGI's Messages API), and
:class:`rlkit.testing.openai_server.OpenAICompatibleServer` for tests. Each chat becomes one
``POST {base_url}/chat/completions`` with ``model``, ``messages``, ``max_tokens`` and ``temperature``.

* **Structured outputs.** ``complete(chats, schema=...)`` (the ``llm`` judge sends the rubric's JSON schema) adds
  ``response_format`` in the shape ``response_format`` names: ``json_schema`` (the default) is OpenAI's
  ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``, which OpenAI, vLLM, SGLang and
  llama.cpp's ``llama-server`` accept; ``json_object`` is ``{"type": "json_object", "schema": ...}``, the only form
  llama-cpp-python's server (``python -m llama_cpp.server``) takes; ``none`` sends no constraint (a server that
  refuses the field). A server that cannot constrain answers HTTP 400, which is not retried: set ``none``.
* **Key.** Read from the environment variable named by ``api_key_env`` on every :meth:`OpenAIBackend.complete`
  call (never from config, so it never lands in a saved config, a log or a cache key) and sent as
  ``Authorization: Bearer <key>`` when set; unset means no header (local servers rarely want one).
* **Concurrency.** Requests run concurrently on one ``httpx.AsyncClient``; at most ``concurrency`` are in flight
  at once (an ``asyncio.Semaphore``, with the connection pool sized to match). Answers come back in request
  order. ``complete`` is synchronous and runs its own event loop with ``asyncio.run``; called from inside a
  running event loop, it runs that loop in a worker thread instead, blocking the caller until it is done.
* **Timeout.** ``timeout`` seconds bound one attempt from sending the request to reading the last byte.
* **Retries** (``rlkit.judging.http``, shared with the ``reward_api`` judge). A timeout, a connection error,
  HTTP 429, any HTTP 5xx, and a 2xx whose body is not JSON or has no
  string ``choices[0].message.content`` are failed attempts and are retried, up to ``max_retries`` times after
  the first attempt. Other HTTP errors (400, 401, 404, ...) are not retried: repeating them cannot help. Before
  retry ``k`` (0-based) the request waits ``min(backoff * 2**k, 30)`` seconds, or the server's numeric
  ``Retry-After`` if that is longer (also capped at 30 s). There is no jitter, so the schedule is
  deterministic (tests rely on that); the waits of concurrent requests do not hold a concurrency slot.
* **Failure.** A request that still fails comes back as ``Completion(text=None, error=...)`` naming the last
  failure and the number of attempts; one bad request never raises.
* **Start-up.** :meth:`OpenAIBackend.check_ready` (which the ``llm`` judge calls from ``check_rubric``, so in
  ``rlkit validate``, ``score``, ``fit`` and ``serve`` before anything is scored) sends one ``GET
  {base_url}/models`` with the same retries for transport failures. Nothing listening is a ``ConfigError`` naming
  ``base_url`` (``cannot connect to http://127.0.0.1:8000/v1 (connection refused)``) and HTTP 401 one naming
  ``api_key_env``; any other answer, even a 404 from a server without that route, means the server is up.
  Building the backend or asking its identity never touches the network.
* **Spend.** Each answer's tokens come from the response's ``usage`` (``prompt_tokens``, ``completion_tokens``);
  a server that sends none, or a malformed one, warns once and those calls are counted in
  ``judge/calls_without_usage`` instead. ``price_input_per_million`` and ``price_output_per_million`` give
  ``judge/cost`` (``rlkit.judging.spend``).
* **Rate limit.** ``requests_per_minute`` and ``tokens_per_minute`` (both off by default) hold requests back, in a
  token bucket per limit (``rlkit.judging.rate_limit``, after veRL's rate-limited reward manager), so a paid
  endpoint's limit is kept up front rather than met by its 429s. A request's tokens are estimated before it leaves
  (its messages' characters / 4 plus ``max_tokens``) and settled with its ``usage`` after.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from rlkit.plugin import (
    MAX_BACKOFF_S,
    Completion,
    ConfigError,
    approx_tokens,
    hookimpl,
    post_with_retries,
    rate_limiter,
    read_usage,
    retry_delay,
    run_async,
    tls_context,
    token_price,
)
from rlkit_plugins.backends.reachability import probe

__all__ = ["MAX_BACKOFF_S", "OpenAIBackend"]

WHERE = "judge.params.backend.params"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

if TYPE_CHECKING:
    import httpx

Messages = Sequence[dict[str, str]]


@dataclass(frozen=True)
class _Answer:
    text: str
    tokens_in: int | None
    tokens_out: int | None
    usage_problem: str | None


def _content(response: httpx.Response) -> _Answer | None:
    try:
        body = response.json()
        content = body["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(content, str):
        return None
    return _Answer(content, *read_usage(body))


class OpenAIBackend:
    """Sends each chat to an OpenAI-compatible ``/chat/completions`` endpoint, concurrently, with retries."""

    @dataclass
    class Params:
        base_url: str = "http://127.0.0.1:8000/v1"
        model: str = "default"
        api_key_env: str = "OPENAI_API_KEY"
        max_tokens: int = 64
        temperature: float = 0.0
        timeout: float = 30.0
        max_retries: int = 3
        backoff: float = 0.5
        concurrency: int = 8
        requests_per_minute: float | None = None
        """At most this many requests a minute (a token bucket holding one second's worth); null: no limit."""
        tokens_per_minute: float | None = None
        """At most this many prompt + answer tokens a minute (estimated before each request, settled with its
        ``usage``); null: no limit."""
        price_input_per_million: float | None = None
        """The endpoint's price per million prompt tokens; with the output price it gives ``judge/cost``."""
        price_output_per_million: float | None = None
        """The endpoint's price per million answer tokens; with the input price it gives ``judge/cost``."""
        response_format: Literal["json_schema", "json_object", "none"] = "json_schema"
        """How a JSON schema is asked for: OpenAI's ``json_schema`` (OpenAI, vLLM, SGLang, llama-server),
        ``json_object`` with a ``schema`` (llama-cpp-python's server), or ``none``."""

    def __init__(self, params: OpenAIBackend.Params | None = None) -> None:
        import httpx  # here, not at module level: every rlkit command imports all built-in plugins

        p = params or OpenAIBackend.Params()
        try:
            url = httpx.URL(p.base_url)
        except Exception:  # httpx raises several types for unparsable URLs
            url = None
        if url is None or url.scheme not in ("http", "https") or not url.host:
            raise ConfigError(f"must be an http(s) URL such as http://127.0.0.1:8000/v1, got {p.base_url!r}",
                              f"{WHERE}.base_url")
        if not p.model:
            raise ConfigError("must name the served model", f"{WHERE}.model")
        if not _ENV_NAME.fullmatch(p.api_key_env or ""):
            raise ConfigError(f"must be the name of an environment variable (the key itself never goes in the "
                              f"config), got {p.api_key_env!r}", f"{WHERE}.api_key_env")
        for name, low, strict in (("max_tokens", 1, False), ("temperature", 0, False), ("timeout", 0, True),
                                  ("max_retries", 0, False), ("backoff", 0, False), ("concurrency", 1, False)):
            value = getattr(p, name)
            if not math.isfinite(value) or value < low or (strict and value == low):
                raise ConfigError(f"must be {'>' if strict else '>='} {low}, got {value}", f"{WHERE}.{name}")
        self.params = p
        self.price = token_price(p.price_input_per_million, p.price_output_per_million, WHERE)
        self.limiter = rate_limiter(p.requests_per_minute, p.tokens_per_minute, WHERE)
        self._url = f"{p.base_url.rstrip('/')}/chat/completions"
        self._usage_warned = False
        if p.response_format not in ("json_schema", "json_object", "none"):
            raise ConfigError(f"must be json_schema, json_object or none, got {p.response_format!r}",
                              f"{WHERE}.response_format")

    @property
    def structured_outputs(self) -> bool:
        """Whether ``complete(..., schema=)`` asks the server to constrain answers (``response_format`` not none)."""
        return self.params.response_format != "none"

    @property
    def max_answer_tokens(self) -> int:
        """The longest answer a request may get (``max_tokens``): what ``rlkit validate``'s estimate assumes."""
        return self.params.max_tokens

    def identity(self) -> dict[str, Any]:
        """What determines the answers (never the key): part of every response-cache key."""
        p = self.params
        return {"backend": "openai", "base_url": p.base_url, "model": p.model, "max_tokens": p.max_tokens,
                "temperature": p.temperature, "response_format": p.response_format}

    def retry_delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry ``retry`` (0-based): exponential, capped, no jitter."""
        return retry_delay(self.params.backoff, retry, retry_after)

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.params.api_key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def check_ready(self) -> None:
        """Raise a one-line ``ConfigError`` when nothing answers at ``base_url`` or the server refuses the key."""
        p = self.params
        base = p.base_url.rstrip("/")
        answer = probe(f"{base}/models", headers=self._headers(), timeout=p.timeout, max_retries=p.max_retries,
                       backoff=p.backoff)
        if answer.response is None:
            raise ConfigError(f"{answer.unreachable(base)}; start the server or fix the URL", f"{WHERE}.base_url")
        if answer.response.status_code == 401:
            raise ConfigError(f"{base} refused the key (HTTP 401); set the environment variable {p.api_key_env} to "
                              "the server's key", f"{WHERE}.api_key_env")

    def complete(self, prompts: Sequence[Messages], schema: dict[str, Any] | None = None) -> list[Completion]:
        """One :class:`Completion` per chat, in order; a request that keeps failing has ``text=None``. With
        ``schema``, each answer is asked to follow that JSON schema (``response_format``)."""
        if not prompts:
            return []
        chats, headers = list(prompts), self._headers()
        extra = {"response_format": self.response_format(schema)} if schema and self.structured_outputs else {}
        return run_async(lambda: self._complete_all(chats, headers, extra), "rlkit-openai")

    def response_format(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The request's ``response_format`` for ``schema``, in the shape the ``response_format`` param names."""
        if self.params.response_format == "json_object":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "rubric_scores", "schema": schema, "strict": True}}

    async def _complete_all(self, chats: list[Messages], headers: dict[str, str],
                            extra: dict[str, Any]) -> list[Completion]:
        import httpx

        p = self.params
        slots = asyncio.Semaphore(p.concurrency)
        limits = httpx.Limits(max_connections=p.concurrency, max_keepalive_connections=p.concurrency)
        async with httpx.AsyncClient(timeout=httpx.Timeout(p.timeout), limits=limits, headers=headers,
                                     verify=tls_context()) as client:
            return list(await asyncio.gather(*(self._complete_one(client, slots, chat, extra) for chat in chats)))

    async def _complete_one(self, client: httpx.AsyncClient, slots: asyncio.Semaphore,
                            messages: Messages, extra: dict[str, Any]) -> Completion:
        p = self.params
        payload = {"model": p.model, "messages": list(messages), "max_tokens": p.max_tokens,
                   "temperature": p.temperature, **extra}
        limiter = self.limiter
        # the most this request may cost, taken from the token bucket up front and settled with its usage
        estimate = approx_tokens("".join(str(m.get("content", "")) for m in messages)) + p.max_tokens
        gate = (lambda: limiter.acquire(estimate)) if limiter is not None else None
        out = await post_with_retries(client, self._url, payload, slots=slots, timeout=p.timeout,
                                      max_retries=p.max_retries, backoff=p.backoff, read=_content,
                                      malformed="no choices[0].message.content", delay=self.retry_delay, gate=gate)
        answer = out.value
        if answer is None:
            return Completion(text=None, error=out.error, latency=out.latency, attempts=out.attempts)
        if answer.usage_problem is not None:
            self._warn_usage(answer.usage_problem)
        elif limiter is not None:
            limiter.settle(estimate, answer.tokens_in + answer.tokens_out)  # type: ignore[operator]
        return Completion(text=answer.text, latency=out.latency, attempts=out.attempts, tokens_in=answer.tokens_in,
                          tokens_out=answer.tokens_out)

    def _warn_usage(self, problem: str) -> None:
        if not self._usage_warned:
            self._usage_warned = True
            warnings.warn(f"judge backend openai: {self.params.base_url} answered without a readable token count "
                          f"({problem}); judge/tokens_in, judge/tokens_out and judge/cost leave such calls out and "
                          "judge/calls_without_usage counts them", UserWarning, stacklevel=2)

    def close(self) -> None:
        """Nothing is held between calls: each :meth:`complete` opens and closes its own client."""


@hookimpl
def rlkit_register_judge_backends(register: Callable[..., None]) -> None:
    """Register the ``openai`` judge backend."""
    register("openai", OpenAIBackend)
