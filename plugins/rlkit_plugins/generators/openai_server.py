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
  (``CompletionResponseChoice`` in the same file): ``"stop"`` where the engine ended the completion (any of the
  model's end tokens, ``<|im_end|>`` where the tokenizer's EOS is another, or a stop string), ``"length"`` where
  ``max_tokens`` cut it (vLLM's ``FinishReason``; ``"abort"`` is read as cut). The token that ended it is one of
  its ``token_ids``, so each row's mask covers exactly the tokens the engine sampled; an answer without
  ``finish_reason`` is read by the end tokens (``end_token_ids``: the tokenizer's EOS and the generation config's).
  The log-probs are what the engine's ``logprobs_mode`` makes them: start vLLM with ``--logprobs-mode
  raw_logprobs`` (the default) for the raw model distribution, which is what ``engine_logprobs`` promises.
* ``sync=adapter``: ``POST {root}/v1/load_lora_adapter`` ``{"lora_name", "lora_path", "load_inplace"}`` and
  ``POST {root}/v1/unload_lora_adapter`` ``{"lora_name"}`` (vLLM's ``LoadLoRAAdapterRequest`` /
  ``UnloadLoRAAdapterRequest``; the server needs ``--enable-lora`` and ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``;
  it answers 200 with a text line; ``OpenAIServingModels.load_lora_adapter``: 404 when no adapter is at
  ``lora_path``, 400 when it does not load; without the variable the routes do not exist, 404). Requests then
  name the adapter in ``model``.
* ``sync=full``: ``POST {root}/update_weights_from_disk`` ``{"model_path"}`` (SGLang's route,
  ``UpdateWeightFromDiskReqInput``), answered ``{"success": bool, "message": str}``.

``{root}`` is ``base_url`` without its trailing ``/v1``. ``rlkit.testing.openai_server.OpenAICompatibleServer``
speaks all of it, so tests run the whole path on CPU against a real server on loopback.

What the loop gets beyond the ``SampledBatch`` contract, as attributes of the returned batch (``SampledBatch``
has no field for them yet):

* ``engine_logprobs``: float ``[B*G, C]``, the engine's log-prob of each sampled completion token, 0 past
  ``completion_mask``; the behaviour policy's log-probs for importance sampling.
* ``policy_version``: the weight version that sampled the batch (0: the weights pushed at setup, or the
  server's own weights with ``sync=none``; +1 per sync).

Weight sync (``sync``): ``none`` samples from whatever the server serves (a frozen sampler); ``full`` saves the
full policy (a LoRA policy merged, in a copy) and its tokenizer to ``<sync_dir>/v<k>`` and asks the server to reload
from it; ``adapter`` saves the policy's LoRA adapter alone to ``<sync_dir>/v<k>`` (a few MB where the full policy is
the whole model) and loads it under the name ``<model>-v<k>``, then unloads the previous one. ``auto`` (the default)
is ``adapter`` for a LoRA policy whose server loads the version-0 adapter at setup (the one probe: a server that
answers it with an HTTP error, e.g. vLLM without runtime LoRA updating, gets the full weights from then on, said in
one line) and ``full`` otherwise. A sync
happens at setup (version 0) and after every ``sync_every``-th optimiser step; ``metrics()`` reports each step's
syncs (``time/sync``: seconds saving and loading; ``sync/bytes``: what was written for the server). The loop calls
``generate`` and ``sync_weights`` from one thread, so a batch never mixes versions. Between syncs (``sync_every``
> 1) the sampler lags the policy by up to ``sync_every - 1`` steps; ``engine_logprobs`` is what corrects for it.

A server must not load new weights while it still samples a batch requested before them, so a load waits until the
batches already out are answered. With ``max_lag`` 0, or under DDP (process 0 sends, every process waits), the sync
sends it there and then. With ``max_lag`` > 0 on one process it leaves the loop once the weights are saved: the load
goes out as soon as the batches before it have been read (the next step reads its rollout first thing), just before
the next batch is requested, so the loop never waits on the engine to finish sampling merely to load. Either way each
batch comes from one version, the one it records; a load that fails fails the step that sends it, in one line.

Reference scoring (``reference_model``, for ``model.reference=engine``): once a training batch is read, one more
request asks the same server for the log-probs of each sequence under the frozen model it serves as
``reference_model`` (vLLM's ``prompt_logprobs``, ``max_tokens`` 1 at temperature 0), before the next batch is
requested, so the server scores it first; the answer waits as ``batch.reference_scores`` (``score_reference``) until
the loop needs it, after the policy's own pass.

Transport (``rlkit_plugins.generators.kept_alive``): requests are written to kept-alive connections on the loop's
own thread when a batch is requested, at most ``max_concurrency`` of a batch at once (the rest as answers come in),
and their answers read when the batch is needed, so the engine samples while the loop judges and trains without a
client thread competing with them. Each attempt waits at most ``timeout_s`` between bytes of an answer; rlkit's
shared retry schedule applies (``retries`` after the first attempt, ``retry_backoff`` doubling, a timeout,
connection error, 429, 5xx or malformed answer retried); a server that does not answer at all is waited for up to
``unavailable_timeout`` seconds past the retries, said once. A record still failing after its retries fails the step
with one line naming it: a step cannot train on missing rollouts. At setup, nothing listening at ``base_url`` is a
``ConfigError``: ``cannot connect to ... (connection refused)``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import urllib.parse
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.plugin import (
    ConfigError,
    GenerationRequest,
    GeneratorError,
    SampledBatch,
    WeightVersions,
    assemble_sampled_batch,
    end_token_ids,
    hookimpl,
    tokenize_prompts,
)
from rlkit_plugins.backends.reachability import probe
from rlkit_plugins.generators.kept_alive import EngineConnections, RequestsOut

if TYPE_CHECKING:
    import torch

WHERE = "generator.params"
_SYNCS = ("auto", "full", "adapter", "none")
Rows = list[tuple[list[int], list[float], bool | None]]  # per sample: token ids, their log-probs, whether it ended


def _read_choices(n: int) -> Any:
    """Reads a completions answer's body: ``[(token_ids, token_logprobs, ended)] * n`` in sample order, or None;
    ``ended``: the engine stopped the sample itself (``finish_reason`` ``"stop"``), None where it does not say."""

    def read(body: bytes) -> Rows | None:
        try:
            choices = sorted(json.loads(body)["choices"], key=lambda c: c["index"])
            out = []
            for choice in choices:
                logprobs = choice["logprobs"]
                ids, logps = choice.get("token_ids"), logprobs["token_logprobs"]
                if ids is None:  # a server without return_token_ids: the "token_id:<id>" names it returns instead
                    ids = [int(name.removeprefix("token_id:")) for name in logprobs["tokens"]]
                if len(ids) != len(logps) or not all(isinstance(t, int) for t in ids):
                    return None
                reason = choice.get("finish_reason")
                out.append(([int(t) for t in ids], [float("nan") if v is None else float(v) for v in logps],
                            reason == "stop" if isinstance(reason, str) else None))
        except (ValueError, KeyError, IndexError, TypeError, AttributeError):
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
        # A batch's requests out at once (one per record). The rest are sent only as answers are read, i.e. when
        # the loop needs the batch, so keep it at least the number of records a step samples for full overlap.
        max_concurrency: int = 256
        retries: int = 3
        retry_backoff: float = 0.5
        # Seconds a server that stops answering at all (an engine that died or restarts) is waited for past the
        # retries, said once, before the step fails and the run stops with its checkpoint (as the judges wait).
        unavailable_timeout: float = 120.0
        # auto (adapter for a LoRA policy whose server loads adapters at run time, else full) | full (the whole
        # policy, LoRA merged; SGLang's /update_weights_from_disk) | adapter (the LoRA adapter alone; vLLM's
        # /v1/load_lora_adapter; the policy must be LoRA-wrapped) | none (a frozen sampler).
        sync: str = "auto"
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
        # The name under which the same server serves the reference model, frozen (vLLM with sync=adapter: the base
        # model's name; the test server: --reference-model), for model.reference=engine: each batch's sequences are
        # scored there (vLLM's prompt_logprobs) as soon as the batch is read, before the next batch is requested,
        # so the engine computes the KL term's reference log-probs while the trainer runs the policy. null: off.
        reference_model: str | None = None

    def __init__(self, params: OpenAIServerGenerator.Params | None = None) -> None:
        p = params or OpenAIServerGenerator.Params()
        if not p.base_url.startswith(("http://", "https://")):
            raise ConfigError(f"must be an http(s) URL such as http://127.0.0.1:8000/v1, got {p.base_url!r}",
                              f"{WHERE}.base_url")
        if p.sync not in _SYNCS:
            raise ConfigError(f"must be one of {', '.join(_SYNCS)}, got {p.sync!r}", f"{WHERE}.sync")
        for name, low, strict in (("timeout_s", 0, True), ("max_concurrency", 1, False), ("retries", 0, False),
                                  ("retry_backoff", 0, False), ("sync_every", 1, False), ("max_lag", 0, False),
                                  ("unavailable_timeout", 0, False)):
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
        self.served_model = p.model
        self.versions = WeightVersions()
        self._tokenizer: Any = None
        self._sync_root: Path | None = None
        self._own_sync_root = False
        self._live: list[Path] = []  # versions the server may still read, oldest first
        self._connections: EngineConnections | None = None
        self._out: list[PendingBatch] = []  # batches requested whose answers are not read yet
        self._scoring: list[ReferenceScores] = []  # reference log-probs asked for and not read yet
        self._due: tuple[Path, str, str] | None = None  # a saved version to load once those are read
        # full | adapter | none: how weights travel, decided at setup (``auto`` by the policy and the server)
        self._route = p.sync
        path = urllib.parse.urlsplit(self.base_url).path
        self._completions_path = f"{path}/completions"

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
        wanted = p.sync
        if wanted == "adapter" and not is_lora:
            raise ConfigError(f"sync={p.sync} sends the policy's LoRA adapter, but this policy has none: train with "
                              "LoRA or use sync=full", f"{WHERE}.sync")
        self._route = ("adapter" if is_lora else "full") if wanted == "auto" else wanted
        self._tokenizer = tokenizer
        version = self.versions.start()  # a resumed run: the counters go on from the checkpoint
        self.served_model = p.model
        self._due = None  # a load saved before a resume: setup pushes the weights the loop has now
        if self._route == "none":
            warnings.warn("generator.params.sync=none: the engine keeps its own weights, so held-out evaluation "
                          "(the start/end tables) scores the engine's model, not the policy being trained",
                          stacklevel=2)
        else:
            try:
                self._push(policy, version)
            except _Refused as exc:
                if p.sync != "auto" or self._route != "adapter":
                    raise
                # the one probe of auto: the server answered the adapter's load with an HTTP error (no runtime LoRA)
                print(f"rlkit: generator.params.sync=auto: {self.root} did not load the LoRA adapter ({exc.message}); "
                      "sending the full weights (LoRA merged) each sync instead", file=sys.stderr, flush=True)
                self._route = "full"
                self._push(policy, version)
        self.versions.forget_costs()  # the setup's push is no step's

    def close(self) -> None:
        """Drop the batches still out (a run's last look-ahead is never trained on) and the connections, then remove
        the version folders this generator made (a temporary ``sync_dir`` entirely)."""
        for batch in self._out:
            batch.abandon()
        for scores in self._scoring:
            scores.abandon()
        self._out, self._due, self._scoring = [], None, []
        if self._connections is not None:
            self._connections.close()
            self._connections = None
        if self._sync_root is not None and self._own_sync_root:
            shutil.rmtree(self._sync_root, ignore_errors=True)
            self._sync_root = None

    @property
    def route(self) -> str:
        """How weights reach the server: ``full``, ``adapter`` or ``none`` (``auto`` is decided at setup)."""
        return self._route

    def metrics(self) -> dict[str, float]:
        """The weight syncs since the last call: ``time/sync`` (seconds saving the weights and having the server
        load them, the loop's time) and ``sync/bytes`` (the size of what was saved for the server to read)."""
        if self._route == "none":
            return {}
        return self.versions.metrics()

    @property
    def policy_version(self) -> int:
        """The served weight version (0: the weights pushed at setup)."""
        return self.versions.version

    def state_dict(self) -> dict[str, int]:
        """The version counters, saved in checkpoints: a resumed run numbers versions and lags on from them."""
        return self.versions.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Called before ``setup`` on resume; ``setup`` then serves the checkpoint's weights under that version."""
        self.versions.load_state_dict(state)

    # --- weight sync --------------------------------------------------------------------------------------

    def sync_weights(self, policy: Any) -> None:
        """After an optimiser step: every ``sync_every``-th one, push the weights as the next version."""
        due = self.versions.step(self.params.sync_every)
        if self._route == "none" or not due:
            return
        self._push(policy, self.policy_version + 1, deferred=True)

    def _folder(self, version: int) -> Path:
        if self._sync_root is None:
            if self.params.sync_dir is None:
                self._sync_root, self._own_sync_root = Path(tempfile.mkdtemp(prefix="rlkit-sync-")), True
            else:
                self._sync_root = Path(self.params.sync_dir).expanduser().resolve()
                self._sync_root.mkdir(parents=True, exist_ok=True)
        return self._sync_root / f"v{version}"

    def _push(self, policy: Any, version: int, deferred: bool = False) -> None:
        """Make ``version`` the served weights. Requests already out are answered first, so every rollout comes from
        one version and records which; under DDP process 0 alone saves and sends the weights (they are the same on
        every process), once every process's requests are answered, and tells the others the outcome. ``deferred``
        (honoured with ``max_lag`` > 0 on one process): save now, load once the batches out have been read
        (``_load_due``)."""
        rank, world = _place()
        name = self.params.model if self._route == "full" else f"{self.params.model}-v{version}"
        failure: tuple[str, str, bool] | None = None
        previous = self.served_model
        # saved while requests may still be out (the server reads the folder only when told): writing the weights
        # overlaps their sampling
        folder = self._save(policy, version) if rank == 0 else None
        if deferred and world == 1 and self.max_lag > 0 and folder is not None:
            self._load_due()  # an earlier version still waiting goes first
            self._due = (folder, name, previous)
            self.served_model = name
            self.versions.taken(version)
            if not self._out:
                self._load_due()
            return
        self._load_due()
        self._read_out()
        if world > 1:
            import torch.distributed as dist

            dist.barrier()  # no process has a request out on the old weights once this returns
        if folder is not None:
            try:
                self._send(folder, name, previous)
            except GeneratorError as exc:
                failure = (exc.message, exc.where or f"{WHERE}.base_url", isinstance(exc, _Refused))
        if world > 1:
            import torch.distributed as dist

            box: list[Any] = [failure]
            dist.broadcast_object_list(box, src=0)
            failure = box[0]
        if failure is not None:
            raise (_Refused if failure[2] else GeneratorError)(failure[0], failure[1])
        self.served_model = name
        self.versions.taken(version)

    def _save(self, policy: Any, version: int) -> Path:
        import torch

        started = time.perf_counter()
        folder = self._folder(version)
        if folder.exists():  # a resumed run, or an earlier run's folder: never serve stale files
            shutil.rmtree(folder)
        with torch.no_grad():
            if self._route == "full" and hasattr(policy, "peft_config"):
                import copy

                # merged in a copy: the policy goes on training its adapter over the untouched base
                copy.deepcopy(policy).merge_and_unload().save_pretrained(folder)
            else:  # the whole model, or (a peft model) its adapter alone
                policy.save_pretrained(folder)
        if self._route == "full" and self._tokenizer is not None:
            self._tokenizer.save_pretrained(folder)
        self.versions.spent(time.perf_counter() - started,
                            sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()))
        return folder

    def _read_out(self) -> None:
        """Read every batch still out (its failure, if any, is kept for its ``result``)."""
        for batch in list(self._out):
            batch.collect()

    def _load_due(self) -> None:
        """Send a deferred load, once the batches requested before it have been read."""
        if self._due is None:
            return
        self._read_out()
        (folder, name, previous), self._due = self._due, None
        self._send(folder, name, previous)

    def _send(self, folder: Path, name: str, previous: str) -> None:
        """Ask the server to serve ``folder`` as ``name`` (``previous``: the name served until now), on a kept-alive
        connection; one attempt (a failed load is the step's failure, not something to repeat blindly)."""
        started = time.perf_counter()
        try:
            self._load(folder, name, previous)
        finally:
            self.versions.spent(time.perf_counter() - started)

    def _load(self, folder: Path, name: str, previous: str) -> None:
        root = urllib.parse.urlsplit(self.root).path
        if self._route == "full":  # SGLang answers {"success": bool, "message": str}
            route, payload = "/update_weights_from_disk", {"model_path": str(folder)}

            def loaded(body: bytes) -> bool | None:
                try:
                    return True if json.loads(body).get("success") is True else None
                except (ValueError, AttributeError):
                    return None
        else:  # vLLM answers 200 with a line of text
            route, payload = "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(folder),
                                                       "load_inplace": True}

            def loaded(body: bytes) -> bool | None:
                return True
        engine = self._engine()
        outcome = engine.post(root + route, json.dumps(payload).encode()).answer(loaded, "no success: true")
        if outcome.value is None:
            # an HTTP answer that is not a success (no retry would change it) is the server refusing these weights
            refused = not outcome.retryable and outcome.error.startswith("HTTP ")
            raise (_Refused if refused else GeneratorError)(f"weight sync to {self.root}{route} failed: "
                                                            f"{outcome.error}", f"{WHERE}.base_url")
        self._live.append(folder)
        if self._route == "adapter" and previous != self.params.model and previous != name:
            # after the new adapter serves (and no request names the old one): an unload failing costs server
            # memory, never a wrong sample
            engine.post(f"{root}/v1/unload_lora_adapter", json.dumps({"lora_name": previous}).encode()).answer(
                lambda body: True, "")
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

    def _score(self, prompts: list[list[int]], completions: list[list[int]], width: int, device: Any
               ) -> ReferenceScores:
        """Ask the engine's reference model for the log-probs of each completion after its prompt (sent now)."""
        body = json.dumps({"model": self.params.reference_model, "prompt": [p + c for p, c in zip(
            prompts, completions, strict=True)], "n": 1, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0,
            "stream": False}).encode()
        return ReferenceScores(self, body, [len(c) for c in completions], width, device)

    def score_reference(self, sampled: SampledBatch) -> ReferenceScores:
        """The reference model's log-probs of ``sampled``'s completion tokens, from the engine: the scores requested
        when the batch was read, else a request now (a batch restored from a checkpoint, or a subset of one)."""
        if self.params.reference_model is None:
            raise ConfigError("model.reference=engine needs the server's name for the reference model",
                              f"{WHERE}.reference_model")
        pending = getattr(sampled, "reference_scores", None)
        if pending is not None:
            return pending
        p = sampled.prompt_length
        prompts = [row[mask.bool()].tolist() for row, mask in zip(sampled.input_ids[:, :p],
                                                                    sampled.attention_mask[:, :p], strict=True)]
        lengths = sampled.completion_mask.sum(dim=1).tolist()
        completions = [row[:int(n)].tolist() for row, n in zip(sampled.completion_ids, lengths, strict=True)]
        return self._score(prompts, completions, sampled.completion_mask.shape[1], sampled.input_ids.device)

    def _engine(self) -> EngineConnections:
        if self._connections is None:
            self._connections = EngineConnections(self.base_url, self._headers(), self.params.timeout_s)
        return self._connections

    def submit(self, policy: Any, tokenizer: Any, request: GenerationRequest) -> PendingBatch:
        """Send the request and return at once; ``.result()`` reads the batch. The samples come from the latest
        version synced (a load still due goes out first); a later sync waits for them."""
        if request.greedy and self._route != "none" and self.versions.behind:
            # held-out evaluation measures the policy as it is, not the last version sync_every let through
            self._push(policy, self.policy_version + 1)
        self._load_due()
        prompt_ids, prompt_mask = tokenize_prompts(tokenizer, request.records, request.prompt_token_ids)
        seeds = request.seeds
        if seeds is not None and len(seeds) != len(request.records):
            raise ValueError(f"{len(seeds)} seeds for {len(request.records)} records")
        prompts = [ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids, prompt_mask, strict=True)]
        bodies = [json.dumps(self._payload(prompt, request, None if seeds is None or request.greedy
                                           else int(seeds[i]))).encode() for i, prompt in enumerate(prompts)]
        device = next(policy.parameters()).device  # where the hf generator's batch lives too
        batch = PendingBatch(self, bodies, prompts, prompt_ids, prompt_mask, request.num_generations, tokenizer,
                             device, request.greedy, end_token_ids(policy, tokenizer))
        self._out.append(batch)
        return batch

    def generate(self, policy: Any, tokenizer: Any, request: GenerationRequest) -> SampledBatch:
        """B × G completions from the server, record by record, with ``engine_logprobs`` and ``policy_version``."""
        return self.submit(policy, tokenizer, request).result()


