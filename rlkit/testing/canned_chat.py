"""A loopback OpenAI-compatible chat server that answers with canned text, for tests of what a judge backend is
asked to write (rubrics from references, verdicts) where the offline tiny model cannot write it.

It speaks just enough of the API for the ``openai`` judge backend: ``GET /v1/models`` and ``POST
/v1/chat/completions`` (answer in ``choices[0].message.content``). ``answer(messages) -> str`` decides each reply;
every request's messages are kept in :attr:`CannedChatServer.requests` (and its whole JSON body, ``response_format``
included, in :attr:`CannedChatServer.bodies`). ``port`` binds a given port (0: a free one), so a test can stop a
server and start another where the first was, as an engine restarted by its supervisor would be::

    with CannedChatServer(lambda messages: '{"criteria": []}') as server:
        server.url  # http://127.0.0.1:<port>/v1

For tests of what a judge spends, each answer carries OpenAI's ``usage`` (``prompt_tokens``: the whitespace-separated
words of the messages' contents, ``completion_tokens``: those of the answer; :func:`count_tokens`), and the server
counts what it served in :attr:`CannedChatServer.served` (answered calls and their tokens). ``usage`` may instead be
``None`` (no field) or a fixed object (a malformed one, say). For tests of rate limits: ``throttle_first`` answers the
next N chat requests with HTTP 429, and ``rate_limit=(n, seconds)`` answers 429 to a request that arrives when ``n``
were already answered within the last ``seconds`` by ``clock`` (pass a fake clock to count instead of timing);
:attr:`CannedChatServer.throttled` counts the 429s.

Structured outputs and log-probs, as the ``openai`` backend asks for them under ``scoring: expected``:

* ``response_format`` is read as llama.cpp's server reads it: ``json_schema`` with the schema nested as OpenAI nests
  it (``{"json_schema": {"schema": ...}}``), ``json_object`` with an optional ``schema`` (llama-cpp-python's form),
  ``text``; any other type is HTTP 400. The schema each request asked for (None: none) is kept in
  :attr:`CannedChatServer.schemas`; the canned answer is sent whatever it is.
* ``logprobs: true`` (with ``top_logprobs``, 0 to 20, which alone is HTTP 400, as OpenAI and llama-server answer)
  adds ``choices[0].logprobs.content`` in OpenAI's layout: one ``{token, logprob, bytes, top_logprobs}`` per token,
  the ``top_logprobs`` likeliest alternatives each. ``answer`` may return a list of :class:`Token` instead of text to
  say what those are (:func:`tokens_of` builds one from text, with chosen alternatives at chosen fields' values and
  an optional ```json fence, which stays out of ``content`` as llama.cpp's server strips it); a plain text answer is
  split by :func:`split_tokens`, each token certain. ``logprobs=False`` makes a server that never sends any.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Token:
    """One token of a canned answer: its text, its log-prob, and the alternatives the server lists at its position
    (``top``: token text -> log-prob; empty: the token alone, at its own log-prob)."""

    text: str
    logprob: float = 0.0
    top: dict[str, float] = field(default_factory=dict)


Answer = Callable[[list[dict[str, Any]]], str | list[Token]]
COUNTED = "count"  # `usage`: count the tokens as count_tokens does
MAX_TOP_LOGPROBS = 20  # OpenAI's cap on top_logprobs
# each token: one digit, a word, or one other character, with the spaces before it (a digit alone, as Llama 3's and
# Qwen's tokenizers split numbers); trailing spaces are a token of their own
_TOKEN = re.compile(r"\s*(?:\d|[^\W\d]\w*|[^\w\s])|\s+$")
_FENCED = re.compile(r"\A\s*```(?:json)?[ \t]*\n(.*?)\n?```\s*\Z", re.DOTALL)


def split_tokens(text: str) -> list[str]:
    """The server's tokenizer, deterministic: ``'{"a": 12}'`` -> ``'{', '"', 'a', '"', ':', ' 1', '2', '}'``; the
    tokens join to ``text``."""
    return _TOKEN.findall(text)


def tokens_of(text: str, alternatives: dict[str, dict[str, float]] | None = None, *,
              fence: bool = False) -> list[Token]:
    """``text`` as :func:`split_tokens` splits it, each token certain (log-prob 0), except the token that writes the
    value of each field named in ``alternatives`` (the first token after ``"<field>":``): the server lists those
    alternatives there (token text -> log-prob), and the written token gets the log-prob listed for its text, spaces
    aside. ``fence``: the stream opens with a ```json fence and closes it, as a llama.cpp model may write."""
    tokens = split_tokens(text)
    out = []
    for index, token in enumerate(tokens):
        written = "".join(tokens[:index]).rstrip()
        named = next((name for name in alternatives or {} if written.endswith(json.dumps(name) + ":")), None)
        if named is None or not token.strip():
            out.append(Token(token))
            continue
        top = (alternatives or {})[named]
        out.append(Token(token, top.get(token, top.get(token.strip(), 0.0)), dict(top)))
    if fence:
        out = [Token("```"), Token("json"), Token("\n"), *out, Token("\n"), Token("```")]
    return out


def _content(tokens: Sequence[Token]) -> str:
    """What a token stream shows as ``message.content``: its text, without a ```json fence around it."""
    text = "".join(t.text for t in tokens)
    fenced = _FENCED.match(text)
    return fenced.group(1) if fenced else text


def _logprobs(tokens: Sequence[Token], top: int) -> dict[str, Any]:
    """``choices[0].logprobs`` in OpenAI's layout: each token with its ``top`` likeliest alternatives."""

    def entry(text: str, logprob: float) -> dict[str, Any]:
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}

    content = []
    for token in tokens:
        listed = token.top or {token.text: token.logprob}
        likeliest = sorted(listed.items(), key=lambda item: -item[1])[:top]
        content.append({**entry(token.text, token.logprob), "top_logprobs": [entry(t, v) for t, v in likeliest]})
    return {"content": content, "refusal": None}


