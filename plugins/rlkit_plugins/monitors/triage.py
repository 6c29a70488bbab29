"""``triage``: ``rlkit doctor``'s checks run live, so a run says at the step a signal starts what the doctor would say
of it afterwards.

Each step the monitor keeps the metrics the triage reads (``MonitorView.metrics``: the step's reward, advantage,
KL, entropy, length and judge metrics, and those of the monitors listed before it, such as
``template_phrases``' share or ``self_internalisation``'s gap), runs the doctor's detectors
(:func:`rlkit.runs.triage.triage`, the same code) on the history so far, and raises one alert the first time each
finding appears: its severity the doctor's (``warning`` or ``error``), its message the detector, the step the
detector says the signal started at, the evidence and the doctor's "what to try".

Cost: the detectors read the whole history, so a check costs more as the run grows (on a 500-step synthetic
history, one check a step cost 2-4 ms a step on average and 3-7 ms at step 500 on a busy two-core machine). By
default they run every 5 steps (0.4-0.7 ms a step on average there), so an alert comes up to 4 steps after the
first step the checks could see its signal; ``every: 1`` checks every step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlkit.plugin import Alert, ConfigError, MonitorView, due, hookimpl, triage, triage_reads


class TriageMonitor:
    """Logs ``findings`` and ``errors`` (how many distinct findings so far, and how many of them are errors); one
    alert per finding (detector and metric), the first time the checks see it."""

    @dataclass
    class Params:
        every: int = 5  # run the checks every `every` steps; the metrics are kept every step

    def __init__(self, params: Params) -> None:
        if params.every < 1:
            raise ConfigError("must be >= 1", "monitors.triage.params.every")
        self.params = params
        self.history: list[tuple[int, dict[str, float]]] = []
        self.found: dict[str, dict[str, Any]] = {}  # "<detector> <metric>" -> what was raised, in order
        self.unread = 0  # steps whose view carried no metrics (outside a training run)
        self._alerts: list[Alert] = []

    def observe(self, step: int, view: MonitorView) -> dict[str, float]:
        if view.metrics is None:
            self.unread += 1
        else:
            while self.history and self.history[-1][0] >= step:  # a step seen again (a resume from earlier)
                self.history.pop()
            self.history.append((step, {k: float(v) for k, v in view.metrics.items()
                                        if triage_reads(k) and math.isfinite(float(v))}))
            if due(step, self.params.every):
                self._check(step)
        errors = sum(f["severity"] == "error" for f in self.found.values())
        return {"findings": float(len(self.found)), "errors": float(errors)}

    def _check(self, step: int) -> None:
        for f in triage(self.history).findings:
            key = f"{f.name} {f.metric}"
            if key in self.found:
                continue  # once per finding: the doctor's checks report the first time a signal held
            self.found[key] = {"name": f.name, "stage": f.stage, "severity": f.severity, "metric": f.metric,
                               "start_step": f.step, "alert_step": step}
            self._alerts.append(Alert("triage", step, f"{f.stage}: {f.name.replace('_', ' ')} from step {f.step} — "
                                                      f"{f.metric}: {f.evidence}; try: {f.advice}", f.severity))

    def alerts(self) -> list[Alert]:
        out, self._alerts = self._alerts, []
        return out

    def summary(self) -> dict[str, Any]:
        first = min(self.found.values(), key=lambda f: f["start_step"], default=None)
        return {"steps": len(self.history), "findings": len(self.found),
                "errors": sum(f["severity"] == "error" for f in self.found.values()),
                "first": f"{first['name']} from step {first['start_step']}" if first else "none",
                "unread_steps": self.unread, "found": list(self.found.values()),
                "metrics": sorted(self.history[-1][1]) if self.history else []}  # what the checks read, at the end

    def state_dict(self) -> dict[str, Any]:
        return {"history": [[s, m] for s, m in self.history], "found": dict(self.found), "unread": self.unread}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [(int(s), {k: float(v) for k, v in m.items()}) for s, m in state["history"]]
        self.found = {k: dict(v) for k, v in state["found"].items()}
        self.unread = int(state["unread"])


@hookimpl
def rlkit_register_monitors(register):
    register("triage", TriageMonitor)
