"""``probes``: fixed prompts sampled and judged every ``every`` steps, their group scores kept over time, so
the same questions can be compared from the first step to the last."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from rlkit.plugin import ConfigError, MonitorView, due, hookimpl, normalize_scores

DEFAULT_PROMPTS = [{"prompt": "2+3=", "reference": "5"}, {"prompt": "17+25=", "reference": "42"},
                   {"prompt": "9+9=", "reference": "18"}]


class Probes:
    """Logs ``score`` (mean over prompts, completions and dimensions, normalised to [0, 1]) and ``<dimension>``
    means; the summary holds every measurement per prompt. Raises no alerts."""

    @dataclass
    class Params:
        prompts: list[dict[str, Any]] = field(default_factory=lambda: [dict(p) for p in DEFAULT_PROMPTS])
        every: int = 10
        num_generations: int = 4

    def __init__(self, params: Params) -> None:
        where = "monitors.probes.params"
        if params.every < 1 or params.num_generations < 1:
            raise ConfigError("every and num_generations must be >= 1", where)
        for i, record in enumerate(params.prompts):
            if not isinstance(record.get("prompt"), str | list) or not record.get("prompt"):
                raise ConfigError('each probe needs a "prompt"', f"{where}.prompts[{i}]")
        if not params.prompts:
            raise ConfigError("name at least one prompt", f"{where}.prompts")
        self.params = params
        self.history: list[dict[str, Any]] = []

    def observe(self, step: int, view: MonitorView) -> dict[str, float]:
        import torch
        if not due(step, self.params.every):
            return {}
        if view.generate is None or view.judge_scores is None:
            raise ConfigError("probes needs the run's policy and judge; it runs inside rlkit fit", "monitors.probes")
        records = self.params.prompts
        texts = view.generate(records, self.params.num_generations)
        scores = normalize_scores(view.judge_scores(records, texts), view.rubric)  # [P, G, D]
        per_prompt = scores.nanmean(dim=(1, 2)).tolist()
        per_dim = scores.nanmean(dim=(0, 1)).tolist()
        self.history.append({"step": step, "scores": [None if math.isnan(s) else round(s, 6) for s in per_prompt],
                             "first_completions": [group[0] for group in texts]})
        overall = float(torch.nanmean(scores))
        metrics = {name: v for name, v in zip(view.rubric.dimension_names, per_dim, strict=True) if not math.isnan(v)}
        if not math.isnan(overall):
            metrics["score"] = overall
        return metrics

    def alerts(self) -> list:
        return []

    def summary(self) -> dict[str, Any]:
        return {"measurements": len(self.history), "prompts": [p["prompt"] for p in self.params.prompts],
                "history": self.history}

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = list(state["history"])


@hookimpl
def rlkit_register_monitors(register):
    register("probes", Probes)
