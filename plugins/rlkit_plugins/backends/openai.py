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
* **Level probabilities** (``scoring: expected``). ``complete(chats, schema=..., level_probs=True)`` also sends
  ``logprobs: true`` and ``top_logprobs`` (the param, 1 to 20; both fields, as llama-cpp-python returns nothing
  without the second and llama-server refuses the second alone), and gives each answer the probability of every
  level of the schema's one-digit integer fields (``Completion.level_probs``), read from
  ``choices[0].logprobs.content`` by :func:`read_level_probs`. The token that writes a field's value is found by its
  text offset after ``"<field>":`` in the tokens' own joined text, never by its index (llama.cpp's server lets a
  model write a ```json fence, then strips it from ``content``); the entries of its ``top_logprobs`` that write a
  level (each counted for the digit it starts with, as the ``hf`` backend counts them) are renormalised over the
  levels, since servers report raw log-probs, before the schema's mask (vLLM's default ``raw_logprobs``,
  llama.cpp, llama-cpp-python). A field whose token lists no level keeps its written level with probability 1 and
  is counted in :attr:`OpenAIBackend.level_probs_fallbacks` (and warned about once): its score is then the sampled
  one, which is a score, not a failure, so the judge's parse accounting is the wrong place for it. A server that
  answers without any ``logprobs`` is a ``ConfigError`` naming ``base_url`` and ``scoring: sampled``, rather than
  expected scores quietly read from the written levels.
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
* **A server that stops answering** (connection errors or timeouts: an engine that died, hung or is restarting) is
  not a failed request: its requests keep retrying on the same schedule until it has been silent
  ``unavailable_timeout`` seconds, the run saying once that it waits; past that, :meth:`OpenAIBackend.complete`
  raises an ``EngineError`` naming ``base_url`` (and ``rlkit fit`` the checkpoint to resume from), so no step is
  trained on scores the judge never gave. An HTTP answer, even a 5xx, means the server is up (``Failure`` above).
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
import dataclasses
import json
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
    EngineError,
    approx_tokens,
    hookimpl,
    post_with_retries,
    rate_limiter,
    read_cached_tokens,
    read_usage,
    retry_delay,
    run_async,
    tls_context,
    token_price,
)
from rlkit_plugins.backends.reachability import probe

__all__ = ["MAX_BACKOFF_S", "OpenAIBackend", "level_distribution", "one_digit_levels", "read_level_probs",
           "value_token"]

WHERE = "judge.params.backend.params"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LEADING_DIGIT = re.compile(r"\s*(\d)(?!\d)")  # a token that writes one digit, perhaps after spaces ("4", " 4", "4,")
MAX_TOP_LOGPROBS = 20  # OpenAI's and vLLM's (--max-logprobs) cap
UNKNOWN_LOGPROB = -9999.0  # what OpenAI lists for a token outside the top 20

if TYPE_CHECKING:
    import httpx

Messages = Sequence[dict[str, str]]


@dataclass(frozen=True)
class _Answer:
    text: str
    tokens_in: int | None
    tokens_out: int | None
    usage_problem: str | None
    tokens: list[Any] | None = None  # choices[0].logprobs.content; None when the server sent none
    tokens_cached: int | None = None  # usage.prompt_tokens_details.cached_tokens: the server's prompt-cache hits


def _content(response: httpx.Response) -> _Answer | None:
    try:
        body = response.json()
        choice = body["choices"][0]
        content = choice["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    if not isinstance(content, str):
        return None
    logprobs = choice.get("logprobs")
    tokens = logprobs.get("content") if isinstance(logprobs, dict) else None
    # absent log-probs are not a malformed answer to retry: the server does not send them (complete() says so)
    return _Answer(content, *read_usage(body), tokens=tokens if isinstance(tokens, list) else None,
                   tokens_cached=read_cached_tokens(body))


def one_digit_levels(schema: dict[str, Any]) -> dict[str, list[int]]:
    """The schema's fields whose values are an integer ``enum`` of one-digit levels: those whose distribution one
    token's ``top_logprobs`` holds. (``rlkit.lm.constrained.single_digit_levels``, which imports torch.)"""
    out = {}
    for name, spec in (schema.get("properties") or {}).items():
        levels = spec.get("enum") if isinstance(spec, dict) and spec.get("type") == "integer" else None
        if levels and all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 9 for v in levels):
            out[name] = list(levels)
    return out


def value_token(tokens: Sequence[str], name: str) -> int | None:
    """The index of the token that writes field ``name``'s value: the one holding the first character after
    ``"<name>":`` in the tokens' joined text, if that token opens with the value (spaces aside) and writes one digit.
    Offsets, not indices: a model may write a ```json fence (or anything) before the object."""
    text = "".join(tokens)
    found = re.search(re.escape(json.dumps(name, ensure_ascii=False)) + r"\s*:\s*", text)
    if found is None or found.end() >= len(text):
        return None
    at, start = found.end(), 0
    for index, token in enumerate(tokens):
        if start + len(token) > at:
            # a token that also writes the colon (``:4``) has alternatives for the colon, not for the value
            opens = not token[:at - start].strip()
            return index if opens and _LEADING_DIGIT.match(token) else None
        start += len(token)
    return None


def level_distribution(entry: dict[str, Any], levels: Sequence[int]) -> dict[int, float] | None:
    """{level: probability} from one token's ``top_logprobs``: the entries that write a level, renormalised over the
    levels (other tokens, such as ``x`` or a space, are dropped); None when no entry writes one."""
    logprob_of: dict[int, list[float]] = {}
    for alternative in entry.get("top_logprobs") or []:
        token = alternative.get("token") if isinstance(alternative, dict) else None
        logprob = alternative.get("logprob") if isinstance(alternative, dict) else None
        found = _LEADING_DIGIT.match(token) if isinstance(token, str) else None
        # OpenAI writes -9999.0 for "very unlikely, value unknown": no evidence, not a log-prob to renormalise
        if (found and int(found.group(1)) in levels and isinstance(logprob, int | float)
                and not isinstance(logprob, bool) and math.isfinite(logprob) and logprob > UNKNOWN_LOGPROB):
            # " 4" and "4" are different tokens writing the same level: their mass adds up
            logprob_of.setdefault(int(found.group(1)), []).append(float(logprob))
    if not logprob_of:
        return None
    peak = max(max(values) for values in logprob_of.values())  # subtracted so that exp cannot underflow to 0 for all
    mass = {level: sum(math.exp(v - peak) for v in values) for level, values in logprob_of.items()}
    total = sum(mass.values())
    return {level: mass.get(level, 0.0) / total for level in levels}


def read_level_probs(tokens: Sequence[Any], levels: dict[str, list[int]]
                     ) -> tuple[dict[str, dict[int, float]], list[str]]:
    """Each level field's {level: probability} from an answer's ``logprobs.content``, and the fields whose
    probabilities could not be read. Of those, one whose value token lists no level in its ``top_logprobs`` gets its
    written level with probability 1; one whose value token cannot be found (or writes no level) is left out, and
    the judge reads it from the text as written. Either way its score is the sampled one."""
    texts = [t.get("token") if isinstance(t, dict) else None for t in tokens]
    if not all(isinstance(t, str) for t in texts):
        return {}, list(levels)  # an entry without its text shifts every offset after it
    out: dict[str, dict[int, float]] = {}
    fallbacks: list[str] = []
    for name, allowed in levels.items():
        index = value_token(texts, name)  # type: ignore[arg-type]
        if index is None:
            fallbacks.append(name)
            continue
        probs = level_distribution(tokens[index], allowed)
        if probs is None:
            fallbacks.append(name)
            written = int(_LEADING_DIGIT.match(texts[index]).group(1))  # type: ignore[arg-type, union-attr]
            if written in allowed:
                out[name] = {level: float(level == written) for level in allowed}
        else:
            out[name] = probs
    return out, fallbacks


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
        unavailable_timeout: float = 120.0
        """Seconds a server that stops answering (connection errors, timeouts) is waited for before the run stops
        with an ``EngineError``; 0: stop once ``max_retries`` are spent. 120: long enough for a supervisor
        (systemd, Kubernetes, a restart script) to bring a crashed engine back up with a small model, short enough
        that a run whose judge is gone for good stops within minutes."""
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
        top_logprobs: int = 20
        """How many of the likeliest tokens the server lists at each position when the judge scores by expected
        level (``scoring: expected``), 1 to 20 (OpenAI's and vLLM's cap); a level outside them counts as
        improbable."""

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
                                  ("max_retries", 0, False), ("backoff", 0, False), ("unavailable_timeout", 0, False),
                                  ("concurrency", 1, False)):
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
        if (isinstance(p.top_logprobs, bool) or not isinstance(p.top_logprobs, int)
                or not 1 <= p.top_logprobs <= MAX_TOP_LOGPROBS):
            raise ConfigError(f"must be an integer from 1 to {MAX_TOP_LOGPROBS} (OpenAI and vLLM list at most "
                              f"{MAX_TOP_LOGPROBS}), got {p.top_logprobs!r}", f"{WHERE}.top_logprobs")
        self.level_probs_fallbacks = 0  # level fields scored at their written level: no level in top_logprobs
        self._fallback_warned = False

    @property
    def structured_outputs(self) -> bool:
        """Whether ``complete(..., schema=)`` asks the server to constrain answers (``response_format`` not none)."""
        return self.params.response_format != "none"

    @property
    def level_probs_outputs(self) -> bool:
        """Whether ``complete(..., schema=, level_probs=True)`` reads each level's probability (from the server's
        ``top_logprobs``): whenever a schema is sent at all (``response_format`` not none)."""
        return self.structured_outputs

    @property
    def max_answer_tokens(self) -> int:
        """The longest answer a request may get (``max_tokens``): what ``rlkit validate``'s estimate assumes."""
        return self.params.max_tokens

    def identity(self) -> dict[str, Any]:
        """What determines the answers (never the key): part of every response-cache key.

        ``top_logprobs`` is in it only when it is not the default: it changes only answers asked with
        ``level_probs``, which the ``llm`` judge's key already keeps apart (``scoring``), so the keys of every
        judge on the default stay as they were."""
        p = self.params
        out = {"backend": "openai", "base_url": p.base_url, "model": p.model, "max_tokens": p.max_tokens,
               "temperature": p.temperature, "response_format": p.response_format}
        if p.top_logprobs != MAX_TOP_LOGPROBS:
            out["top_logprobs"] = p.top_logprobs
        return out

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

    def complete(self, prompts: Sequence[Messages], schema: dict[str, Any] | None = None,
                 level_probs: bool = False) -> list[Completion]:
        """One :class:`Completion` per chat, in order; a request that keeps failing has ``text=None``. With
        ``schema``, each answer is asked to follow that JSON schema (``response_format``), and with ``level_probs``
        each carries the probability of every level of the schema's one-digit fields (``Completion.level_probs``,
        from the server's ``top_logprobs``). A server that answers without log-probs is a ``ConfigError``."""
        if not prompts:
            return []
        chats, headers = list(prompts), self._headers()
        extra: dict[str, Any] = {"response_format": self.response_format(schema)} if schema and \
            self.structured_outputs else {}
        asked = bool(level_probs and schema)
        if asked:
            extra |= {"logprobs": True, "top_logprobs": self.params.top_logprobs}
        replies = run_async(lambda: self._complete_all(chats, headers, extra), "rlkit-openai")
        if not asked:
            return [completion for completion, _ in replies]
        return self._with_level_probs(replies, one_digit_levels(schema))  # type: ignore[arg-type]

    def _with_level_probs(self, replies: list[tuple[Completion, list[Any] | None]],
                          levels: dict[str, list[int]]) -> list[Completion]:
        # every request asked the same way: one answer without log-probs means the server does not send them
        if any(c.text is not None and (tokens is None or (c.text and not tokens)) for c, tokens in replies):
            raise ConfigError(f"{self.params.base_url} does not return logprobs (asked with logprobs: true, "
                              f"top_logprobs: {self.params.top_logprobs}), so scoring: expected cannot read the "
                              "levels' probabilities; use scoring: sampled, or a server that returns them (OpenAI, "
                              "vLLM, SGLang, llama.cpp's llama-server)", "judge.params.scoring")
        out, fallbacks = [], 0
        for completion, tokens in replies:
            if completion.text is None:
                out.append(completion)
                continue
            probs, missed = read_level_probs(tokens or [], levels)
            fallbacks += len(missed)
            out.append(dataclasses.replace(completion, level_probs=probs))
        if fallbacks:
            self.level_probs_fallbacks += fallbacks
            if not self._fallback_warned:
                self._fallback_warned = True
                warnings.warn(f"judge backend openai: the levels' probabilities of {fallbacks} dimension score(s) "
                              f"could not be read from {self.params.base_url}'s answer (no level among the top "
                              f"{self.params.top_logprobs} tokens where the value is written, or no such token); "
                              "they are scored at the level written, and OpenAIBackend.level_probs_fallbacks counts "
                              "them", UserWarning, stacklevel=3)
        return out

    def response_format(self, schema: dict[str, Any]) -> dict[str, Any]:
        """The request's ``response_format`` for ``schema``, in the shape the ``response_format`` param names."""
        if self.params.response_format == "json_object":
            return {"type": "json_object", "schema": schema}
        return {"type": "json_schema", "json_schema": {"name": "rubric_scores", "schema": schema, "strict": True}}

    async def _complete_all(self, chats: list[Messages], headers: dict[str, str],
                            extra: dict[str, Any]) -> list[tuple[Completion, list[Any] | None]]:
        import httpx

        p = self.params
        slots = asyncio.Semaphore(p.concurrency)
        limits = httpx.Limits(max_connections=p.concurrency, max_keepalive_connections=p.concurrency)
        async with httpx.AsyncClient(timeout=httpx.Timeout(p.timeout), limits=limits, headers=headers,
                                     verify=tls_context()) as client:
            return list(await asyncio.gather(*(self._complete_one(client, slots, chat, extra) for chat in chats)))

    async def _complete_one(self, client: httpx.AsyncClient, slots: asyncio.Semaphore, messages: Messages,
                            extra: dict[str, Any]) -> tuple[Completion, list[Any] | None]:
        """The answer, and its ``logprobs.content`` (None when the server sent none)."""
        p = self.params
        payload = {"model": p.model, "messages": list(messages), "max_tokens": p.max_tokens,
                   "temperature": p.temperature, **extra}
        limiter = self.limiter
        # the most this request may cost, taken from the token bucket up front and settled with its usage
        estimate = approx_tokens("".join(str(m.get("content", "")) for m in messages)) + p.max_tokens
        gate = (lambda: limiter.acquire(estimate)) if limiter is not None else None
        out = await post_with_retries(client, self._url, payload, slots=slots, timeout=p.timeout,
                                      max_retries=p.max_retries, backoff=p.backoff, read=_content,
                                      malformed="no choices[0].message.content", delay=self.retry_delay, gate=gate,
                                      unavailable_timeout=p.unavailable_timeout,
                                      unavailable_where=f"{WHERE}.unavailable_timeout")
        if out.unavailable:
            raise EngineError(f"the judge server at {p.base_url} stopped answering and has not answered for "
                              f"{p.unavailable_timeout:g} s ({WHERE}.unavailable_timeout); last try: {out.error}; no "
                              "step is trained on scores it did not give", f"{WHERE}.base_url")
        answer = out.value
        if answer is None:
            return Completion(text=None, error=out.error, latency=out.latency, attempts=out.attempts), None
        if answer.usage_problem is not None:
            self._warn_usage(answer.usage_problem)
        elif limiter is not None:
            limiter.settle(estimate, answer.tokens_in + answer.tokens_out)  # type: ignore[operator]
        return Completion(text=answer.text, latency=out.latency, attempts=out.attempts, tokens_in=answer.tokens_in,
                          tokens_out=answer.tokens_out, tokens_cached=answer.tokens_cached), answer.tokens

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
