"""rlkit's rubric rewards as TRL ``reward_funcs`` for ``GRPOTrainer``.

TRL (1.16, ``GRPOTrainer._calculate_rewards``) calls each reward function as
``func(prompts=..., completions=..., completion_ids=..., trainer_state=..., log_extra=..., log_metric=..., **columns)``
with one row per completion (the G completions of a prompt side by side), turns ``None`` into NaN and skips it in
its NaN-aware sums, and logs ``rewards/<func.__name__>/mean`` and ``/std``. Nothing here imports TRL: the callables
only follow that contract.

The functions of one :func:`trl_reward_funcs` call share a cache, so a batch is judged once however many of them
TRL calls.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from omegaconf import DictConfig

from rlkit.core.errors import ConfigError, DataError
from rlkit.data.records import assistant_text, content_text
from rlkit.integrations.scorer import SCALES, FlatScores, RubricScorer, record_key

log = logging.getLogger("rlkit.integrations.trl")

Mode = Literal["dimensions", "aggregate", "both"]
MODES = ("dimensions", "aggregate", "both")
# Keyword arguments TRL passes that are not dataset columns (trl/trainer/grpo_trainer.py, _calculate_rewards)
TRL_KEYWORDS = frozenset({"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric",
                          "environments"})


def completion_text(completion: Any) -> str:
    """A TRL completion as the text rlkit judges: plain text as it is; a conversational completion (a list of
    messages) as its last assistant message, the answer a multi-turn or tool-using completion ends with."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list):
        return assistant_text(completion)
    raise DataError(f"a completion must be text or a list of chat messages, got {type(completion).__name__}",
                    "completions")


def prompt_record(prompt: Any) -> str | list[dict[str, str]]:
    """A TRL prompt as an rlkit record holds it: text, or messages reduced to ``{role, content}`` text."""
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list):
        return [{"role": str(m.get("role", "user")), "content": content_text(m.get("content"))}
                for m in prompt if isinstance(m, dict)]
    raise DataError(f"a prompt must be text or a list of chat messages, got {type(prompt).__name__}", "prompts")


class _SharedScores:
    """Judges a TRL batch once for every reward function of one set; the last batch is kept."""

    def __init__(self, scorer: RubricScorer, group_size: int | None) -> None:
        self.scorer = scorer
        self.group_size = group_size
        self._key: Any = None
        self._scores: FlatScores | None = None
        self._announced = False

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], completion_ids: Sequence[Any] | None,
                 trainer_state: Any, columns: dict[str, Any]) -> FlatScores:
        n = len(completions)
        if len(prompts) != n:
            raise DataError(f"{len(prompts)} prompts for {n} completions", "reward function input")
        step = int(getattr(trainer_state, "global_step", 0) or 0)
        # dataset columns arrive as one list per column, a value per row; anything else is not a column
        fields = {k: v for k, v in columns.items() if k not in TRL_KEYWORDS and isinstance(v, list) and len(v) == n}
        records = [{**{k: v[i] for k, v in fields.items()}, "prompt": prompt_record(prompts[i])} for i in range(n)]
        texts = [completion_text(c) for c in completions]
        key = (step, tuple(record_key(r) for r in records), tuple(texts))
        if key != self._key or self._scores is None:
            counts = [len(ids) for ids in completion_ids] if completion_ids is not None else None
            self._scores = self.scorer.score(records, texts, step=step, token_counts=counts,
                                             group_size=self.group_size)
            self._key = key
        if not self._announced:
            self._announced = True
            log.info("rlkit rewards: rubric %s", self.scorer.identity())
        return self._scores


def _nan_to_none(values: Sequence[float]) -> list[float | None]:
    return [None if math.isnan(v) else float(v) for v in values]


class DimensionReward:
    """One rubric dimension as a TRL reward function; TRL logs it as ``rewards/<dimension>/mean``."""

    def __init__(self, shared: _SharedScores, dimension: str, scale: str) -> None:
        self._shared, self.dimension, self.scale = shared, dimension, scale
        self.__name__ = dimension  # TRL names a callable's logs after __name__ (trl.trainer.utils.get_callable_name)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 completion_ids: Sequence[Any] | None = None, trainer_state: Any = None,
                 **kwargs: Any) -> list[float | None]:
        scores = self._shared(prompts, completions, completion_ids, trainer_state, kwargs)
        return _nan_to_none(scores.column(self.dimension, self.scale))


