"""``llama_cpp``: rollouts from a llama.cpp engine that rlkit starts, feeds the policy's current weights and stops.

The engine is llama.cpp's server from the ``xllamacpp`` wheel (the ``judge-server`` extra), run by rlkit's one engine
manager (:class:`rlkit.plugin.LlamaServer`, the judge's too): a child process on a free loopback port, health-checked,
restarted once if it dies, stopped when the command ends. It starts on the first request, sized to it: ``slots`` =
the request's completions (every completion of a step decodes in one continuous batch), each slot's context the
longest prompt plus ``max_new_tokens``; a later, bigger request reloads it bigger.

Weights: at setup and after every ``sync_every``-th optimiser step the policy is written as one GGUF file
(:func:`rlkit.plugin.write_gguf`, from memory: no Hugging Face save first; a LoRA policy merged, the adapter's update
added to a copy, never to the training weights) and the engine reloads on it, inside the same child (a new
``xllamacpp.Server``: no Python start, ~10 ms plus the model's load). llama-server cannot swap in a new LoRA adapter
file at run time (``/lora-adapters`` only rescales adapters loaded at start), so an adapter would need the same
reload and costs extra matrix products at every decoded token: the merged file is the one route.

Versions follow the ``openai_server`` generator's rule: each batch records the version that sampled it
(``policy_version``: 0 at setup, +1 per sync) and how many optimiser steps the policy has moved since
(``policy_lag``); a new version loads only once every batch requested on the old one has been read, so a batch never
mixes versions; with ``max_lag`` 1 the next step's batch is requested before this step's update and comes back one
version behind, corrected by ``objective.params.is_correction`` against ``engine_logprobs``. The counters travel in
checkpoints under the same keys.

Wire: the request body and how the answer is read (token ids in, each sampled token's raw log-prob out, aligned
where the server leaves entries out; ended or cut by the server's ``stop_type``) are in
:mod:`rlkit_plugins.generators.llama_cpp_wire`.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.plugin import (
    EXPORT_TYPES,
    ConfigError,
    EngineError,
    GenerationRequest,
    GeneratorError,
    LlamaServer,
    LlamaServerSettings,
    SampledBatch,
    WeightVersions,
    assemble_sampled_batch,
    hookimpl,
    tokenize_prompts,
    write_gguf,
)
from rlkit_plugins.generators.kept_alive import EngineConnections, RequestsOut
from rlkit_plugins.generators.llama_cpp_wire import Rows, completion_body, read_completions

WHERE = "generator.params"
INSTALL_ENGINE = "pip install 'rlkit[judge-server]'"
CONTEXT_STEP = 256  # slots' context rounded up to this, so prompts a little longer than the last do not reload


def engine_installed() -> bool:
    """Whether the ``xllamacpp`` wheel is importable (nothing is imported)."""
    try:
        return importlib.util.find_spec("xllamacpp") is not None
    except ValueError:  # a module set to None in sys.modules: blocked
        return False


class LlamaCppGenerator:
    """Samples each step's completions from a llama.cpp engine on the policy's current weights (see the module
    doc), with the sampled tokens' log-probs."""

    @dataclass
    class Params:
        # The engine's weights: f32 (the trained weights exactly: engine log-probs match the trainer's to float
        # rounding), f16, or q8_0 (a quarter of f32's bytes; log-probs off by a few hundredths, which is_correction
        # corrects like any other mismatch).
        weights: str = "f32"
        # Completions decoded at once; null: each request's completions (B x G), never fewer than G.
        slots: int | None = None
        # Each slot's context in tokens; null: the longest prompt plus max_new_tokens, rounded up to 256.
        context: int | None = None
        # CPU threads the engine computes with; null: every core this process may use.
        threads: int | None = None
        # Sync after every k-th optimiser step; the sampler lags by up to k-1 steps in between.
        sync_every: int = 1
        # Steps whose rollouts are requested ahead (0 or 1; see the openai_server generator): with 1, step k+1
        # samples while step k judges and updates, one version behind, corrected by importance sampling.
        max_lag: int = 0
        timeout_s: float = 600.0
        # Retries of a failed request before the engine is checked; a dead engine is restarted once and the batch
        # asked again, a second death stops the run.
        retries: int = 1
        retry_backoff: float = 0.2
        ready_timeout: float = 300.0
        # Reuse a slot's KV for the part of a prompt it shares with its previous one (the group's G completions).
        prompt_cache: bool = True
        # llama.cpp sampling extras sent with every request, e.g. {repeat_penalty: 1.1}. null: none.
        extra_body: dict[str, Any] | None = None

    def __init__(self, params: LlamaCppGenerator.Params | None = None) -> None:
        p = params or LlamaCppGenerator.Params()
        if p.weights not in EXPORT_TYPES:
            raise ConfigError(f"must be one of {', '.join(EXPORT_TYPES)}, got {p.weights!r}", f"{WHERE}.weights")
        for name, low in (("slots", 1), ("context", 16), ("threads", 1)):
            value = getattr(p, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
                raise ConfigError(f"must be an integer >= {low} or null, got {value!r}", f"{WHERE}.{name}")
        for name, low, strict in (("sync_every", 1, False), ("max_lag", 0, False), ("retries", 0, False),
                                  ("retry_backoff", 0, False), ("timeout_s", 0, True), ("ready_timeout", 0, True)):
            value = getattr(p, name)
            if not isinstance(value, int | float) or not math.isfinite(value) or value < low or (
                    strict and value == low):
                raise ConfigError(f"must be {'>' if strict else '>='} {low}, got {value!r}", f"{WHERE}.{name}")
        if p.max_lag > 1:
            raise ConfigError(f"must be 0 or 1 (one engine serves one version at a time), got {p.max_lag}",
                              f"{WHERE}.max_lag")
        if not engine_installed():  # rlkit validate builds the plugin: the missing engine is its one line
            raise ConfigError(f"generator=llama_cpp needs the llama.cpp engine: {INSTALL_ENGINE}", "generator")
        self.params = p
        self.max_lag = p.max_lag  # read by the loop (rlkit.train.lookahead)
        self.honours_seeds = True  # a completion is drawn from its request's seed alone (llama.cpp's per-slot RNG)
        self.versions = WeightVersions()
        self._root: Path | None = None  # the tokenizer's files and the versions' GGUF files
        self._tokenizer: Any = None
        self._tokenizer_dir: Path | None = None
        self._file: Path | None = None  # the newest version's file
        self._due = False  # _file is newer than what the engine serves: reload before the next request
        self._server: LlamaServer | None = None
        self._served: tuple[str, int, int] | None = None  # (file, slots, context) the engine serves
        self._connections: EngineConnections | None = None
        self._out: list[PendingBatch] = []
        self.logprobs_missing = 0  # completion tokens without an engine log-prob since the last metrics()

    # --- lifecycle ----------------------------------------------------------------------------------------

    def setup(self, policy: Any, tokenizer: Any) -> None:
        """Write the policy's weights as version 0 (a resumed run: the checkpoint's version); the engine starts on
        the first request."""
        for batch in self._out:
            batch.abandon()
        self._out = []
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="rlkit-llama-cpp-"))
        self._tokenizer, self._tokenizer_dir = tokenizer, self._root / "tokenizer"
        tokenizer.save_pretrained(self._tokenizer_dir)  # read by every export: special ids, chat template
        self._write(policy, self.versions.start())
        self.versions.forget_costs()  # the setup's export is no step's

    def close(self) -> None:
        """Drop the batches still out, stop the engine, remove the files."""
        for batch in self._out:
            batch.abandon()
        self._out = []
        if self._connections is not None:
            self._connections.close()
            self._connections = None
        if self._server is not None:
            self._server.stop()
            self._server, self._served = None, None
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    @property
    def server(self) -> LlamaServer | None:
        """The engine's handle once a request has started it."""
        return self._server

    def metrics(self) -> dict[str, float]:
        """Since the last call: the syncs' ``time/sync`` (writing the GGUF file and reloading the engine on it) and
        ``sync/bytes`` (the file's size), and ``generator/logprobs_missing``, the completion tokens of the batches
        read that have no engine log-prob (NaN in ``engine_logprobs``: see the module doc)."""
        missing, self.logprobs_missing = self.logprobs_missing, 0
        return {**self.versions.metrics(), "generator/logprobs_missing": float(missing)}

    @property
    def policy_version(self) -> int:
        """The newest weight version (0: the weights written at setup)."""
        return self.versions.version

    def state_dict(self) -> dict[str, int]:
        """The version counters, as the ``openai_server`` generator saves them."""
        return self.versions.state_dict()

    def load_state_dict(self, state: dict[str, int]) -> None:
        """Called before ``setup`` on resume."""
        self.versions.load_state_dict(state)

    # --- weights ------------------------------------------------------------------------------------------

    def sync_weights(self, policy: Any) -> None:
        """After an optimiser step: every ``sync_every``-th one, write the weights as the next version; the engine
        loads it once the batches requested before it are read."""
        if self.versions.step(self.params.sync_every):
            self._write(policy, self.policy_version + 1)

    def _write(self, policy: Any, version: int) -> None:
        import torch

        assert self._root is not None and self._tokenizer_dir is not None
        started = time.perf_counter()
        path = self._root / f"v{version}.gguf"
        with torch.no_grad():
            written = write_gguf(policy, self._tokenizer, path, self.params.weights, where=WHERE,
                                 tokenizer_folder=self._tokenizer_dir, name="policy")
        if self._due and self._file is not None and self._file != path:
            self._file.unlink(missing_ok=True)  # written, never served; a served file goes once the engine moves on
        self._file, self._due = path, True
        self.versions.taken(version)
        self.versions.spent(time.perf_counter() - started, written.bytes)

    # --- the engine ---------------------------------------------------------------------------------------

    def _engine(self, slots: int, context: int) -> EngineConnections:
        """Connections to an engine serving the newest file with at least ``slots`` and ``context``: started,
        reloaded (a new version, more room) or restarted (it died: once) as needed."""
        assert self._file is not None
        p = self.params
        file = str(self._file)
        if self._served is not None:
            slots, context = max(slots, self._served[1]), max(context, self._served[2])
        wanted = (file, slots, context)
        if self._server is None:
            if not engine_installed():
                raise ConfigError(f"generator=llama_cpp needs the llama.cpp engine: {INSTALL_ENGINE}", "generator")
            threads = p.threads or len(os.sched_getaffinity(0))
            settings = LlamaServerSettings(model=file, slots=slots, context=context, threads=threads,
                                           alias="policy", prompt_cache=p.prompt_cache,
                                           kv_cache="f32" if p.weights == "f32" else "f16")
            self._server = LlamaServer(settings, WHERE, ready_timeout=p.ready_timeout)
        if self._served != wanted or not self._server.running or self._connections is None:
            started = time.perf_counter()
            previous = self._served
            url = self._server.reload(model=file, slots=slots, context=context) if previous is not None \
                else self._server.ensure_running()
            if self._connections is not None:
                self._connections.close()
            self._connections = EngineConnections(url, {}, p.timeout_s)
            self._served, self._due = wanted, False
            if previous is not None and previous[0] != file:
                Path(previous[0]).unlink(missing_ok=True)
                self.versions.spent(time.perf_counter() - started)  # a version's load is the sync's time
        return self._connections

    def _read_out(self) -> None:
        for batch in list(self._out):
            batch.collect()

    # --- sampling -----------------------------------------------------------------------------------------

    def submit(self, policy: Any, tokenizer: Any, request: GenerationRequest) -> PendingBatch:
        """Send the request and return at once; ``.result()`` reads the batch."""
        if request.greedy and self.versions.behind:
            # held-out evaluation measures the policy as it is, not the last version sync_every let through
            self._write(policy, self.policy_version + 1)
        prompt_ids, prompt_mask = tokenize_prompts(tokenizer, request.records, request.prompt_token_ids)
        seeds = request.seeds
        if seeds is not None and len(seeds) != len(request.records):
            raise ValueError(f"{len(seeds)} seeds for {len(request.records)} records")
        prompts = [ids[mask.bool()].tolist() for ids, mask in zip(prompt_ids, prompt_mask, strict=True)]
        g = request.num_generations
        slots = self.params.slots or len(prompts) * g
        if slots < g:
            raise ConfigError(f"{slots} slots cannot sample a group of {g} completions at once: use at least {g} "
                              "or null", f"{WHERE}.slots")
        longest = max((len(prompt) for prompt in prompts), default=0) + request.max_new_tokens
        context = self.params.context or -(-longest // CONTEXT_STEP) * CONTEXT_STEP
        if self._due or (self._served is not None and (slots > self._served[1] or context > self._served[2])):
            self._read_out()  # no batch on the old engine is still out when it reloads
        bodies = [json.dumps(completion_body(prompt, request, None if seeds is None or request.greedy
                                             else int(seeds[i]), self.params.prompt_cache,
                                             self.params.extra_body)).encode() for i, prompt in enumerate(prompts)]
        batch = PendingBatch(self, bodies, prompt_ids, prompt_mask, g, tokenizer,
                             next(policy.parameters()).device, (slots, context))
        self._out.append(batch)
        return batch

    def generate(self, policy: Any, tokenizer: Any, request: GenerationRequest) -> SampledBatch:
        """B × G completions from the engine, with ``engine_logprobs`` (NaN: unknown), ``policy_version`` and
        ``policy_lag``."""
        return self.submit(policy, tokenizer, request).result()


class PendingBatch:
    """A batch's requests out at the engine (one per record, its G completions together); ``result()`` reads and
    assembles them. A batch whose engine died is asked again, once, of the restarted engine on the same file."""

    def __init__(self, generator: LlamaCppGenerator, bodies: list[bytes], prompt_ids: Any, prompt_mask: Any, g: int,
                 tokenizer: Any, device: Any, room: tuple[int, int]) -> None:
        self._generator, self._bodies, self._room = generator, bodies, room
        self._prompt_ids, self._prompt_mask, self._g = prompt_ids, prompt_mask, g
        self._tokenizer, self._device = tokenizer, device
        self._rows: list[Rows | None] = []
        self._failure: str | None = None
        self._collected = False
        self._batch: SampledBatch | None = None
        self._requests = self._send()
        self.policy_version, self._served_at = generator.policy_version, generator.versions.pushed_at

    def _send(self) -> RequestsOut:
        engine = self._generator._engine(*self._room)
        return RequestsOut(engine, "/completion", self._bodies, len(self._bodies))

    def collect(self) -> None:
        """Read every record's answer; an engine found dead is restarted (once in the run) and the batch re-asked."""
        if self._collected:
            return
        self._collected = True
        generator, p = self._generator, self._generator.params
        if self in generator._out:
            generator._out.remove(self)
        read = read_completions(self._g)
        malformed = f"no {self._g} results with tokens and their completion_probabilities"
        self._rows, failure = self._requests.collect(read, malformed, p.retries, p.retry_backoff)
        server = generator._server
        if failure is not None and server is not None and not server.running:
            self._requests = self._send()  # restarts the engine, or raises EngineError after the one restart
            # on the newest weights: a version written meanwhile (max_lag 1) is what samples the batch now
            self.policy_version, self._served_at = generator.policy_version, generator.versions.pushed_at
            self._rows, failure = self._requests.collect(read, malformed, p.retries, p.retry_backoff)
        if failure is not None:
            self._failure = f"the llama.cpp engine failed record {failure[0]} of the batch: {failure[1]}"

    def abandon(self) -> None:
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
            server = self._generator._server
            if server is not None and not server.running:
                raise EngineError(self._failure, WHERE)
            raise GeneratorError(self._failure, WHERE)
        rows = [row for record in self._rows for row in (record or [])]
        tokenizer, g = self._tokenizer, self._g
        width = max(1, max(len(ids) for ids, _, _ in rows))
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        completion = torch.full((len(rows), width), pad, dtype=self._prompt_ids.dtype)
        logps = torch.zeros(len(rows), width, dtype=torch.float32)
        for r, (ids, values, _) in enumerate(rows):
            completion[r, :len(ids)] = torch.tensor(ids, dtype=self._prompt_ids.dtype)
            logps[r, :len(values)] = torch.tensor(values, dtype=torch.float32)
        # the engine's stop reason, where it gave one; else (an older server) the tokenizer's EOS, as for any engine
        stopped = [bool(ids) and ids[-1] == tokenizer.eos_token_id if ended is None else ended
                   for ids, _, ended in rows]
        batch = assemble_sampled_batch(self._prompt_ids.repeat_interleave(g, dim=0).to(self._device),
                                       self._prompt_mask.repeat_interleave(g, dim=0).to(self._device),
                                       completion.to(self._device), tokenizer, g,
                                       lengths=[len(ids) for ids, _, _ in rows], stopped=stopped)
        batch.engine_logprobs = logps.to(self._device).masked_fill(batch.completion_mask == 0, 0.0)
        self._generator.logprobs_missing += int(batch.engine_logprobs.isnan().sum())
        batch.policy_version = self.policy_version
        batch.policy_lag = self._generator.versions.lag(self._served_at)
        self._batch = batch
        return batch


@hookimpl
def rlkit_register_generators(register):
    register("llama_cpp", LlamaCppGenerator)
