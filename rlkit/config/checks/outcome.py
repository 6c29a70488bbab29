"""What checking a config hands the commands: :class:`CheckedConfig`, the checked config and its (cheaply built)
parts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlkit.config.checks.blocks import check_block
from rlkit.config.schemas import (
    DataConfig,
    DebiasConfig,
    EvalConfig,
    ModelConfig,
    RubricEvolveConfig,
    RubricScheduleConfig,
    RunConfig,
)
from rlkit.core.logger_settings import LoggerSettings
from rlkit.core.rubric import Rubric
from rlkit.reward.pipeline import HeldoutScoring


@dataclass
class CheckedConfig:
    """A config that :func:`rlkit.config.check_config` passed: every plugin built (cheaply) and the rubric loaded.

    ``rubric`` is the user's (the judge is asked with it; a checkpoint is keyed by it); ``scored_rubric``
    is what the judge's scores follow, the same object unless the judge derives its own (a ranking judge's
    ``rank``), and what weights, aggregation, monitors and reports read."""

    cfg: DictConfig
    rubric: Rubric
    run: RunConfig = field(default_factory=RunConfig)
    plugins: dict[str, Any] = field(default_factory=dict)
    scored_rubric: Rubric = None  # type: ignore[assignment]  # set by check_config
    plugin_names: dict[str, str] = field(default_factory=dict)
    records: list[dict[str, Any]] | None = None
    model: ModelConfig | None = None
    data: DataConfig | None = None
    objective: Any = None
    debias: DebiasConfig | None = None
    evolve: RubricEvolveConfig | None = None  # rubric.evolve: criteria written during training (every > 0)
    rubric_dropout: float = 0.0  # rubric.dropout: the share of a group's dimensions left out of its training reward
    schedule: RubricScheduleConfig | None = None  # rubric.schedule: stages of dimensions (stages empty: none)

    @property
    def reference_monitors(self) -> list[str]:
        """The keys of monitors that read the reference policy (``reads_reference``): the run keeps one for them."""
        return [key for key, monitor in (self.plugins.get("monitor") or {}).items()
                if getattr(monitor, "reads_reference", False)]

    @property
    def needs_reference(self) -> bool:
        """Whether the run keeps a reference policy: for the objective, or for a monitor that reads one."""
        return self.objective.reference_use is not None or bool(self.reference_monitors)

    @property
    def judge_config(self) -> dict[str, Any]:
        """The ``judge`` block, resolved: what audits and calibration rounds are keyed by."""
        return resolved(self.cfg.judge)

    @property
    def reward_config(self) -> dict[str, Any]:
        """The blocks that decide a record's reward (:data:`REWARD_CONFIG_KEYS`), resolved: a resumed scoring run
        must match them."""
        return {key: resolved(self.cfg.get(key)) for key in REWARD_CONFIG_KEYS}

    @property
    def trainer_kwargs(self) -> dict[str, Any]:
        """The ``trainer`` block, resolved: lightning.Trainer's keyword arguments (checked by ``check_trainer``)."""
        return resolved(self.cfg.trainer)

    @property
    def logger_settings(self) -> LoggerSettings:
        return LoggerSettings.of(self.cfg)

    @property
    def eval_block(self) -> EvalConfig:
        """The ``eval`` block (the golden set), checked against its schema."""
        return check_block(EvalConfig, resolved(OmegaConf.select(self.cfg, "eval", default=None)) or {}, "eval")

    def heldout_scoring(self) -> HeldoutScoring | None:
        """Held-out scoring on an absolute yardstick, or None when training's own scoring is one. A training judge
        that only ranks within groups hands held-out completions to ``heldout_judge`` on the user's rubric; a
        group-relative aggregator (a lone completion's rank says nothing) leaves the judge as it is. Either way the
        scores are weighted by ``heldout_weights`` and combined by ``heldout_aggregator``."""
        ranks = self._ranks_within_groups()
        if ranks is None:
            return None
        judge = "heldout_judge" if ranks == "judge" else "judge"
        return HeldoutScoring(judge=self.plugins[judge], judge_name=self.plugin_names[judge], rubric=self.rubric,
                              aggregator=self.plugins["heldout_aggregator"], scheduler=self.plugins["heldout_weights"])

    def heldout_yardstick(self) -> str | None:
        """Why held-out rewards are not the training reward, for the start/end table's title; None when they are."""
        ranks, names = self._ranks_within_groups(), self.plugin_names
        if ranks == "judge":
            return (f"judge={names['judge']} ranks within groups: held-out scored by {names['heldout_judge']}, "
                    f"reward = {names['heldout_aggregator']}")
        if ranks == "aggregator":
            return (f"aggregator={names['aggregator']} ranks within groups: held-out reward = "
                    f"{names['heldout_aggregator']} of the same scores")
        return None

    def _ranks_within_groups(self) -> str | None:
        """Which training part only ranks within groups, so held-out scoring needs its own yardstick: the judge
        (it derives a ranking rubric), the aggregator (group-relative), or None."""
        if self.scored_rubric is not self.rubric:
            return "judge"
        return "aggregator" if is_group_relative(self.plugins.get("aggregator")) else None


REWARD_CONFIG_KEYS = ("judge", "aggregator", "weights", "score_normalization")
"""The config keys that change a completion's scores or reward (batch size, retries and progress do not)."""


def resolved(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def is_group_relative(plugin: Any) -> bool:
    """Whether a plugin compares completions within their group (``group_relative = True``), so a lone completion
    or a group of one gives it nothing to compare."""
    return bool(getattr(plugin, "group_relative", False))
