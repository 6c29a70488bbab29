"""``tool_errors``: the share of a step's tool calls that failed, against the first steps (multi-turn episodes).

A policy can learn to please a rubric without using its tools well: calls the environment cannot read, tools named
wrongly, arguments a tool refuses. Their share (``episode`` counts ``tool_errors`` / ``tool_calls``, as
``environment=tools`` reports them) rising above the baseline is worth an alert before it shows in the reward. Steps
without episodes or without a call measure nothing."""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.plugin import ConfigError, MonitorView, due, hookimpl
from rlkit_plugins.monitors.drift import DriftMonitor


def tool_error_rate(view: MonitorView) -> float | None:
    """Failed calls / calls over the view's episodes; None when it holds no episode or no call."""
    if view.episodes is None:
        return None
    calls = errors = 0.0
    for group in view.episodes:
        for episode in group:
            calls += float(episode.info.get("tool_calls", 0.0))
            errors += float(episode.info.get("tool_errors", 0.0))
    return errors / calls if calls else None


class ToolErrorDrift(DriftMonitor):
    """Alerts when the tool error rate rises more than ``max_rise`` above its mean over the first measurements."""

    key = "tool_errors"

    @dataclass
    class Params:
        every: int = 1
        baseline_steps: int = 3
        max_rise: float = 0.2

    def __init__(self, params: Params) -> None:
        if not 0 < params.max_rise <= 1:
            raise ConfigError("must lie in (0, 1]", "monitors.tool_errors.params.max_rise")
        super().__init__(params)

    def observe(self, step: int, view: MonitorView) -> dict[str, float]:
        if due(step, self.params.every) and tool_error_rate(view) is None:
            return {}  # nothing was called: no measurement, the baseline waits
        return super().observe(step, view)

    def measure(self, view: MonitorView) -> float:
        rate = tool_error_rate(view)
        assert rate is not None
        return rate

    def outside(self, value: float, baseline: float) -> bool:
        return value - baseline > self.params.max_rise

    def describe(self, value: float, baseline: float) -> str:
        return (f"{value:.0%} of tool calls failed (unreadable, unknown tool, refused arguments, errors), up from "
                f"{baseline:.0%} in the first steps (limit +{self.params.max_rise:.0%})")


@hookimpl
def rlkit_register_monitors(register):
    register("tool_errors", ToolErrorDrift)
