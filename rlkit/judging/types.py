"""What a judge backend hands back for one request."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Completion:
    """One backend answer: ``text`` is None when the request failed after the backend's retries
    (then ``error`` says why). ``latency`` is the wall time of the request in seconds, retries included."""

    text: str | None
    error: str | None = None
    latency: float = 0.0
    attempts: int = 1
