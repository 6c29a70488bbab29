"""``rlkit serve``: the configured judge, aggregator and rubric behind an HTTP reward API (FastAPI).

``POST /v1/reward`` scores one group (a prompt and its responses, each a text or an episode; or one whole
conversation, ``messages``) with per-step scores for a rubric's step-scoped dimensions, ``POST /v1/rewards`` (also
at ``/get_reward``, OpenRLHF's path) a flat batch of prompt/completion rows as TRL's and OpenRLHF's remote reward
functions send it, ``GET /v1/info`` says which rubric it scores,
``GET /health`` answers without auth, and ``POST /v1/chat/completions`` answers OpenAI-style when the judge is a
generative model on the ``hf`` backend. ``/openapi.json`` is the schema. Guards, in order: bearer token (401),
per-client rate limit (429 with Retry-After), body size (413), strict JSON (422: no NaN/Infinity, no float
overflow, at most 64 levels deep); then FastAPI's validation (422), response caps (413) and the judging timeout
(504). A bad request is never a 5xx. Logs carry lengths and counts, never the texts.
"""

from __future__ import annotations

import asyncio
import errno
import hmac
import logging
import math
import os
import signal
import socket
import threading
import time
from collections.abc import Sequence
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlkit.config import CheckedConfig, ServeConfig, check_block
from rlkit.core.errors import ConfigError, RlkitError
from rlkit.core.rubric import Rubric
from rlkit.core.types import RewardBatch
from rlkit.evaluation.scoring import completion_ranks, judge_and_aggregate
from rlkit.integrations.scorer import RubricScorer
from rlkit.integrations.trl import completion_text
from rlkit.reward.episodes_io import judged_rollout, num_turns, step_lists
from rlkit.serve.protocol import (
    BatchRewardRequest,
    BatchRewardResponse,
    ChatRequest,
    ChatResponse,
    DimensionInfo,
    ErrorBody,
    InfoResponse,
    RewardRequest,
    RewardResponse,
    RubricInfo,
    ScoredResponse,
)
from rlkit.serve.strict_json import body_problem, echoable, is_json_content_type

log = logging.getLogger("rlkit.serve")
OPEN_PATHS = ("/health", "/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")


# The `serve` block's schema lives with every other block's (rlkit.config.schemas); the old name stays.
ServeSettings = ServeConfig


def serve_settings(cfg: DictConfig) -> ServeConfig:
    """Validate ``cfg.serve``; a bad value raises a ``ConfigError`` naming ``serve.<field>``."""
    node = cfg.get("serve")
    return check_block(ServeConfig, OmegaConf.to_container(node, resolve=True) if node is not None else {}, "serve")


def _rubric_info(rubric: Rubric, definition: bool = False) -> RubricInfo:
    dims = [DimensionInfo(name=d.name, type=d.type, low=d.low, high=d.high) for d in rubric.dimensions]
    return RubricInfo(**rubric.identity(), dimensions=dims, definition=rubric.canonical() if definition else None)


def score_group(validated: CheckedConfig, record: dict[str, Any], responses: Sequence[str | list[dict[str, Any]]]
                ) -> tuple[RewardBatch, list[dict[str, list[float | None]]] | None]:
    """One group (texts, or episodes as their messages after the prompt) through the judge, the output checks and
    aggregation, as ``rlkit score`` does per batch; with step-scoped dimensions in the rubric, each response's
    step scores ``{dimension: [score per turn]}``."""
    rollout = judged_rollout([record], [list(responses)])
    judge = validated.plugins["judge"]
    batch, steps = judge_and_aggregate(validated, rollout, lambda r: judge.score(r, validated.rubric))
    if steps is None:
        return batch, None
    return batch, [step_lists(steps[0, g], turns, validated.scored_rubric)
                   for g, turns in enumerate(num_turns(rollout)[0])]


def _chars(response: str | list[dict[str, Any]]) -> int:
    """A response's length: its text, or all its episode's messages' contents."""
    return len(response) if isinstance(response, str) else sum(len(m["content"]) for m in response)


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None  # JSON has no NaN or infinity; null is "not scored"


