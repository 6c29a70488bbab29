"""A token-bucket limit on requests and tokens per minute, so a paid endpoint's rate limit is kept up front instead of
being found by its HTTP 429s (which ``rlkit.judging.http`` still retries with backoff, should one come).

The shape follows veRL's rate-limited reward manager (``verl/experimental/reward_loop/reward_manager/limited.py``:
``AsyncTokenBucket`` and ``RateLimitedRewardManager``, Apache-2.0): one bucket for requests and one for tokens, each
refilled continuously at ``limit / 60`` a second and holding one second's worth, so a minute's quota never leaves in
one burst; a request larger than a bucket waits for a full bucket and leaves it in debt. Where rlkit differs:

* a request's tokens are estimated before it is sent (its messages' characters / 4 plus ``max_tokens``, the most
  the answer may take) and settled with the server's ``usage`` once it answers, so the estimate's error is paid back;
* waiters are served first come, first served (one lock, held while waiting): no herd re-checking the buckets;
* the clock and the sleep are parameters, so tests count what a fake clock lets through instead of timing.

Own code rather than ``pyrate-limiter``: that library is in the environment only as a dependency of a test tool, its
API changed across major versions, and it has no notion of settling an estimate afterwards.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable

from rlkit.core.errors import ConfigError

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]


class TokenBucket:
    """``per_minute`` units a minute, at most one second's worth (and at least 1) at once; plain state, no event loop,
    so it outlives the event loop of each ``complete`` call."""

    def __init__(self, per_minute: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate)
        self.level = self.capacity
        self._stamp: float | None = None

    def wait(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` may be taken (0: now); more than the capacity needs a full bucket."""
        if self._stamp is not None:
            self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
        self._stamp = now
        return max(0.0, (min(amount, self.capacity) - self.level) / self.rate)

    def take(self, amount: float) -> None:
        self.level -= amount  # may go below 0: the next requests wait until the debt is refilled

    def give_back(self, amount: float) -> None:
        self.level = min(self.capacity, self.level + amount)


class RateLimiter:
    """Requests wait in :meth:`acquire` until both buckets allow them; :meth:`settle` corrects the token estimate."""

    def __init__(self, requests_per_minute: float | None = None, tokens_per_minute: float | None = None, *,
                 clock: Clock = time.monotonic, sleep: Sleep = asyncio.sleep) -> None:
        self.requests = TokenBucket(requests_per_minute) if requests_per_minute else None
        self.tokens = TokenBucket(tokens_per_minute) if tokens_per_minute else None
        self.clock, self.sleep = clock, sleep
        self.granted = 0  # requests let through
        self.delayed = 0  # of those, how many had to wait
        self._lock: asyncio.Lock | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _loop_lock(self) -> asyncio.Lock:
        # an asyncio.Lock belongs to one event loop, and each `complete` call runs its own
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            self._lock, self._loop = asyncio.Lock(), loop
        assert self._lock is not None
        return self._lock

    async def acquire(self, tokens: int = 0) -> None:
        """Wait until one more request of about ``tokens`` tokens keeps within both limits, then count it."""
        async with self._loop_lock():
            waited = False
            while True:
                now = self.clock()
                delay = max(self.requests.wait(1, now) if self.requests else 0.0,
                            self.tokens.wait(tokens, now) if self.tokens else 0.0)
                if delay <= 1e-9:  # float rounding after an exact sleep must not cost another round
                    break
                waited = True
                await self.sleep(delay)
            if self.requests:
                self.requests.take(1)
            if self.tokens:
                self.tokens.take(tokens)
            self.granted += 1
            self.delayed += waited

    def settle(self, estimated: int, actual: int | None) -> None:
        """The request took ``actual`` tokens (None: unknown, the estimate stands) where ``estimated`` were taken."""
        if self.tokens is not None and actual is not None:
            if actual < estimated:
                self.tokens.give_back(estimated - actual)
            else:
                self.tokens.take(actual - estimated)


def rate_limiter(requests_per_minute: float | None, tokens_per_minute: float | None, where: str) -> RateLimiter | None:
    """The limiter for a backend's ``requests_per_minute`` and ``tokens_per_minute`` (None: no limit), or None when
    neither is set; 0, a negative or a non-numeric limit raises naming the field."""
    for name, value in (("requests_per_minute", requests_per_minute), ("tokens_per_minute", tokens_per_minute)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            raise ConfigError(f"must be a limit > 0 (null: no limit), got {value!r}", f"{where}.{name}")
    if requests_per_minute is None and tokens_per_minute is None:
        return None
    return RateLimiter(requests_per_minute, tokens_per_minute)
