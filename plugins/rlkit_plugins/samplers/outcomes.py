"""What the adaptive samplers learn from a step: each prompt's share of successful completions on one rubric
dimension, and a running pass rate per prompt (an exponential moving average of those shares)."""

from __future__ import annotations

import math
import random
from typing import TYPE_CHECKING, Any

from rlkit.plugin import ConfigError, Rubric

if TYPE_CHECKING:
    import torch


def check_dimension(rubric: Rubric, dimension: str, where: str) -> None:
    """``dimension`` must be one of the rubric's (the scores a sampler reads follow it)."""
    if dimension not in rubric.dimension_names:
        raise ConfigError(f"rubric {rubric.name} has no dimension {dimension!r}; it has "
                          f"{', '.join(rubric.dimension_names)}", where)


def success_shares(raw_scores: torch.Tensor, rubric: Rubric, dimension: str, threshold: float) -> list[float | None]:
    """Per prompt of ``raw_scores [B, G, D]``: the share of its scored completions whose raw ``dimension`` score is
    at least ``threshold``; None when none of them was scored."""
    import torch
    column = raw_scores[..., rubric.dimension_names.index(dimension)].float()
    scored = ~torch.isnan(column)
    hits = ((column >= threshold) & scored).sum(dim=1).tolist()
    counts = scored.sum(dim=1).tolist()
    return [h / n if n else None for h, n in zip(hits, counts, strict=True)]


def update_rate(rate: float | None, share: float, smoothing: float) -> float:
    """The running pass rate after a step with success ``share``: the first share as it is, then an exponential
    moving average with weight ``smoothing`` on the newest."""
    return share if rate is None else (1.0 - smoothing) * rate + smoothing * share


def draw_order(seed: int, draw: int, n: int) -> list[int]:
    """A permutation of ``range(n)`` that depends on the run seed and the draw alone (never on global RNG state)."""
    order = list(range(n))
    random.Random(seed * 1_000_003 + draw).shuffle(order)
    return order


def check_length(state: dict[str, Any], key: str, n: int, name: str) -> None:
    """A checkpoint's per-prompt state must cover this run's training prompts."""
    if len(state.get(key, [])) != n:
        raise ConfigError(f"the checkpoint's {name} state covers {len(state.get(key, []))} training prompts, this run "
                          f"has {n}; resume with the same data", "ckpt_path")


def mean_rate(rates: list[float | None]) -> float:
    seen = [r for r in rates if r is not None]
    return sum(seen) / len(seen) if seen else math.nan