class _RateLimiter:
    """A token bucket per client: ``per_minute`` requests, refilled evenly."""

    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def wait(self, client: str) -> float:
        """0 when the request may go ahead (and is counted), else the seconds until it may."""
        if not self.per_minute:
            return 0.0
        now, rate = time.monotonic(), self.per_minute / 60.0
        with self._lock:
            if len(self._buckets) > 10_000:  # memory stays bounded: a bucket idle for a minute is full again
                self._buckets = {c: b for c, b in self._buckets.items() if now - b[1] < 60.0}
            tokens, last = self._buckets.get(client, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - last) * rate)
            if tokens >= 1:
                self._buckets[client] = (tokens - 1, now)
                return 0.0
            self._buckets[client] = (tokens, now)
            return (1 - tokens) / rate


def _guard(app: Any, settings: ServeSettings, token: str | None) -> Any:
    """ASGI middleware: auth, rate limit and body cap before FastAPI reads anything."""
    import json

    limiter = _RateLimiter(settings.rate_limit)

    async def send_json(send: Any, status: int, detail: Any, headers: list[tuple[bytes, bytes]] = ()) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *headers]})
        await send({"type": "http.response.body", "body": body})

    async def guarded(scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            return await app(scope, receive, send)
        headers = dict(scope["headers"])
        if token is not None:
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, f"Bearer {token}".encode()):  # constant time: no timing oracle
                log.info("%s %s: 401", scope["method"], scope["path"])
                return await send_json(send, 401, "missing or wrong bearer token (Authorization: Bearer <token>)",
                                       [(b"www-authenticate", b"Bearer")])
        wait = limiter.wait((scope.get("client") or ("?",))[0])  # one bucket per client address
        if wait:
            log.info("%s %s: 429", scope["method"], scope["path"])
            return await send_json(send, 429, f"rate limit of {settings.rate_limit} requests per minute exceeded",
                                   [(b"retry-after", str(math.ceil(wait)).encode())])
        limit = settings.max_body_bytes
        declared = headers.get(b"content-length")
        too_big = f"request body over serve.max_body_bytes={limit} bytes"
        if declared is not None and declared.isdigit() and int(declared) > limit:
            return await send_json(send, 413, too_big)
        # Read the body ourselves (chunked requests declare no length), then replay it to FastAPI.
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            size += len(chunks[-1])
            if size > limit:
                return await send_json(send, 413, too_big)
            if not message.get("more_body"):
                break
        body, sent = b"".join(chunks), False
        if body and scope["method"] in ("POST", "PUT", "PATCH") and is_json_content_type(headers.get(b"content-type")):
            problem = body_problem(body)
            if problem is not None:
                log.info("%s %s: 422, %s", scope["method"], scope["path"], problem["msg"])
                return await send_json(send, 422, [problem])

        async def replay() -> dict:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await app(scope, replay, send)

    return guarded


