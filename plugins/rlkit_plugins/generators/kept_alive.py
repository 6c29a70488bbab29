"""POSTs to an inference engine written on the caller's thread when sent and read back when needed, over kept-alive
HTTP/1.1 connections (the ``openai_server`` generator's transport).

Why not an asynchronous client on a thread of its own: a step overlaps the engine's sampling with judging and
training, which run Python on the loop's thread, and a client thread in the same process competes with them for the
GIL. Measured on the tiny policy (``benchmarks/vs_trl.py``), httpx on a background event loop stretched the step's
judging from 2 to 15 ms and delayed its requests' arrival at the engine by ~6 ms. Here sending a request is a write to
a socket (well under a millisecond), and its answer waits in the socket's buffer while the engine samples and the
loop trains, until the batch is read.

Failures follow rlkit's shared rules (``rlkit.plugin.answered_attempt``): a timeout, a connection error, 429, 5xx
or an answer ``read`` cannot use is retried; other HTTP errors are final. A kept-alive connection the server has
closed meanwhile (uvicorn closes idle ones after 5 s) is noticed before reuse, as urllib3 does, and a request it
still loses is sent once more on a fresh connection without counting as a retry. Connections go straight to the
server (no HTTP proxy). With ``unavailable_timeout``, a server that does not answer at all (refused, reset, timed
out: an engine that died or is restarting) is waited for that long past the retries, from its first silence, said
once, as the judges' requests wait (``rlkit.plugin.post_with_retries``); any answer ends the silence.
"""

from __future__ import annotations

import http.client
import select
import sys
import time
import urllib.parse
from collections import deque
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from rlkit.plugin import Attempt, answered_attempt, retry_after_seconds, retry_delay, tls_context

T = TypeVar("T")
_LOST = (OSError, http.client.HTTPException)  # a refused, reset or closed connection, a bad status line


