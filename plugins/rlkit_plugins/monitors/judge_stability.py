"""``judge_stability``: every ``every`` steps the run's judge scores a fixed human-labelled probe set; agreement
(quadratic-weighted kappa, as ``rlkit calibrate`` computes it) falling below its first measurement flags a judge
whose scoring of the *same* texts changed during the run.

What it measures is the judge's stability, not judge/policy collusion: the policy's outputs never enter the probe
set, so a judge the policy has learned to please scores those fixed texts exactly as before. With a deterministic
judge (``rule``, ``llm`` at temperature 0 with its response cache) the agreement is constant for the whole run. It
earns its place with judges that can change under a run: a served model behind a moving alias, a GRM refreshed
mid-run, a sampling judge, a judge backend replaced on resume. The collusion check is humans on the live outputs:
the ``label_sample`` monitor, ``rlkit label`` and ``rlkit calibrate`` by step window."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rlkit.plugin import DEFAULT_CALIBRATION_LABELS as DEFAULT_LABELS
from rlkit.plugin import (
    Alert,
    ConfigError,
    MonitorView,
    Rubric,
    calibrate,
    due,
    hookimpl,
    judge_records,
    read_labels,
    resolve_path,
)


class JudgeStability:
    """Logs ``agreement`` (mean kappa over the labelled dimensions), ``start_agreement`` and ``kappa/<dim>``;
    alerts when agreement falls more than ``max_drop`` below the first measurement."""

    @dataclass
    class Params:
        labels: str = DEFAULT_LABELS  # JSONL as for rlkit calibrate: {"prompt", "completion", "labels": {...}}
        every: int = 50
        max_drop: float = 0.1
        limit: int = 0  # score only the first `limit` labelled lines (0: all)

    key = "judge_stability"

    def __init__(self, params: Params) -> None:
        where = f"monitors.{self.key}.params"
        if params.every < 1:
            raise ConfigError("must be >= 1", f"{where}.every")
        if params.max_drop <= 0 or params.limit < 0:
            raise ConfigError("max_drop must be > 0 and limit >= 0", where)
        self.params = params
        self.labelled: list[dict[str, Any]] | None = None
        self.rubric: Rubric | None = None
        self.first: float | None = None
        self.history: list[tuple[int, float]] = []
        self.below = False
        self._alerts: list[Alert] = []

    def check_rubric(self, rubric: Rubric) -> None:
        """Read the labels now, so a bad file or an unknown dimension fails before training."""
        path = resolve_path(self.params.labels)
        if not path.is_file():
            raise ConfigError(f"no labels file {path}", f"monitors.{self.key}.params.labels")
        records = read_labels(path, rubric)
        self.labelled = records[:self.params.limit] if self.params.limit else records
        self.rubric = rubric

    def observe(self, step: int, view: MonitorView) -> dict[str, float]:
        if not due(step, self.params.every):
            return {}
        if view.judge_scores is None:
            raise ConfigError(f"{self.key} needs the run's judge; it runs inside rlkit fit", f"monitors.{self.key}")
        if self.labelled is None or self.rubric is not view.rubric:
            self.check_rubric(view.rubric)
        assert self.labelled is not None
        raw = view.judge_scores(judge_records(self.labelled), [[r["completion"]] for r in self.labelled])
        report = calibrate(self.labelled, raw[:, 0], view.rubric)
        kappas = {row.name: row.kappa for row in report.rows if not math.isnan(row.kappa)}
        if not kappas:
            return {}
        agreement = sum(kappas.values()) / len(kappas)
        self.first = agreement if self.first is None else self.first
        self.history.append((step, agreement))
        below = self.first - agreement > self.params.max_drop
        if below and not self.below:
            self._alerts.append(Alert(self.key, step,
                                      f"judge agreement with the fixed labelled probe set fell to {agreement:.3f} "
                                      f"from {self.first:.3f} (limit -{self.params.max_drop:g}): the judge scores the "
                                      "same texts differently than at the start of the run"))
        self.below = below
        return {"agreement": agreement, "start_agreement": self.first,
                **{f"kappa/{name}": k for name, k in kappas.items()}}

    def alerts(self) -> list[Alert]:
        out, self._alerts = self._alerts, []
        return out

    def summary(self) -> dict[str, Any]:
        return {"measurements": len(self.history), "start_agreement": self.first,
                "final_agreement": self.history[-1][1] if self.history else None,
                "min_agreement": min((a for _, a in self.history), default=None)}

    def state_dict(self) -> dict[str, Any]:
        return {"first": self.first, "history": self.history, "below": self.below}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.first, self.below = state["first"], bool(state["below"])
        self.history = [tuple(h) for h in state["history"]]


@hookimpl
def rlkit_register_monitors(register):
    register("judge_stability", JudgeStability)