class _Refused(GeneratorError):
    """The server answered a weight load with an HTTP error (not a lost connection): ``auto`` falls back on it."""


class PendingBatch:
    """A batch's requests out at the engine (each record's ``n`` samples one request, at most ``max_concurrency``
    sent at once). ``collect()`` reads their answers, retrying failed ones; ``result()`` assembles the batch and says
    how far behind the policy the sampling weights are by then."""

    def __init__(self, generator: OpenAIServerGenerator, bodies: list[bytes], prompts: list[list[int]],
                 prompt_ids: torch.Tensor, prompt_mask: torch.Tensor, g: int, tokenizer: Any, device: torch.device,
                 greedy: bool = False, end_ids: list[int] | None = None) -> None:
        self._generator, self._prompts = generator, prompts
        self._prompt_ids, self._prompt_mask, self._g = prompt_ids, prompt_mask, g
        self._tokenizer, self._device = tokenizer, device
        self._end_ids = end_ids if end_ids is not None else [tokenizer.eos_token_id]  # for an answer without reason
        self.policy_version, self._served_at = generator.policy_version, generator.versions.pushed_at
        self._batch: SampledBatch | None = None
        self._rows: list[Rows | None] = []
        self._failure: GeneratorError | None = None
        self._collected = False
        self._reference: ReferenceScores | None = None  # the reference's log-probs, asked for once read
        self._trains = not greedy  # held-out (greedy) batches never meet the reference
        self._requests = RequestsOut(generator._engine(), generator._completions_path, bodies,
                                     generator.params.max_concurrency)

    def collect(self) -> None:
        """Read every record's answer (retrying failed ones); once all are in, ask for the reference's scores."""
        if self._collected:
            return
        self._collected = True
        if self in self._generator._out:
            self._generator._out.remove(self)
        p = self._generator.params
        self._rows, failure = self._requests.collect(
            _read_choices(self._g), f"no {self._g} choices with token_ids and logprobs.token_logprobs", p.retries,
            p.retry_backoff, p.unavailable_timeout, f"{WHERE}.unavailable_timeout")
        if failure is not None:
            self._failure = GeneratorError(f"{self._generator.base_url}/completions failed for record {failure[0]} "
                                           f"of the batch: {failure[1]}", f"{WHERE}.base_url")
        elif p.reference_model is not None and self._trains:
            prompts = [self._prompts[r] for r, record in enumerate(self._rows) for _ in (record or [])]
            completions = [ids for record in self._rows for ids, _, _ in (record or [])]
            width = max(1, max((len(c) for c in completions), default=0))  # as result() assembles it
            self._reference = self._generator._score(prompts, completions, width, self._device)

    def abandon(self) -> None:
        """Hang up the requests still out: their answers are no longer wanted."""
        self._requests.abandon()
        self._collected = True
        if self in self._generator._out:
            self._generator._out.remove(self)

    def result(self) -> SampledBatch:
        import torch
        if self._batch is not None:
            return self._batch
        self.collect()
        if self._failure is not None:
            raise self._failure
        if self._generator._due is not None and not self._generator._out:
            self._generator._load_due()  # nothing sampled on the old weights is still out: the new ones can load
        rows = [row for record in self._rows for row in (record or [])]
        tokenizer, g, device = self._tokenizer, self._g, self._device
        width = max(1, max(len(ids) for ids, _, _ in rows))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        completion = torch.full((len(rows), width), pad, dtype=self._prompt_ids.dtype)
        logps = torch.zeros(len(rows), width, dtype=torch.float32)
        for r, (ids, values, _) in enumerate(rows):
            completion[r, :len(ids)] = torch.tensor(ids, dtype=self._prompt_ids.dtype)
            logps[r, :len(values)] = torch.tensor(values, dtype=torch.float32)
        # the engine's finish_reason, where it gave one, else the end tokens, decides what ended (see the module doc)
        stopped = [bool(ids) and ids[-1] in self._end_ids if ended is None else ended for ids, _, ended in rows]
        batch = assemble_sampled_batch(self._prompt_ids.repeat_interleave(g, dim=0).to(device),
                                       self._prompt_mask.repeat_interleave(g, dim=0).to(device),
                                       completion.to(device), tokenizer, g,
                                       lengths=[len(ids) for ids, _, _ in rows], stopped=stopped)
        batch.engine_logprobs = logps.to(device).masked_fill(batch.completion_mask == 0, 0.0)
        batch.policy_version = self.policy_version
        batch.policy_lag = self._generator.versions.lag(self._served_at)
        # not a field: it never travels in a checkpoint. Scored as the engine returned the tokens, which the masks
        # now cover exactly; the check stays so that a mask read otherwise is scored again, never misaligned
        if self._reference is not None and self._reference.lengths == batch.completion_mask.sum(dim=1).tolist():
            batch.reference_scores = self._reference
        self._batch = batch
        return batch


