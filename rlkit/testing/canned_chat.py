"""A loopback OpenAI-compatible chat server that answers with canned text, for tests of what a judge backend is
asked to write (rubrics from references, verdicts) where the offline tiny model cannot write it.

It speaks just enough of the API for the ``openai`` judge backend: ``GET /v1/models`` and ``POST
/v1/chat/completions`` (answer in ``choices[0].message.content``). ``answer(messages) -> str`` decides each reply;
every request's messages are kept in :attr:`CannedChatServer.requests` (and its whole JSON body, ``response_format``
included, in :attr:`CannedChatServer.bodies`)::

    with CannedChatServer(lambda messages: '{"criteria": []}') as server:
        server.url  # http://127.0.0.1:<port>/v1

For tests of what a judge spends, each answer carries OpenAI's ``usage`` (``prompt_tokens``: the whitespace-separated
words of the messages' contents, ``completion_tokens``: those of the answer; :func:`count_tokens`), and the server
counts what it served in :attr:`CannedChatServer.served` (answered calls and their tokens). ``usage`` may instead be
``None`` (no field) or a fixed object (a malformed one, say). For tests of rate limits: ``throttle_first`` answers the
next N chat requests with HTTP 429, and ``rate_limit=(n, seconds)`` answers 429 to a request that arrives when ``n``
were already answered within the last ``seconds`` by ``clock`` (pass a fake clock to count instead of timing);
:attr:`CannedChatServer.throttled` counts the 429s.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[list[dict[str, Any]]], str]
COUNTED = "count"  # `usage`: count the tokens as count_tokens does


def count_tokens(text: str) -> int:
    """The server's token count: whitespace-separated words (enough for tests to compare against)."""
    return len(text.split())


# what judge/rubric_scores.jinja lists: "* <name> (0 or 1): ..." or "* <name> (integer 1 to 5): ..."
_DIMENSION_LINE = re.compile(r"^\* (\S+) \((?:0 or 1|integer -?\d+ to -?\d+)\)", re.MULTILINE)


def scoring_request(messages: list[dict[str, Any]]) -> tuple[list[str], str] | None:
    """``(dimension names, response)`` of a request rendered from ``judge/rubric_scores.jinja`` (the ``llm`` judge's
    default template), or None for any other request."""
    text = str(messages[0].get("content", "")) if messages else ""
    names = _DIMENSION_LINE.findall(text)
    if not names or "\nRESPONSE:" not in text:
        return None
    response = text.rsplit("\nRESPONSE:", 1)[1]
    return names, response.removeprefix("\n")  # an empty response leaves no newline (the template's end is trimmed)


def score_each_dimension(verdict: Callable[[str, str], int], otherwise: Answer) -> Answer:
    """An answer for :class:`CannedChatServer`: a scoring request gets ``{name: verdict(name, response)}`` for every
    dimension it lists; any other request is answered by ``otherwise``."""

    def answer(messages: list[dict[str, Any]]) -> str:
        asked = scoring_request(messages)
        if asked is None:
            return otherwise(messages)
        names, response = asked
        return json.dumps({name: verdict(name, response) for name in names})

    return answer


class CannedChatServer:
    """Binds ``127.0.0.1`` on a free port; serves in a daemon thread between ``start`` and ``stop``."""

    def __init__(self, answer: Answer, *, usage: Any = COUNTED, throttle_first: int = 0,
                 rate_limit: tuple[int, float] | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.answer = answer
        self.requests: list[list[dict[str, Any]]] = []
        self.bodies: list[dict[str, Any]] = []
        self.usage = usage
        self.served = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}  # chat answers sent (HTTP 200)
        self.throttled = 0  # HTTP 429s sent
        self.throttle_first = throttle_first
        self.rate_limit, self.clock = rate_limit, clock
        self._answered_at: deque[float] = deque()  # when the answers within the rate-limit window were given
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "start the server first"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> CannedChatServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
                pass  # a test's output is no place for an access log

            def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                if self.path.rstrip("/") == "/v1/models":
                    self._json(200, {"object": "list", "data": [{"id": "canned", "object": "model"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._json(404, {"error": {"message": f"no route {self.path}"}})
                    return
                request = json.loads(raw or b"{}")
                messages = request.get("messages") or []
                wait = owner._throttle()
                if wait is not None:
                    self._json(429, {"error": {"message": "rate limit reached", "type": "rate_limit_error"}},
                               {"Retry-After": f"{wait:g}"})
                    return
                with owner._lock:
                    owner.requests.append(messages)
                    owner.bodies.append(request)
                text = owner.answer(messages)
                body: dict[str, Any] = {"object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]}
                prompt_tokens = sum(count_tokens(str(m.get("content", ""))) for m in messages)
                completion_tokens = count_tokens(text)
                if owner.usage == COUNTED:
                    body["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                                     "total_tokens": prompt_tokens + completion_tokens}
                elif owner.usage is not None:
                    body["usage"] = owner.usage
                with owner._lock:
                    owner.served["calls"] += 1
                    owner.served["prompt_tokens"] += prompt_tokens
                    owner.served["completion_tokens"] += completion_tokens
                self._json(200, body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="canned-chat", daemon=True)
        self._thread.start()
        return self

    def _throttle(self) -> float | None:
        """Seconds the client should wait when this request is answered 429, else None (and it counts as answered)."""
        with self._lock:
            if self.throttle_first > 0:
                self.throttle_first -= 1
                self.throttled += 1
                return 0.0
            if self.rate_limit is None:
                return None
            limit, window = self.rate_limit
            now = self.clock()
            while self._answered_at and self._answered_at[0] <= now - window:
                self._answered_at.popleft()
            if len(self._answered_at) >= limit:
                self.throttled += 1
                return window
            self._answered_at.append(now)
            return None

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> CannedChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
