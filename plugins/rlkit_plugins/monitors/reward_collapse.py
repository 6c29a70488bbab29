"""``reward_collapse``: learning has stopped because the reward no longer separates completions.

A group whose rewards are all equal gives every completion advantage 0. That happens when most groups
are saturated in every dimension (the host's saturation detector, :func:`rlkit.reward.diagnostics.saturated_groups`)
or when every completion already gets the maximum score; the alert names the saturated dimensions."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlkit.plugin import Alert, ConfigError, MonitorView, due, hookimpl, nan_mean_std


class RewardCollapse:
    """Logs ``flat_groups`` (share of groups with equal rewards), ``at_max`` (share of completions at every
    dimension's maximum) and ``saturated/<dimension>``; alerts after ``patience`` collapsed measurements."""

    @dataclass
    class Params:
        every: int = 1
        max_flat_share: float = 0.8     # collapsed when more groups than this have equal rewards
        dimension_share: float = 0.8    # a dimension is named when saturated in more groups than this
        patience: int = 3               # consecutive collapsed measurements before the alert

    def __init__(self, params: Params) -> None:
        where = "monitors.reward_collapse.params"
        if params.every < 1 or params.patience < 1:
            raise ConfigError("every and patience must be >= 1", where)
        for key in ("max_flat_share", "dimension_share"):
            if not 0 <= getattr(params, key) <= 1:
                raise ConfigError("must be in [0, 1]", f"{where}.{key}")
        self.params = params
        self.streak = 0
        self.collapsed_steps = 0
        self.measurements = 0
        self.first_collapse: int | None = None
        self._alerts: list[Alert] = []

    def observe(self, step: int, view: MonitorView) -> dict[str, float]:
        import torch
        if not due(step, self.params.every):
            return {}
        _, group_std, group_n = nan_mean_std(view.rewards, dim=1)
        flat = float(((group_std == 0) | (group_n < 2)).float().mean())
        high = torch.tensor([d.high for d in view.rubric.dimensions], dtype=view.raw_scores.dtype)
        scored = ~torch.isnan(view.raw_scores)
        top = ((view.raw_scores >= high) | ~scored).all(dim=-1) & scored.any(dim=-1)  # [B, G]
        at_max = float(top.float().mean())
        saturated = view.saturated.float().mean(dim=0)  # [D]
        names = view.rubric.dimension_names
        collapsed = flat > self.params.max_flat_share or at_max == 1.0
        self.measurements += 1
        self.streak = self.streak + 1 if collapsed else 0
        self.collapsed_steps += collapsed
        if self.streak == self.params.patience:  # once per collapse, again after a recovery
            self.first_collapse = step if self.first_collapse is None else self.first_collapse
            dims = [n for n, s in zip(names, saturated.tolist(), strict=True) if s > self.params.dimension_share]
            why = "every completion scores the maximum" if at_max == 1.0 else \
                f"{flat:.0%} of groups have equal rewards"
            self._alerts.append(Alert("reward_collapse", step,
                                      f"learning has stopped: {why} (advantages 0) for {self.streak} measurements; "
                                      f"saturated dimensions: {', '.join(dims) or 'none over the share, rewards tie'}"))
        return {"flat_groups": flat, "at_max": at_max,
                **{f"saturated/{n}": float(s) for n, s in zip(names, saturated.tolist(), strict=True)}}

    def alerts(self) -> list[Alert]:
        out, self._alerts = self._alerts, []
        return out

    def summary(self) -> dict[str, Any]:
        return {"measurements": self.measurements, "collapsed_measurements": self.collapsed_steps,
                "first_collapse_step": self.first_collapse}

    def state_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("streak", "collapsed_steps", "measurements", "first_collapse")}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            setattr(self, key, value)


@hookimpl
def rlkit_register_monitors(register):
    register("reward_collapse", RewardCollapse)
