"""The test server's token completions (vLLM's ``/v1/completions``): requests that arrive together are decoded in
one left-padded pass, each row with its own seeded noise, with the raw log-probs vLLM's ``raw_logprobs`` returns."""

from __future__ import annotations

import threading
import time
from typing import Any, NamedTuple

from rlkit.core.timeline import record, span
from rlkit.testing.openai_server.wire import _DEFAULT_MAX_TOKENS, _BadRequest, _number


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



class TokenCompletions:
    """The completions route of :class:`~rlkit.testing.openai_server.OpenAICompatibleServer` (a mixin: the server holds
    the model, its locks and the queue of waiting jobs)."""

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
