"""``llm``: every rubric dimension scored by a language model in one call per completion.

The prompt comes from a Jinja template (``templates/judge/``, or the user's file) that renders the
dimensions, their ranges and anchor texts; the answer is parsed strictly (JSON) then leniently
(``rlkit.judging.parsing``) and range-checked. A completion whose answer cannot be parsed is asked again
up to ``parse_retries`` times with a reminder of the format; what still fails follows ``failure_policy``:

* ``nan``: the dimension is not scored (masked out of aggregation and advantages, like a missing reward);
* ``min``: the dimension's lowest level;
* ``drop_group``: every completion of that prompt is unscored (its group gets no advantage).

Never a silent zero. With ``permutations > 1`` each completion is scored that many times with the
dimensions listed in different orders and the median is kept (position bias control). Answers are cached
for the run (``rlkit.judging.cache``). ``metrics()`` reports the last call's parse-failure rate, retries,
latency and cache hit rate; the training loop logs them every step.

With the default ``hf`` backend and no model, the judge is the offline tiny judge, trained on CPU on
first use and cached (``rlkit.judging.tiny_judge``), asked with the compact template it was trained on.
"""

from __future__ import annotations

import math
import random
import statistics
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from rlkit import ConfigError, Rollout, Rubric, hookimpl
from rlkit.data import prompt_text
from rlkit.judging.cache import ResponseCache
from rlkit.judging.parsing import parse_scores
from rlkit.judging.templates import render_template, template_hash, template_path

FULL_TEMPLATE = "judge/rubric_scores.jinja"
COMPACT_TEMPLATE = "judge/rubric_scores_compact.jinja"


