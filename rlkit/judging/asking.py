"""What every model-based judge does around its backend: build it (swapping in an offline tiny judge when
no model is named), look answers up in the response cache, ask the rest in one batch, parse, re-ask what
could not be read with a format reminder, and count retries and latency for the step's metrics.

The judges (``llm``, ``ranking``) own only what differs: the prompts, the parser and how parsed answers
become scores.
"""

from __future__ import annotations

import json
import re
import statistics
import time
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from rlkit.data.records import prompt_text
from rlkit.judging.cache import ResponseCache
from rlkit.judging.spend import CallPlan, SpendMeter, plan_calls

Chat = list[dict[str, str]]
Parsed = TypeVar("Parsed")


class JudgeBackend:
    """A judge's backend, built by the host from the judge's ``backend`` reference at validate time (so a bad
    name or param fails in ``rlkit validate``). A backend that has no model to answer with (``needs_model``: the
    ``hf`` backend with none named) is swapped, on the first request, for ``backend.with_model(folder)`` on the
    offline tiny judge that ``build_offline`` returns (trained on first use, cached).

    ``get(variant)`` serves judges whose offline model depends on the request (the ranking judge's is
    trained for one group size): each distinct ``variant`` is passed to ``build_offline`` and built once."""

    def __init__(self, ref: Any, build_offline: Callable[..., Path]) -> None:
        self.configured = ref.plugin
        self.offline = bool(getattr(self.configured, "needs_model", False))
        self._build_offline = build_offline
        self._offline: dict[Hashable, Any] = {}
        self._ready = False
        # what the judge spends through this backend, priced by the backend's optional `price` (rlkit.judging.spend)
        self.meter = SpendMeter(getattr(self.configured, "price", None))

    def plan(self, calls: int, formula: str, prompt: str) -> CallPlan:
        """``calls`` requests about ``prompt`` long, answered in at most the backend's ``max_answer_tokens``."""
        answer_tokens = int(getattr(self.configured, "max_answer_tokens", 0) or 0)
        return plan_calls(calls, formula, prompt, answer_tokens, self.meter.price)

    def check_ready(self) -> None:
        """Before any scoring, once: a backend that asks a server (``check_ready``) must reach it, so a server that
        is not running is one line naming its ``base_url`` at start-up instead of a run that scores nothing."""
        if not self._ready:
            check = getattr(self.configured, "check_ready", None)
            if callable(check):
                check()
            self._ready = True

    def shown_reference(self, record: dict[str, Any], show: bool | None) -> str | None:
        """The record's reference when the judge is shown it (a judge's ``show_reference``; None: the offline tiny
        judge only, which judges by comparing with it; a model judge shown the answer key may copy it), else None."""
        reference = record.get("reference") if (self.offline if show is None else show) else None
        return str(reference) if reference is not None else None

    @property
    def model_folder(self) -> Path | None:
        """The local model folder the configured backend answers with (``model_folder``), None for the offline tiny
        judge or a served model."""
        return None if self.offline else getattr(self.configured, "model_folder", None)

    @property
    def chat_model(self) -> str | None:
        """The name a chat endpoint answers as when the backend generates in this process, else None."""
        if not getattr(self.configured, "generates_locally", False):
            return None
        return "rlkit-offline-judge" if self.offline else str(self.configured.params.model)

    def close(self) -> None:
        """Close the backend and any offline one built for it (a backend that runs an engine stops it)."""
        for backend in (self.configured, *self._offline.values()):
            close = getattr(backend, "close", None)
            if callable(close):
                close()

    def get(self, variant: Hashable | None = None) -> Any:
        if not self.offline:
            return self.configured
        if variant not in self._offline:
            folder = self._build_offline() if variant is None else self._build_offline(variant)
            self._offline[variant] = self.configured.with_model(folder)
        return self._offline[variant]


@dataclass
class Asked(Generic[Parsed]):
    """The outcome of :func:`ask`: each slot's accepted parse (absent when none was readable), plus the
    counts the judge reports."""

    parsed: dict[Hashable, Parsed] = field(default_factory=dict)
    requests: int = 0
    retries: int = 0
    latencies: list[float] = field(default_factory=list)
    seconds: float = 0.0

    def metrics(self, cache: ResponseCache) -> dict[str, float]:
        return {"judge/retries": float(self.retries), "judge/requests": float(self.requests),
                "judge/cache_hit_rate": cache.hit_rate,
                "judge/latency_mean": statistics.mean(self.latencies) if self.latencies else 0.0,
                "judge/seconds": self.seconds}


