"""Rollouts requested before the step that trains on them: a generator with ``max_lag`` k > 0 samples the next k
steps' prompts while the current step judges and updates, so generation overlaps training (``max_lag`` 0 is the
synchronous loop).

The next steps' prompts are known before Lightning yields them: the data sampler's order depends only on the seed,
the epoch and the position (``PromptDataModule.upcoming``). A step takes the head of the queue only when it was asked
for this step with exactly this step's prompts; anything else (the first step, a resumed run without a saved queue,
a data module that cannot read ahead, ``limit_train_batches``) empties the queue and samples synchronously, so a
mismatch costs time, never a rollout of the wrong prompts.

What resume guarantees: the queue's finished rollouts travel in the checkpoint (tokens, engine log-probs, the version
that sampled them), and the generator's version counters with them, so a run resumed from a checkpoint trains on the
same rollouts, with the same lags, as the uninterrupted run (with ``sync_every`` 1; an engine that samples
deterministically from a seed, as vLLM with a fixed batch, SGLang and the test server do).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Protocol

import torch

from rlkit.lm.sampling import SampledBatch


class PendingRollout(Protocol):
    def result(self) -> SampledBatch: ...


@dataclass
class FinishedRollout:
    """A rollout sampled before a checkpoint, restored from it: rebuilt on the device the policy is on when the step
    takes it (a checkpoint is loaded before Lightning moves the module)."""

    state: dict[str, Any]
    device: Callable[[], torch.device]

    def result(self) -> SampledBatch:
        return batch_from_state(self.state, self.device())


@dataclass
class QueuedRollout:
    step: int
    records: list[dict[str, Any]]
    pending: PendingRollout


def batch_state(batch: SampledBatch) -> dict[str, Any]:
    """A sampled batch as checkpointable plain values (tensors on the CPU)."""
    return {f.name: (v.detach().cpu() if isinstance(v := getattr(batch, f.name), torch.Tensor) else v)
            for f in fields(batch)}


def batch_from_state(state: dict[str, Any], device: torch.device | str) -> SampledBatch:
    return SampledBatch(**{k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in state.items()})


class RolloutQueue:
    """The rollouts a step has requested for the steps after it, oldest first."""

    def __init__(self, generator: Any) -> None:
        asks_ahead = callable(getattr(generator, "submit", None))
        self.depth = int(getattr(generator, "max_lag", 0) or 0) if asks_ahead else 0
        self._queue: list[QueuedRollout] = []
        self.misses = 0  # steps that found no rollout requested for them (the first step included)

    def __len__(self) -> int:
        return len(self._queue)

    def take(self, step: int, records: list[dict[str, Any]]) -> PendingRollout | None:
        """The rollout requested for ``step`` with these ``records``; None (and an empty queue) when the head is not
        it."""
        if self._queue and self._queue[0].step == step and self._queue[0].records == records:
            return self._queue.pop(0).pending
        self._queue.clear()
        self.misses += 1
        return None

    def top_up(self, step: int, upcoming: list[list[dict[str, Any]]], submit: Any) -> None:
        """Request rollouts for steps ``step + 1 ..`` from ``upcoming`` (their prompts, in order) until ``depth``
        are queued; ``submit(records, step)`` returns a pending rollout."""
        for offset, records in enumerate(upcoming, start=1):
            if len(self._queue) >= self.depth:
                break
            target = step + offset
            if any(q.step == target for q in self._queue):
                continue
            self._queue.append(QueuedRollout(target, records, submit(records, target)))

    def clear(self) -> None:
        self._queue.clear()

    def state_dict(self) -> list[dict[str, Any]]:
        """The queued rollouts, waited for (the loop's weight sync already did) and copied to the CPU."""
        return [{"step": q.step, "records": q.records, "batch": batch_state(q.pending.result())} for q in self._queue]

    def load_state_dict(self, state: list[dict[str, Any]], device: Callable[[], torch.device]) -> None:
        self._queue = [QueuedRollout(int(s["step"]), list(s["records"]), FinishedRollout(s["batch"], device))
                       for s in state]
