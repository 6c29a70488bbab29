"""What a model-based judge costs: calls, tokens, latency, cache hits and retries, counted where its backend is asked,
and the estimate ``rlkit validate`` prints before a run.

Counting happens in one place, :func:`rlkit.judging.asking.ask`, from what each backend hands back
(:class:`~rlkit.judging.types.Completion`: latency, attempts and, when the backend can say, ``tokens_in`` and
``tokens_out``): the ``openai`` backend reads the server's ``usage``, the ``hf`` backend counts with its tokenizer.
A judge exposes its running totals as ``spend() -> Spend``; composite judges add their members'. The training loop
logs what a step spent (:class:`StepSpend`):

* ``judge/calls``: requests answered or failed by the backend (a re-ask after an unreadable answer is a call;
  a transport retry of the same request is not);
* ``judge/tokens_in``, ``judge/tokens_out``: prompt and answer tokens of those calls;
* ``judge/latency_s``: the calls' summed wall time (concurrent calls overlap, so this is work, not elapsed time);
* ``judge/cache_hits``: answers taken from the response cache instead of asking;
* ``judge/retries``: requests sent again: HTTP retries (timeout, 429, 5xx) and re-asks for unreadable answers;
* ``judge/calls_without_usage``: calls whose tokens the backend could not report (left out of the token counts);
* ``judge/tokens_cached``: of ``judge/tokens_in``, those the server took from its prompt cache instead of computing
  (``usage.prompt_tokens_details.cached_tokens``; 0 where a backend does not report it);
* ``judge/cost``: with a price per million tokens on the backend, the calls' cost.

A judge that makes no calls (``rule``) has no ``spend``, and none of these figures is logged for it: an absent
``judge/calls`` means "not model-judged", while ``0`` means "model-judged, everything came from the cache".
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from rlkit.core.errors import ConfigError
from rlkit.judging.types import Completion

CHARS_PER_TOKEN = 4  # the usual rule of thumb for English text under BPE tokenizers; estimates only


@dataclass(frozen=True)
class TokenPrice:
    """Dollars (or any currency) per million prompt and per million answer tokens."""

    input_per_million: float = 0.0
    output_per_million: float = 0.0

    def cost(self, tokens_in: int, tokens_out: int) -> float:
        return (tokens_in * self.input_per_million + tokens_out * self.output_per_million) / 1e6


def token_price(input_per_million: float | None, output_per_million: float | None, where: str) -> TokenPrice | None:
    """The backend's price, or None when neither is set (a price left unset counts as 0); a negative, infinite or
    non-numeric price raises naming ``<where>.price_input_per_million`` or ``...price_output_per_million``."""
    for name, value in (("price_input_per_million", input_per_million),
                        ("price_output_per_million", output_per_million)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
            raise ConfigError(f"must be a price >= 0 per million tokens (e.g. 2.5) or null, got {value!r}",
                              f"{where}.{name}")
    if input_per_million is None and output_per_million is None:
        return None
    return TokenPrice(float(input_per_million or 0.0), float(output_per_million or 0.0))


def read_cached_tokens(body: Any) -> int | None:
    """``usage.prompt_tokens_details.cached_tokens`` of an OpenAI chat-completions body: the prompt tokens the server
    took from its prompt cache (OpenAI, vLLM and llama.cpp's server report it); None when absent or malformed."""
    usage = body.get("usage") if isinstance(body, dict) else None
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    value = details.get("cached_tokens") if isinstance(details, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def read_usage(body: Any) -> tuple[int | None, int | None, str | None]:
    """``(prompt_tokens, completion_tokens, problem)`` from an OpenAI chat-completions response body: its ``usage``
    object holds both as non-negative integers. Absent or malformed gives ``(None, None, why)``: the answer itself is
    still good, so the call is kept and only its tokens are left out."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if usage is None:
        return None, None, "the response has no usage field"
    if not isinstance(usage, dict):
        return None, None, f"usage is {type(usage).__name__}, not an object"
    counts = []
    for key in ("prompt_tokens", "completion_tokens"):
        value = usage.get(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return None, None, f"usage.{key} is {value!r}, not a token count"
        counts.append(value)
    return counts[0], counts[1], None


@dataclass(frozen=True)
class Spend:
    """Running totals of a judge's calls (see the module doc for each figure). ``cost`` is None without a price."""

    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    cache_hits: int = 0
    retries: int = 0
    calls_without_usage: int = 0
    cost: float | None = None
    tokens_cached: int = 0

    def _combine(self, other: Spend, sign: int) -> Spend:
        cost = None if self.cost is None and other.cost is None else (self.cost or 0.0) + sign * (other.cost or 0.0)
        return Spend(self.calls + sign * other.calls, self.tokens_in + sign * other.tokens_in,
                     self.tokens_out + sign * other.tokens_out, self.latency_s + sign * other.latency_s,
                     self.cache_hits + sign * other.cache_hits, self.retries + sign * other.retries,
                     self.calls_without_usage + sign * other.calls_without_usage, cost,
                     self.tokens_cached + sign * other.tokens_cached)

    def __add__(self, other: Spend) -> Spend:
        return self._combine(other, 1)

    def __sub__(self, other: Spend) -> Spend:
        return self._combine(other, -1)

    def metrics(self) -> dict[str, float]:
        """The ``judge/`` figures; ``judge/cost`` only with a price."""
        out = {"judge/calls": float(self.calls), "judge/tokens_in": float(self.tokens_in),
               "judge/tokens_out": float(self.tokens_out), "judge/latency_s": self.latency_s,
               "judge/cache_hits": float(self.cache_hits), "judge/retries": float(self.retries),
               "judge/calls_without_usage": float(self.calls_without_usage),
               "judge/tokens_cached": float(self.tokens_cached)}
        if self.cost is not None:
            out["judge/cost"] = self.cost
        return out


SPEND_METRICS = tuple(Spend(cost=0.0).metrics())  # every figure's name, for reports and tables


class SpendMeter:
    """A judge backend's running totals; thread-safe, since a served judge may be asked from several threads."""

    def __init__(self, price: TokenPrice | None = None) -> None:
        self.price = price
        self._lock = threading.Lock()
        self._spend = Spend()

    def record(self, answers: Sequence[Completion]) -> None:
        """Count one batch of backend answers: calls, latency, HTTP retries and, where reported, tokens."""
        tokens_in = sum(a.tokens_in or 0 for a in answers)
        tokens_out = sum(a.tokens_out or 0 for a in answers)
        unknown = sum(a.tokens_in is None or a.tokens_out is None for a in answers)
        batch = Spend(calls=len(answers), tokens_in=tokens_in, tokens_out=tokens_out,
                      latency_s=sum(a.latency for a in answers), retries=sum(max(a.attempts - 1, 0) for a in answers),
                      calls_without_usage=unknown, tokens_cached=sum(a.tokens_cached or 0 for a in answers))
        with self._lock:
            self._spend = self._spend + batch

    def add(self, *, cache_hits: int = 0, retries: int = 0) -> None:
        """Count answers the cache gave and re-asks the judge made (the backend sees neither as such)."""
        with self._lock:
            self._spend = self._spend + Spend(cache_hits=cache_hits, retries=retries)

    def total(self) -> Spend:
        with self._lock:
            spend = self._spend
        if self.price is None:
            return spend
        return replace(spend, cost=self.price.cost(spend.tokens_in, spend.tokens_out))


def judge_spend(judge: Any) -> Spend | None:
    """A judge's running totals (its ``spend()``), or None for a judge that makes no model calls."""
    spend = getattr(judge, "spend", None)
    return spend() if callable(spend) else None


def sum_spend(parts: Iterable[Spend | None]) -> Spend | None:
    """The sum of the members' spend, None when no member makes calls: what a composite judge's ``spend`` returns."""
    known = [p for p in parts if p is not None]
    if not known:
        return None
    total = Spend()
    for part in known:
        total = total + part
    return total


class StepSpend:
    """What a judge spent during each training step: :meth:`begin` at the step's start, :meth:`metrics` at its end.
    Calls between steps (held-out evaluation) belong to no step; ``total`` sums the steps."""

    def __init__(self, judge: Any) -> None:
        self.judge = judge
        self._mark: Spend | None = None
        self.total: Spend | None = None

    def begin(self) -> None:
        self._mark = judge_spend(self.judge)

    def metrics(self) -> dict[str, float]:
        """The step's ``judge/`` spend figures; empty for a judge that makes no calls."""
        now = judge_spend(self.judge)
        if now is None:
            return {}
        step = now - (self._mark or Spend())
        self._mark = now
        self.total = step if self.total is None else self.total + step
        return step.metrics()


# --- estimates: what `rlkit validate` prints ---------------------------------------------------------------------


def approx_tokens(text: str) -> int:
    """About how many tokens ``text`` is, without a tokenizer (``rlkit validate`` loads none)."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)


@dataclass(frozen=True)
class JudgeLoad:
    """What one training step hands the judge, for estimates: ``prompts`` groups of ``generations`` completions,
    prompts of about ``prompt_chars`` characters, completions of at most ``completion_tokens`` tokens."""

    prompts: int
    generations: int
    prompt_chars: int = 200
    completion_tokens: int = 16

    def placeholder_prompt(self) -> str:
        return "x" * self.prompt_chars

    def placeholder_completion(self) -> str:
        return "x" * (self.completion_tokens * CHARS_PER_TOKEN)


@dataclass(frozen=True)
class CallPlan:
    """A judge's expected calls and tokens (per step, or per run after :meth:`times`), before cache hits and
    re-asks; ``formula`` says how the calls were counted (``8 prompts × 4 completions × 1 permutation``).
    ``tokens_out`` is an upper bound: every answer as long as the backend allows."""

    calls: int
    tokens_in: int
    tokens_out: int
    formula: str
    cost: float | None = None

    def __add__(self, other: CallPlan) -> CallPlan:
        cost = None if self.cost is None and other.cost is None else (self.cost or 0.0) + (other.cost or 0.0)
        return CallPlan(self.calls + other.calls, self.tokens_in + other.tokens_in,
                        self.tokens_out + other.tokens_out, f"{self.formula} + {other.formula}", cost)

    def times(self, steps: int) -> CallPlan:
        return CallPlan(self.calls * steps, self.tokens_in * steps, self.tokens_out * steps,
                        f"{steps} steps × ({self.formula})", None if self.cost is None else self.cost * steps)

    def labelled(self, label: str) -> CallPlan:
        return replace(self, formula=f"{label}: {self.formula}")


def plan_calls(calls: int, formula: str, prompt: str, answer_tokens: int, price: TokenPrice | None) -> CallPlan:
    """``calls`` requests, each about ``prompt`` long and answered in at most ``answer_tokens`` tokens."""
    tokens_in, tokens_out = calls * approx_tokens(prompt), calls * answer_tokens
    return CallPlan(calls, tokens_in, tokens_out, formula,
                    None if price is None else price.cost(tokens_in, tokens_out))


def plan_judge(judge: Any, load: JudgeLoad, rubric: Any) -> CallPlan | None:
    """A judge's expected calls a step (its ``planned_calls(load, rubric)``), None for one that makes no calls."""
    plan = getattr(judge, "planned_calls", None)
    return plan(load, rubric) if callable(plan) else None


def sum_plans(parts: Iterable[CallPlan | None]) -> CallPlan | None:
    """The members' plans added, None when no member makes calls."""
    known = [p for p in parts if p is not None]
    if not known:
        return None
    total = known[0]
    for part in known[1:]:
        total = total + part
    return total


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'s' * (count != 1)}"


def spend_line(spend: Spend) -> str:
    """One line for a summary: ``judge spend: 96 calls, 12,345 tokens in, 678 out, 4.2 s, 3 cache hits, ...``."""
    parts = [f"{spend.calls:,} calls", f"{spend.tokens_in:,} tokens in"
             + (f" ({spend.tokens_cached:,} from the server's prompt cache)" if spend.tokens_cached else ""),
             f"{spend.tokens_out:,} out",
             f"{spend.latency_s:.1f} s of calls", f"{spend.cache_hits:,} cache hits", f"{spend.retries:,} retries"]
    if spend.calls_without_usage:
        parts.append(f"{spend.calls_without_usage:,} calls without usage")
    if spend.cost is not None:
        parts.append(f"cost {spend.cost:.4f}")
    return "judge spend: " + ", ".join(parts)


# --- the run report: totals over the logged steps ------------------------------------------------------------------


def spend_table(history: Sequence[tuple[int, dict[str, float]]]) -> tuple[list[str], list[list[Any]]] | None:
    """Per spend figure: its total over the run's logged training steps and its mean a step; None when the run's
    judge made no calls (no ``judge/calls`` was logged)."""
    steps = [metrics for _, metrics in history if "judge/calls" in metrics]
    if not steps:
        return None
    rows = []
    for key in SPEND_METRICS:
        values = [m[key] for m in steps if key in m and math.isfinite(m[key])]
        if values:
            rows.append([key, round(sum(values), 6), round(sum(values) / len(values), 6)])
    return ["figure", "run total", "mean a step"], rows


def spend_section(history: Sequence[tuple[int, dict[str, float]]]) -> list[str]:
    """The run report's "Judge spend" section in markdown; no lines when the judge made no calls."""
    table = spend_table(history)
    if table is None:
        return []
    columns, rows = table
    lines = ["", "## Judge spend", "",
             "Calls, tokens, latency, cache hits and retries of the judge over the training steps (held-out scoring "
             "between steps left out; the end-of-run summary counts it); `judge/cost` only with a price on the "
             "backend.", "", "| " + " | ".join(columns) + " |", "|---|--:|--:|"]
    for key, total, mean in rows:
        lines.append(f"| `{key}` | {total:,.6g} | {mean:,.6g} |")
    return lines
