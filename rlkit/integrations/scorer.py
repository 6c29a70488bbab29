"""An rlkit config's judge, weights and aggregator as one object that scores flat batches.

Other trainers hand rewards a flat list of completions, one per row, each with its prompt's record; rlkit's
pipeline works on groups ``[B, G]``. :class:`RubricScorer` finds the groups (consecutive rows of one record, or
fixed-size chunks), judges them, weights and aggregates exactly as ``rlkit score`` does, and hands the rows back
in the order they came.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from rlkit.config import CheckedConfig, check_config, compose_config
from rlkit.config.validate import is_group_relative
from rlkit.core.errors import ConfigError, DataError, no_such
from rlkit.core.registry import load_registry
from rlkit.core.rubric import Rubric
from rlkit.core.types import Rollout
from rlkit.reward.pipeline import aggregate_rewards, check_judge_output

SCALES = ("normalized", "raw")


@dataclass(frozen=True)
class FlatScores:
    """Scores of N rows in the order given.

    ``raw`` ``[N, D]`` is each dimension in its own range after rubric conditions (NaN = not scored); ``scores``
    ``[N, D]`` the same mapped to [0, 1], as aggregators see them; ``rewards`` ``[N]`` the aggregated reward (NaN
    when nothing could be scored); ``weights`` ``[D]`` the weights the scheduler gave at ``step``.
    """

    dimension_names: list[str]
    raw: torch.Tensor
    scores: torch.Tensor
    rewards: torch.Tensor
    weights: torch.Tensor
    step: int

    def column(self, name: str, scale: str = "normalized") -> list[float]:
        """One dimension's values, NaN where not scored."""
        table = self.scores if scale == "normalized" else self.raw
        return table[:, self.dimension_names.index(name)].tolist()


def load_validated(config: DictConfig | str | Path | None = None, overrides: Sequence[str] = ()) -> CheckedConfig:
    """An rlkit config, validated: ``None`` composes rlkit's ``fit`` config with ``overrides`` (group choices such as
    ``aggregator=lexicographic`` included); a ``DictConfig`` is taken as composed (e.g. inside your own
    ``@hydra.main``); a path is a YAML file of a composed config (a run's ``.hydra/config.yaml``) to which
    ``overrides`` apply as ``key=value`` settings. Nothing is read from ``data.path``: the trainer brings the texts."""
    if isinstance(config, list | tuple):
        raise ConfigError("a DictConfig, a YAML path or None; give overrides as overrides=[...]", "config")
    if isinstance(overrides, str):
        raise ConfigError(f"a list of key=value strings, got the string {overrides!r}", "overrides")
    registry = load_registry()
    if config is None:
        cfg = compose_config(registry, list(overrides))
    elif isinstance(config, DictConfig):
        cfg = _with_settings(config, overrides)
    else:
        path = Path(config).expanduser()
        if not path.is_file():
            raise ConfigError(no_such(path, "config file"), str(path))
        try:
            loaded = OmegaConf.load(path)
        except Exception as exc:  # yaml's and OmegaConf's errors both say what is wrong; one line of it
            raise ConfigError(f"not a YAML config: {str(exc).splitlines()[0]}", str(path)) from None
        if not isinstance(loaded, DictConfig):
            raise ConfigError("must hold a mapping (a composed rlkit config)", str(path))
        cfg = _with_settings(loaded, overrides)
    return check_config(cfg, registry, read_data=False)


def _with_settings(cfg: DictConfig, overrides: Sequence[str]) -> DictConfig:
    """``cfg`` with ``key=value`` settings applied (a composed config has no groups left to choose from)."""
    if not overrides:
        return cfg
    bad = [o for o in overrides if "=" not in o or not o.lstrip("+~").split("=", 1)[0]]
    if bad:
        raise ConfigError(f"expected key=value, got {bad[0]!r}", "overrides")
    merged = OmegaConf.create(OmegaConf.to_container(cfg))  # unlocked: a setting may add a key
    try:
        return OmegaConf.merge(merged, OmegaConf.from_dotlist([o.lstrip("+") for o in overrides]))
    except Exception as exc:  # OmegaConf's errors span lines; the first says what is wrong
        raise ConfigError(str(exc).splitlines()[0], "overrides") from None


