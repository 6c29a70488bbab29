"""What a reward-hacking or health monitor reads and raises: the step view, alerts, drift baselines.

A monitor (plugin kind ``monitor``, hook ``rlkit_register_monitors``) is selected as a list,
``monitors=[template_phrases,length_drift]``; each lands under its own key ``monitors.<name>``. Every training
step the host hands each monitor a :class:`MonitorView` and logs what it returns as ``monitors/<key>/<metric>``.

Two files in the run directory (written by rank 0 only), read by ``rlkit report``:

* ``alerts.jsonl``: one JSON object per alert, appended as it is raised:
  ``{"monitor": "<key>", "step": <int>, "severity": "warning" | "info" | "error", "message": "<text>"}``
  (``error``: what ``rlkit doctor`` would call an error, raised by the ``triage`` monitor).
* ``monitors.json``: written once at the end of the run, ``{"<key>": <that monitor's summary() dict>}``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

if TYPE_CHECKING:
    from rlkit.core.rubric import Rubric

SEVERITIES = ("info", "warning", "error")
ALERTS_FILE = "alerts.jsonl"
SUMMARY_FILE = "monitors.json"


@dataclass(frozen=True)
class Alert:
    """Something a monitor wants a person to look at: which monitor, at which step, and why."""

    monitor: str
    step: int
    message: str
    severity: str = "warning"

    def as_dict(self) -> dict[str, Any]:
        """The ``alerts.jsonl`` line."""
        return {"monitor": self.monitor, "step": self.step, "severity": self.severity, "message": self.message}


@dataclass(frozen=True)
class MonitorView:
    """One training step as a monitor sees it (this process's share of the batch).

    * ``texts`` ``[B][G]`` completions of ``records`` (B prompt records);
    * ``raw_scores`` ``float32 [B, G, D]`` in each dimension's range, ``scores`` the same in [0, 1] (NaN = unscored);
    * ``rewards`` ``float32 [B, G]``; ``completion_lengths`` ``[B, G]`` token counts;
    * ``saturated`` ``bool [B, D]``: the host's saturation detector (:func:`rlkit.reward.diagnostics.saturated_groups`);
    * ``judge_scores(records, completions [N][G]) -> float32 [N, G, D]``: the run's judge on other texts;
    * ``generate(records, num_generations) -> [N][G] texts``: the policy sampling other prompts;
    * ``log_probs(records, texts [N][G]) -> (policy, reference)``: each text's mean per-token log-prob ``float32
      [N, G]`` as the record's completion under the policy now and under the run's reference policy (None when the
      run has none, ``model.reference=none``).

    The callables leave the training's random streams untouched; they are None outside a training run.
    With a multi-turn environment, ``episodes`` ``[B][G]`` holds each completion's ``rlkit.Episode`` (``texts`` are
    their last turns); None for single-turn rollouts.
    ``metrics``: the step's metrics logged before the monitors run (``reward/*``, ``advantages/*``, ``kl``,
    ``entropy``, ``completion_length``, the judge's), plus those of the monitors listed before this one; None outside
    a training run.
    """

    step: int
    records: Sequence[dict[str, Any]]
    texts: Sequence[Sequence[str]]
    raw_scores: torch.Tensor
    scores: torch.Tensor
    rewards: torch.Tensor
    rubric: Rubric
    completion_lengths: torch.Tensor
    saturated: torch.Tensor
    judge_scores: Callable[[Sequence[dict[str, Any]], Sequence[Sequence[str]]], torch.Tensor] | None = None
    generate: Callable[[Sequence[dict[str, Any]], int], list[list[str]]] | None = None
    episodes: Sequence[Sequence[Any]] | None = None
    log_probs: Callable[[Sequence[dict[str, Any]], Sequence[Sequence[str]]],
                        tuple[torch.Tensor, torch.Tensor | None]] | None = None
    metrics: Mapping[str, float] | None = None


def make_view(step: int, records: Sequence[dict[str, Any]], texts: Sequence[Sequence[str]], raw_scores: torch.Tensor,
              rubric: Rubric, rewards: torch.Tensor | None = None, completion_lengths: torch.Tensor | None = None,
              **callables: Any) -> MonitorView:
    """A view from texts and raw scores (tests, offline use): scores, saturation and defaults filled in."""
    import torch

    from rlkit.core.stats import nan_weighted_sum
    from rlkit.reward.diagnostics import saturated_groups
    from rlkit.reward.pipeline import normalize_scores

    scores = normalize_scores(raw_scores, rubric)
    if rewards is None:
        weights = torch.tensor(rubric.initial_weights(), dtype=torch.float32)
        rewards = nan_weighted_sum(scores, weights / weights.sum())
    if completion_lengths is None:
        completion_lengths = torch.tensor([[float(len(t.split())) for t in group] for group in texts])
    return MonitorView(step, records, texts, raw_scores, scores, rewards, rubric, completion_lengths,
                       saturated_groups(scores), **callables)


class BaselineDrift:
    """A measured value against its mean over the first ``baseline_steps`` measurements; the alert is
    edge-triggered (raised when the value leaves the band, again only after it has come back)."""

    def __init__(self, baseline_steps: int) -> None:
        self.baseline_steps = baseline_steps
        self.first: list[float] = []
        self.outside = False

    @property
    def baseline(self) -> float:
        return sum(self.first) / len(self.first) if self.first else float("nan")

    @property
    def ready(self) -> bool:
        return len(self.first) >= self.baseline_steps

    def update(self, value: float, outside: Callable[[float, float], bool]) -> bool:
        """Record ``value``; True when ``outside(value, baseline)`` has just become true."""
        if not self.ready:
            if not math.isnan(value):
                self.first.append(value)
            return False
        now = not math.isnan(value) and outside(value, self.baseline)
        raised = now and not self.outside
        self.outside = now
        return raised

    def state_dict(self) -> dict[str, Any]:
        return {"first": list(self.first), "outside": self.outside}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.first, self.outside = list(state["first"]), bool(state["outside"])


def due(step: int, every: int) -> bool:
    """A monitor with cadence ``every`` measures at this step (steps 0, every, 2·every, …)."""
    return every > 0 and step % every == 0


__all__ = ["ALERTS_FILE", "SUMMARY_FILE", "Alert", "BaselineDrift", "MonitorView", "due", "make_view"]
