"""Whether a server answers at all: the start-up probe shared by the clients that ask one (the ``openai`` backend,
the ``reward_api`` judge).

Scoring never raises for a failed request (it becomes NaN or ``text=None``), so a server that is not running would
only show up as a run of unscored completions. A judge probes once before anything is scored instead, and a
connection that cannot be made fails there, as one line naming ``base_url``: ``cannot connect to
http://127.0.0.1:8000/v1 (connection refused) after 4 attempts``. Transport failures (refused, timed out, reset)
are retried on the shared backoff schedule (a server may still be starting); any HTTP answer means it is up.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import retry_delay, snippet, tls_context

if TYPE_CHECKING:
    import httpx


@dataclass(frozen=True)
class Probe:
    """The outcome of :func:`probe`: the server's answer, or why no connection was made."""

    response: httpx.Response | None
    failure: str = ""
    attempts: int = 1

    def unreachable(self, url: str) -> str:
        """``cannot connect to URL (why)``, plus the attempts when there were several."""
        tries = f" after {self.attempts} attempts" if self.attempts > 1 else ""
        return f"cannot connect to {url} ({self.failure}){tries}"


def connect_failure(exc: BaseException, timeout: float) -> str:
    """Why a request got no answer, in a few words: ``connection refused``, ``no answer within 30 s``, or the
    error's type and text."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return f"no answer within {timeout:g} s"
    text = str(exc)
    if isinstance(exc, httpx.ConnectError) and "refused" in text.lower():
        return "connection refused"
    return f"{type(exc).__name__}: {snippet(text)}" if text else type(exc).__name__


def probe(url: str, *, headers: dict[str, str], timeout: float, max_retries: int, backoff: float) -> Probe:
    """``GET url`` until the server answers with any status, retrying transport failures ``max_retries`` times."""
    import httpx

    failure = ""
    for attempt in range(max_retries + 1):
        if attempt:
            time.sleep(retry_delay(backoff, attempt - 1))
        try:
            return Probe(httpx.get(url, headers=headers, timeout=timeout, verify=tls_context()), attempts=attempt + 1)
        except httpx.TransportError as exc:
            failure = connect_failure(exc, timeout)
    return Probe(None, failure, max_retries + 1)
