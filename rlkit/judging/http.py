"""One HTTP POST with retries, shared by the clients that ask a remote server (the ``openai`` backend, the
``reward_api`` judge), so both follow the same schedule and failure rules.

* A timeout, a connection error, HTTP 429, any HTTP 5xx, and a 2xx whose body ``read`` cannot use are failed
  attempts and are retried, up to ``max_retries`` times after the first. Other HTTP errors (400, 401, 404, ...)
  are not: repeating them cannot help.
* Before retry ``k`` (0-based) the request waits ``min(backoff * 2**k, 30)`` seconds, or the server's numeric
  ``Retry-After`` if that is longer (also capped at 30 s). No jitter: the schedule is deterministic.
* The waits do not hold a concurrency slot, so a failing request does not starve the others.
* An endpoint that does not answer at all (a connection error or a timeout: an engine that died, hung or is
  restarting) is an outage, not a failed request, where the caller passes ``unavailable_timeout``: its requests go on
  retrying on the same schedule until the endpoint has been silent that many seconds (counted from its first
  unanswered attempt, and never before ``max_retries`` are spent), saying so once in one warning, and then come back
  ``unavailable`` so the caller stops rather than use a request that was never answered. Any HTTP answer, a 5xx
  included, means the server is up and follows the rules above. An outage is the endpoint's, kept per URL for the
  process: every request to it, whichever client sends it, waits on the one clock and one warning is said.
  An attempt sent before the endpoint's last answer that comes back unanswered is ambiguous (the outage that was
  over, or one that began after that answer: a server killed while answering its last requests refuses the ones
  still in flight); it is tried once more, at once and not counted against ``max_retries``, and the retry, sent
  after the answer, says which.
"""

from __future__ import annotations

import asyncio
import functools
import math
import ssl
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    import httpx

MAX_BACKOFF_S = 30.0
T = TypeVar("T")


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS settings every rlkit HTTP client passes as ``verify``: httpx builds a context per client by default,
    reading the CA bundle each time (~50 ms a client on this machine), which a client made per batch or per weight
    sync paid every step. Made once, from the same defaults (``SSL_CERT_FILE``/``SSL_CERT_DIR`` honoured)."""
    import httpx

    return httpx.create_ssl_context()


@dataclass(frozen=True)
class Attempt(Generic[T]):
    """The outcome of one HTTP attempt: the value ``read`` took from the response, or why there is none."""

    value: T | None
    error: str = ""
    retryable: bool = False
    retry_after: float | None = None
    unanswered: bool = False  # no HTTP answer at all (connection error, timeout): the endpoint may be down


@dataclass(frozen=True)
class Outcome(Generic[T]):
    """The outcome of a request after its retries: a value, or the last error and the attempts made."""

    value: T | None
    error: str
    attempts: int
    latency: float
    unavailable: bool = False  # the endpoint did not answer for ``unavailable_timeout``: stop, do not use the request


def snippet(text: str, limit: int = 200) -> str:
    """``text`` on one line, cut to ``limit`` characters: enough of an error body to say what went wrong."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def retry_after(response: httpx.Response) -> float | None:
    """The numeric ``Retry-After`` header in seconds, or None (absent, or an HTTP date: use our backoff)."""
    return retry_after_seconds(response.headers.get("retry-after"))


def retry_after_seconds(header: str | None) -> float | None:
    """A ``Retry-After`` header's value in seconds, or None (absent, or an HTTP date: use our backoff)."""
    try:
        value = float(header or "")
    except ValueError:
        return None
    return value if math.isfinite(value) and value >= 0 else None


def answered_attempt(status: int, text: Callable[[], str], value: Callable[[], T | None], malformed: str,
                     after: float | None = None) -> Attempt[T]:
    """An attempt the server answered with ``status``, judged by the module's rules: 429 and 5xx are retried (after
    ``after`` seconds if the server said), other non-2xx are final, a 2xx whose ``value()`` is None is malformed and
    retried. ``text()`` (the body, for the message) is read only for a failure."""
    if status == 429 or status >= 500:
        return Attempt(None, f"HTTP {status}: {snippet(text())}", retryable=True, retry_after=after)
    if not 200 <= status < 300:
        return Attempt(None, f"HTTP {status}: {snippet(text())}")
    answer = value()
    if answer is None:
        return Attempt(None, f"malformed response ({malformed}): {snippet(text())}", retryable=True)
    return Attempt(answer)


def retry_delay(backoff: float, retry: int, after: float | None = None) -> float:
    """Seconds to wait before retry ``retry`` (0-based): exponential, capped, no jitter."""
    delay = min(backoff * 2.0**retry, MAX_BACKOFF_S)
    if after is not None:
        delay = max(delay, min(after, MAX_BACKOFF_S))
    return delay


async def _attempt(client: httpx.AsyncClient, url: str, payload: Any, timeout: float,
                   read: Callable[[httpx.Response], T | None], malformed: str) -> Attempt[T]:
    import httpx

    try:
        # httpx's timeout bounds each phase; wait_for bounds the attempt as a whole.
        response = await asyncio.wait_for(client.post(url, json=payload), timeout=timeout)
    except (asyncio.TimeoutError, httpx.TimeoutException):
        return Attempt(None, f"timed out after {timeout:g} s", retryable=True, unanswered=True)
    except httpx.TransportError as exc:
        return Attempt(None, f"connection error: {type(exc).__name__}: {exc}", retryable=True, unanswered=True)
    except Exception as exc:  # e.g. a payload that is not JSON-serialisable: this request only
        return Attempt(None, f"request failed: {type(exc).__name__}: {exc}")
    return answered_attempt(response.status_code, lambda: response.text, lambda: read(response), malformed,
                            retry_after(response))


