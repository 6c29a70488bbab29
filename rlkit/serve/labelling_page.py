"""``rlkit label serve <labelling file>``: the labelling file as a page in a browser, for the people who label.

A small FastAPI app on loopback only (reach it from another machine through an SSH tunnel, never an open port). The
page (``GET /``, no data in it) asks the labeller's name, then shows one completion at a time with its prompt,
reference and each dimension's description and anchors, or a group's completions side by side, shuffled, to rank.
Its data goes through ``/api/*``, which needs ``Authorization: Bearer <token>`` (the page reads the token from the
URL's ``#token=`` fragment, which browsers never send to a server or write to its logs):

* ``GET /api/tasks?labeller=NAME``: the lines as the page shows them (never the judge's scores) with this
  labeller's answers and progress;
* ``POST /api/label`` ``{labeller, line, key, dimension, level}`` (level null: skip);
* ``POST /api/rank`` ``{labeller, line, key, order}`` (tiers of completion indices, best first; null: skip).

Every answer goes through :func:`rlkit.evaluation.labelling_answers.save_answer` (lock, re-read, atomic replace). A
bad request is a 4xx with ``{"detail": "<one line>"}``: 401 without the token, 422 for a level outside the range or an
unknown line or dimension, 409 when the file changed under the page.
"""

# no `from __future__ import annotations`: FastAPI reads the endpoints' annotations, and the request models are
# local to create_label_app (pydantic and FastAPI load only when a page is served)
import errno
import hmac
import os
import random
import secrets
import signal
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError, DataError
from rlkit.evaluation.labelling import LABELLER_NAME_LIMIT, file_and_options, is_group, read_labelling
from rlkit.evaluation.labelling_answers import (
    AnswerError,
    StaleLineError,
    answered,
    apply_label,
    apply_ranking,
    line_key,
    progress,
    save_answer,
)

USAGE = "usage: rlkit label serve <labelling file> [port=8400] [api_key_env=NAME] [seed=0]"
DEFAULT_PORT = 8400
HOST = "127.0.0.1"  # loopback only: other machines come through `ssh -L`, so labels never cross a network in clear


def _dimension(dim: dict[str, Any]) -> dict[str, Any]:
    low, high = (int(v) for v in dim["range"])
    anchors = {float(k): text for k, text in (dim.get("anchors") or {}).items()}
    return {"name": dim["name"], "description": dim.get("description") or "",
            "levels": [{"level": v, "anchor": anchors.get(float(v), "")} for v in range(low, high + 1)]}


def page_item(number: int, line: dict[str, Any], labeller: str, seed: int) -> dict[str, Any]:
    """Line ``number`` as the page shows it to ``labeller``: what is labelled, never what the judge said."""
    item: dict[str, Any] = {"line": number, "key": line_key(line), "step": line.get("step"),
                            "prompt": str(line.get("prompt", "")), "reference": line.get("reference"),
                            "dimensions": [_dimension(d) for d in line["dimensions"]]}
    if is_group(line):
        shown = list(range(len(line["completions"])))
        # shuffled per labeller and group: no completion is always first, and the file's order (often the
        # generator's) says nothing
        random.Random(f"{seed}/{labeller}/{item['key']}").shuffle(shown)
        order = (line.get("rankings") or {}).get(labeller)
        item.update(kind="rank", completions=line["completions"], shown=shown, order=order,
                    answered=labeller in (line.get("rankings") or {}))
    else:
        item.update(kind="label", completion=line["completion"], answers=answered(line, labeller))
    return item


def page_token(options: dict[str, str], command: str = "rlkit label serve") -> str:
    """The page's bearer token: from ``api_key_env``'s variable, else a fresh random one."""
    name = options.get("api_key_env")
    if not name:
        return secrets.token_urlsafe(18)
    token = os.environ.get(name, "")
    if not token:
        raise ConfigError(f"the environment variable {name} is unset or empty; export it with the token",
                          f"{command} api_key_env")
    return token


def guard_api(app: Any, token: str, command: str, what: str) -> None:
    """``/api/*`` of a page's ``app`` behind ``Authorization: Bearer <token>`` (401 without it), and its errors as
    ``{"detail": "<one line>"}``: 422 for a malformed request or an ``AnswerError``, 409 for a stale line or
    ``what`` (the file) unreadable now."""
    from fastapi import Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    app.state.token = token
    expected = f"Bearer {token}".encode()

    def error(status: int, detail: str) -> JSONResponse:
        return JSONResponse({"detail": detail}, status_code=status)

    @app.middleware("http")
    async def need_token(request: Request, call_next: Any) -> Any:
        if request.url.path.startswith("/api/"):
            given = request.headers.get("authorization", "").encode()
            if not hmac.compare_digest(given, expected):  # constant time: no timing oracle
                return error(401, "missing or wrong bearer token (Authorization: Bearer <token>); open the URL "
                                  f"`{command}` printed, with its #token=")
        return await call_next(request)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body") or "body"
        return error(422, f"{where}: {first.get('msg')}")

    @app.exception_handler(DataError)
    async def bad_answer(request: Request, exc: DataError) -> JSONResponse:
        status = 422 if isinstance(exc, AnswerError) else 409
        return error(status, str(exc) if isinstance(exc, AnswerError | StaleLineError) else
                     f"{what} cannot be read now: {exc}")


