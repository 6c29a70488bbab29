"""Judge spend: the figures, the bad-input errors, the token-bucket limiter on a fake clock, and the ``openai`` backend
against a loopback server that reports ``usage`` and answers 429 (counted, never timed)."""

from __future__ import annotations

import asyncio

import pytest

from rlkit.core.errors import ConfigError
from rlkit.judging.rate_limit import RateLimiter, rate_limiter
from rlkit.judging.spend import (
    CallPlan,
    Spend,
    SpendMeter,
    StepSpend,
    read_usage,
    spend_table,
    sum_spend,
    token_price,
)
from rlkit.judging.types import Completion
from rlkit.testing.canned_chat import CannedChatServer, count_tokens
from rlkit_plugins.backends.openai import OpenAIBackend

WHERE = "judge.params.backend.params"


class FakeClock:
    """A clock that moves only when the limiter sleeps: what it lets through is counted, not timed."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        await asyncio.sleep(0)


def _backend(url: str, **params) -> OpenAIBackend:
    return OpenAIBackend(OpenAIBackend.Params(base_url=url, backoff=0.0, **params))


def _chats(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"question number {i}"}] for i in range(n)]


# --- bad input: one error naming the field ---------------------------------------------------------------------


@pytest.mark.parametrize("field, value", [("price_input_per_million", -1.0), ("price_output_per_million", float("inf")),
                                          ("requests_per_minute", 0), ("tokens_per_minute", -5)])
def test_a_bad_price_or_limit_names_its_field(field, value):
    with pytest.raises(ConfigError) as err:
        OpenAIBackend(OpenAIBackend.Params(**{field: value}))
    assert err.value.where == f"{WHERE}.{field}"


def test_prices_and_limits_left_unset_mean_none():
    assert token_price(None, None, WHERE) is None and rate_limiter(None, None, WHERE) is None
    assert token_price(2.0, None, WHERE).cost(1_000_000, 1_000_000) == 2.0


@pytest.mark.parametrize("body, problem", [({}, "no usage"), ({"usage": []}, "not an object"),
                                           ({"usage": {"prompt_tokens": "7", "completion_tokens": 1}}, "prompt_tokens"),
                                           ({"usage": {"prompt_tokens": 7, "completion_tokens": -1}},
                                            "completion_tokens"),
                                           ({"usage": {"prompt_tokens": True, "completion_tokens": 1}},
                                            "prompt_tokens")])
def test_a_malformed_usage_says_what_is_wrong(body, problem):
    tokens_in, tokens_out, why = read_usage(body)
    assert tokens_in is None and tokens_out is None and problem in why
    assert read_usage({"usage": {"prompt_tokens": 7, "completion_tokens": 2}}) == (7, 2, None)


# --- the figures --------------------------------------------------------------------------------------------------


def test_the_meter_counts_calls_tokens_retries_and_cost():
    meter = SpendMeter(token_price(1.0, 4.0, WHERE))
    meter.record([Completion("a", latency=0.5, attempts=2, tokens_in=10, tokens_out=3),
                  Completion(None, error="x", latency=0.25, attempts=1),
                  Completion("b", latency=0.25, tokens_in=None, tokens_out=None)])
    meter.add(cache_hits=4, retries=1)
    total = meter.total()
    assert (total.calls, total.tokens_in, total.tokens_out, total.retries, total.cache_hits) == (3, 10, 3, 2, 4)
    assert total.latency_s == 1.0 and total.calls_without_usage == 2
    assert total.cost == pytest.approx((10 * 1.0 + 3 * 4.0) / 1e6)


def test_a_step_counts_only_its_own_calls():
    class Judge:
        def __init__(self):
            self.meter = SpendMeter()

        def spend(self):
            return self.meter.total()

    judge = Judge()
    watch = StepSpend(judge)
    judge.meter.record([Completion("held-out", tokens_in=5, tokens_out=1)])  # between steps: no step's
    watch.begin()
    judge.meter.record([Completion("a", tokens_in=2, tokens_out=1)] * 3)
    step = watch.metrics()
    assert step["judge/calls"] == 3 and step["judge/tokens_in"] == 6 and "judge/cost" not in step
    assert StepSpend(object()).metrics() == {}, "a judge that makes no calls logs no spend"
    assert sum_spend([None, None]) is None and sum_spend([Spend(calls=1), None, Spend(calls=2)]).calls == 3


def test_the_report_table_totals_the_steps():
    history = [(0, {"judge/calls": 4.0, "judge/tokens_in": 10.0}), (1, {"judge/calls": 6.0, "judge/tokens_in": 5.0}),
               (2, {"heldout/reward": 0.5})]
    columns, rows = spend_table(history)
    assert ["judge/calls", 10.0, 5.0] in rows and ["judge/tokens_in", 15.0, 7.5] in rows
    assert spend_table([(0, {"reward/mean": 1.0})]) is None
    plan = CallPlan(4, 40, 8, "2 prompts × 2 completions").times(3)
    assert (plan.calls, plan.tokens_in, plan.formula) == (12, 120, "3 steps × (2 prompts × 2 completions)")


# --- the token bucket, on a fake clock --------------------------------------------------------------------------


def test_the_limiter_spaces_requests():
    clock = FakeClock()
    limiter = RateLimiter(requests_per_minute=60, clock=clock, sleep=clock.sleep)  # 1 a second, 1 at once

    async def ten() -> list[float]:
        granted = []
        for _ in range(10):
            await limiter.acquire()
            granted.append(clock.now)
        return granted

    granted = asyncio.run(ten())
    assert granted == pytest.approx([float(i) for i in range(10)]), "the first at once, then one a second"
    assert limiter.granted == 10 and limiter.delayed == 9


def test_the_token_limit_settles_the_estimate_with_the_usage():
    clock = FakeClock()
    limiter = RateLimiter(tokens_per_minute=600, clock=clock, sleep=clock.sleep)  # 10 a second, 10 at once

    async def run() -> list[float]:
        out = []
        for actual in (10, 4, 10):
            await limiter.acquire(10)
            out.append(clock.now)
            limiter.settle(10, actual)
        await limiter.acquire(25)  # more than the bucket holds: waits for a full one, then owes the rest
        out.append(clock.now)
        await limiter.acquire(1)
        out.append(clock.now)
        return out

    assert asyncio.run(run()) == pytest.approx([0.0, 1.0, 1.4, 2.4, 4.0])


def test_the_limiter_serves_concurrent_requests_in_order():
    clock = FakeClock()
    limiter = RateLimiter(requests_per_minute=120, clock=clock, sleep=clock.sleep)  # 2 a second, 2 at once
    order: list[int] = []

    async def one(i: int) -> None:
        await limiter.acquire()
        order.append(i)

    async def all_of_them() -> None:
        await asyncio.gather(*(one(i) for i in range(7)))

    asyncio.run(all_of_them())
    assert order == list(range(7)) and clock.now == pytest.approx(2.5), "2 at once, then one every half second"


# --- the openai backend against the loopback server -------------------------------------------------------------


def test_the_backend_reports_the_servers_usage():
    with CannedChatServer(lambda messages: "three word answer") as server:
        backend = _backend(server.url, price_input_per_million=1.0, price_output_per_million=2.0)
        answers = backend.complete(_chats(5))
    assert [a.tokens_out for a in answers] == [3] * 5
    assert sum(a.tokens_in for a in answers) == server.served["prompt_tokens"] == 5 * count_tokens("question number 0")
    assert server.served["calls"] == 5


def test_a_server_without_usage_warns_once_and_the_answers_stand():
    with CannedChatServer(lambda messages: "fine", usage={"prompt_tokens": "many"}) as server, \
            pytest.warns(UserWarning, match="usage.prompt_tokens") as caught:
        answers = _backend(server.url).complete(_chats(3))
    assert [a.text for a in answers] == ["fine"] * 3 and all(a.tokens_in is None for a in answers)
    assert len([w for w in caught if "token count" in str(w.message)]) == 1


def test_429s_are_retried_and_counted_with_the_limiter_on():
    with CannedChatServer(lambda messages: "ok", throttle_first=3) as server:
        backend = _backend(server.url, max_retries=3, requests_per_minute=6000, concurrency=2)
        meter = SpendMeter()
        answers = backend.complete(_chats(4))
        meter.record(answers)
    assert all(a.text == "ok" for a in answers), "a 429 never loses an answer"
    assert server.throttled == 3 and meter.total().retries == 3 and meter.total().calls == 4
    assert backend.limiter.granted == 7, "each attempt, retries included, passes the limiter"


def test_the_limiter_keeps_a_run_under_the_servers_limit():
    """The server allows 10 answers in any 10 (fake) seconds and answers 429 beyond; the backend does not retry, so
    every 429 would be a lost answer. Without a limit half the requests are refused; at 30 a minute none is."""
    clock = FakeClock()
    with CannedChatServer(lambda messages: "ok", rate_limit=(10, 10.0), clock=clock) as server:
        unlimited = _backend(server.url, max_retries=0, concurrency=1).complete(_chats(20))
        assert sum(a.text is None for a in unlimited) == 10 and server.throttled == 10
        clock.now += 60.0  # a fresh window
        server.throttled = 0
        backend = _backend(server.url, max_retries=0, concurrency=1, requests_per_minute=30)
        backend.limiter.clock, backend.limiter.sleep = clock, clock.sleep
        limited = backend.complete(_chats(20))
    assert all(a.text == "ok" for a in limited) and server.throttled == 0
    assert backend.limiter.delayed == 19 and sum(clock.sleeps) == pytest.approx(38.0), "one every 2 s after the first"


def test_local_and_served_counts_agree_on_the_same_model():
    """The hf backend counts with its tokenizer what the OpenAI-compatible test server reports as usage for the same
    model and chats (greedy): the two ways of counting are one."""
    from rlkit.testing.openai_server import OpenAICompatibleServer
    from rlkit_plugins.backends.hf import HFBackend

    chats = _chats(3)
    with OpenAICompatibleServer() as server:
        served = _backend(server.url, max_tokens=8, temperature=0.0).complete(chats)
        counts = server.served_usage()
    from rlkit_plugins.backends.tiny import TinyBackend

    local = TinyBackend(HFBackend.Params(max_new_tokens=8)).complete(chats)  # the tiny policy, as the server's
    assert counts["calls"] == 3 and counts["prompt_tokens"] == sum(a.tokens_in for a in served)
    assert counts["completion_tokens"] == sum(a.tokens_out for a in served)
    assert [(a.text, a.tokens_in, a.tokens_out) for a in local] == [(a.text, a.tokens_in, a.tokens_out) for a in served]
