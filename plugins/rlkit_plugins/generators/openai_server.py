"""``openai_server``: rollouts from an inference engine (vLLM, SGLang) reached over HTTP as a separate process.

Each step's prompts are tokenised here with the policy's tokenizer (left-padded, exactly as the ``hf`` generator
does) and sent as token ids, one ``POST {base_url}/completions`` per record with ``n = num_generations``; the
engine answers with the sampled token ids and their log-probs, so nothing is re-tokenised and the loop trains on
the very tokens the engine drew. The batch is built by ``assemble_sampled_batch`` like every other generator's.

Wire fields relied on (checked against the engines' sources and docs):

* Request, ``/v1/completions`` (OpenAI's completions API as vLLM extends it, ``CompletionRequest`` in
  ``vllm/entrypoints/openai/protocol.py``; docs.vllm.ai "OpenAI-Compatible Server"): ``model``, ``prompt``
  (a list of token ids), ``n``, ``max_tokens``, ``temperature`` (0: greedy), ``seed``, ``logprobs`` (0: the
  sampled token's log-prob only), ``return_token_ids`` (vLLM >= 0.10.2; answers ``token_ids`` and
  ``prompt_token_ids`` per choice), ``return_tokens_as_token_ids`` (``logprobs.tokens`` as ``"token_id:<id>"``,
  read when a server answers no ``token_ids``), ``skip_special_tokens``.
* Response, ``CompletionResponse``: ``choices[i].index`` (prompt index × n + sample), ``choices[i].token_ids``,
  ``choices[i].logprobs.token_logprobs`` (one per token in ``token_ids``), ``choices[i].finish_reason``
  (``CompletionResponseChoice`` in the same file). The EOS that ends a completion is one of its tokens.
  The log-probs are what the engine's ``logprobs_mode`` makes them: start vLLM with ``--logprobs-mode
  raw_logprobs`` (the default) for the raw model distribution, which is what ``engine_logprobs`` promises.
* ``sync=lora``: ``POST {root}/v1/load_lora_adapter`` ``{"lora_name", "lora_path", "load_inplace"}`` and
  ``POST {root}/v1/unload_lora_adapter`` ``{"lora_name"}`` (vLLM's ``LoadLoRAAdapterRequest`` /
  ``UnloadLoRAAdapterRequest``; the server needs ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``;
  it answers 200 with a text line). Requests then name the adapter in ``model``.
* ``sync=disk``: ``POST {root}/update_weights_from_disk`` ``{"model_path"}`` (SGLang's route,
  ``UpdateWeightFromDiskReqInput``), answered ``{"success": bool, "message": str}``.

``{root}`` is ``base_url`` without its trailing ``/v1``. ``rlkit.testing.openai_server.OpenAICompatibleServer``
speaks all of it, so tests run the whole path on CPU against a real server on loopback.

What the loop gets beyond the ``SampledBatch`` contract, as attributes of the returned batch (``SampledBatch``
has no field for them yet):

* ``engine_logprobs``: float ``[B*G, C]``, the engine's log-prob of each sampled completion token, 0 past
  ``completion_mask``; the behaviour policy's log-probs for importance sampling.
* ``policy_version``: the weight version that sampled the batch (0: the weights pushed at setup, or the
  server's own weights with ``sync=none``; +1 per sync).

Weight sync (``sync``): ``none`` samples from whatever the server serves (a frozen sampler); ``disk`` saves the
full policy (and tokenizer) to ``<sync_dir>/v<k>`` and asks the server to reload from it; ``lora`` saves the
policy's LoRA adapter to ``<sync_dir>/v<k>`` and loads it under the name ``<model>-v<k>``, then unloads the
previous one. Either happens at setup (version 0) and after every ``sync_every``-th optimiser step; the loop calls
``generate`` and ``sync_weights`` from one thread, so a batch never mixes versions. Between syncs (``sync_every``
> 1) the sampler lags the policy by up to ``sync_every - 1`` steps; ``engine_logprobs`` is what corrects for it.

Transport: one ``httpx.AsyncClient`` per ``generate``, at most ``max_concurrency`` requests in flight, each
attempt bounded by ``timeout_s``, with rlkit's shared retry schedule (``retries`` after the first attempt,
``retry_backoff`` doubling, a timeout, connection error, 429, 5xx or malformed answer retried). A record still
failing after its retries fails the step with one line naming it: a step cannot train on missing rollouts. At
setup, nothing listening at ``base_url`` is a ``ConfigError``: ``cannot connect to ... (connection refused)``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import warnings
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlkit.plugin import (
    ConfigError,
    GenerationRequest,
    GeneratorError,
    SampledBatch,
    assemble_sampled_batch,
    hookimpl,
    post_with_retries,
    snippet,
    tls_context,
    tokenize_prompts,
)
from rlkit_plugins.backends.reachability import probe

if TYPE_CHECKING:
    import httpx

WHERE = "generator.params"
_SYNCS = ("none", "disk", "lora")


def _read_choices(n: int) -> Any:
    """A ``read`` for ``post_with_retries``: ``[(token_ids, token_logprobs)] * n`` in sample order, or None."""

    def read(response: httpx.Response) -> list[tuple[list[int], list[float]]] | None:
        try:
            choices = sorted(response.json()["choices"], key=lambda c: c["index"])
            out = []
            for choice in choices:
                logprobs = choice["logprobs"]
                ids, logps = choice.get("token_ids"), logprobs["token_logprobs"]
                if ids is None:  # a server without return_token_ids: the "token_id:<id>" names it returns instead
                    ids = [int(name.removeprefix("token_id:")) for name in logprobs["tokens"]]
                if len(ids) != len(logps) or not all(isinstance(t, int) for t in ids):
                    return None
                out.append(([int(t) for t in ids], [float("nan") if v is None else float(v) for v in logps]))
        except (ValueError, KeyError, IndexError, TypeError):
            return None
        return out if len(out) == n else None

    return read


class OpenAIServerGenerator:
    """Samples each step's completions from an OpenAI-compatible completions server, as token ids with their
    log-probs, and keeps the server's weights in step with the policy (``sync``)."""

    @dataclass
    class Params:
        base_url: str = "http://127.0.0.1:8000/v1"
        # The name the server serves the base model under (vLLM: --served-model-name, else the model path).
        model: str = "default"
        # Environment variable holding the key sent as `Authorization: Bearer`; unset: no header.
        api_key_env: str = "OPENAI_API_KEY"
        timeout_s: float = 120.0
        max_concurrency: int = 16
        retries: int = 3
        retry_backoff: float = 0.5
        # none (a frozen sampler) | disk (full weights, SGLang's /update_weights_from_disk) | lora (vLLM's
        # /v1/load_lora_adapter; the policy must be LoRA-wrapped)
        sync: str = "disk"
        # Sync after every k-th optimiser step; the sampler lags by up to k-1 steps in between.
        sync_every: int = 1
        # Where versions are saved; the server must read the same path. null: a temporary folder.
        sync_dir: str | None = None
        # Steps whose rollouts are requested ahead: with 1, step k+1's prompts are sampled while step k judges and
        # updates (generation overlaps training; its rollouts are one version behind, corrected by importance
        # sampling against the engine's log-probs). 0: the synchronous loop.
        max_lag: int = 0
        # Sent with every completions request on top of rlkit's fields: the engine's own sampling extras, e.g.
        # {min_tokens: 16} (vLLM), {top_k: 50}, or {repetition_penalty: 1.1}. null: none.
        extra_body: dict[str, Any] | None = None

    def __init__(self, params: OpenAIServerGenerator.Params | None = None) -> None:
        p = params or OpenAIServerGenerator.Params()
        if not p.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"must be an http(s) URL such as http://127.0.0.1:8000/v1, got {p.base_url!r}",
                              f"{WHERE}.base_url")
        if p.sync not in _SYNCS:
            raise ConfigError(f"must be one of {', '.join(_SYNCS)}, got {p.sync!r}", f"{WHERE}.sync")
        for name, low, strict in (("timeout_s", 0, True), ("max_concurrency", 1, False), ("retries", 0, False),
                                  ("retry_backoff", 0, False), ("sync_every", 1, False), ("max_lag", 0, False)):
            value = getattr(p, name)
            if value < low or (strict and value == low):
                raise ConfigError(f"must be {'>' if strict else '>='} {low}, got {value}", f"{WHERE}.{name}")
        self.params = p
        self.base_url = p.base_url.rstrip("/")
        self.root = self.base_url[:-3] if self.base_url.endswith("/v1") else self.base_url
        # The engine draws a request's samples from its seed alone (vLLM, SGLang and the test server do), so a
        # record's completions do not depend on the rest of the batch (up to the engine's batch invariance).
        self.honours_seeds = True
        self.max_lag = p.max_lag  # read by the loop (rlkit.train.lookahead)
        self.policy_version = 0
        self.served_model = p.model
        self._steps = 0
        self._pushed_at = 0  # self._steps when the served weights were pushed
        self._tokenizer: Any = None
        self._sync_root: Path | None = None
        self._own_sync_root = False
        self._live: list[Path] = []  # versions the server may still read, oldest first
        self._pool: ThreadPoolExecutor | None = None
        self._in_flight: set[Future] = set()
        self._restored: dict[str, int] | None = None

    # --- lifecycle ----------------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        key = os.environ.get(self.params.api_key_env)
        return {"Authorization": f"Bearer {key}"} if key else {}

    def setup(self, policy: Any, tokenizer: Any) -> None:
        """Check the server answers, then (``sync`` other than none) push the policy's weights as version 0."""
        p = self.params
        answer = probe(f"{self.base_url}/models", headers=self._headers(), timeout=min(p.timeout_s, 10.0),
                       max_retries=p.retries, backoff=p.retry_backoff)
        if answer.response is None:
            raise ConfigError(f"{answer.unreachable(self.base_url)}; start the server (vLLM, SGLang, or "
                              f"`python -m rlkit.testing.openai_server`) or fix the URL", f"{WHERE}.base_url")
        if answer.response.status_code == 401:
            raise ConfigError(f"{self.base_url} refused the key (HTTP 401); set the environment variable "
                              f"{p.api_key_env} to a key it accepts", f"{WHERE}.api_key_env")
        is_lora = hasattr(policy, "peft_config")
        if p.sync == "lora" and not is_lora:
            raise ConfigError("sync=lora sends the policy's LoRA adapter, but this policy has none: train with LoRA "
                              "or use sync=disk", f"{WHERE}.sync")
        if p.sync == "disk" and is_lora:
            raise ConfigError("sync=disk sends full weights, but this policy is LoRA-wrapped: use sync=lora",
                              f"{WHERE}.sync")
        self._tokenizer = tokenizer
        restored, self._restored = self._restored, None
        if restored is None:
            self.policy_version, self._steps, self._pushed_at = 0, 0, 0
        else:  # a resumed run: the counters go on from the checkpoint
            self.policy_version, self._steps = restored["policy_version"], restored["steps"]
            self._pushed_at = restored["pushed_at"]
        self.served_model = p.model
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=p.max_lag + 1, thread_name_prefix="rlkit-generator")
        if p.sync == "none":
            warnings.warn("generator.params.sync=none: the engine keeps its own weights, so held-out evaluation "
                          "(the start/end tables) scores the engine's model, not the policy being trained",
                          stacklevel=2)
        else:
            # weights newer than the last pushed version (a resume between syncs with sync_every > 1) are a new one
            self._push(policy, self.policy_version + (self._pushed_at != self._steps))

    def close(self) -> None:
        """Wait for requests still out, then remove the version folders this generator made (a temporary
        ``sync_dir`` entirely)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        if self._sync_root is not None and self._own_sync_root:
            shutil.rmtree(self._sync_root, ignore_errors=True)
            self._sync_root = None

    def state_dict(self) -> dict[str, int]:
        """The version counters, saved in checkpoints: a resumed run numbers versions and lags on from them."""
        return {"policy_version": self.policy_version, "steps": self._steps, "pushed_at": self._pushed_at}

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Called before ``setup`` on resume; ``setup`` then serves the checkpoint's weights under that version."""
        self._restored = {k: int(state[k]) for k in ("policy_version", "steps", "pushed_at")}

    # --- weight sync --------------------------------------------------------------------------------------

    def sync_weights(self, policy: Any) -> None:
        """After an optimiser step: every ``sync_every``-th one, push the weights as the next version."""
        self._steps += 1
        if self.params.sync == "none" or self._steps % self.params.sync_every:
            return
        self._push(policy, self.policy_version + 1)

    def _folder(self, version: int) -> Path:
        if self._sync_root is None:
            if self.params.sync_dir is None:
                self._sync_root, self._own_sync_root = Path(tempfile.mkdtemp(prefix="rlkit-sync-")), True
            else:
                self._sync_root = Path(self.params.sync_dir).expanduser().resolve()
                self._sync_root.mkdir(parents=True, exist_ok=True)
        return self._sync_root / f"v{version}"

    def _push(self, policy: Any, version: int) -> None:
        """Make ``version`` the served weights. Requests already out finish first, so every rollout comes from one
        version and records which; under DDP process 0 alone saves and sends the weights (they are the same on every
        process), once every process's requests are answered, and tells the others the outcome."""
        rank, world = _place()
        name = self.params.model if self.params.sync == "disk" else f"{self.params.model}-v{version}"
        failure: tuple[str, str] | None = None
        # saved while requests may still be out (the server reads the folder only when told): writing the weights
        # overlaps their sampling
        folder = self._save(policy, version) if rank == 0 else None
        wait(list(self._in_flight))
        if world > 1:
            import torch.distributed as dist

            dist.barrier()  # no process has a request out on the old weights once this returns
        if folder is not None:
            try:
                self._send(folder, name)
            except GeneratorError as exc:
                failure = (exc.message, exc.where or f"{WHERE}.base_url")
        if world > 1:
            import torch.distributed as dist

            box: list[Any] = [failure]
            dist.broadcast_object_list(box, src=0)
            failure = box[0]
        if failure is not None:
            raise GeneratorError(*failure)
        self.served_model, self.policy_version, self._pushed_at = name, version, self._steps

    @torch.no_grad()
    def _save(self, policy: Any, version: int) -> Path:
        folder = self._folder(version)
        if folder.exists():  # a resumed run, or an earlier run's folder: never serve stale files
            shutil.rmtree(folder)
        policy.save_pretrained(folder)
        if self.params.sync == "disk" and self._tokenizer is not None:
            self._tokenizer.save_pretrained(folder)
        return folder

    def _send(self, folder: Path, name: str) -> None:
        import httpx

        headers, timeout = self._headers(), self.params.timeout_s
        if self.params.sync == "disk":
            url, payload = f"{self.root}/update_weights_from_disk", {"model_path": str(folder)}
        else:
            url, payload = f"{self.root}/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(folder),
                                                                 "load_inplace": True}
        try:
            response = httpx.post(url, json=payload, headers=headers, timeout=timeout, verify=tls_context())
        except httpx.TransportError as exc:
            raise GeneratorError(f"weight sync to {url} failed: {type(exc).__name__}: {exc}",
                                 f"{WHERE}.base_url") from None
        ok = response.status_code == 200
        if ok and self.params.sync == "disk":
            try:
                ok = response.json().get("success") is True
            except ValueError:
                ok = False
        if not ok:
            raise GeneratorError(f"weight sync to {url} failed: HTTP {response.status_code}: "
                                 f"{snippet(response.text)}", f"{WHERE}.base_url")
        previous = self.served_model
        self._live.append(folder)
        if self.params.sync == "lora" and previous != self.params.model and previous != name:
            # after the new adapter serves (and no request names the old one): an unload failing costs server
            # memory, never a wrong sample
            httpx.post(f"{self.root}/v1/unload_lora_adapter", json={"lora_name": previous}, headers=headers,
                       timeout=timeout, verify=tls_context())
        while len(self._live) > 1:  # the server has read the newest; older folders are no longer needed
            shutil.rmtree(self._live.pop(0), ignore_errors=True)

    # --- sampling -----------------------------------------------------------------------------------------

    def _payload(self, prompt: list[int], request: GenerationRequest, seed: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.served_model, "prompt": prompt, "n": request.num_generations,
            "max_tokens": request.max_new_tokens, "temperature": 0.0 if request.greedy else request.temperature,
            "logprobs": 0, "return_token_ids": True, "return_tokens_as_token_ids": True,
            "skip_special_tokens": True, "stream": False, **(self.params.extra_body or {})}
        if seed is not None:
            body["seed"] = seed
        return body

    async def _ask(self, payloads: list[dict[str, Any]], n: int) -> list[Any]:
        import httpx

        p = self.params
        slots = asyncio.Semaphore(p.max_concurrency)
        limits = httpx.Limits(max_connections=p.max_concurrency, max_keepalive_connections=p.max_concurrency)
        async with httpx.AsyncClient(headers=self._headers(), timeout=p.timeout_s, limits=limits,
                                     verify=tls_context()) as client:
            return await asyncio.gather(*(
                post_with_retries(client, f"{self.base_url}/completions", payload, slots=slots, timeout=p.timeout_s,
                                  max_retries=p.retries, backoff=p.retry_backoff, read=_read_choices(n),
                                  malformed=f"no {n} choices with token_ids and logprobs.token_logprobs")
                for payload in payloads))

    def _fetch(self, payloads: list[dict[str, Any]], n: int) -> list[tuple[list[int], list[float]]]:
        """On a worker thread (no event loop there): every record's ``n`` samples, in record order."""
        outcomes = asyncio.run(self._ask(payloads, n))
        rows: list[tuple[list[int], list[float]]] = []
        for i, outcome in enumerate(outcomes):
            if outcome.value is None:
                raise GeneratorError(f"{self.base_url}/completions failed for record {i} of the batch after "
                                     f"{self.params.retries} retries: {outcome.error}", f"{WHERE}.base_url")
            rows.extend(outcome.value)
        return rows

    def submit(self, policy: Any, tokenizer: Any, request: GenerationRequest) -> PendingBatch:
        """Send the request and return at once; ``.result()`` waits for the batch. The samples come from the
        version served now: a later sync waits for them."""
        if request.greedy and self.params.sync != "none" and self._pushed_at != self._steps:
            # held-out evaluation measures the policy as it is, not the last version sync_every let through
            self._push(policy, self.policy_version + 1)
        prompt_ids, prompt_mask = tokenize_prompts(tokenizer, request.records, request.prompt_token_ids)
        seeds = request.seeds
        if seeds is not None and len(seeds) != len(request.records):
            raise ValueError(f"{len(seeds)} seeds for {len(request.records)} records")
        payloads = [self._payload(prompt_ids[i][prompt_mask[i].bool()].tolist(), request,
                                  None if seeds is None or request.greedy else int(seeds[i]))
                    for i in range(len(request.records))]
        if self._pool is None:  # sampling without setup (a frozen sampler used directly)
            self._pool = ThreadPoolExecutor(max_workers=self.params.max_lag + 1, thread_name_prefix="rlkit-generator")
        future = self._pool.submit(self._fetch, payloads, request.num_generations)
        self._in_flight.add(future)
        future.add_done_callback(self._in_flight.discard)
        device = next(policy.parameters()).device  # where the hf generator's batch lives too
        return PendingBatch(self, future, prompt_ids, prompt_mask, request.num_generations, tokenizer, device)

    def generate(self, policy: Any, tokenizer: Any, request: GenerationRequest) -> SampledBatch:
        """B × G completions from the server, record by record, with ``engine_logprobs`` and ``policy_version``."""
        return self.submit(policy, tokenizer, request).result()