class AggregateReward:
    """The configured aggregator's reward as one TRL reward function, with the weights of TRL's current step.

    Through TRL's ``log_metric`` it logs ``rlkit/weight/<dimension>`` (the scheduler's weights at this step) and
    ``rlkit/score/<dimension>`` (the mean normalised score), so a moving weight schedule can be watched."""

    def __init__(self, shared: _SharedScores, name: str) -> None:
        self._shared = shared
        self.__name__ = name

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 completion_ids: Sequence[Any] | None = None, trainer_state: Any = None,
                 log_metric: Callable[[str, float], None] | None = None, **kwargs: Any) -> list[float | None]:
        scores = self._shared(prompts, completions, completion_ids, trainer_state, kwargs)
        if log_metric is not None:
            for i, name in enumerate(scores.dimension_names):
                log_metric(f"rlkit/weight/{name}", float(scores.weights[i]))
                column = [v for v in scores.column(name) if not math.isnan(v)]
                if column:
                    log_metric(f"rlkit/score/{name}", sum(column) / len(column))
        return _nan_to_none(scores.rewards.tolist())


@dataclass
class TrlRewards:
    """What :func:`trl_reward_funcs` returns: ``funcs`` for ``GRPOTrainer(reward_funcs=...)`` and ``weights`` for
    ``GRPOConfig(reward_weights=...)``, in the same order."""

    funcs: list[Callable[..., list[float | None]]]
    weights: list[float]
    scorer: RubricScorer
    names: list[str] = field(default_factory=list)

    @property
    def rubric_identity(self) -> dict[str, str]:
        return self.scorer.identity()


def trl_reward_funcs(config: DictConfig | str | Path | None = None, overrides: Sequence[str] = (), *,
                     mode: Mode = "dimensions", scale: str = "normalized", group_size: int | None = None,
                     aggregate_name: str | None = None) -> TrlRewards:
    """TRL ``reward_funcs`` from an rlkit config (rubric, judge, aggregator, weights).

    ``config``/``overrides``: as :func:`rlkit.integrations.scorer.load_validated` reads them (``None`` composes
    rlkit's own config, e.g. ``overrides=["aggregator=lexicographic"]``).

    ``mode``:
      * ``"dimensions"``: one function per rubric dimension, returning its score (``None`` where not scored), with
        ``weights`` the scheduler's step-0 weights; TRL sums them (``sum_then_normalize``) or normalises each first
        (``normalize_then_sum``, GDPO-style).
      * ``"aggregate"``: one function returning the configured aggregator's reward, with the weight scheduler
        stepped by TRL's ``trainer_state.global_step``; weights ``[1.0]``.
      * ``"both"``: the dimensions, logged but weighted 0, then the aggregate weighted 1: TRL logs every
        dimension and trains on rlkit's reward.

    ``scale``: ``"normalized"`` (each dimension mapped to [0, 1] from its rubric range, what aggregators see) or
    ``"raw"`` (the dimension's own range). ``group_size``: TRL's ``num_generations`` to cut groups by count; by
    default a group is a run of consecutive rows with the same prompt and columns.
    """
    if mode not in MODES:
        raise ConfigError(f"must be one of {', '.join(MODES)}, got {mode!r}", "mode")
    if scale not in SCALES:
        raise ConfigError(f"must be one of {', '.join(SCALES)}, got {scale!r}", "scale")
    if group_size is not None and group_size < 1:
        raise ConfigError(f"must be >= 1, got {group_size}", "group_size")
    scorer = RubricScorer.from_config(config, overrides)
    shared = _SharedScores(scorer, group_size)
    dimensions = scorer.dimension_names
    name = aggregate_name or scorer.validated.plugin_names["aggregator"]
    if mode != "dimensions" and name in dimensions:
        raise ConfigError(f"{name!r} is also a dimension of rubric {scorer.scored_rubric.name}; TRL would log both "
                          f"under rewards/{name}/: give the aggregate another name", "aggregate_name")
    funcs: list[Callable[..., list[float | None]]] = []
    weights: list[float] = []
    if mode in ("dimensions", "both"):
        funcs += [DimensionReward(shared, d, scale) for d in dimensions]
        weights += scorer.initial_weights() if mode == "dimensions" else [0.0] * len(dimensions)
        if mode == "dimensions" and scorer.validated.plugin_names["weight_scheduler"] != "constant":
            log.warning("weights=%s moves rlkit's weights over steps, but TRL applies reward_weights as given: use "
                        "mode='aggregate' or 'both' for the schedule to act", scorer.validated.plugin_names[
                            "weight_scheduler"])
    if mode in ("aggregate", "both"):
        funcs.append(AggregateReward(shared, name))
        weights.append(1.0)
    return TrlRewards(funcs=funcs, weights=weights, scorer=scorer, names=[f.__name__ for f in funcs])
