"""The test server's HTTP side (``http.server`` in background threads, kept-alive connections): routes each request
to the server's handlers, records it, and answers in OpenAI's (or SGLang's) error shapes."""

from __future__ import annotations

import json
import threading
from contextlib import suppress
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from rlkit.core.timeline import span
from rlkit.testing.openai_server.weights import _ADMIN_ROUTES
from rlkit.testing.openai_server.wire import _GARBAGE, RequestRecord, _BadRequest, _json_object

if TYPE_CHECKING:
    from rlkit.testing.openai_server.server import OpenAICompatibleServer


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog of 5 drops the SYNs of a larger burst of new connections, and the client
    # retransmits them a second later: a generator opening 8 connections at once waited ~1 s a step for that
    request_queue_size = 128
    app: OpenAICompatibleServer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._connections: set[Any] = set()
        self._connections_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Hang up every kept-alive connection, as a server process that dies does: ``shutdown`` only stops
        accepting new ones, and a client holding one open would otherwise go on being answered."""
        import socket

        with self._connections_lock:
            connections, self._connections = list(self._connections), set()
        for connection in connections:
            with suppress(OSError):
                connection.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if isinstance(sys.exc_info()[1], ConnectionError):
            return  # a client that timed out and hung up
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as real servers do; every response sets Content-Length
    # headers and body go out as two writes: with Nagle's algorithm on, a kept-alive connection's body waited for
    # the client's delayed ACK (~40 ms on Linux), as uvicorn and every engine's server avoid with TCP_NODELAY
    disable_nagle_algorithm = True
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's signature
        pass  # tests run many requests; access logs are noise

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except ConnectionError:
            self.close_connection = True  # the client gave up (timeout) before the answer

    def _send_json(self, status: int, payload: dict[str, Any]) -> None:
        self._send(status, json.dumps(payload).encode())

    def _send_error_json(self, status: int, message: str, kind: str) -> None:
        self._send_json(status, {"error": {"message": message, "type": kind, "code": status}})

    def _read_body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length > 0 else b""

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        app = self.server.app
        authorization = self.headers.get("Authorization")
        with app._track():
            if not app._auth_ok(authorization):
                answer = partial(self._send_error_json, 401, "invalid or missing API key", "authentication_error")
            elif self.path.rstrip("/") == "/v1/models":
                answer = partial(self._send_json, 200, {"object": "list", "data": [
                    {"id": app.model_name, "object": "model", "created": 0, "owned_by": "rlkit"},
                    *([{"id": app.reference_name, "object": "model", "created": 0, "owned_by": "rlkit"}]
                      if app.reference_model is not None else []),
                    *({"id": name, "object": "model", "created": 0, "owned_by": "rlkit", "root": path,
                       "parent": app.model_name} for name, path in list(app.adapters.items()))]})
            else:
                answer = partial(self._send_error_json, 404, f"no route {self.path}", "not_found_error")
            app._record(RequestRecord("GET", self.path, authorization, answer.args[0]))  # before answering
            answer()

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        app = self.server.app
        authorization = self.headers.get("Authorization")
        with app._track():
            with span("server", "read request"):
                raw = self._read_body()  # always drain the body, or keep-alive desynchronises
            route = self.path.rstrip("/")
            if route in _ADMIN_ROUTES and (app.runtime_lora or "lora" not in route):
                self._admin(route, raw, authorization)
                return
            if route not in ("/v1/chat/completions", "/v1/completions"):
                self._send_error_json(404, f"no route {self.path}", "not_found_error")
                app._record(RequestRecord("POST", self.path, authorization, 404))
                return
            fault, detail = app._draw_fault()
            if app.delay and app._stopping.wait(app.delay):
                self.close_connection = True  # shutting down: no answer, as a server going away would
                app._record(RequestRecord("POST", self.path, authorization, 0, None))
                return
            status = 200
            usage: dict[str, Any] = {}
            try:
                if not app._auth_ok(authorization):
                    raise _BadRequest(401, "invalid or missing API key", "authentication_error")
                if fault == "fail":
                    raise _BadRequest(detail, "injected failure", "server_error")
                body = _json_object(raw)
                if fault == "garbage":
                    content_type, garbage = _GARBAGE[detail]
                    answer = partial(self._send, 200, garbage, content_type)
                else:
                    handle = app._completion if route == "/v1/completions" else app._chat_completion
                    result = handle(body)
                    usage = result.get("usage") or {}
                    answer = partial(self._send_json, 200, result)
            except _BadRequest as exc:
                status = exc.status
                answer = partial(self._send_error_json, exc.status, exc.message, exc.kind)
            except Exception as exc:  # a server bug must still answer, or the client waits for its timeout
                status = 500
                answer = partial(self._send_error_json, 500, f"{type(exc).__name__}: {exc}", "server_error")
            # Recorded before answering: a client that has its answer finds its request in the log.
            app._record(RequestRecord("POST", self.path, authorization, status,
                                      fault if status in (200, 500, 503) and fault else None,
                                      usage.get("prompt_tokens", 0), usage.get("completion_tokens", 0)))
            with span("server", "send answer"):
                answer()

    def _admin(self, route: str, raw: bytes, authorization: str | None) -> None:
        app = self.server.app
        status = 200
        try:
            if not app._auth_ok(authorization):
                raise _BadRequest(401, "invalid or missing API key", "authentication_error")
            body = _json_object(raw)
            with span("server", _ADMIN_ROUTES[route].strip("_").replace("_", " ")):  # "update weights from disk"
                result = getattr(app, _ADMIN_ROUTES[route])(body)
            if isinstance(result, str):  # vLLM answers the LoRA routes with a plain-text line
                answer = partial(self._send, 200, result.encode(), "text/plain; charset=utf-8")
            else:
                answer = partial(self._send_json, 200, result)
        except _BadRequest as exc:
            status = exc.status
            if route == "/update_weights_from_disk":  # SGLang's shape, failures included
                answer = partial(self._send_json, exc.status, {"success": False, "message": exc.message})
            else:
                answer = partial(self._send_error_json, exc.status, exc.message, exc.kind)
        except Exception as exc:
            status = 500
            answer = partial(self._send_error_json, 500, f"{type(exc).__name__}: {exc}", "server_error")
        app._record(RequestRecord("POST", self.path, authorization, status))
        answer()

