"""``length_drift`` and ``repetition_drift``: completion length and repetitiveness against the first steps.

A policy that learns to pad (longer answers score higher with many judges) or to repeat itself shows
here long before it shows in the reward."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlkit.plugin import Alert, BaselineDrift, ConfigError, MonitorView, due, hookimpl


def repetition(text: str, n: int) -> float:
    """Share of the text's word ``n``-grams that repeat an earlier one (0: none repeats)."""
    words = text.split()
    grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
    return 1.0 - len(set(grams)) / len(grams) if grams else 0.0


class DriftMonitor:
    """A per-step value against its baseline over the first measurements; subclasses say what is measured."""

    key = ""

    def __init__(self, params: Any) -> None:
        if params.every < 1 or params.baseline_steps < 1:
            raise ConfigError("every and baseline_steps must be >= 1", f"monitors.{self.key}.params")
        self.params = params
        self.drift = BaselineDrift(params.baseline_steps)
        self.last = float("nan")
        self._alerts: list[Alert] = []

    def measure(self, view: MonitorView) -> float:
        raise NotImplementedError

    def outside(self, value: float, baseline: float) -> bool:
        raise NotImplementedError

    def describe(self, value: float, baseline: float) -> str:
        raise NotImplementedError

    def observe(self, step: int, view: MonitorView) -> dict[str, float]:
        if not due(step, self.params.every):
            return {}
        value = self.measure(view)
        if self.drift.update(value, self.outside):
            self._alerts.append(Alert(self.key, step, self.describe(value, self.drift.baseline)))
        self.last = value
        metrics = {"value": value}
        if self.drift.ready:
            metrics["baseline"] = self.drift.baseline
        return metrics

    def alerts(self) -> list[Alert]:
        out, self._alerts = self._alerts, []
        return out

    def summary(self) -> dict[str, Any]:
        return {"baseline": self.drift.baseline if self.drift.first else None,
                "final": None if self.last != self.last else self.last}  # NaN is not JSON

    def state_dict(self) -> dict[str, Any]:
        return {"drift": self.drift.state_dict(), "last": self.last}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.drift.load_state_dict(state["drift"])
        self.last = float(state["last"])


class LengthDrift(DriftMonitor):
    """Mean completion length in tokens; alerts when its ratio to the baseline leaves [1/max_ratio, max_ratio]."""

    key = "length_drift"

    @dataclass
    class Params:
        every: int = 1
        baseline_steps: int = 3
        max_ratio: float = 2.0

    def __init__(self, params: Params) -> None:
        if params.max_ratio <= 1:
            raise ConfigError("must be > 1", "monitors.length_drift.params.max_ratio")
        super().__init__(params)

    def measure(self, view: MonitorView) -> float:
        return float(view.completion_lengths.float().mean())

    def outside(self, value: float, baseline: float) -> bool:
        ratio = self.params.max_ratio
        return baseline > 0 and not baseline / ratio <= value <= baseline * ratio

    def describe(self, value: float, baseline: float) -> str:
        return (f"mean completion length {value:.1f} tokens is {value / baseline:.2f}x the first steps' "
                f"{baseline:.1f} (limit {self.params.max_ratio:g}x either way)")


class RepetitionDrift(DriftMonitor):
    """Mean share of repeated word n-grams per completion; alerts when it rises ``max_rise`` above the baseline."""

    key = "repetition_drift"

    @dataclass
    class Params:
        every: int = 1
        baseline_steps: int = 3
        ngram: int = 3
        max_rise: float = 0.2

    def __init__(self, params: Params) -> None:
        if params.ngram < 1:
            raise ConfigError("must be >= 1", "monitors.repetition_drift.params.ngram")
        super().__init__(params)

    def measure(self, view: MonitorView) -> float:
        texts = [t for group in view.texts for t in group]
        return sum(repetition(t, self.params.ngram) for t in texts) / max(len(texts), 1)

    def outside(self, value: float, baseline: float) -> bool:
        return value - baseline > self.params.max_rise

    def describe(self, value: float, baseline: float) -> str:
        return (f"{value:.0%} of word {self.params.ngram}-grams repeat within a completion, up from "
                f"{baseline:.0%} in the first steps (limit +{self.params.max_rise:.0%})")


@hookimpl
def rlkit_register_monitors(register):
    register("length_drift", LengthDrift)
    register("repetition_drift", RepetitionDrift)
