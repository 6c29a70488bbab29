"""The weight versions an engine generator serves (``openai_server``, ``llama_cpp``): which version is newest, how many
optimiser steps the policy has taken, when the newest was taken, and what the syncs cost since the loop last asked.

Version 0 is the weights pushed at setup; each sync is the next. A batch records the version that sampled it and, from
the step that version was taken at, its lag: how many optimiser steps the policy has moved since. The counters travel
in checkpoints, so a resumed run numbers versions and lags on from them.
"""

from __future__ import annotations

from typing import Any

_KEYS = ("policy_version", "steps", "pushed_at")


class WeightVersions:
    """Version counters and sync costs of the weights an engine serves."""

    def __init__(self) -> None:
        self.version = 0  # the newest version taken
        self.steps = 0  # optimiser steps the policy has taken
        self.pushed_at = 0  # ``steps`` when the newest version was taken
        self._restored: dict[str, int] | None = None
        self._sync_s, self._sync_bytes = 0.0, 0

    def start(self) -> int:
        """At setup: the counters from a checkpoint (``load_state_dict``) or zero, and the version to push now: the
        checkpoint's, or the next one when the policy moved after it (a resume between syncs with ``sync_every`` >
        1)."""
        restored, self._restored = self._restored, None
        self.version, self.steps, self.pushed_at = (restored[k] for k in _KEYS) if restored else (0, 0, 0)
        return self.version + self.behind

    def step(self, sync_every: int) -> bool:
        """After an optimiser step: whether this one is a sync (every ``sync_every``-th)."""
        self.steps += 1
        return self.steps % sync_every == 0

    @property
    def behind(self) -> bool:
        """The policy moved after the newest version was taken."""
        return self.pushed_at != self.steps

    def taken(self, version: int) -> None:
        """``version`` holds the policy's weights as of now."""
        self.version, self.pushed_at = version, self.steps

    def lag(self, taken_at: int) -> int:
        """Optimiser steps since a version taken at step ``taken_at``."""
        return self.steps - taken_at

    def spent(self, seconds: float, size: int = 0) -> None:
        """A sync's cost: seconds of the loop's time and bytes written for the engine."""
        self._sync_s += seconds
        self._sync_bytes += size

    def metrics(self) -> dict[str, float]:
        """``time/sync`` and ``sync/bytes`` since the last call."""
        out = {"time/sync": self._sync_s, "sync/bytes": float(self._sync_bytes)}
        self._sync_s, self._sync_bytes = 0.0, 0
        return out

    def forget_costs(self) -> None:
        """Setup's push is no step's."""
        self._sync_s, self._sync_bytes = 0.0, 0

    def state_dict(self) -> dict[str, int]:
        return {"policy_version": self.version, "steps": self.steps, "pushed_at": self.pushed_at}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Before setup on resume; :meth:`start` takes them up."""
        self._restored = {k: int(state[k]) for k in _KEYS}
