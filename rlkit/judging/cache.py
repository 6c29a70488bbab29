"""The response cache of model-based judges: nothing is asked twice in a run.

The key holds everything that determines an answer: the judge, the backend's identity (backend, model,
decoding settings), the template's content hash, the rubric hash, the permutation index and the exact
prompt and completion. Only successful answers are cached, so a transient failure is asked again.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


class ResponseCache:
    def __init__(self) -> None:
        self._answers: dict[str, str] = {}
        self.hits = 0
        self.misses = 0

    @staticmethod
    def key(**parts: Any) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

    def get(self, key: str) -> str | None:
        answer = self._answers.get(key)
        if answer is None:
            self.misses += 1
        else:
            self.hits += 1
        return answer

    def put(self, key: str, answer: str) -> None:
        self._answers[key] = answer

    def __len__(self) -> int:
        return len(self._answers)

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0