class RubricScorer:
    """Judge, weights and aggregator of one validated config, scoring flat batches of rows."""

    def __init__(self, validated: CheckedConfig) -> None:
        self.validated = validated
        self.judge = validated.plugins["judge"]
        self.judge_name = validated.plugin_names["judge"]
        self.aggregator = validated.plugins["aggregator"]
        self.scheduler = validated.plugins["weight_scheduler"]
        self.normalization = validated.run.score_normalization

    @classmethod
    def from_config(cls, config: DictConfig | str | Path | None = None,
                    overrides: Sequence[str] = ()) -> RubricScorer:
        """Build from a config as :func:`load_validated` reads it."""
        return cls(load_validated(config, overrides))

    @property
    def scored_rubric(self) -> Rubric:
        """The rubric the scores follow (the judge's own when it derives one, as a ranking judge does)."""
        return self.validated.scored_rubric

    @property
    def dimension_names(self) -> list[str]:
        return self.scored_rubric.dimension_names

    @property
    def group_relative(self) -> bool:
        """Whether the aggregator compares completions within their group, so a group of one tells it nothing."""
        return is_group_relative(self.aggregator)

    def identity(self) -> dict[str, str]:
        """The rubric's name, version and content hash, with the judge, aggregator and weights chosen."""
        names = self.validated.plugin_names
        return {**self.scored_rubric.identity(), "judge": names["judge"], "aggregator": names["aggregator"],
                "weights": names["weight_scheduler"]}

    def initial_weights(self) -> list[float]:
        """The weights the scheduler gives before any scores are seen (step 0), without touching its state."""
        scheduler = copy.deepcopy(self.scheduler)
        empty = torch.full((1, 1, len(self.dimension_names)), float("nan"))
        return [float(w) for w in scheduler.weights(0, empty, self.scored_rubric)]

    def score(self, records: Sequence[dict[str, Any]], completions: Sequence[str], *, step: int = 0,
              token_counts: Sequence[int] | None = None, group_size: int | None = None) -> FlatScores:
        """Score row i = (``records[i]``, ``completions[i]``).

        Groups are fixed chunks of ``group_size`` rows when given, else runs of consecutive rows whose records are
        equal (how TRL and veRL lay out the G samples of a prompt). Groups of different sizes are judged and
        aggregated apart, each with the scheduler's weights for ``step``.
        """
        n = len(completions)
        if len(records) != n:
            raise DataError(f"{len(records)} prompt records for {n} completions", "reward function input")
        if token_counts is not None and len(token_counts) != n:
            raise DataError(f"{len(token_counts)} token counts for {n} completions", "completion_ids")
        groups = _groups(records, group_size)
        dims = len(self.dimension_names)
        raw = torch.full((n, dims), float("nan"))
        scores = torch.full((n, dims), float("nan"))
        rewards = torch.full((n,), float("nan"))
        weights = torch.tensor(self.initial_weights()) if not groups else None
        by_size: dict[int, list[list[int]]] = {}
        for rows in groups:
            by_size.setdefault(len(rows), []).append(rows)
        for _, same in sorted(by_size.items()):
            counts = None
            if token_counts is not None:
                counts = torch.tensor([[int(token_counts[i]) for i in rows] for rows in same], dtype=torch.long)
            rollout = Rollout(records=[records[rows[0]] for rows in same],
                              completions=[[completions[i] for i in rows] for rows in same],
                              completion_token_counts=counts)
            scored = self.scored_rubric
            judged = check_judge_output(self.judge.score(rollout, self.validated.rubric), rollout, scored,
                                        self.judge_name)
            batch = aggregate_rewards(judged, scored, self.scheduler, self.aggregator, step, self.normalization)
            index = torch.tensor([i for rows in same for i in rows], dtype=torch.long)
            raw[index] = batch.raw_scores.reshape(-1, dims)
            scores[index] = batch.scores.reshape(-1, dims)
            rewards[index] = batch.rewards.reshape(-1)
            weights = batch.weights
        return FlatScores(self.dimension_names, raw, scores, rewards, weights, step)


def record_key(record: dict[str, Any]) -> Hashable:
    """A record as a hashable value, so rows of the same prompt compare equal."""
    return json.dumps(record, sort_keys=True, ensure_ascii=False, default=str)


def _groups(records: Sequence[dict[str, Any]], group_size: int | None) -> list[list[int]]:
    n = len(records)
    if group_size is not None:
        if group_size < 1 or n % group_size:
            raise DataError(f"{n} completions do not split into groups of {group_size}", "group_size")
        return [list(range(s, s + group_size)) for s in range(0, n, group_size)]
    groups: list[list[int]] = []
    previous: Hashable = None
    for i, record in enumerate(records):
        key = record_key(record)
        if groups and key == previous:
            groups[-1].append(i)
        else:
            groups.append([i])
        previous = key
    return groups
