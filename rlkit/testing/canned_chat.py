"""A loopback OpenAI-compatible chat server that answers with canned text, for tests of what a judge backend is
asked to write (rubrics from references, verdicts) where the offline tiny model cannot write it.

It speaks just enough of the API for the ``openai`` judge backend: ``GET /v1/models`` and ``POST
/v1/chat/completions`` (answer in ``choices[0].message.content``). ``answer(messages) -> str`` decides each reply;
every request's messages are kept in :attr:`CannedChatServer.requests`::

    with CannedChatServer(lambda messages: '{"criteria": []}') as server:
        server.url  # http://127.0.0.1:<port>/v1
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[list[dict[str, Any]]], str]


class CannedChatServer:
    """Binds ``127.0.0.1`` on a free port; serves in a daemon thread between ``start`` and ``stop``."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer
        self.requests: list[list[dict[str, Any]]] = []
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

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
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
                messages = json.loads(raw or b"{}").get("messages") or []
                with owner._lock:
                    owner.requests.append(messages)
                text = owner.answer(messages)
                self._json(200, {"object": "chat.completion", "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="canned-chat", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> CannedChatServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
