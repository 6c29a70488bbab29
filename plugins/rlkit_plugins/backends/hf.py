"""The built-in ``hf`` judge backend: a local Hugging Face causal LM run in-process.

* ``model`` is a local model directory or a hub id already in the local Hugging Face cache (resolved by
  :func:`rlkit.lm.models.locate_model`, which never downloads). A path or id that does not resolve fails when the
  backend is built, so ``rlkit validate`` reports it, and so does none at all: the offline tiny judge is the
  ``tiny`` backend (``rlkit_plugins.backends.tiny``), chosen by name, never by leaving ``model`` out.
* The weights load on the first :meth:`HFBackend.complete`, not when the backend is built: ``rlkit validate``
  builds every configured plugin and must stay fast.
* Requests are answered in batches of ``batch_size``, left-padded, with one ``generate`` call each; only the
  new tokens are decoded, cut at the first end-of-sequence token. ``temperature: 0`` is greedy decoding.
* ``device_map``, ``max_memory`` and ``offload_folder`` load a judge too big for one device (see
  :func:`rlkit.plugin.plan_placement`): ``device_map: auto`` has accelerate spread the modules over the GPUs, then
  the CPU, then ``offload_folder`` on disk, each device holding at most its ``max_memory`` (``{0: 20GiB, cpu:
  60GiB}``; a device left out holds nothing). The map is planned from the model's config when the backend is
  built, so a malformed ``max_memory``, a missing GPU or a model that does not fit without an ``offload_folder``
  fails ``rlkit validate`` naming the param; it is planned again when the weights load. Offloading is slow but
  gives the same greedy answers. ``device_map: null`` (the default) loads the model whole on the CPU, as before.
* Each chat is rendered with the tokenizer's chat template when it has one, else as ``role: content`` lines
  followed by ``assistant:``.
* Structured outputs: ``complete(chats, schema=...)`` constrains every answer to a JSON schema (the ``llm`` judge
  sends the rubric's) by constrained decoding (:class:`rlkit.plugin.JsonSchemaConstraint`), so each answer parses.
* Nothing is retried for transient reasons (there are none in-process); a batch whose generation raises is
  retried one request at a time, so a single bad request comes back as ``text=None`` with an ``error`` and
  the others are still answered. ``latency`` is the batch's wall time divided by its size.
* Spend: each answer carries its prompt tokens and its new tokens (up to and including the end-of-sequence token
  that stopped it, as a server's ``usage`` counts them), counted with the tokenizer; ``price_input_per_million``
  and ``price_output_per_million`` (the cost of the hardware, if you want one) give ``judge/cost``.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.plugin import (
    Completion,
    ConfigError,
    JsonSchemaConstraint,
    Placement,
    hookimpl,
    input_device,
    render_chat,
    token_price,
)

WHERE = "judge.params.backend.params"
_DTYPES = ("auto", "float32", "float16", "bfloat16")

Messages = Sequence[dict[str, str]]


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """The tokenizer's EOS plus the model's generation-config EOS ids (chat models often list several)."""
    ids: set[int] = set()
    for source in (tokenizer.eos_token_id, getattr(model.generation_config, "eos_token_id", None)):
        if isinstance(source, int):
            ids.add(source)
        elif source:
            ids.update(int(i) for i in source)
    return sorted(ids)


def _chat_problem(messages: Any) -> str | None:
    """Why ``messages`` is not a chat of ``{"role": str, "content": str}`` messages, or None."""
    # Checked here because a chat template renders a missing key as "" without complaint.
    if isinstance(messages, str | bytes) or not isinstance(messages, Sequence) or not messages:
        return "malformed chat: expected a non-empty list of messages"
    for i, m in enumerate(messages):
        if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
            return f"malformed chat: messages[{i}] needs a string 'role' and a string 'content'"
    return None


def _cut_at_stop(row: list[int], stop: set[int]) -> list[int]:
    for i, token in enumerate(row):
        if token in stop:
            return row[:i]
    return row


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".strip()


class HFBackend:
    """Answers chats with a local causal LM, batched, in this process."""

    @dataclass
    class Params:
        model: str | None = None
        max_new_tokens: int = 64
        temperature: float = 0.0
        batch_size: int = 16
        dtype: str = "float32"
        # null: the whole model on the CPU; auto | balanced | balanced_low_0 | sequential: planned by accelerate;
        # a device (cpu, cuda, cuda:N); or {module name: device} with devices GPU index, cpu or disk
        device_map: str | int | dict[str, int | str] | None = None
        max_memory: dict[int | str, int | str] | None = None  # {0: 20GiB, cpu: 60GiB}: the most each device holds
        offload_folder: str | None = None  # where the weights that fit on no device go
        price_input_per_million: float | None = None
        """A price per million prompt tokens (the hardware's, if you want one); with the output price it gives
        ``judge/cost``."""
        price_output_per_million: float | None = None
        """A price per million answer tokens; with the input price it gives ``judge/cost``."""

    def __init__(self, params: HFBackend.Params | None = None) -> None:
        p = params or HFBackend.Params()
        if p.model is None and self.model_required:
            raise ConfigError("hf answers with a model you name (a model directory, a GGUF file or a hub id already "
                              "in the local cache); backend: tiny is the offline tiny judge, for tests and demos",
                              f"{WHERE}.model")
        if p.model is not None and (not isinstance(p.model, str) or not p.model.strip()):
            raise ConfigError(f"must be a model directory, a hub id or null, got {p.model!r}", f"{WHERE}.model")
        if p.max_new_tokens < 1:
            raise ConfigError(f"must be >= 1, got {p.max_new_tokens}", f"{WHERE}.max_new_tokens")
        if not (math.isfinite(p.temperature) and p.temperature >= 0):
            raise ConfigError(f"must be a finite number >= 0 (0 = greedy), got {p.temperature}",
                              f"{WHERE}.temperature")
        if p.batch_size < 1:
            raise ConfigError(f"must be >= 1, got {p.batch_size}", f"{WHERE}.batch_size")
        if p.dtype not in _DTYPES:
            raise ConfigError(f"must be one of {', '.join(_DTYPES)}, got {p.dtype!r}", f"{WHERE}.dtype")
        self.params = p
        self.price = token_price(p.price_input_per_million, p.price_output_per_million, WHERE)
        # Resolving a path or a cached hub id touches only the filesystem, so a wrong one fails at validate time.
        self._path: Path | None = None
        self._ref: str | None = None
        if p.model is not None:
            self._path, self._ref = _locate(p.model)
        # Planned from the config alone (no weights), so a placement that cannot work fails at validate time too.
        self._placement(self._path)
        self._model: Any = None
        self._tokenizer: Any = None
        self._stop: set[int] = set()
        self._lock = threading.Lock()

    # no model named is a mistake here, never a silent switch to the offline tiny judge (the tiny backend is that)
    model_required = True
    generates_locally = True  # rlkit serve may answer chats with this model
    structured_outputs = True  # complete(..., schema=) constrains answers to a JSON schema
    level_probs_outputs = True  # complete(..., schema=, level_probs=True) reads each level's probability

    @property
    def max_answer_tokens(self) -> int:
        """The longest answer (``max_new_tokens``): what ``rlkit validate``'s estimate assumes."""
        return self.params.max_new_tokens

    @property
    def needs_model(self) -> bool:
        """No model was named: the judge swaps in its offline one (:meth:`with_model`)."""
        return self.params.model is None

    def with_model(self, folder: str | Path) -> HFBackend:
        """The same backend answering with the model in ``folder``."""
        return HFBackend(dataclasses.replace(self.params, model=str(folder)))

    @property
    def model_folder(self) -> Path | None:
        """The folder of the named model (None without one: the judge's offline model answers)."""
        return self._path if self.params.model is not None else None

    @property
    def loaded(self) -> bool:
        """Whether the weights are in memory (they load on the first non-empty :meth:`complete`)."""
        return self._model is not None

    def _model_path(self) -> Path:
        if self._path is None:
            from rlkit.plugin import build_tiny_policy

            self._path = build_tiny_policy()  # reused from the cache once built
            self._ref = str(self._path)
        return self._path

    def identity(self) -> dict[str, Any]:
        """Backend, model and decoding settings: part of every response-cache key.

        ``model`` is the resolved directory for a local model or the tiny policy (whose folder name carries
        its spec hash), and ``<hub id>@<snapshot commit>`` for a hub id, so a cache never mixes revisions.
        ``dtype`` is included because it changes greedy answers.
        """
        self._model_path()
        return {"backend": "hf", "model": self._ref, "max_new_tokens": self.params.max_new_tokens,
                "temperature": self.params.temperature, "dtype": self.params.dtype}

    def _placement(self, path: Path | None) -> Placement | None:
        from rlkit.plugin import plan_placement

        p = self.params
        return plan_placement(path, device_map=p.device_map, max_memory=p.max_memory, offload_folder=p.offload_folder,
                              dtype=p.dtype, where=WHERE)

    def _load(self) -> tuple[Any, Any]:
        if self._model is None:
            from rlkit.plugin import load_policy

            path = self._model_path()
            placement = self._placement(path)  # again: free memory has changed since the backend was built
            try:
                model, tokenizer = load_policy(path, dtype=self.params.dtype, placement=placement)
            except ConfigError as exc:
                raise ConfigError(exc.message, f"{WHERE}.model") from None
            model.eval()
            self._stop = set(stop_token_ids(model, tokenizer))
            self._model, self._tokenizer = model, tokenizer
        return self._model, self._tokenizer

    def complete(self, prompts: Sequence[Messages], schema: dict[str, Any] | None = None,
                 level_probs: bool = False) -> list[Completion]:
        """One :class:`Completion` per chat, in order; a failed request has ``text=None`` and an ``error``. With
        ``schema`` every answer is constrained to that JSON schema, and with ``level_probs`` each carries the
        probability of every level of the schema's one-digit fields (``Completion.level_probs``)."""
        if not prompts:
            return []
        with self._lock:  # one model, one generate at a time; callers may share a backend across threads
            _, tokenizer = self._load()
            results: list[Completion | None] = [None] * len(prompts)
            rendered: list[tuple[int, str]] = []
            for i, messages in enumerate(prompts):
                problem = _chat_problem(messages)
                if problem is None:
                    try:
                        text = render_chat(messages, tokenizer)
                    except Exception as exc:
                        problem = f"cannot render the chat: {_error(exc)}"
                    else:
                        # An empty row would be all padding: nothing for the model to continue.
                        empty = not tokenizer(text, add_special_tokens=False)["input_ids"]
                        problem = "the chat renders to an empty prompt" if empty else None
                if problem is None:
                    rendered.append((i, text))
                else:  # a malformed chat fails that request only
                    results[i] = Completion(text=None, error=problem)
            size = self.params.batch_size
            for start in range(0, len(rendered), size):
                chunk = rendered[start:start + size]
                answered = self._complete_chunk([t for _, t in chunk], schema, level_probs)
                for (i, _), completion in zip(chunk, answered, strict=True):
                    results[i] = completion
        return [r for r in results if r is not None]

    def _complete_chunk(self, texts: list[str], schema: dict[str, Any] | None = None,
                        level_probs: bool = False) -> list[Completion]:
        began = time.perf_counter()
        try:
            answers = self._generate(texts, schema, level_probs)
        except Exception as exc:
            if len(texts) == 1:
                return [Completion(text=None, error=f"generation failed: {_error(exc)}",
                                   latency=time.perf_counter() - began)]
            # Find which request broke the batch: the others still deserve answers.
            return [self._retry_alone(text, schema, level_probs) for text in texts]
        latency = (time.perf_counter() - began) / len(texts)
        return [Completion(text=a, latency=latency, tokens_in=n_in, tokens_out=n_out, level_probs=probs)
                for a, n_in, n_out, probs in answers]

    def _retry_alone(self, text: str, schema: dict[str, Any] | None = None, level_probs: bool = False) -> Completion:
        began = time.perf_counter()
        try:
            ((answer, n_in, n_out, probs),) = self._generate([text], schema, level_probs)
        except Exception as exc:
            return Completion(text=None, error=f"generation failed: {_error(exc)}",
                              latency=time.perf_counter() - began, attempts=2)
        return Completion(text=answer, latency=time.perf_counter() - began, attempts=2, tokens_in=n_in,
                          tokens_out=n_out, level_probs=probs)

    def _generate(self, texts: list[str], schema: dict[str, Any] | None = None,
                  level_probs: bool = False) -> list[tuple[str, int, int, dict[str, dict[int, float]] | None]]:
        """Each text's answer, prompt tokens, new tokens (padding left out, the stopping EOS counted) and, with a
        schema and ``level_probs``, its levels' probabilities."""
        import torch

        model, tokenizer = self._model, self._tokenizer
        constraint = JsonSchemaConstraint(tokenizer, schema, len(texts), sorted(self._stop),
                                          level_probs=level_probs) if schema else None
        # The rendered text already holds whatever special tokens the template adds.
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        device = input_device(model)
        sample = self.params.temperature > 0
        with torch.no_grad():
            out = model.generate(
                input_ids=enc["input_ids"].to(device), attention_mask=enc["attention_mask"].to(device),
                max_new_tokens=self.params.max_new_tokens, do_sample=sample,
                temperature=self.params.temperature if sample else None, top_k=None, top_p=None,
                pad_token_id=tokenizer.pad_token_id, eos_token_id=sorted(self._stop) or None, use_cache=True,
                logits_processor=[constraint] if constraint is not None else None,
            )
        new_tokens = out[:, enc["input_ids"].shape[1]:].tolist()
        prompt_tokens = enc["attention_mask"].sum(dim=1).tolist()
        answers = []
        for index, (row, n_in) in enumerate(zip(new_tokens, prompt_tokens, strict=True)):
            kept = _cut_at_stop(row, self._stop)
            probs = constraint.level_probs[index] if constraint is not None and level_probs else None
            # the EOS that ended the answer was generated (and paid for) too; padding after it was not
            answers.append((tokenizer.decode(kept, skip_special_tokens=True), int(n_in),
                            len(kept) + (len(kept) < len(row)), probs))
        return answers

    def close(self) -> None:
        """Drop the model; a later :meth:`complete` loads it again."""
        with self._lock:
            self._model = self._tokenizer = None
            self._stop = set()


def _locate(model: str) -> tuple[Path, str]:
    """The directory to load and the identity string for a configured model path or hub id."""
    from rlkit.plugin import locate_model

    try:
        path = locate_model(model)
    except ConfigError as exc:
        raise ConfigError(f"{exc.message} (got {model!r})", f"{WHERE}.model") from None
    if Path(model).expanduser().is_dir():
        return path, str(path.resolve())
    return path, f"{model}@{path.name}"  # a hub snapshot folder is named after its commit


@hookimpl
def rlkit_register_judge_backends(register: Callable[..., None]) -> None:
    """Register the ``hf`` judge backend."""
    register("hf", HFBackend)