def create_app(validated: CheckedConfig, settings: ServeSettings) -> Any:
    """The reward API for a validated config: its judge, aggregator, weights and rubric, built once."""
    from fastapi import Depends, FastAPI, HTTPException
    from fastapi.encoders import jsonable_encoder
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse
    from fastapi.security import HTTPBearer

    judge_name = validated.plugin_names["judge"]
    judge = validated.plugins["judge"]
    lock = threading.Lock()  # judges are not thread-safe: one scoring call at a time
    token = (os.environ.get(settings.api_key_env) if settings.api_key_env else None) or None  # "" is unset
    if not token and settings.host not in ("127.0.0.1", "localhost", "::1"):
        log.warning("serving on %s without auth: set %s to require a bearer token", settings.host,
                    settings.api_key_env or "serve.api_key_env")
    info = InfoResponse(judge=judge_name, rubric=_rubric_info(validated.rubric),
                        scored_rubric=_rubric_info(validated.scored_rubric, definition=True),
                        chat_model=_chat_model(judge))
    errors = {code: {"model": ErrorBody} for code in (401, 413, 422, 429, 504)}
    # The guard checks the token; this only publishes the bearer scheme in the OpenAPI schema.
    secured = [] if token is None else [Depends(HTTPBearer(auto_error=False))]
    app = FastAPI(title="rlkit reward API", version="1",
                  description=f"Rewards from judge {judge_name!r} on rubric {validated.rubric.name} "
                              f"v{validated.rubric.version}.")

    async def in_worker(work: Any, what: str) -> Any:
        def locked() -> Any:
            with lock:
                return work()

        try:
            return await asyncio.wait_for(asyncio.to_thread(locked), settings.timeout_s)
        except asyncio.TimeoutError:
            raise HTTPException(504, f"{what} took longer than serve.timeout_s={settings.timeout_s:g} s") from None
        except RlkitError as exc:  # the judge refused this input (e.g. a reference that is not a number)
            raise HTTPException(422, str(exc)) from None

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Any, exc: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler echoes each input as is: a non-JSON body's bytes that are not UTF-8 made it a 500.
        return JSONResponse(status_code=422, content={"detail": jsonable_encoder(echoable(exc.errors()))})

    @app.get("/health", summary="Liveness; no auth")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/v1/info", response_model=InfoResponse, responses=errors, dependencies=secured)
    def get_info() -> InfoResponse:
        """The judge, the rubric it is asked with, and the rubric its scores follow (with its definition)."""
        return info

    @app.post("/v1/reward", response_model=RewardResponse, responses=errors, dependencies=secured)
    async def reward(request: RewardRequest) -> RewardResponse:
        """Score one group: a prompt and its responses (texts or episodes), or one conversation (``messages``),
        each with reward, rank, per-dimension scores and, for step-scoped dimensions, per-turn scores."""
        responses = request.response_records()
        n, longest = len(responses), max(map(_chars, responses))
        if n > settings.max_responses:
            raise HTTPException(413, f"{n} responses, over serve.max_responses={settings.max_responses}")
        if longest > settings.max_response_chars:
            raise HTTPException(413, f"a response of {longest} characters, over serve.max_response_chars="
                                     f"{settings.max_response_chars}")
        record = {**request.fields, "prompt": request.prompt_record()}
        began = time.perf_counter()
        batch, steps = await in_worker(lambda: score_group(validated, record, responses), "judging")
        log.info("reward: %d responses, %d chars, %.3f s", n, sum(map(_chars, responses)),
                 time.perf_counter() - began)
        rewards = [float(x) for x in batch.rewards[0].tolist()]
        names = batch.rubric.dimension_names
        results = [ScoredResponse(index=i, reward=_finite(r), rank=k,
                                  scores={d: _finite(float(v)) for d, v in zip(names, row, strict=True)},
                                  steps=None if steps is None else {
                                      d: [None if v is None else _finite(v) for v in values]
                                      for d, values in steps[i].items()})
                   for i, (r, k, row) in enumerate(zip(rewards, completion_ranks(rewards), batch.raw_scores[0].tolist(),
                                                       strict=True))]
        return RewardResponse(rubric=info.scored_rubric.identity(), judge=judge_name,
                              dimensions=info.scored_rubric.dimensions, results=results)

    scorer = RubricScorer(validated)

    async def rewards(request: BatchRewardRequest, unscored: float | None = None) -> BatchRewardResponse:
        """Score a flat batch, one completion per row (TRL's or OpenRLHF's shape), consecutive rows of one prompt
        forming a group. ``?unscored=0`` puts that number where no dimension could be scored, for clients (such as
        OpenRLHF) that need a number in every row; without it such a reward is null."""
        if unscored is not None and not math.isfinite(unscored):
            raise HTTPException(422, "unscored must be a finite number")
        records, completions = request.rows()
        texts = [completion_text(c) for c in completions]
        n, longest = len(texts), max(len(t) for t in texts)
        if n > settings.max_responses:
            raise HTTPException(413, f"{n} rows, over serve.max_responses={settings.max_responses}")
        if longest > settings.max_response_chars:
            raise HTTPException(413, f"a completion of {longest} characters, over serve.max_response_chars="
                                     f"{settings.max_response_chars}")
        began = time.perf_counter()
        scored = await in_worker(lambda: scorer.score(records, texts), "judging")
        log.info("rewards: %d rows, %d chars, %.3f s", n, sum(map(len, texts)), time.perf_counter() - began)
        values = [_finite(float(r)) for r in scored.rewards.tolist()]
        values = [unscored if v is None else v for v in values]
        logs = {name: [_finite(float(v)) for v in scored.raw[:, j].tolist()]
                for j, name in enumerate(scored.dimension_names)}
        return BatchRewardResponse(rewards=values, scores=values, extra_logs=logs, rubric=info.scored_rubric.identity())

    app.post("/v1/rewards", response_model=BatchRewardResponse, responses=errors, dependencies=secured,
             summary="Score a batch of prompt/completion rows (TRL's and OpenRLHF's remote reward shape)")(rewards)
    # OpenRLHF's reward servers answer at /get_reward (openrlhf/cli/serve_rm.py); the same call, left out of the schema
    app.post("/get_reward", response_model=BatchRewardResponse, responses=errors, dependencies=secured,
             include_in_schema=False)(rewards)

    @app.post("/v1/chat/completions", response_model=ChatResponse, responses={**errors, 404: {"model": ErrorBody}},
              dependencies=secured)
    async def chat(request: ChatRequest) -> ChatResponse:
        """OpenAI-style chat with the judge's own model (judges on the ``hf`` backend only)."""
        if info.chat_model is None:
            raise HTTPException(404, f"judge {judge_name!r} has no local generative model; /v1/chat/completions "
                                     "is served for a judge on the hf backend (e.g. judge=llm)")
        messages = [m.model_dump() for m in request.messages]
        done = await in_worker(lambda: judge.backend.get().complete([messages])[0], "generation")
        if done.text is None:
            raise HTTPException(502, f"the judge's backend failed: {done.error}")
        log.info("chat: %d messages -> %d chars", len(messages), len(done.text))
        return ChatResponse.answer(info.chat_model, done.text)

    app.add_middleware(_GuardMiddleware, settings=settings, token=token)
    return app