class _Refused(Exception):
    """A request the server answers with HTTP 400."""


def _schema(request: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema ``response_format`` asks for (None: none), read as llama.cpp's server reads it."""
    shape = request.get("response_format")
    if shape is None:
        return None
    kind = shape.get("type") if isinstance(shape, dict) else None
    if kind == "json_schema":
        nested = shape.get("json_schema")
        schema = nested.get("schema") if isinstance(nested, dict) else None
        if not isinstance(schema, dict):
            raise _Refused("response_format json_schema needs json_schema.schema, a JSON schema")
        return schema
    if kind == "json_object":
        schema = shape.get("schema", {})
        if not isinstance(schema, dict):
            raise _Refused("response_format json_object's schema must be a JSON schema")
        return schema
    if kind == "text":
        return None
    raise _Refused('response_format type must be one of "text", "json_object" or "json_schema"')


def _top_logprobs(request: dict[str, Any]) -> int | None:
    """How many alternatives to list per token (None: no log-probs asked), checked as OpenAI checks it."""
    asked, top = request.get("logprobs"), request.get("top_logprobs")
    if asked not in (None, True, False):
        raise _Refused(f"logprobs must be a boolean, got {asked!r}")
    if top is not None and (isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS):
        raise _Refused(f"top_logprobs must be an integer from 0 to {MAX_TOP_LOGPROBS}, got {top!r}")
    if top is not None and asked is not True:
        raise _Refused("logprobs must be set to true if top_logprobs is used")
    return (top or 0) if asked else None


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
                 rate_limit: tuple[int, float] | None = None, clock: Callable[[], float] = time.monotonic,
                 logprobs: bool = True, port: int = 0) -> None:
        self.answer = answer
        self.port = port  # 0: a free one; a test that restarts a stopped server passes its old port
        self.requests: list[list[dict[str, Any]]] = []
        self.bodies: list[dict[str, Any]] = []
        self.schemas: list[dict[str, Any] | None] = []  # the JSON schema each answered request asked for
        self.logprobs = logprobs  # False: log-probs asked for are never sent (a server without them)
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
                try:
                    schema, top = _schema(request), _top_logprobs(request)
                except _Refused as exc:
                    self._json(400, {"error": {"message": str(exc), "type": "invalid_request_error"}})
                    return
                with owner._lock:
                    owner.schemas.append(schema)
                said = owner.answer(messages)
                tokens = [Token(t) for t in split_tokens(said)] if isinstance(said, str) else list(said)
                text = said if isinstance(said, str) else _content(tokens)
                choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                          "finish_reason": "stop"}
                if top is not None and owner.logprobs:
                    choice["logprobs"] = _logprobs(tokens, top)
                body: dict[str, Any] = {"object": "chat.completion", "choices": [choice]}
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

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
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