class PendingBatch:
    """A request out at the engine; ``result()`` assembles its batch (on the calling thread: tokenizers are not
    safe to share across threads) and says how far behind the policy the sampling weights are by then."""

    def __init__(self, generator: OpenAIServerGenerator, future: Future, prompt_ids: torch.Tensor,
                 prompt_mask: torch.Tensor, g: int, tokenizer: Any, device: torch.device) -> None:
        self._generator, self._future = generator, future
        self._prompt_ids, self._prompt_mask, self._g = prompt_ids, prompt_mask, g
        self._tokenizer, self._device = tokenizer, device
        self.policy_version, self._served_at = generator.policy_version, generator._pushed_at
        self._batch: SampledBatch | None = None

    def result(self) -> SampledBatch:
        if self._batch is not None:
            return self._batch
        rows = self._future.result()
        tokenizer, g, device = self._tokenizer, self._g, self._device
        width = max(1, max(len(ids) for ids, _ in rows))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        completion = torch.full((len(rows), width), pad, dtype=self._prompt_ids.dtype)
        logps = torch.zeros(len(rows), width, dtype=torch.float32)
        for r, (ids, values) in enumerate(rows):
            completion[r, :len(ids)] = torch.tensor(ids, dtype=self._prompt_ids.dtype)
            logps[r, :len(values)] = torch.tensor(values, dtype=torch.float32)
        batch = assemble_sampled_batch(self._prompt_ids.repeat_interleave(g, dim=0).to(device),
                                       self._prompt_mask.repeat_interleave(g, dim=0).to(device),
                                       completion.to(device), tokenizer, g)
        batch.engine_logprobs = logps.to(device).masked_fill(batch.completion_mask == 0, 0.0)
        batch.policy_version = self.policy_version
        batch.policy_lag = self._generator._steps - self._served_at
        self._batch = batch
        return batch


def _place() -> tuple[int, int]:
    """(rank, world size) of this process in a torch.distributed run; (0, 1) otherwise."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@hookimpl
def rlkit_register_generators(register):
    register("openai_server", OpenAIServerGenerator)
