"""A small OpenAI-compatible server for tests and local use, serving a local causal LM.

It answers ``POST /v1/chat/completions``, ``POST /v1/completions`` and ``GET /v1/models`` with a real Hugging Face
model loaded by :func:`rlkit.lm.models.load_policy` (the embedded tiny policy by default), using only the standard
library (``http.server`` in a background thread), so it adds no dependency beyond rlkit's own (peft for LoRA).
It binds ``127.0.0.1`` on a free port unless told otherwise; :attr:`OpenAICompatibleServer.url` is the base URL a
client needs (``.../v1``)::

    from rlkit.testing.openai_server import OpenAICompatibleServer

    with OpenAICompatibleServer() as server:          # the tiny policy
        print(server.url)                             # http://127.0.0.1:<port>/v1

Requests: ``messages`` (``content`` a string or a list of ``{"type": "text", "text": ...}`` parts) are rendered
with the tokenizer's chat template when it has one, else as ``role: content`` lines followed by ``assistant:``
(the ``hf`` judge backend renders the same way); ``max_tokens`` (or ``max_completion_tokens``, default 16);
``temperature`` (default 1.0 as in OpenAI's API; 0 is greedy); ``seed`` (makes sampling repeatable). Chat
requests run the model one at a time. Token completions are batched as an engine batches them: requests that arrive
less than ``batch_window_s`` apart are decoded in one left-padded pass (per group of equal sampling
settings), so B concurrent requests cost about one batched ``generate``, not B.

Token completions, weight updates and LoRA adapters speak the routes and fields of vLLM (>= 0.10.2) and SGLang, so
an RL generator talks to this server as it would to them (``rlkit_plugins.generators.openai_server``):

* ``POST /v1/completions`` (vLLM's ``CompletionRequest``): ``prompt`` as token ids (a list of ints, or a list of
  such lists; a string or list of strings is tokenised without special tokens), ``n`` (default 1),
  ``max_tokens`` (default 16), ``min_tokens`` (vLLM's: no EOS before that many; default 0), ``temperature``
  (default 1.0; 0 is greedy), ``seed`` (each sample's noise is a hash of the seed, its prompt's index and its
  own index: the Gumbel-max draw of ``rlkit.lm.seeded``, so a request gets the same samples whatever else is
  decoded beside it; one prompt with seed s draws what the ``hf`` generator's ``per_prompt_seed`` draws for a
  record with seed s), ``logprobs`` (an int >= 0: return log-probs),
  ``return_token_ids`` (vLLM's extension: ``token_ids`` and
  ``prompt_token_ids`` per choice), ``return_tokens_as_token_ids`` (``logprobs.tokens`` as ``"token_id:<id>"``),
  ``model`` (the served name, or a loaded LoRA adapter's name). The answer is vLLM's ``CompletionResponse``:
  ``choices`` ordered prompt by prompt, each prompt's ``n`` consecutive, ``index`` = prompt index × n + sample;
  each with ``text`` (special tokens skipped), ``finish_reason`` (``stop`` at an EOS, which ``token_ids`` and the
  log-probs include, else ``length``), ``token_ids``/``prompt_token_ids`` (or null), and ``logprobs`` (null
  unless asked): ``tokens``, ``token_logprobs``, ``top_logprobs`` (the sampled token and the ``logprobs`` most
  likely ones), ``text_offset``. Each log-prob is the sampled token's under the raw logits of the serving model
  (log-softmax at temperature 1, before temperature or any other processing): vLLM's ``raw_logprobs``
  ``logprobs_mode``, which is what a trainer compares with its own policy's log-probs. ``prompt_logprobs`` (vLLM's
  extension, an int >= 0) adds each choice's ``prompt_logprobs``: None for the first prompt token, then for each
  later one ``{"<token id>": {"logprob", "rank", "decoded_token"}}``, its raw log-prob given the tokens before it.
  With ``max_tokens`` 1 at temperature 0 one forward pass gives both (how a trainer scores sequences).
* A second, frozen model (``reference=PATH``, ``--reference-model``) is served under ``reference_name``
  (``"reference"``): weight updates and adapters never touch it, as a vLLM base model stays the reference for a
  LoRA policy. Its requests share the one model lock, in arrival order.
* ``POST /update_weights_from_disk`` (SGLang's route): ``{"model_path": DIR}`` reloads the model (and tokenizer)
  from that directory, dropping any LoRA adapters; answers ``{"success": true, "message": ...}`` (HTTP 400 with
  ``success: false`` when it cannot).
* ``POST /v1/load_lora_adapter`` (vLLM's route; vLLM needs ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``):
  ``{"lora_name", "lora_path", "load_inplace"}`` loads a peft adapter under that name (an existing name is HTTP
  400 unless ``load_inplace``); answers 200 with a plain-text line, as vLLM does. ``POST
  /v1/unload_lora_adapter`` ``{"lora_name"}`` drops one. ``GET /v1/models`` lists the adapters after the base.

A weight update or adapter load waits for the running generation and blocks the next one, so every answer comes
from one set of weights. :attr:`~OpenAICompatibleServer.weight_updates` counts the updates.

Fault injection, for testing clients (set at construction or with :meth:`~OpenAICompatibleServer.set_faults`);
every generation request (chat or token completions; not the weight routes) draws once from each seeded stream,
so which request gets a fault depends only on ``seed`` and its arrival index:

* ``fail_first``: the next N generation requests get HTTP 503;
* ``fail_rate``: that share of generation requests gets HTTP 500 or 503;
* ``garbage_rate``: that share gets a 200 whose body is malformed (not JSON, or JSON without
  ``choices[0].message.content`` nor ``choices[i].token_ids``);
* ``delay``: every generation request waits that many seconds before its answer (to trigger client timeouts);
* ``api_key``: when set, a request without ``Authorization: Bearer <api_key>`` gets HTTP 401.

Every request is recorded (:attr:`~OpenAICompatibleServer.log`, :attr:`~OpenAICompatibleServer.request_count`,
:attr:`~OpenAICompatibleServer.authorizations`), as is the largest number in flight at once
(:attr:`~OpenAICompatibleServer.max_in_flight`).

Command line: ``python -m rlkit.testing.openai_server [--model PATH_OR_HUB_ID] [--port 8000]``.
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NamedTuple

from rlkit.core.timeline import record, span
from rlkit.judging import render_chat

_GARBAGE: tuple[tuple[str, bytes], ...] = (
    ("application/json", b'{"choices": [{"message": {"content": "unterminated'),
    ("text/html", b"<html><body>502 Bad Gateway</body></html>"),
    ("application/json", b'{"choices": []}'),
    ("application/json", b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": null}}]}'),
    ("application/json", b'{"id": "chatcmpl-garbage", "object": "chat.completion"}'),
)
_DEFAULT_MAX_TOKENS = 16
_ADMIN_ROUTES = {"/update_weights_from_disk": "_update_weights_from_disk",
                 "/v1/load_lora_adapter": "_load_lora_adapter", "/v1/unload_lora_adapter": "_unload_lora_adapter"}


@dataclass(frozen=True)
class RequestRecord:
    """One request the server received: its method and path, the ``Authorization`` header, the status sent and
    the injected fault (``fail``, ``garbage`` or None); for an answered generation, the ``usage`` it reported."""

    method: str
    path: str
    authorization: str | None
    status: int
    fault: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _BadRequest(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object; a 400 otherwise."""
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        raise _BadRequest(400, "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise _BadRequest(400, "the request body must be a JSON object")
    return body


def _messages(body: dict[str, Any]) -> list[dict[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _BadRequest(400, "'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _BadRequest(400, f"messages[{i}] must be an object with a string 'role'")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI's content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if not isinstance(content, str):
            raise _BadRequest(400, f"messages[{i}].content must be a string or a list of text parts")
        out.append({"role": m["role"], "content": content})
    return out


def _number(body: dict[str, Any], key: str, default: float, low: float, integer: bool = False) -> Any:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) or value < low:
        raise _BadRequest(400, f"'{key}' must be {'an integer' if integer else 'a number'} >= {low}, got {value!r}")
    return value


class _Row(NamedTuple):
    """One decoded sample: its tokens (through the first stop token), their raw log-probs, the most likely (ids,
    log-probs) at each position, and whether it ended at a stop token."""

    tokens: list[int]
    logprobs: list[float]
    top: list[tuple[list[int], list[float]]]
    stopped: bool


class _Job:
    """One token-completion request waiting to be decoded: its rows are each prompt ``n`` times, each row with its
    own noise seed (prompt index and sample index mixed into the request's seed)."""

    def __init__(self, name: Any, max_tokens: int, min_tokens: int, temperature: float, prompts: list[list[int]],
                 n: int, seed: int, top: int = 0, prompt_logprobs: bool = False) -> None:
        self.settings = (name, max_tokens, min_tokens, temperature, prompt_logprobs)
        self.prompt_scores: list[list[tuple[float, int]]] = []  # per prompt: (log-prob, rank) of tokens 1..
        self.top = top  # the most likely tokens to report per position, besides the sampled one
        self.prompts, self.n, self.seed = prompts, n, seed
        self.size = len(prompts) * n
        self.done = threading.Event()
        self.out: list[_Row] = []
        self.error: Exception | None = None

    def rows(self) -> list[tuple[list[int], int]]:
        from rlkit.lm.seeded import MASK32, group_row_seeds

        # the first prompt keeps the request's seed: one prompt with seed s draws what the hf generator's
        # per_prompt_seed draws for a record with seed s
        prompt_seeds = [(self.seed + p * 0x9E3779B9) & MASK32 for p in range(len(self.prompts))]
        seeds = group_row_seeds(prompt_seeds, self.n).tolist()
        return [(prompt, seeds[p * self.n + j]) for p, prompt in enumerate(self.prompts) for j in range(self.n)]


class OpenAICompatibleServer:
    """Serves one local causal LM over OpenAI's chat and token completions APIs (with vLLM's and SGLang's weight
    routes), with optional injected faults."""

    def __init__(self, model: str | Path | None = None, *, policy: tuple[Any, Any] | None = None,
                 model_name: str = "default", host: str = "127.0.0.1", port: int = 0, dtype: str = "float32",
                 api_key: str | None = None, garbage_rate: float = 0.0, fail_rate: float = 0.0,
                 fail_first: int = 0, delay: float = 0.0, seed: int = 0, batch_window_s: float = 0.005,
                 max_batch_rows: int = 512, reference: str | Path | None = None,
                 reference_name: str = "reference") -> None:
        """``model``: a local model directory or cached hub id (None: the embedded tiny policy); or pass an
        already loaded ``policy=(model, tokenizer)`` to share one between servers. Token completions that arrive
        within ``batch_window_s`` of each other are decoded together, at most ``max_batch_rows`` rows a pass.
        ``reference``: a model directory served, frozen, as ``reference_name`` beside it."""
        from rlkit.lm.models import build_tiny_policy, load_policy

        if policy is None:
            policy = load_policy(model if model is not None else build_tiny_policy(), dtype=dtype)
        self.model, self.tokenizer = policy
        self.model.eval()
        self.reference_model = None if reference is None else load_policy(reference, dtype=dtype)[0].eval()
        self.reference_name = reference_name
        self.model_name = model_name
        self._dtype = dtype
        self.adapters: dict[str, str] = {}  # LoRA adapter name -> the directory it was loaded from
        self.weight_updates = 0
        self.api_key = api_key
        self._host, self._port = host, port
        self._lock = threading.Lock()  # faults, RNGs and statistics
        self._model_lock = threading.Lock()  # one generate at a time
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
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
            raise _BadRequest(404, f"model {name!r} does not exist; this server serves "
                                   + ", ".join(repr(n) for n in self._served_names()), "not_found_error")

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

    def _prompts(self, body: dict[str, Any]) -> list[list[int]]:
        prompt = body.get("prompt")
        if isinstance(prompt, str):
            prompt = [prompt]
        if not isinstance(prompt, list) or not prompt:
            raise _BadRequest(400, "'prompt' must be token ids (a list of ints or of such lists) or text")
        if all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            prompt = [prompt]
        vocab = len(self.tokenizer)
        out = []
        for i, p in enumerate(prompt):
            if isinstance(p, str):
                p = self.tokenizer(p, add_special_tokens=False)["input_ids"]
            if (not isinstance(p, list) or not p
                    or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < vocab for t in p)):
                raise _BadRequest(400, f"prompt[{i}] must be a non-empty list of token ids in [0, {vocab})")
            out.append(p)
        return out

    def _completion(self, body: dict[str, Any]) -> dict[str, Any]:
        """vLLM's ``CompletionResponse`` for a ``/v1/completions`` request (see the module docstring)."""
        if body.get("stream"):
            raise _BadRequest(400, "stream is not supported by this server")
        prompts = self._prompts(body)
        n = _number(body, "n", 1, 1, integer=True)
        max_tokens = _number(body, "max_tokens", _DEFAULT_MAX_TOKENS, 1, integer=True)
        min_tokens = min(_number(body, "min_tokens", 0, 0, integer=True), max_tokens)
        temperature = float(_number(body, "temperature", 1.0, 0))
        logprobs = body.get("logprobs")
        if logprobs is not None:
            logprobs = _number(body, "logprobs", 0, 0, integer=True)
        prompt_logprobs = body.get("prompt_logprobs")
        if prompt_logprobs is not None:
            _number(body, "prompt_logprobs", 0, 0, integer=True)
        seed = body.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise _BadRequest(400, f"'seed' must be an integer, got {seed!r}")
        name = body.get("model")
        self._check_served(name)
        if seed is None:
            with self._lock:
                seed = self._seeds.getrandbits(32)
        job = _Job(name, max_tokens, min_tokens, temperature, prompts, n, seed, logprobs or 0,
                   prompt_logprobs=prompt_logprobs is not None)
        self._decode_with(job)
        built_from = time.time()
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        tok = self.tokenizer
        choices: list[dict[str, Any]] = []
        prompt_total = completion_total = 0
        for row, (kept, chosen, tops, stopped) in enumerate(job.out):
            prompt = prompts[row // n]
            choice: dict[str, Any] = {
                "index": row, "text": tok.decode(kept, skip_special_tokens=True), "logprobs": None,
                "finish_reason": "stop" if stopped else "length", "stop_reason": None, "token_ids": None,
                "prompt_token_ids": None}
            if body.get("return_token_ids"):
                choice["token_ids"], choice["prompt_token_ids"] = kept, list(prompt)
            if logprobs is not None:
                choice["logprobs"] = self._choice_logprobs(kept, chosen, tops[:len(kept)], logprobs, as_ids)
            if prompt_logprobs is not None:
                names = tok.convert_ids_to_tokens(prompt[1:])
                choice["prompt_logprobs"] = [None, *({str(t): {"logprob": lp, "rank": rank, "decoded_token": text}}
                                                     for t, (lp, rank), text in zip(prompt[1:], job.prompt_scores[
                                                         row // n], names, strict=True))]
            choices.append(choice)
            completion_total += len(kept)
            prompt_total += len(prompt)
        record("server", "build answer", built_from, time.time())
        with self._lock:
            number = len(self.log) + self._in_flight
        return {"id": f"cmpl-{number}", "object": "text_completion", "created": int(time.time()),
                "model": name or self.model_name, "choices": choices,
                "usage": {"prompt_tokens": prompt_total, "completion_tokens": completion_total,
                          "total_tokens": prompt_total + completion_total}}

    def _decode_with(self, job: _Job) -> None:
        """Queue ``job`` and return once it is decoded. One waiting request at a time leads: once the burst it
        belongs to has arrived (``_gather_burst``) it decodes every request queued by then, its own included;
        the others sleep until their job is done or the lead is free (no polling: on a tiny model the decode loop
        is bound by the interpreter, and threads waking to poll slowed it by a third)."""
        with self._queue_ready:
            self._waiting.append(job)
            self._last_arrival = time.monotonic()
            while not job.done.is_set() and self._leading:
                self._queue_ready.wait()
            if job.done.is_set():
                lead = False
            else:
                self._leading = lead = True
        if lead:
            try:
                with span("server", "gather burst"):
                    self._gather_burst()
                with self._queue_ready:
                    jobs, self._waiting = self._waiting, []
                with self._model_lock:
                    self._decode_jobs(jobs)
            finally:
                with self._queue_ready:
                    self._leading = False
                    self._queue_ready.notify_all()
        if job.error is not None:
            raise job.error

    def _gather_burst(self) -> None:
        """Wait until no request has joined the queue for ``batch_window_s`` (at most 20 windows in all): a client's
        concurrent requests arrive over a few milliseconds, and one fixed window split them between passes. Timed
        from the newest arrival, not in whole windows of polling, which cost a burst arriving over 1 ms two windows."""
        if not self.batch_window_s:
            return
        deadline = time.monotonic() + 20 * self.batch_window_s
        while True:
            with self._queue_ready:
                quiet_at = self._last_arrival + self.batch_window_s
            now = time.monotonic()
            if now >= quiet_at or now >= deadline:
                return
            time.sleep(min(quiet_at, deadline) - now)

    def _decode_jobs(self, jobs: list[_Job]) -> None:
        """Decode ``jobs`` in as few left-padded passes as their settings allow; the caller holds the model
        lock. A job that fails (its adapter unloaded meanwhile) gets its error; the others their rows."""
        groups: dict[tuple, list[_Job]] = {}
        for job in jobs:
            groups.setdefault(job.settings, []).append(job)
        for (name, max_tokens, min_tokens, temperature, scores), group in groups.items():
            try:
                rows = [(prompt, seed) for job in group for prompt, seed in job.rows()]
                top = max(job.top for job in group)
                out: list[_Row] = []
                with self._selected(name) as model:
                    if scores:
                        greedy_next = max_tokens == 1 and temperature == 0 and not top
                        for job in group:
                            with span("server", "score reference" if name == self.reference_name
                                      else "score prompts", rows=len(job.prompts)):
                                job.prompt_scores, next_rows = self._score_prompts(model, job.prompts,
                                                                                   greedy_next)
                            out += [row for row in next_rows for _ in range(job.n)]
                        if greedy_next:  # each job's one token came from the scoring pass itself
                            rows = []
                    for at in range(0, len(rows), self.max_batch_rows):
                        chunk = rows[at:at + self.max_batch_rows]
                        with span("server", "decode", rows=len(chunk), tokens=max_tokens):
                            out += self._decode(model, chunk, max_tokens, min_tokens, temperature, top)
                for job in group:
                    job.out, out = out[:job.size], out[job.size:]
            except _BadRequest as exc:
                for job in group:
                    job.error = exc
            except Exception as exc:  # a server bug: every waiting request answers 500, none hangs
                for job in group:
                    job.error = exc
            finally:
                for job in group:
                    job.done.set()

    def _score_prompts(self, model: Any, prompts: list[list[int]], greedy_next: bool
                       ) -> tuple[list[list[tuple[float, int]]], list[_Row]]:
        """One forward pass over the left-padded prompts: each token's (raw log-prob, rank) after the tokens before
        it, and, with ``greedy_next``, each prompt's greedy next token as a one-token ``_Row`` (else none)."""
        import torch

        tok = self.tokenizer
        width = max(len(p) for p in prompts)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], dtype=torch.long, device=model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids, attention_mask=mask, use_cache=False).logits.float(), -1)
        chosen = logp[:, :-1].gather(2, ids[:, 1:, None])
        ranks = (logp[:, :-1] > chosen).sum(-1) + 1
        scores = [list(zip(chosen[i, width - len(p):, 0].tolist(), ranks[i, width - len(p):].tolist(), strict=True))
                  for i, p in enumerate(prompts)]
        rows: list[_Row] = []
        if greedy_next:
            values, tokens = logp[:, -1].max(-1)
            rows = [_Row([t], [v], [], t in self._stop_ids) for t, v in zip(tokens.tolist(), values.tolist(),
                                                                             strict=True)]
        return scores, rows

    def _decode(self, model: Any, rows: list[tuple[list[int], int]], max_tokens: int, min_tokens: int,
                temperature: float, top: int) -> list[_Row]:
        """One batched decode of ``rows`` (prompt ids, noise seed) with rlkit's KV-cache loop (``generate`` where
        the loop would draw differently): per row, the kept tokens (through the first stop token), their raw
        log-probs, the ``top`` most likely (ids, log-probs) at each position, and whether it stopped."""
        import torch

        from rlkit.lm.decoding import decode_with_kv_cache, loop_can_decode
        from rlkit.lm.seeded import SeededSampling

        tok = self.tokenizer
        width = max(len(p) for p, _ in rows)
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for p, _ in rows], dtype=torch.long, device=model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p, _ in rows], device=model.device)
        # Sampling is the Gumbel-max draw of rlkit.lm.seeded: a row's noise depends on its seed alone, never on
        # the rows decoded beside it.
        sampling = None
        if temperature > 0:
            sampling = SeededSampling(torch.tensor([seed for _, seed in rows], dtype=torch.int64), width, temperature)
        chosen: list[torch.Tensor] = []
        tops: list[tuple[torch.Tensor, torch.Tensor]] = []

        def keep(raw: torch.Tensor, tokens: torch.Tensor) -> None:
            # raw logits, before temperature or masking: the serving model's own distribution (vLLM's raw_logprobs)
            logp = torch.log_softmax(raw.float(), dim=-1)
            chosen.append(logp.gather(1, tokens[:, None]).squeeze(1))
            if top:
                values, indices = logp.topk(min(top, logp.shape[-1]), dim=-1)
                tops.append((indices, values))

        stops = sorted(self._stop_ids)
        with torch.no_grad():
            if loop_can_decode(model, {"min_new_tokens": min_tokens}):
                new = decode_with_kv_cache(model, ids, mask, max_new_tokens=max_tokens, eos_token_id=stops or None,
                                           pad_token_id=tok.pad_token_id, greedy=True, min_new_tokens=min_tokens,
                                           logits_processor=sampling, on_step=keep)
            else:
                out = model.generate(
                    input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens, min_new_tokens=min_tokens or None,
                    do_sample=False, temperature=None, top_k=None, top_p=None,
                    logits_processor=None if sampling is None else [sampling], pad_token_id=tok.pad_token_id,
                    eos_token_id=stops or None, use_cache=True, output_logits=True, return_dict_in_generate=True)
                new = out.sequences[:, width:]
                for step, logits in enumerate(out.logits):
                    keep(logits, new[:, step])
        self.decode_passes += 1
        chosen_all = torch.stack(chosen, dim=1).tolist() if chosen else [[] for _ in rows]
        result = []
        for j in range(len(rows)):
            row = new[j].tolist()
            stop_at = next((i for i, t in enumerate(row) if t in self._stop_ids), None)
            kept = row if stop_at is None else row[:stop_at + 1]
            row_tops = [(i[j].tolist(), v[j].tolist()) for i, v in tops[:len(kept)]]
            result.append(_Row(kept, chosen_all[j][:len(kept)], row_tops, stop_at is not None))
        return result

    def _choice_logprobs(self, tokens: list[int], chosen: list[float], tops: list[tuple[list[int], list[float]]],
                         top: int, as_ids: bool) -> dict[str, Any]:
        def name(t: int) -> str:
            return f"token_id:{t}" if as_ids else self.tokenizer.decode([t])

        names = [name(t) for t in tokens]
        entries = []
        for i in range(len(tokens)):
            entry = {names[i]: chosen[i]}
            if top:
                ids, values = tops[i]
                entry.update({name(k): v for k, v in zip(ids[:top], values[:top], strict=True)})
            entries.append(entry)
        offsets, at = [], 0
        for text in names:
            offsets.append(at)
            at += len(text)
        return {"text_offset": offsets, "token_logprobs": chosen, "tokens": names, "top_logprobs": entries}

    def _update_weights_from_disk(self, body: dict[str, Any]) -> dict[str, Any]:
        """SGLang's ``/update_weights_from_disk``: reload the model from ``model_path``."""
        from rlkit.lm.models import load_policy

        path = body.get("model_path")
        if not isinstance(path, str) or not path:
            raise _BadRequest(400, "'model_path' must be a directory")
        if self._load_weights_in_place(Path(path)):
            return {"success": True, "message": "Succeeded to update model weights."}
        try:
            model, tokenizer = load_policy(path, dtype=self._dtype)
        except Exception as exc:  # SGLang answers a failed load with success: false, not a 500
            raise _BadRequest(400, f"failed to load weights from {path}: {type(exc).__name__}: {exc}") from None
        model.eval()
        with self._model_lock:
            self.model, self.tokenizer = model.to(self.model.device), tokenizer
            self.adapters = {}
            self._stop_ids = self._stop_token_ids()
            self.weight_updates += 1
        return {"success": True, "message": "Succeeded to update model weights."}

    def _load_weights_in_place(self, path: Path) -> bool:
        """Copy the tensors of ``path/model.safetensors`` into the served model when they match its parameters name
        for name and shape, as SGLang updates weights in place; False (nothing changed) for anything else: sharded
        or other formats, another architecture, LoRA adapters loaded. Rebuilding the model and its tokenizer from the
        folder took ~35 ms of every weight sync of the tiny policy."""
        import torch
        from safetensors.torch import load_file

        file = path / "model.safetensors"
        if self.adapters or not file.is_file():
            return False
        try:
            tensors = load_file(str(file))
        except Exception:  # unreadable here: the full load reports it
            return False
        params = dict(self.model.state_dict())
        if set(tensors) - set(params) or any(tensors[k].shape != params[k].shape for k in tensors):
            return False
        # a name the file leaves out must share its storage with one it has (tied embeddings), or it would go stale
        covered = {params[k].data_ptr() for k in tensors}
        if any(params[k].data_ptr() not in covered for k in set(params) - set(tensors)):
            return False
        with self._model_lock, torch.no_grad():
            for name, value in tensors.items():
                params[name].copy_(value)
            self.weight_updates += 1
        return True

    def _load_lora_adapter(self, body: dict[str, Any]) -> str:
        """vLLM's ``/v1/load_lora_adapter``: load a peft adapter under ``lora_name``."""
        from peft import PeftModel

        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not name or not isinstance(path, str) or not path:
            raise _BadRequest(400, "'lora_name' and 'lora_path' must be non-empty strings")
        if name == self.model_name:
            raise _BadRequest(400, f"{name!r} is the base model's name")
        if not Path(path, "adapter_config.json").is_file():
            raise _BadRequest(400, f"no LoRA adapter at {path} (no adapter_config.json)")
        with self._model_lock:
            if name in self.adapters and not body.get("load_inplace"):
                raise _BadRequest(400, f"The lora adapter '{name}' has already been loaded.")
            if name in self.adapters:
                self.model.delete_adapter(name)
            if isinstance(self.model, PeftModel):
                self.model.load_adapter(path, adapter_name=name, is_trainable=False)
            else:
                self.model = PeftModel.from_pretrained(self.model, path, adapter_name=name, is_trainable=False)
            self.model.eval()
            self.adapters[name] = path
            self.weight_updates += 1
        return f"Success: LoRA adapter '{name}' added successfully."

    def _unload_lora_adapter(self, body: dict[str, Any]) -> str:
        """vLLM's ``/v1/unload_lora_adapter``: drop the adapter ``lora_name``."""
        name = body.get("lora_name")
        with self._model_lock:
            if name not in self.adapters:
                raise _BadRequest(404, f"The lora adapter '{name}' cannot be found.", "not_found_error")
            del self.adapters[name]
            if self.adapters:
                self.model.set_adapter(next(iter(self.adapters)))  # peft warns when the active one goes
                self.model.delete_adapter(name)
            else:  # the last one: back to the plain base model
                self.model = self.model.unload()
        return f"Success: LoRA adapter '{name}' removed successfully."


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
            if route in _ADMIN_ROUTES:
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


@contextmanager
def server_process(model: str | Path | None = None, *, timeout: float = 120.0, reference: str | Path | None = None,
                   threads: int | None = None) -> Iterator[tuple[str, Any]]:
    """``python -m rlkit.testing.openai_server`` in a process of its own on a free port (the caller's environment,
    thread pinning included, or ``threads`` torch threads): yields its base URL and the ``subprocess.Popen`` once it
    serves, and stops it after. ``reference``: a model directory it also serves, frozen, as ``reference``."""
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "rlkit.testing.openai_server", "--port", "0"]
    if model is not None:
        command += ["--model", str(model)]
    if reference is not None:
        command += ["--reference-model", str(reference)]
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        deadline = time.monotonic() + timeout
        line = ""
        while " at http://" not in line:  # main() prints "serving ... at <url>" once it listens
            line = server.stdout.readline()
            if not line or time.monotonic() > deadline:
                raise RuntimeError(f"the test server did not start (exit code {server.poll()})")
        yield line.rsplit(" at ", 1)[1].strip(), server
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a local causal LM over OpenAI's completions APIs.")
    parser.add_argument("--model", default=None, help="model directory or cached hub id (default: the tiny policy)")
    parser.add_argument("--model-name", default="default", help="the name clients send as 'model'")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer <key>'")
    parser.add_argument("--batch-window", type=float, default=0.005,
                        help="seconds to gather concurrent token completions into one decode")
    parser.add_argument("--reference-model", default=None,
                        help="a model directory served, frozen, beside the model (weight updates leave it alone)")
    parser.add_argument("--reference-name", default="reference", help="the name clients send to use it")
    args = parser.parse_args(argv)
    server = OpenAICompatibleServer(args.model, model_name=args.model_name, host=args.host, port=args.port,
                                    dtype=args.dtype, api_key=args.api_key, batch_window_s=args.batch_window,
                                    reference=args.reference_model, reference_name=args.reference_name).start()
    print(f"serving {args.model or 'the embedded tiny policy'} as {args.model_name!r} at {server.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
