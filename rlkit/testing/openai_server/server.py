"""The test server itself: the served model (and a frozen reference beside it), injected faults, statistics, the
lifecycle, and chat completions; token completions and the weight routes come from their own modules."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlkit.judging import render_chat
from rlkit.testing.openai_server.decoding import TokenCompletions, _Job
from rlkit.testing.openai_server.handler import _Handler, _HTTPServer
from rlkit.testing.openai_server.weights import WeightRoutes
from rlkit.testing.openai_server.wire import (
    _DEFAULT_MAX_TOKENS,
    _GARBAGE,
    RequestRecord,
    _BadRequest,
    _messages,
    _number,
)


class OpenAICompatibleServer(TokenCompletions, WeightRoutes):
    """Serves one local causal LM over OpenAI's chat and token completions APIs (with vLLM's and SGLang's weight
    routes), with optional injected faults."""

    def __init__(self, model: str | Path | None = None, *, policy: tuple[Any, Any] | None = None,
                 model_name: str = "default", host: str = "127.0.0.1", port: int = 0, dtype: str = "float32",
                 api_key: str | None = None, garbage_rate: float = 0.0, fail_rate: float = 0.0,
                 fail_first: int = 0, delay: float = 0.0, seed: int = 0, batch_window_s: float = 0.005,
                 max_batch_rows: int = 512, reference: str | Path | None = None,
                 reference_name: str = "reference", runtime_lora: bool = True) -> None:
        """``model``: a local model directory or cached hub id (None: the embedded tiny policy); or pass an
        already loaded ``policy=(model, tokenizer)`` to share one between servers. Token completions that arrive
        within ``batch_window_s`` of each other are decoded together, at most ``max_batch_rows`` rows a pass.
        ``reference``: a model directory served, frozen, as ``reference_name`` beside it. ``runtime_lora=False``
        leaves out the LoRA routes (404), as vLLM without ``VLLM_ALLOW_RUNTIME_LORA_UPDATING`` does."""
        from rlkit.lm.models import build_tiny_policy, load_policy

        if policy is None:
            policy = load_policy(model if model is not None else build_tiny_policy(), dtype=dtype)
        self.model, self.tokenizer = policy
        self.model.eval()
        self.reference_model = None if reference is None else load_policy(reference, dtype=dtype)[0].eval()
        self.reference_name = reference_name
        self.runtime_lora = runtime_lora
        self.model_name = model_name
        self._dtype = dtype
        self.adapters: dict[str, str] = {}  # LoRA adapter name -> the directory it was loaded from
        self.weight_updates = 0
        self.api_key = api_key
        self._host, self._port = host, port
        self._lock = threading.Lock()  # faults, RNGs and statistics
        self._model_lock = threading.Lock()  # one generate at a time
        self._stopping = threading.Event()
        self._httpd: _HTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stop_ids = self._stop_token_ids()
        self.garbage_rate = self.fail_rate = self.delay = 0.0
        self._fail_left = 0
        self._in_flight = 0
        # requests received but not yet in the log: a request is recorded just before its answer is sent and
        # leaves the in-flight count only after, so counting both would count it twice in between
        self._unrecorded = 0
        self._request = threading.local()
        self.batch_window_s, self.max_batch_rows = batch_window_s, max_batch_rows
        self._waiting: list[_Job] = []  # token-completion requests not yet decoded, in arrival order
        self._queue_ready = threading.Condition()  # guards _waiting and _leading; notified when a lead ends
        self._leading = False
        self._last_arrival = 0.0  # time.monotonic() when the newest job joined _waiting
        self._seeds = random.Random(f"{seed}:sampling")  # for requests without a seed
        self.decode_passes = 0  # batched decodes run (a statistic: how well requests were batched)
        self.set_faults(garbage_rate=garbage_rate, fail_rate=fail_rate, fail_first=fail_first, delay=delay, seed=seed)
        self.reset_stats()

    # --- configuration and statistics ---------------------------------------------------------------------

    def set_faults(self, *, garbage_rate: float | None = None, fail_rate: float | None = None,
                   fail_first: int | None = None, delay: float | None = None, seed: int | None = None) -> None:
        """Change the injected faults; arguments left as None keep their value. A ``seed`` restarts both random
        streams; ``fail_first`` counts from now."""
        with self._lock:
            for name, value in (("garbage_rate", garbage_rate), ("fail_rate", fail_rate)):
                if value is not None:
                    if not 0.0 <= value <= 1.0:
                        raise ValueError(f"{name} must be in [0, 1], got {value}")
                    setattr(self, name, float(value))
            if fail_first is not None:
                if fail_first < 0:
                    raise ValueError(f"fail_first must be >= 0, got {fail_first}")
                self._fail_left = int(fail_first)
            if delay is not None:
                if delay < 0:
                    raise ValueError(f"delay must be >= 0, got {delay}")
                self.delay = float(delay)
            if seed is not None:
                # Separate streams, so changing one rate does not move the other's choices.
                self._fail_rng = random.Random(f"{seed}:fail")
                self._garbage_rng = random.Random(f"{seed}:garbage")

    def reset_stats(self) -> None:
        """Forget the recorded requests and the in-flight maximum (requests still running stay counted)."""
        with self._lock:
            self.log: list[RequestRecord] = []
            self.max_in_flight = self._in_flight

    @property
    def request_count(self) -> int:
        """Requests received (any method and path) since the last :meth:`reset_stats`."""
        with self._lock:
            return len(self.log) + self._unrecorded

    @property
    def authorizations(self) -> list[str | None]:
        """The ``Authorization`` header of each finished request, in the order they finished."""
        with self._lock:
            return [r.authorization for r in self.log]

    def served_usage(self, path: str = "/v1/chat/completions") -> dict[str, int]:
        """What the finished requests to ``path`` were answered with: ``calls`` (HTTP 200 with a body) and the
        ``prompt_tokens`` and ``completion_tokens`` their ``usage`` reported, for tests of what a client counts."""
        with self._lock:
            done = [r for r in self.log if r.path.rstrip("/") == path and r.status == 200 and r.fault is None]
        return {"calls": len(done), "prompt_tokens": sum(r.prompt_tokens for r in done),
                "completion_tokens": sum(r.completion_tokens for r in done)}

    def faults_served(self, fault: str) -> int:
        """How many finished requests got the injected ``fault`` (``fail`` or ``garbage``)."""
        with self._lock:
            return sum(r.fault == fault for r in self.log)

    # --- lifecycle ----------------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The base URL clients use, ending in ``/v1``."""
        if self._httpd is None:
            raise RuntimeError("the server is not running; call start() or use it as a context manager")
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> OpenAICompatibleServer:
        if self._httpd is not None:
            return self
        self._stopping.clear()
        httpd = _HTTPServer((self._host, self._port), _Handler)
        httpd.app = self
        self._httpd = httpd
        self._thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="rlkit-openai-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        httpd, self._httpd = self._httpd, None
        if httpd is None:
            return
        self._stopping.set()  # wakes requests sleeping in an injected delay
        httpd.shutdown()
        httpd.server_close()
        httpd.close_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def drop_connections(self) -> None:
        """Hang up every kept-alive connection and go on serving, as a server closes idle ones (uvicorn after 5 s):
        a client must notice and connect again."""
        if self._httpd is not None:
            self._httpd.close_connections()

    def __enter__(self) -> OpenAICompatibleServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- request handling (called from the handler threads) ----------------------------------------------

    @contextmanager
    def _track(self) -> Iterator[None]:
        with self._lock:
            self._in_flight += 1
            self._unrecorded += 1
            self.max_in_flight = max(self.max_in_flight, self._in_flight)
        self._request.recorded = False  # one handler thread serves its connection's requests one at a time
        try:
            yield
        finally:
            with self._lock:
                self._in_flight -= 1
                if not self._request.recorded:
                    self._unrecorded -= 1

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self.log.append(record)
            if getattr(self._request, "recorded", True) is False:
                self._request.recorded = True
                self._unrecorded -= 1

    def _draw_fault(self) -> tuple[str | None, int]:
        """(``fail``/``garbage``/None, status or garbage index) for the next chat request."""
        with self._lock:
            fail_draw, fail_pick = self._fail_rng.random(), self._fail_rng.random()
            garbage_draw, garbage_pick = self._garbage_rng.random(), self._garbage_rng.random()
            if self._fail_left > 0:
                self._fail_left -= 1
                return "fail", 503
            if fail_draw < self.fail_rate:
                return "fail", 500 if fail_pick < 0.5 else 503
            if garbage_draw < self.garbage_rate:
                return "garbage", int(garbage_pick * len(_GARBAGE))
            return None, 0

    def _auth_ok(self, authorization: str | None) -> bool:
        return self.api_key is None or authorization == f"Bearer {self.api_key}"

    def _stop_token_ids(self) -> set[int]:
        ids: set[int] = set()
        for source in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            if isinstance(source, int):
                ids.add(source)
            elif source:
                ids.update(int(i) for i in source)
        return ids

    @contextmanager
    def _serving(self, name: Any) -> Iterator[Any]:
        """Holds the model lock and yields the model set up to serve ``name`` (the base or a LoRA adapter)."""
        self._check_served(name)
        with self._model_lock, self._selected(name) as model:
            yield model

    def _served_names(self) -> list[str]:
        return [self.model_name, *([self.reference_name] if self.reference_model is not None else []),
                *self.adapters]

    def _check_served(self, name: Any) -> None:
        if name is not None and name not in self._served_names():
            # vLLM's words (OpenAIServing._check_model), then what is served
            raise _BadRequest(404, f"The model `{name}` does not exist. This server serves "
                                   + ", ".join(repr(n) for n in self._served_names()) + ".", "NotFoundError")

    @contextmanager
    def _selected(self, name: Any) -> Iterator[Any]:
        """The model set up to serve ``name``; the caller holds the model lock."""
        model = self.model
        if self.reference_model is not None and name == self.reference_name:
            yield self.reference_model
        elif name in self.adapters:  # checked again under the lock: an unload may have raced the request
            model.set_adapter(name)
            yield model
        elif name not in (None, self.model_name):
            raise _BadRequest(404, f"model {name!r} was unloaded", "not_found_error")
        elif self.adapters:
            with model.disable_adapter():
                yield model
        else:
            yield model

    def _chat_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        import torch

        if body.get("stream"):
            raise _BadRequest(400, "stream is not supported by this server")
        if body.get("n", 1) != 1:
            raise _BadRequest(400, "only n=1 is supported by this server")
        messages = _messages(body)
        max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
        max_tokens = _number({"max_tokens": max_tokens}, "max_tokens", _DEFAULT_MAX_TOKENS, 1, integer=True)
        temperature = float(_number(body, "temperature", 1.0, 0))
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise _BadRequest(400, f"'seed' must be an integer, got {seed!r}")
        tok = self.tokenizer
        enc = tok([render_chat(messages, tok)], return_tensors="pt", add_special_tokens=False)
        prompt_tokens = int(enc["input_ids"].shape[1])
        if prompt_tokens == 0:
            raise _BadRequest(400, "the messages render to an empty prompt")
        sample = temperature > 0
        with self._serving(body.get("model")) as model, torch.no_grad(), \
                torch.random.fork_rng(devices=[], enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            out = model.generate(
                input_ids=enc["input_ids"], attention_mask=enc["attention_mask"], max_new_tokens=max_tokens,
                do_sample=sample, temperature=temperature if sample else None, top_k=None, top_p=None,
                pad_token_id=tok.pad_token_id, eos_token_id=sorted(self._stop_ids) or None, use_cache=True,
            )
        new = out[0, prompt_tokens:].tolist()
        stop_at = next((i for i, t in enumerate(new) if t in self._stop_ids), None)
        kept = new if stop_at is None else new[:stop_at]
        completion_tokens = len(kept) + (stop_at is not None)
        text = tok.decode(kept, skip_special_tokens=True)
        with self._lock:
            number = len(self.log) + self._in_flight
        return {
            "id": f"chatcmpl-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                         "finish_reason": "length" if stop_at is None else "stop"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens},
        }

