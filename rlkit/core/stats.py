"""NaN-aware tensor statistics shared by estimators, aggregators and metrics."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def json_number(x: float) -> float | None:
    """A number as the run's JSON files hold it: rounded to 6 places, NaN as null."""
    return None if math.isnan(x) else round(float(x), 6)


def nan_mean_std(x: torch.Tensor, dim: int | tuple[int, ...], *, unbiased: bool = True,
                 keepdim: bool = False) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Mean, std and count over the non-NaN entries of ``x`` along ``dim``.

    The std is Bessel-corrected when ``unbiased`` (as ``torch.std`` and TRL's GRPO); with fewer
    than two values it is 0, since one value has no spread. The mean of no values is NaN.
    """
    import torch
    valid = ~torch.isnan(x)
    count = valid.sum(dim=dim, keepdim=True)
    filled = torch.where(valid, x, torch.zeros_like(x))
    mean = filled.sum(dim=dim, keepdim=True) / count.clamp(min=1)
    mean = torch.where(count > 0, mean, torch.full_like(mean, float("nan")))
    sq = torch.where(valid, (x - mean) ** 2, torch.zeros_like(x)).sum(dim=dim, keepdim=True)
    dof = (count - 1) if unbiased else count
    var = sq / dof.clamp(min=1)
    std = torch.where(dof > 0, var.sqrt(), torch.zeros_like(var))
    if not keepdim:
        mean, std, count = (t.squeeze(dim) if isinstance(dim, int) else _squeeze(t, dim)
                            for t in (mean, std, count))
    return mean, std, count


def _squeeze(t: torch.Tensor, dims: tuple[int, ...]) -> torch.Tensor:
    for d in sorted((d % t.ndim for d in dims), reverse=True):
        t = t.squeeze(d)
    return t


def nan_weighted_sum(scores: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted mean over the last dim, skipping NaN entries and renormalising the weights left.

    ``scores [..., D]``, ``weights [D]`` → ``[...]``. Where nothing with positive weight was
    scored the result is NaN: no reward, rather than a silent 0.
    """
    import torch
    valid = ~torch.isnan(scores)
    w = torch.where(valid, weights.to(scores.dtype).expand_as(scores), torch.zeros_like(scores))
    total = w.sum(dim=-1)
    weighted = (torch.where(valid, scores, torch.zeros_like(scores)) * w).sum(dim=-1)
    return torch.where(total > 0, weighted / total.clamp(min=torch.finfo(scores.dtype).tiny),
                       torch.full_like(total, float("nan")))


def scored_values_differ(x: torch.Tensor, valid: torch.Tensor, dim: int = 1) -> torch.Tensor:
    """Whether the scored entries of ``x`` (``valid``) take more than one value along ``dim`` (kept as size 1).
    Estimators give a group without contrast exact zeros: centring equal rewards leaves a rounding error, which a
    division by a tiny std or a batch normalisation would turn into an advantage."""
    import torch
    hi = torch.where(valid, x, torch.full_like(x, -torch.inf)).amax(dim=dim, keepdim=True)
    lo = torch.where(valid, x, torch.full_like(x, torch.inf)).amin(dim=dim, keepdim=True)
    return hi > lo


def nan_median(x: torch.Tensor, dim: int = 0) -> torch.Tensor:
    """The median along ``dim`` ignoring NaN, averaging the two middle values when an even number are present (NaN
    where none is). ``torch.nanmedian`` returns the lower of the two, so over two members it is always the lower
    one: "the consensus" of a rule judge's 1 and a model judge's 0 would be 0."""
    import torch
    x = x.movedim(dim, 0)
    valid = ~torch.isnan(x)
    count = valid.sum(dim=0)
    ordered = torch.sort(torch.where(valid, x, torch.full_like(x, float("inf"))), dim=0).values
    lower = ordered.gather(0, ((count - 1).clamp(min=0) // 2).unsqueeze(0)).squeeze(0)
    upper = ordered.gather(0, (count // 2).clamp(max=x.shape[0] - 1).unsqueeze(0)).squeeze(0)
    return torch.where(count > 0, (lower + upper) / 2, torch.full_like(lower, float("nan")))


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's τ-b of two score (or rank) vectors, ties allowed; NaN where it is undefined (either all tied)."""
    from itertools import combinations
    from math import nan, sqrt

    concordant = discordant = ties_x = ties_y = 0
    for i, j in combinations(range(len(x)), 2):
        dx, dy = x[i] - x[j], y[i] - y[j]
        if dx == 0 and dy == 0:
            continue
        if dx == 0:
            ties_x += 1
        elif dy == 0:
            ties_y += 1
        elif (dx > 0) == (dy > 0):
            concordant += 1
        else:
            discordant += 1
    denom = sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return nan if denom == 0 else (concordant - discordant) / denom
