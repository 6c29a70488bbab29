"""``template_phrases``: the share of completions written to a template ("First… Second… Finally",
"首先…其次…最后"), a classic way for a policy to please a judge without getting better."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rlkit.plugin import Alert, ConfigError, MonitorView, due, hookimpl

DEFAULT_PATTERNS = [
    r"\bfirst(?:ly)?\b.*\bsecond(?:ly)?\b.*\b(?:finally|lastly)\b",
    r"首先.*其次.*最后",
]


class TemplatePhrases:
    """Logs ``share`` (completions matching any pattern) and ``start_share``; alerts when the share passes
    ``threshold`` or rises more than ``max_rise`` above the starting share."""

    @dataclass
    class Params:
        patterns: list[str] = field(default_factory=lambda: list(DEFAULT_PATTERNS))  # case-insensitive, . spans lines
        every: int = 1
        baseline_steps: int = 1   # measurements averaged into the starting share
        threshold: float = 0.5    # alert when the share exceeds this (1.0: never)
        max_rise: float = 0.3     # alert when the share exceeds the starting share by more (1.0: never)

    def __init__(self, params: Params) -> None:
        where = "monitors.template_phrases.params"
        if not params.patterns:
            raise ConfigError("name at least one pattern", f"{where}.patterns")
        self.compiled = []
        for i, pattern in enumerate(params.patterns):
            try:
                self.compiled.append(re.compile(pattern, re.IGNORECASE | re.DOTALL))
            except re.error as exc:
                raise ConfigError(f"pattern {pattern!r} is not a regular expression: {exc}",
                                  f"{where}.patterns[{i}]") from None
        if params.every < 1 or params.baseline_steps < 1:
            raise ConfigError("every and baseline_steps must be >= 1", where)
        self.params = params
        self.first: list[float] = []
        self.above = False
        self.history: list[tuple[int, float]] = []
        self._alerts: list[Alert] = []

    def matches(self, text: str) -> bool:
        return any(p.search(text) for p in self.compiled)

    def observe(self, step: int, view: MonitorView) -> dict[str, float]:
        if not due(step, self.params.every):
            return {}
        texts = [t for group in view.texts for t in group]
        share = sum(self.matches(t) for t in texts) / len(texts) if texts else 0.0
        self.history.append((step, share))
        if len(self.first) < self.params.baseline_steps:
            self.first.append(share)
        start = sum(self.first) / len(self.first)
        above = share > self.params.threshold or share - start > self.params.max_rise
        if above and not self.above:  # once per climb, again only after falling back
            self._alerts.append(Alert("template_phrases", step,
                                      f"{share:.0%} of completions follow a template phrase (started at {start:.0%}; "
                                      f"threshold {self.params.threshold:.0%}, rise {self.params.max_rise:.0%})"))
        self.above = above
        return {"share": share, "start_share": start}

    def alerts(self) -> list[Alert]:
        out, self._alerts = self._alerts, []
        return out

    def summary(self) -> dict[str, Any]:
        if not self.history:
            return {"measurements": 0}
        return {"measurements": len(self.history), "start_share": sum(self.first) / len(self.first),
                "final_share": self.history[-1][1], "max_share": max(s for _, s in self.history)}

    def state_dict(self) -> dict[str, Any]:
        return {"first": self.first, "above": self.above, "history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.first, self.above = list(state["first"]), bool(state["above"])
        self.history = [tuple(h) for h in state["history"]]


@hookimpl
def rlkit_register_monitors(register):
    register("template_phrases", TemplatePhrases)