class EngineConnections:
    """Kept-alive connections to one server, for one thread."""

    def __init__(self, base_url: str, headers: dict[str, str], timeout: float) -> None:
        url = urllib.parse.urlsplit(base_url)
        self._https = url.scheme == "https"
        self._host = url.hostname or "127.0.0.1"
        self._port = url.port or (443 if self._https else 80)
        self.headers = {"Content-Type": "application/json", **headers}
        self.timeout = timeout
        self._idle: list[http.client.HTTPConnection] = []

    def fresh(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(self._host, self._port, timeout=self.timeout, context=tls_context())
        return http.client.HTTPConnection(self._host, self._port, timeout=self.timeout)

    def take(self) -> tuple[http.client.HTTPConnection, bool]:
        """An idle connection the server has not closed, else a new one; and whether it was reused."""
        while self._idle:
            connection = self._idle.pop()
            # an idle socket with something to read has been closed (or reset) by the server
            if connection.sock is not None and not select.select([connection.sock], [], [], 0)[0]:
                return connection, True
            connection.close()
        return self.fresh(), False

    def give_back(self, connection: http.client.HTTPConnection) -> None:
        self._idle.append(connection)

    def post(self, path: str, body: bytes) -> Exchange:
        """Send ``body`` to ``path`` now; the exchange's ``answer`` reads the reply."""
        exchange = Exchange(self, path, body)
        exchange.send()
        return exchange

    def close(self) -> None:
        for connection in self._idle:
            connection.close()
        self._idle.clear()


class Exchange:
    """One POST sent, its answer not read yet."""

    def __init__(self, connections: EngineConnections, path: str, body: bytes) -> None:
        self._connections, self.path, self._body = connections, path, body
        self._connection: http.client.HTTPConnection | None = None
        self._reused = False
        self._error = "not sent"

    def send(self, fresh: bool = False) -> None:
        connection, reused = (self._connections.fresh(), False) if fresh else self._connections.take()
        try:
            connection.request("POST", self.path, self._body, self._connections.headers)
        except _LOST as exc:
            connection.close()
            if reused:  # closed by the server after the check: once more, on a new connection
                self.send(fresh=True)
            else:
                self._connection, self._error = None, _lost(exc)
            return
        self._connection, self._reused = connection, reused

    def answer(self, read: Callable[[bytes], T | None], malformed: str) -> Attempt[T]:
        """Wait for the reply (at most the timeout between bytes) and judge it; the connection goes back to the
        pool unless the server closes it."""
        connection = self._connection
        if connection is None:
            return Attempt(None, self._error, retryable=True, unanswered=True)
        self._connection = None
        try:
            response = connection.getresponse()
            body = response.read()
        except TimeoutError:
            connection.close()
            return Attempt(None, f"timed out after {self._connections.timeout:g} s", retryable=True, unanswered=True)
        except _LOST as exc:
            connection.close()
            if self._reused:  # the server closed the kept-alive connection as the request went out
                self.send(fresh=True)
                return self.answer(read, malformed)
            return Attempt(None, _lost(exc), retryable=True, unanswered=True)
        if response.will_close:
            connection.close()
        else:
            self._connections.give_back(connection)
        return answered_attempt(response.status, lambda: body.decode("utf-8", "replace"), lambda: read(body),
                                malformed, retry_after_seconds(response.getheader("retry-after")))

    def abandon(self) -> None:
        """Close the connection without reading the reply (the engine's answer is no longer wanted)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class RequestsOut(Generic[T]):
    """``bodies`` POSTed to one path, at most ``window`` out at once (the rest sent as answers free their places)."""

    def __init__(self, connections: EngineConnections, path: str, bodies: list[bytes], window: int) -> None:
        self._connections, self._path, self._bodies, self._window = connections, path, bodies, window
        self._held: deque[int] = deque(range(len(bodies)))  # not sent yet
        self._sent: dict[int, Exchange] = {}
        self._send_more()

    def _send_more(self) -> None:
        while self._held and len(self._sent) < self._window:
            i = self._held.popleft()
            self._sent[i] = self._connections.post(self._path, self._bodies[i])

    def collect(self, read: Callable[[bytes], T | None], malformed: str, retries: int, backoff: float,
                unavailable_timeout: float | None = None, unavailable_where: str = ""
                ) -> tuple[list[T | None], tuple[int, str] | None]:
        """Read every answer: first attempts in order, then rounds of retries for the failed ones after rlkit's
        backoff, and past ``retries`` while the server is silent and ``unavailable_timeout`` allows (the module's
        docstring). Returns the values, and the first request that failed for good with its error (the rest hung
        up)."""
        values: list[T | None] = [None] * len(self._bodies)
        failed: dict[int, Attempt] = {}
        silent_since: float | None = None
        attempt = 0
        while True:
            attempt += 1
            if failed:
                after = [a.retry_after for a in failed.values() if a.retry_after is not None]
                pause = retry_delay(backoff, attempt - 2, max(after, default=None))
                if silent_since is not None and unavailable_timeout is not None:  # the last try at the deadline
                    pause = min(pause, max(silent_since + unavailable_timeout - time.monotonic(), 0.0))
                time.sleep(pause)
                self._held.extend(sorted(failed))
                failed = {}
                self._send_more()
            while self._sent:
                i = min(self._sent)
                outcome = self._sent.pop(i).answer(read, malformed)
                self._send_more()
                if not outcome.unanswered:
                    silent_since = None  # any answer: the server is up, and a later silence is news
                    self._warned.discard(unavailable_where)
                if outcome.value is not None:
                    values[i] = outcome.value
                elif outcome.retryable and (attempt <= retries or self._waits(outcome, silent_since,
                                                                              unavailable_timeout, unavailable_where)):
                    if outcome.unanswered and silent_since is None:
                        silent_since = time.monotonic()
                    failed[i] = outcome
                else:
                    self.abandon()
                    return values, (i, f"{outcome.error} (after {attempt} attempt{'s' * (attempt != 1)})")
            if not failed:
                break
        return values, None

    _warned: set[str] = set()  # endpoints whose silence was said, once per process

    @classmethod
    def _waits(cls, outcome: Attempt, silent_since: float | None, timeout: float | None, where: str) -> bool:
        """Whether a request past its retries goes on waiting for a silent server."""
        if not outcome.unanswered or not timeout:  # None or 0: no wait past the retries
            return False
        if silent_since is not None and time.monotonic() >= silent_since + timeout:
            return False
        if where not in cls._warned:
            cls._warned.add(where)
            print(f"rlkit: warning: the engine is not answering ({outcome.error}); waiting up to {timeout:g} s "
                  f"({where}) for it to answer again before the run stops", file=sys.stderr, flush=True)
        return True

    def abandon(self) -> None:
        """Hang up the requests still out and drop those not sent: their answers are no longer wanted."""
        for exchange in self._sent.values():
            exchange.abandon()
        self._sent = {}
        self._held.clear()


def _lost(exc: Any) -> str:
    return f"connection error: {type(exc).__name__}: {exc}"