class LLMJudge:
    @dataclass
    class Params:
        backend: str = "hf"
        backend_params: dict[str, Any] = field(default_factory=dict)
        template: str | None = None  # None: compact for the offline tiny judge, the full rubric template otherwise
        parse_retries: int = 1
        failure_policy: Literal["nan", "min", "drop_group"] = "nan"
        permutations: int = 1
        failure_warning: float = 0.05  # warn when the parse-failure rate of a call exceeds this

    def __init__(self, params: Params) -> None:
        from rlkit.registry import load_registry

        if params.parse_retries < 0:
            raise ConfigError("must be >= 0", "judge.params.parse_retries")
        if params.permutations < 1:
            raise ConfigError("must be >= 1", "judge.params.permutations")
        self.params = params
        self.offline = params.backend == "hf" and params.backend_params.get("model") is None
        self.template = params.template or (COMPACT_TEMPLATE if self.offline else FULL_TEMPLATE)
        template_path(self.template)  # fail at validate time on a missing template
        # built now so a bad backend name or param fails in `rlkit validate`; backends load models lazily
        self._registry = load_registry()
        self._backend = self._registry.create("judge_backend", params.backend, dict(params.backend_params),
                                              where="judge.params.backend_params")
        self._offline_ready = False
        self.cache = ResponseCache()
        self._last: dict[str, float] = {}
        self._warned = False

    # --- the backend ---------------------------------------------------------------------------

    def _ready_backend(self) -> Any:
        if self.offline and not self._offline_ready:
            from rlkit.judging.tiny_judge import build_tiny_judge

            params = {**self.params.backend_params, "model": str(build_tiny_judge())}
            self._backend = self._registry.create("judge_backend", "hf", params, where="judge.params.backend_params")
            self._offline_ready = True
        return self._backend

    # --- scoring -------------------------------------------------------------------------------

    def _orders(self, rubric: Rubric) -> list[list[int]]:
        base = list(range(len(rubric.dimensions)))
        orders = [base]
        for k in range(1, self.params.permutations):
            order = base[:]
            random.Random(k).shuffle(order)  # seeded by the permutation index: the same orders every call
            orders.append(order)
        return orders

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        backend = self._ready_backend()
        identity = backend.identity()
        t_hash, dims = template_hash(self.template), rubric.dimensions
        b, g, d = rollout.num_prompts, rollout.group_size, len(dims)
        orders = self._orders(rubric)
        # requests: (prompt index, completion index, permutation index) -> chat
        requests: dict[tuple[int, int, int], tuple[str, list[dict[str, str]]]] = {}
        for i, record in enumerate(rollout.records):
            prompt = prompt_text(record["prompt"])
            for j, completion in enumerate(rollout.completions[i]):
                for k, order in enumerate(orders):
                    text = render_template(self.template, rubric=rubric, prompt=prompt, completion=completion,
                                           dimensions=[dims[x] for x in order])
                    key = ResponseCache.key(judge="llm", backend=identity, template=t_hash, rubric=rubric.content_hash,
                                            permutation=k, prompt=prompt, completion=completion)
                    requests[(i, j, k)] = (key, [{"role": "user", "content": text}])
        parsed: dict[tuple[int, int, int], dict[str, float]] = {}  # slot -> the scores its answer gave
        pending = []
        for slot, (key, _) in requests.items():
            cached = self.cache.get(key)
            if cached is None:
                pending.append(slot)
            else:
                parsed[slot] = parse_scores(cached, rubric).scores
        start = time.perf_counter()
        latencies: list[float] = []
        retries = 0
        chats = {slot: requests[slot][1] for slot in pending}
        for attempt in range(self.params.parse_retries + 1):
            if not chats:
                break
            slots = list(chats)
            results = backend.complete([chats[s] for s in slots])
            latencies += [r.latency for r in results]
            retry: dict[tuple[int, int, int], list[dict[str, str]]] = {}
            for slot, result in zip(slots, results, strict=True):
                got = parse_scores(result.text, rubric) if result.text is not None else None
                if got is not None and got.scores:
                    parsed[slot] = got.scores
                    if got.complete:
                        self.cache.put(requests[slot][0], result.text)
                    continue
                if attempt < self.params.parse_retries:
                    retries += 1
                    retry[slot] = [*requests[slot][1], {"role": "assistant", "content": result.text or ""},
                                   {"role": "user", "content": "Answer with one JSON object, one field per "
                                    f"dimension: {', '.join(x.name for x in dims)}."}]
            chats = retry
        scores = torch.full((b, g, d), math.nan)
        failures = 0
        for i in range(b):
            for j in range(g):
                for x, dim in enumerate(dims):
                    values = [parsed[(i, j, k)][dim.name] for k in range(len(orders))
                              if (i, j, k) in parsed and dim.name in parsed[(i, j, k)]]
                    if values:
                        scores[i, j, x] = statistics.median(values)
                    else:
                        failures += 1
        missing = torch.isnan(scores)
        if self.params.failure_policy == "min":
            low = torch.tensor([dim.low for dim in dims]).expand_as(scores)
            scores = torch.where(missing, low, scores)
        elif self.params.failure_policy == "drop_group":
            scores[missing.any(dim=-1).any(dim=-1)] = math.nan
        rate = failures / max(b * g * d, 1)
        self._last = {"judge/parse_failure_rate": rate, "judge/retries": float(retries),
                      "judge/requests": float(len(pending)), "judge/cache_hit_rate": self.cache.hit_rate,
                      "judge/latency_mean": statistics.mean(latencies) if latencies else 0.0,
                      "judge/seconds": time.perf_counter() - start}
        if rate > self.params.failure_warning and not self._warned:
            self._warned = True
            warnings.warn(f"judge llm: {rate:.0%} of dimension scores could not be parsed after "
                          f"{self.params.parse_retries} retries (failure_policy={self.params.failure_policy}); "
                          "see judge/parse_failure_rate", stacklevel=2)
        return scores

    def metrics(self) -> dict[str, float]:
        """The last ``score`` call's parse-failure rate, retries, requests, cache hit rate and latency."""
        return dict(self._last)


@hookimpl
def rlkit_register_judges(register):
    register("llm", LLMJudge)