def create_label_app(path: Path, token: str, seed: int = 0) -> Any:
    """The labelling page's app for ``path`` (checked readable first)."""
    from fastapi import FastAPI
    from fastapi.responses import HTMLResponse
    from pydantic import BaseModel, Field

    read_labelling(path)
    page_html = (Path(__file__).parent / "labelling_page.html").read_text(encoding="utf-8")
    app = FastAPI(title="rlkit labelling page", docs_url=None, redoc_url=None, openapi_url=None)

    class Label(BaseModel):
        labeller: str = Field(min_length=1, max_length=LABELLER_NAME_LIMIT)
        line: int
        key: str | None = None
        dimension: str
        level: int | None

    class Rank(BaseModel):
        labeller: str = Field(min_length=1, max_length=LABELLER_NAME_LIMIT)
        line: int
        key: str | None = None
        order: list[list[int]] | None

    guard_api(app, token, "rlkit label serve", "the labelling file")

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return page_html

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    def state(labeller: str) -> dict[str, Any]:
        lines = read_labelling(path)
        return {"file": path.name, "labeller": labeller,
                "items": [page_item(n, line, labeller, seed) for n, line in enumerate(lines, start=1)],
                "progress": progress(lines, labeller)}

    @app.get("/api/tasks")
    def tasks(labeller: str) -> dict[str, Any]:
        labeller = labeller.strip()
        if not labeller:
            raise AnswerError("a name is needed, to tell labellers apart", "labeller")
        return state(labeller)

    @app.post("/api/label")
    def label(answer: Label) -> dict[str, Any]:
        name = answer.labeller.strip()
        line = save_answer(path, answer.line, answer.key,
                           lambda line: apply_label(line, answer.dimension, answer.level, name))
        return {"answers": answered(line, name), "progress": progress(read_labelling(path), name)}

    @app.post("/api/rank")
    def rank(answer: Rank) -> dict[str, Any]:
        name = answer.labeller.strip()
        save_answer(path, answer.line, answer.key, lambda line: apply_ranking(line, answer.order, name))
        return {"order": answer.order, "progress": progress(read_labelling(path), name)}

    return app


def bind_loopback(port: int, command: str = "rlkit label serve") -> socket.socket:
    """A listening socket on loopback ``port`` (0: any free one); a port in use is one error line."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((HOST, port))
        sock.listen(64)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:  # said as rlkit serve says it
            raise ConfigError(f"port {port} on {HOST} is in use (another server?); pick another port=, or 0 for any "
                              "free one", f"{command} port") from None
        raise ConfigError(f"cannot listen on {HOST}:{port} ({exc.strerror or exc}); pick another port=, or 0 for any "
                          "free one", f"{command} port") from None
    return sock


def _options(args: Sequence[str]) -> tuple[Path, int, dict[str, str]]:
    path, options = file_and_options(args, ("port", "api_key_env", "seed"), ("port", "seed"), "rlkit label serve",
                                     USAGE)
    port = int(options.get("port", DEFAULT_PORT))
    if port > 65535:
        raise ConfigError("must be at most 65535", "rlkit label serve port")
    return path, port, options


def cmd_label_serve(args: Sequence[str]) -> int:
    """Serve the page until Ctrl-C; the URL to open (with its token) is the first line printed."""
    path, port, options = _options(args)
    lines = read_labelling(path)  # a wrong file is one error line now, not a page that fails later
    sock = bind_loopback(port)  # before the app is built (FastAPI imported): a port in use fails at once
    app = create_label_app(path, page_token(options), int(options.get("seed", 0)))
    bound = sock.getsockname()[1]
    groups = sum(is_group(line) for line in lines)
    print(f"labelling page for {path} ({len(lines) - groups} completions, {groups} groups to rank): "
          f"open http://{HOST}:{bound}/#token={app.state.token}", flush=True)
    print(f"from another machine: ssh -N -L {bound}:127.0.0.1:{bound} <this host>, then open the same URL there; "
          "Ctrl-C stops (every answer is already saved)", flush=True)
    serve_until_stopped(app, sock)
    return 0


def serve_until_stopped(app: Any, sock: socket.socket) -> None:
    """Serve ``app`` on ``sock`` until Ctrl-C, then close the socket."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5))
    # stopping the page is what Ctrl-C is for: Python's own handler under uvicorn (as `rlkit serve` does), so the
    # command line's interrupt guard does not report it as an interrupted command (exit 130)
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main_thread else None
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:
        pass
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        sock.close()
