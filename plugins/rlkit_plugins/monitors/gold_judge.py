"""``gold_judge``: a second judge the policy is never trained on scores the same completions as the training judge;
the two rewards are logged side by side and an alert is raised when the training reward rises while the gold
reward falls over a window of measurements (or the gold reward falls while the training reward stays level), the
signature of a policy learning to please its training judge
rather than to answer better (the failure rubric dropout, arXiv 2608.11669, is cited for; ``rubric.dropout``).

Which completions: with ``prompts`` (a JSONL of prompt records, e.g. a held-out file) the run's policy samples
``num_generations`` completions per record at each measurement (``MonitorView.generate``, seeded per record) and
both judges score them. Without it the monitor scores the *step's own* completions: the view carries no held-out
split, and the step's completions are what the policy is being pushed towards, so the divergence still shows.

Both judges' scores go through the same yardstick, the rubric's weighted sum of range-normalised scores (the
rubric's initial weights), so the divergence compares judges, not the run's aggregator or weight schedule. With
``rubric`` (a rubric file) the gold judge scores on a rubric of its own, the paper's gold judge that sees what the
training rubric leaves out; each reward is then its own rubric's yardstick and the divergence compares the two.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlkit.plugin import (
    Alert,
    ConfigError,
    JudgeError,
    JudgeRef,
    MonitorView,
    PluginRef,
    Rollout,
    Rubric,
    RubricError,
    due,
    hookimpl,
    load_rubric,
    nan_weighted_sum,
    normalize_scores,
    resolve_path,
)
from rlkit_plugins.monitors.prompt_records import read_monitor_prompts

if TYPE_CHECKING:
    import torch

WHERE = "monitors.gold_judge.params"


class GoldJudge:
    """Logs ``gold/reward`` and ``train/reward`` (mean yardstick reward of the same completions under each judge),
    ``divergence`` (train − gold) and ``gold/unscored`` (share of completions the gold judge left unscored); alerts
    when, over the last ``window`` measurements, the gold reward fell more than ``min_fall`` and the gap between the
    two widened by more than ``min_rise + min_fall``: the training reward rose while the gold fell, or stayed level
    while the gold fell further (changes read off a least-squares line, so one noisy point does not fire it)."""

    @dataclass
    class Params:
        judge: JudgeRef = field(default_factory=lambda: PluginRef.to("judge", "rule"))
        rubric: str | None = None   # a rubric file the gold judge scores on; None: the run's rubric
        prompts: str | None = None  # JSONL of prompt records to sample and score; None: the step's own completions
        num_generations: int = 2    # completions per record with `prompts`
        limit: int = 0              # only the first `limit` records of `prompts` (0: all)
        every: int = 10
        window: int = 4             # measurements over which the two trends are compared
        min_rise: float = 0.05      # on the [0, 1] yardstick
        min_fall: float = 0.05

    def __init__(self, params: Params) -> None:
        if params.every < 1 or params.num_generations < 1 or params.window < 1:
            raise ConfigError("every, num_generations and window must be >= 1", WHERE)
        if params.limit < 0 or params.min_rise < 0 or params.min_fall < 0:
            raise ConfigError("limit, min_rise and min_fall must be >= 0", WHERE)
        self.params = params
        if callable(getattr(params.judge.plugin, "scored_rubric", None)):
            raise ConfigError(f"judge {params.judge.name!r} scores groups on a rubric of its own; a gold judge scores "
                              "the run's rubric, dimension by dimension, to compare with the training judge",
                              params.judge.where or f"{WHERE}.judge")
        self.gold = params.judge.plugin
        self.gold_rubric: Rubric | None = None
        if params.rubric is not None:
            try:
                self.gold_rubric = load_rubric(resolve_path(params.rubric))
            except RubricError as exc:
                raise ConfigError(str(exc), f"{WHERE}.rubric") from None
        self.records: list[dict[str, Any]] | None = None
        self.history: list[dict[str, float]] = []  # {"step", "train", "gold"} per measurement
        self.diverging = False
        self._alerts: list[Alert] = []

    def check_rubric(self, rubric: Rubric) -> None:
        """The gold judge's own rubric check, and the prompts file read now, so a bad one fails before training."""
        check = getattr(self.gold, "check_rubric", None)
        if check is not None:
            check(self.gold_rubric or rubric)
        if self.params.prompts is not None and self.records is None:
            self.records = read_monitor_prompts(self.params.prompts, self.params.limit, f"{WHERE}.prompts")

    def observe(self, step: int, view: MonitorView) -> dict[str, float]:
        if not due(step, self.params.every):
            return {}
        records, texts, train_raw = self._completions(view)
        rollout = Rollout(records=list(records), completions=[list(group) for group in texts])
        gold_rubric = self.gold_rubric or view.rubric
        gold_raw = self.gold.score(rollout, gold_rubric)
        expected = (len(records), len(texts[0]), len(gold_rubric.dimensions))
        if tuple(gold_raw.shape) != expected:
            raise JudgeError(f"returned scores of shape {tuple(gold_raw.shape)}, expected {list(expected)}",
                             f"{WHERE}.judge ({self.params.judge.name})")
        gold, train = yardstick(gold_raw, gold_rubric), yardstick(train_raw, view.rubric)
        unscored = float(gold.isnan().float().mean())
        gold_mean, train_mean = _nanmean(gold), _nanmean(train)
        if math.isnan(gold_mean) or math.isnan(train_mean):
            return {"gold/unscored": unscored}  # nothing to compare at this step: said, not folded into a trend
        self.history.append({"step": step, "train": train_mean, "gold": gold_mean})
        self._check_divergence(step)
        return {"gold/reward": gold_mean, "train/reward": train_mean, "divergence": train_mean - gold_mean,
                "gold/unscored": unscored}

    def _completions(self, view: MonitorView) -> tuple[list[dict[str, Any]], list[list[str]], torch.Tensor]:
        """The records, completions and training judge's raw scores this measurement compares."""
        if self.params.prompts is None:
            return list(view.records), [list(group) for group in view.texts], view.raw_scores
        if view.generate is None or view.judge_scores is None:
            raise ConfigError("gold_judge with prompts needs the run's policy and judge; it runs inside rlkit fit",
                              f"{WHERE}.prompts")
        if self.records is None:
            self.check_rubric(view.rubric)
        assert self.records is not None
        texts = view.generate(self.records, self.params.num_generations)
        return self.records, texts, view.judge_scores(self.records, texts)

    def _check_divergence(self, step: int) -> None:
        window = self.params.window
        if len(self.history) <= window:
            return
        recent = self.history[-window - 1:]
        train_change, gold_change = _change(recent, "train"), _change(recent, "gold")
        # The gap must widen by both margins and the gold reward must fall: the training reward rising is the
        # classic signature, but a saturated training judge can stay flat while the gold judge marks the answers
        # down (judged_model seed 2: gold 0.93 -> 0.64, training +0.02), and that is the same failure.
        margin = self.params.min_rise + self.params.min_fall
        now = gold_change < -self.params.min_fall and train_change - gold_change > margin
        if now and not self.diverging:
            if train_change > self.params.min_rise:
                said = (f"the training reward rose {train_change:+.3f} while the gold judge's fell {gold_change:+.3f} "
                        "on the same completions: the policy may be learning the training judge rather than the task")
            else:
                said = (f"the gold judge's reward fell {gold_change:+.3f} while the training reward moved only "
                        f"{train_change:+.3f} on the same completions: the training judge does not see what the gold "
                        "judge marks down (a saturated or fooled training judge)")
            self._alerts.append(Alert("gold_judge", step, f"over the last {window} measurements {said}"))
        self.diverging = now

    def alerts(self) -> list[Alert]:
        out, self._alerts = self._alerts, []
        return out

    def summary(self) -> dict[str, Any]:
        first, last = (self.history[0], self.history[-1]) if self.history else ({}, {})
        return {"measurements": len(self.history), "gold_judge": self.params.judge.name,
                "start_gold": first.get("gold"), "final_gold": last.get("gold"),
                "start_train": first.get("train"), "final_train": last.get("train"),
                "final_divergence": last["train"] - last["gold"] if last else None}

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history, "diverging": self.diverging}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [dict(h) for h in state["history"]]
        self.diverging = bool(state["diverging"])


def yardstick(raw: torch.Tensor, rubric: Rubric) -> torch.Tensor:
    """Raw scores ``[N, G, D]`` → ``[N, G]``: the rubric's weighted sum of range-normalised scores, NaN where
    nothing was scored."""
    import torch

    weights = torch.tensor(rubric.initial_weights(), dtype=torch.float32)
    return nan_weighted_sum(normalize_scores(raw.detach().cpu().to(torch.float32), rubric), weights / weights.sum())


def _nanmean(values: torch.Tensor) -> float:
    import torch

    return float(torch.nanmean(values)) if (~values.isnan()).any() else float("nan")


def _change(points: list[dict[str, float]], key: str) -> float:
    """The change of ``key`` over ``points`` read off their least-squares line (slope × span of the steps)."""
    xs, ys = [p["step"] for p in points], [p[key] for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    spread = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0
    return slope * (xs[-1] - xs[0])


@hookimpl
def rlkit_register_monitors(register):
    register("gold_judge", GoldJudge)
