"""Peak RSS per phase of an `rlkit fit` run in this process: exact high-water marks, not samples.

At every phase boundary the kernel's peak-RSS counter (VmHWM) is read and reset (``echo 5 > /proc/self/clear_refs``,
Linux only), so a phase's peak is the highest RSS while it ran; that includes what was already resident when it
began (glibc keeps freed heap memory). The run's peak is the highest phase peak: getrusage's ru_maxrss reads the
same counter, so after the first reset it covers only the last phase.

Phases: ``setup`` (imports, model load, reference copy, Lightning), ``validation (before)`` / ``(after)``
(held-out greedy generation and judging), and in each training step ``generation``, ``judging``,
``reference log-probs``, ``old log-probs`` (``num_iterations`` > 1), ``policy forward`` (the log-prob pass
with gradients), ``loss``, ``backward``, ``optimiser step`` (AdamW) and ``step (other)``; between steps
``training (other)`` (Lightning's loop, callbacks), ``checkpoint save``; ``teardown`` after the last step
(report, saving the policy).

Each phase also reports its rise, how far it took RSS above what was resident when it began, and the run the
phase that last raised its peak (where the peak is set; later phases may sit at the same RSS without using it).

Used by memory.py: ``install()`` before ``rlkit.cli.main``, then ``report()``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

_STATUS, _CLEAR = Path("/proc/self/status"), Path("/proc/self/clear_refs")
# the order phases happen in, for tables
PHASE_ORDER = ("setup", "validation (before)", "generation", "judging", "reference log-probs", "old log-probs",
               "policy forward", "loss", "backward", "optimiser step", "step (other)", "training (other)",
               "checkpoint save", "teardown", "validation (after)")


def _status_kb(field: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


class PhasePeaks:
    """A stack of phase names; each boundary closes the current interval and charges its peak to the phase."""

    def __init__(self, first: str = "setup") -> None:
        self.stack = [first]
        self.peaks_kb: dict[str, int] = {}
        # how far a phase took RSS above what was resident when it began: which phase makes the memory grow
        self.rises_kb: dict[str, int] = {}
        self.peak_set_by = first  # the phase that last raised the run's peak
        self.trained = False  # set at the first training step
        self._reset()

    def _reset(self) -> None:
        _CLEAR.write_text("5")  # VmHWM := VmRSS
        self._start_kb = _status_kb("VmRSS:")

    def _close(self) -> None:
        name, hwm = self.stack[-1], _status_kb("VmHWM:")
        if hwm > max(self.peaks_kb.values(), default=0):
            self.peak_set_by = name
        self.peaks_kb[name] = max(self.peaks_kb.get(name, 0), hwm)
        self.rises_kb[name] = max(self.rises_kb.get(name, 0), hwm - self._start_kb)
        self._reset()

    def enter(self, name: str) -> None:
        self._close()
        # held-out generation and judging are validation's, not the training step's
        self.stack.append(self.stack[-1] if self.stack[-1].startswith("validation") else name)

    def leave(self) -> None:
        self._close()
        self.stack.pop()

    def switch(self, name: str) -> None:
        """Replace the phase at the bottom of the stack (setup → training → teardown)."""
        self._close()
        self.stack[0] = name

    def peaks_mb(self) -> dict[str, float]:
        self._close()
        return {k: v / 1024 for k, v in self.peaks_kb.items()}

    def report(self) -> dict[str, Any]:
        """Peak and rise MB per phase, and the phase that set the run's peak."""
        peaks = self.peaks_mb()
        return {"peak_mb": peaks, "rise_mb": {k: v / 1024 for k, v in self.rises_kb.items()},
                "peak_set_by": self.peak_set_by}

    def wrap(self, owner: Any, attr: str, name: str | Callable[..., str]) -> None:
        """Charge every call of ``owner.attr`` to ``name`` (or ``name(*args)``, to tell calls apart)."""
        inner = getattr(owner, attr)

        @functools.wraps(inner)
        def charged(*args: Any, **kwargs: Any) -> Any:
            self.enter(name(*args) if callable(name) else name)
            try:
                return inner(*args, **kwargs)
            finally:
                self.leave()

        setattr(owner, attr, charged)


def install() -> PhasePeaks:
    """Instrument rlkit's training loop; returns the tracker whose ``peaks_mb()`` holds the result."""
    import lightning
    import torch
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    import rlkit.train.module as module
    import rlkit.train.updates as updates
    from rlkit.lm.reference import AdapterOffReference, FrozenCopyReference
    from rlkit.train.step_rewards import RewardPipeline
    from rlkit_plugins.generators.hf import HFGenerator
    from rlkit_plugins.objectives.group_dpo import GroupDpoObjective
    from rlkit_plugins.objectives.policy_gradient import PolicyGradientObjective

    tracker = PhasePeaks()
    mod = module.RubricRLModule
    tracker.wrap(mod, "validation_step", lambda *_: f"validation ({'after' if tracker.trained else 'before'})")
    tracker.wrap(lightning.Trainer, "save_checkpoint", "checkpoint save")
    tracker.wrap(mod, "training_step", "step (other)")
    tracker.wrap(HFGenerator, "generate", "generation")
    tracker.wrap(RewardPipeline, "judge", "judging")
    for ref in (FrozenCopyReference, AdapterOffReference):
        tracker.wrap(ref, "log_probs", "reference log-probs")
    # updates.sequence_log_probs is the policy's own pass (the reference's goes through rlkit.lm.reference's name)
    tracker.wrap(updates, "sequence_log_probs",
                 lambda *_: "policy forward" if torch.is_grad_enabled() else "old log-probs")
    for objective in (PolicyGradientObjective, GroupDpoObjective):
        tracker.wrap(objective, "loss", "loss")
    tracker.wrap(mod, "manual_backward", "backward")
    register_optimizer_step_pre_hook(lambda *_: tracker.enter("optimiser step"))
    register_optimizer_step_post_hook(lambda *_: tracker.leave())

    # setup lasts until the first training step; everything after the last one is teardown
    started = mod.on_train_start

    def on_train_start(self: Any) -> None:
        tracker.switch("training (other)")
        tracker.trained = True
        started(self)

    ended = mod.on_train_end

    def on_train_end(self: Any) -> None:
        ended(self)
        tracker.switch("teardown")

    mod.on_train_start, mod.on_train_end = on_train_start, on_train_end
    return tracker