class ReferenceScores:
    """The reference model's log-probs of a batch's completion tokens, asked of the engine (``prompt_logprobs`` over
    each whole sequence, one request); ``result()`` reads them as ``[N, C]``."""

    def __init__(self, generator: OpenAIServerGenerator, body: bytes, lengths: list[int], width: int,
                 device: Any) -> None:
        self._generator, self.lengths, self._width, self._device = generator, lengths, width, device
        self._requests = RequestsOut(generator._engine(), generator._completions_path, [body], 1)
        self._value: torch.Tensor | None = None
        generator._scoring.append(self)

    def _read(self, body: bytes) -> list[list[float]] | None:
        try:
            choices = sorted(json.loads(body)["choices"], key=lambda c: c["index"])
            out = []
            for choice, length in zip(choices, self.lengths, strict=True):
                entries = choice["prompt_logprobs"][len(choice["prompt_logprobs"]) - length:] if length else []
                out.append([float(next(iter(entry.values()))["logprob"]) for entry in entries])
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, StopIteration):
            return None
        return out

    def abandon(self) -> None:
        self._requests.abandon()

    def result(self) -> torch.Tensor:
        import torch
        if self._value is not None:
            return self._value
        p = self._generator.params
        (values,), failure = self._requests.collect(self._read, "no prompt_logprobs for every sequence", p.retries,
                                                    p.retry_backoff, p.unavailable_timeout,
                                                    f"{WHERE}.unavailable_timeout")
        if self in self._generator._scoring:
            self._generator._scoring.remove(self)
        if failure is not None:
            raise GeneratorError(f"{self._generator.base_url}/completions failed to score the reference's log-probs "
                                 f"({p.reference_model}): {failure[1]}", f"{WHERE}.reference_model")
        out = torch.zeros(len(values), self._width, dtype=torch.float32)
        for r, row in enumerate(values):
            out[r, :len(row)] = torch.tensor(row, dtype=torch.float32)
        self._value = out.to(self._device)
        return self._value


def _place() -> tuple[int, int]:
    """(rank, world size) of this process in a torch.distributed run; (0, 1) otherwise."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@hookimpl
def rlkit_register_generators(register):
    register("openai_server", OpenAIServerGenerator)