def ask(backend: Any, cache: ResponseCache, requests: dict[Hashable, tuple[str, Chat]],
        parse: Callable[[Hashable, str], tuple[Parsed | None, bool]], retries: int,
        reminder: Callable[[Hashable], str], meter: SpendMeter | None = None,
        schema: Callable[[Hashable], dict[str, Any]] | None = None, level_probs: bool = False) -> Asked[Parsed]:
    """Answer every ``slot -> (cache key, chat)``; ``meter`` (the judge's :attr:`JudgeBackend.meter`) counts the
    calls, tokens, latency, cache hits and retries. With ``schema`` (only for a backend whose
    ``structured_outputs`` is true) each slot's answer is constrained to ``schema(slot)``, a JSON schema: the backend
    is called once per distinct schema, as ``backend.complete(chats, schema=...)``; ``level_probs`` asks it for the
    levels' probabilities too (``backend.level_probs_outputs``), and then what is parsed and cached for a slot is
    ``answer_with_levels(completion)``, the text and those probabilities in one JSON string.

    ``parse(slot, text)`` returns ``(parsed or None, complete)``: None is unreadable and asked again;
    a readable but incomplete answer is kept and asked again too; a later readable answer replaces it.
    Complete answers are cached at once; an incomplete one once the retries are spent (asking again in
    the same run would get the same answer from a greedy judge); unreadable ones are not cached.
    """
    out: Asked[Parsed] = Asked()
    pending: dict[Hashable, Chat] = {}
    for slot, (key, chat) in requests.items():
        cached = cache.get(key)
        got = parse(slot, cached)[0] if cached is not None else None
        if got is None:
            pending[slot] = chat
        else:
            out.parsed[slot] = got
    out.requests = len(pending)
    cache_hits = len(requests) - len(pending)
    start = time.perf_counter()
    kept: dict[Hashable, str] = {}  # readable but incomplete answers, cached once the retries are spent
    for attempt in range(retries + 1):
        if not pending:
            break
        slots = list(pending)
        results = _complete(backend, slots, pending, schema, level_probs)
        if meter is not None:
            meter.record(results)
        out.latencies += [r.latency for r in results]
        again: dict[Hashable, Chat] = {}
        for slot, result in zip(slots, results, strict=True):
            answer = (answer_with_levels(result) if level_probs else result.text) if result.text is not None else None
            got, complete = parse(slot, answer) if answer is not None else (None, False)
            if got is not None:
                out.parsed[slot] = got
                if complete:
                    kept.pop(slot, None)
                    cache.put(requests[slot][0], answer)
                    continue
                kept[slot] = answer  # type: ignore[assignment]
            if attempt < retries:
                out.retries += 1
                again[slot] = [*requests[slot][1], {"role": "assistant", "content": result.text or ""},
                               {"role": "user", "content": reminder(slot)}]
        pending = again
    for slot, text in kept.items():
        cache.put(requests[slot][0], text)  # the best this run will get: nothing is asked twice
    out.seconds = time.perf_counter() - start
    if meter is not None:
        meter.add(cache_hits=cache_hits, retries=out.retries)
    return out


def answer_with_levels(result: Any) -> str:
    """A completion's text and level probabilities as one JSON string (what a judge scoring by expected level
    parses and caches); :func:`split_levels` reads it back."""
    levels = {name: {str(k): v for k, v in probs.items()} for name, probs in (result.level_probs or {}).items()}
    return json.dumps({"text": result.text, "level_probs": levels})


def split_levels(answer: str) -> tuple[str, dict[str, dict[int, float]]]:
    """(text, {field: {level: probability}}) from :func:`answer_with_levels`'s string."""
    data = json.loads(answer)
    return data["text"], {name: {int(k): float(v) for k, v in probs.items()}
                          for name, probs in data["level_probs"].items()}


def _complete(backend: Any, slots: list[Hashable], chats: dict[Hashable, Chat],
              schema: Callable[[Hashable], dict[str, Any]] | None, level_probs: bool = False) -> list[Any]:
    """The backend's answers to ``slots`` in order: one call, or one per distinct schema."""
    if schema is None:
        return backend.complete([chats[s] for s in slots])
    groups: dict[str, tuple[dict[str, Any], list[int]]] = {}
    for index, slot in enumerate(slots):
        wanted = schema(slot)
        groups.setdefault(json.dumps(wanted, sort_keys=False), (wanted, []))[1].append(index)
    results: list[Any] = [None] * len(slots)
    for wanted, indices in groups.values():
        asked = [chats[slots[i]] for i in indices]
        answers = backend.complete(asked, schema=wanted, level_probs=True) if level_probs else \
            backend.complete(asked, schema=wanted)
        for index, result in zip(indices, answers, strict=True):
            results[index] = result
    return results


class FailureWarning:
    """Warns once per judge when the share of unreadable answers in a call passes the threshold."""

    def __init__(self, judge: str, threshold: float, retries: int, policy: str) -> None:
        self.judge, self.threshold, self.retries, self.policy = judge, threshold, retries, policy
        self._warned = False

    def check(self, rate: float, what: str) -> None:
        if rate > self.threshold and not self._warned:
            self._warned = True
            warnings.warn(f"judge {self.judge}: {rate:.0%} of {what} could not be parsed after {self.retries} "
                          f"retries (failure_policy={self.policy}); see judge/parse_failure_rate", stacklevel=3)


class ReferenceLeakCheck:
    """A judge's ``reference_leak_check``: counts the records whose reference answer its prompt holds verbatim (as a
    whole word) more often than the template and rubric alone do (their anchors may quote an answer;
    ``show_reference`` shows it on purpose), outside the completions (which may give it), and warns once per judge.
    The judge logs the count as ``judge/reference_leaks``, the key ``rlkit doctor`` reads."""

    def __init__(self, judge: str) -> None:
        self.judge = judge
        self._warned = False

    def count(self, records: Sequence[dict[str, Any]], render: Callable[[dict[str, Any], str], str],
              template: str) -> int:
        """The leaks among ``records``. ``render(record, prompt)`` is the judge's prompt for ``record`` with
        ``prompt`` as its prompt text, the reference as the judge shows it and no completion text; ``template``
        names it in the warning."""
        leaked = []
        for record in records:
            reference = record.get("reference")
            if not isinstance(reference, str) or not reference.strip():
                continue
            word = re.compile(r"(?<!\w)" + re.escape(reference.strip()) + r"(?!\w)")
            prompt = prompt_text(record["prompt"])
            if len(word.findall(render(record, prompt))) > len(word.findall(render(record, ""))):
                leaked.append(prompt)
        if leaked and not self._warned:
            self._warned = True
            warnings.warn(f"judge {self.judge}: the reference answer appears verbatim in the judge's prompt for "
                          f"{len(leaked)} of {len(records)} records (first: {leaked[0][:60]!r}; template {template}); "
                          "the judge is shown the answer key", UserWarning, stacklevel=3)
        return len(leaked)
