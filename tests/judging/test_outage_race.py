"""A request the server drops just after answering another is the start of an outage or a request that failed; either
way it is tried again once, uncounted, so a judge killed mid-batch does not cost one completion its score while
``max_retries`` is 0 (benchmarks/faults.py's "judge server killed, restarted" row). A real loopback server."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx

from rlkit.judging.http import _ENDPOINTS, post_with_retries


class DropsTheFirstAfterAnsweringAnother(BaseHTTPRequestHandler):
    """``{"mode": "drop"}``: the first such request is held until an ``ok`` request has been answered, then its
    connection is closed with no answer (as a server killed mid-request does); later ones are answered."""

    answered_ok = threading.Event()
    dropped = threading.Event()

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body["mode"] == "drop" and not self.dropped.is_set():
            self.answered_ok.wait(10)
            time.sleep(0.2)  # the client has read the other answer by now
            self.dropped.set()
            self.close_connection = True
            self.connection.shutdown(2)
            return
        data = json.dumps({"value": body["mode"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
        if body["mode"] == "ok":
            self.answered_ok.set()

    def log_message(self, *args) -> None:
        pass


def test_a_request_dropped_after_the_endpoint_answered_another_is_tried_once_more_uncounted():
    server = ThreadingHTTPServer(("127.0.0.1", 0), DropsTheFirstAfterAnsweringAnother)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/score"
    _ENDPOINTS.pop(url, None)

    async def ask() -> list:
        slots = asyncio.Semaphore(4)
        async with httpx.AsyncClient() as client:
            def post(mode: str):
                return post_with_retries(client, url, {"mode": mode}, slots=slots, timeout=5.0, max_retries=0,
                                         backoff=0.01, read=lambda r: r.json()["value"], malformed="no value",
                                         unavailable_timeout=5.0, unavailable_where="test")

            dropped = asyncio.ensure_future(post("drop"))
            await asyncio.sleep(0.05)  # the dropped request leaves first, before the endpoint's answer
            return [await post("ok"), await dropped]

    try:
        ok, dropped = asyncio.run(ask())
    finally:
        server.shutdown()
    assert DropsTheFirstAfterAnsweringAnother.dropped.is_set()
    assert ok.value == "ok"
    assert dropped.value == "drop", dropped.error  # before: "connection error ... (after 1 attempt)"
    assert dropped.attempts == 2 and not dropped.unavailable