class _GuardMiddleware:
    def __init__(self, app: Any, settings: ServeSettings, token: str | None) -> None:
        self._call = _guard(app, settings, token)

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        await self._call(scope, receive, send)


def _chat_model(judge: Any) -> str | None:
    """The served model's name when the judge generates with a local model (an ``hf`` backend), else None."""
    return getattr(getattr(judge, "backend", None), "chat_model", None)


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host:port`` and listening; a port in use or a host that cannot be bound raises a
    ``ConfigError`` naming ``serve.port`` or ``serve.host``."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # a restart need not wait out TIME_WAIT
        sock.bind((host, port))
        sock.listen(2048)  # listening at once: a second server bound meanwhile (SO_REUSEADDR) fails here, not later
    except (OSError, UnicodeError) as exc:  # gaierror (an unknown host) is an OSError too
        sock.close()
        if getattr(exc, "errno", None) == errno.EADDRINUSE:
            raise ConfigError(f"port {port} on {host} is in use (another server?); pick a free serve.port, or 0 for "
                              "any free one", "serve.port") from None
        if getattr(exc, "errno", None) == errno.EACCES:
            raise ConfigError(f"port {port} on {host} needs privileges this process lacks; pick a serve.port "
                              "above 1023", "serve.port") from None
        raise ConfigError(f"cannot bind {host}:{port}: {getattr(exc, 'strerror', None) or exc}", "serve.host") from None
    return sock


class RewardServer:
    """uvicorn serving an app from a background thread (``with RewardServer(app) as s: s.url``), or in the
    foreground until Ctrl-C (:meth:`serve_forever`)."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0, log_level: str = "warning",
                 sock: socket.socket | None = None) -> None:
        import uvicorn

        # bound now (or by the caller, before loading the judge), so the port (a free one for 0) is known
        self._socket = listening_socket(host, port) if sock is None else sock
        self.host, self.port = host, self._socket.getsockname()[1]
        self._server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, timeout_graceful_shutdown=5))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """The base URL, e.g. ``http://127.0.0.1:8000``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def serve_forever(self) -> None:
        """Serve in this thread until Ctrl-C (SIGINT) or SIGTERM, which uvicorn turns into a clean shutdown."""
        # uvicorn raises the Ctrl-C again once it has shut down, through the handler it found: Python's own here, so it
        # arrives as a KeyboardInterrupt caught below, not as the command line's "interrupted" (exit 130): stopping
        # a server is what Ctrl-C is for
        main_thread = threading.current_thread() is threading.main_thread()
        previous = signal.signal(signal.SIGINT, signal.default_int_handler) if main_thread else None
        try:
            self._server.run(sockets=[self._socket])
        except KeyboardInterrupt:
            pass
        finally:
            if previous is not None:
                signal.signal(signal.SIGINT, previous)
            self._socket.close()

    def start(self) -> RewardServer:
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._socket]},
                                        name="rlkit-reward-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the reward server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self._socket.close()

    def __enter__(self) -> RewardServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