@dataclass
class _Endpoint:
    """What is known of one URL's availability: since when it has been silent (None: it answers), when it last
    answered, and whether the run was told that it waits."""

    silent_since: float | None = None
    answered_at: float = -math.inf
    warned: bool = False

    def answered(self) -> None:
        self.silent_since, self.answered_at, self.warned = None, time.monotonic(), False

    def unanswered(self, sent: float) -> float | None:
        """Record an attempt sent at ``sent`` that got no answer; when it began the endpoint's silence: None for an
        attempt sent before the endpoint last answered (it died with the outage that is over, and starts none)."""
        if sent < self.answered_at:
            return None
        if self.silent_since is None:
            self.silent_since = sent
        return self.silent_since


_ENDPOINTS: dict[str, _Endpoint] = {}  # by URL: an outage is the endpoint's, whichever client meets it


def endpoint_outage(url: str) -> float | None:
    """Seconds since ``url`` stopped answering, while requests to it wait for it (else None)."""
    since = _ENDPOINTS[url].silent_since if url in _ENDPOINTS else None
    return None if since is None else time.monotonic() - since


async def post_with_retries(client: httpx.AsyncClient, url: str, payload: Any, *, slots: asyncio.Semaphore,
                            timeout: float, max_retries: int, backoff: float,
                            read: Callable[[httpx.Response], T | None], malformed: str,
                            delay: Callable[[int, float | None], float] | None = None,
                            gate: Callable[[], Awaitable[None]] | None = None,
                            unavailable_timeout: float | None = None, unavailable_where: str = "") -> Outcome[T]:
    """POST ``payload`` as JSON until ``read`` returns a value or the retries are spent; never raises.

    ``gate`` (a rate limiter's ``acquire``) is awaited before every attempt, retries included (the server counts
    each), once a concurrency slot is held, so a request leaves when the limiter lets it and not later in a burst.

    With ``unavailable_timeout`` (seconds), an endpoint that does not answer is waited for that long (the module's
    docstring); the one warning names ``url`` and ``unavailable_where``, the setting that bounds the wait, and an
    outcome past it is ``unavailable``: the caller should stop at once, which cancels the requests still waiting."""
    began: float | None = None
    outcome: Attempt[T] = Attempt(None, "not attempted")
    attempts = 0
    endpoint = _ENDPOINTS.setdefault(url, _Endpoint())
    silent_since: float | None = None
    free = 0  # the one uncounted retry of an ambiguous unanswered attempt (the module's docstring)
    wait = delay or (lambda retry, after: retry_delay(backoff, retry, after))
    while True:
        if attempts > free:
            pause = wait(attempts - free - 1, outcome.retry_after)
            if silent_since is not None and unavailable_timeout is not None:  # the last try at the deadline
                pause = min(pause, max(silent_since + unavailable_timeout - time.monotonic(), 0.0))
            await asyncio.sleep(pause)
        async with slots:  # released during the backoff sleep, so a failing request holds no slot
            if gate is not None:
                await gate()
            if began is None:
                began = time.perf_counter()  # waiting for a slot or the rate limit is not latency
            sent = time.monotonic()
            outcome = await _attempt(client, url, payload, timeout, read, malformed)
        attempts += 1
        if not outcome.unanswered:
            endpoint.answered()  # any HTTP answer, a 5xx included: the server is up
        if outcome.value is not None or not outcome.retryable:
            break
        # None as well when the endpoint answered others since this attempt left: it is up, this request just failed
        silent_since = endpoint.unanswered(sent) if outcome.unanswered and unavailable_timeout is not None else None
        if outcome.unanswered and unavailable_timeout is not None and silent_since is None and not free:
            free = 1
            continue
        if silent_since is not None and unavailable_timeout is not None and attempts - free > max_retries:
            if time.monotonic() >= silent_since + unavailable_timeout:
                _ENDPOINTS.pop(url, None)  # given up: a later run's first silence is its own
                return _outcome(outcome, attempts, began, unavailable=True)
            if not endpoint.warned:
                endpoint.warned = True
                # printed, not warnings.warn: a second outage later in the run says the same words, and is news
                print(f"rlkit: warning: {url} is not answering ({outcome.error}); waiting up to "
                      f"{unavailable_timeout:g} s ({unavailable_where}) for it to answer again before the run stops",
                      file=sys.stderr, flush=True)
            continue
        if attempts - free > max_retries:
            break
    return _outcome(outcome, attempts, began)


def _outcome(last: Attempt[T], attempts: int, began: float | None, unavailable: bool = False) -> Outcome[T]:
    latency = time.perf_counter() - (began or time.perf_counter())
    error = "" if last.value is not None else f"{last.error} (after {attempts} attempt{'s' * (attempts != 1)})"
    return Outcome(last.value, error, attempts, latency, unavailable)


def run_async(make: Callable[[], Awaitable[T]], thread_name: str = "rlkit-http") -> T:
    """Run a coroutine to completion from synchronous code, even when called inside a running event loop
    (``asyncio.run`` refuses to nest; a worker thread has no loop of its own)."""

    def run() -> T:
        return asyncio.run(make())  # type: ignore[arg-type]

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return run()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name) as pool:
        return pool.submit(run).result()
