"""Rubric dropout: during training each scored dimension of a group is left out of its reward with probability p.

``rubric.dropout: p`` (arXiv 2608.11669, "Rubric Dropout"; the paper's text was not at hand offline, so this follows
the issue's definition): per group (a prompt's completions together, so they are still compared on the same
dimensions), each dimension with a positive weight and a score is dropped with probability p; the aggregation then
runs over the kept dimensions, a weighted sum renormalised over their weights. A group never loses all of them: when
every one is drawn, one is kept, chosen uniformly. Held-out and golden-set scoring never drop.

The drops come from a generator seeded by the run seed and the step alone, so every process draws the same ones
and a resumed run draws exactly those of the uninterrupted run; nothing needs to travel in the checkpoint.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from rlkit.core.types import RewardBatch


def dropout_seed(seed: int, step: int) -> int:
    """The seed of ``step``'s drops: a function of the run seed and the step only (resume, processes)."""
    # odd multipliers keep (seed, step) pairs apart and away from the sampling seeds' (seed * 1_000_003 + step) mix
    return ((seed * 2_654_435_761 + step) * 40_503 + 0x5EED) % (2**63)


def dropout_generator(seed: int, step: int) -> torch.Generator:
    """The CPU generator of ``step``'s drops (:func:`dropout_seed`)."""
    import torch

    return torch.Generator().manual_seed(dropout_seed(seed, step))


def usable_dimensions(scores: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``bool [B, D]``: the dimensions each group can drop, those with a positive weight scored on at least one of
    its completions."""
    b, _, d = scores.shape
    return (weights.to(scores.device) > 0).expand(b, d) & (~scores.isnan()).any(dim=1)


def rubric_dropout(scores: torch.Tensor, weights: torch.Tensor, p: float, seed: int,
                   step: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``scores [B, G, D]`` → (the same with each group's dropped dimensions NaN, ``kept`` bool ``[B, D]``).

    Only dimensions a group can use are drawn (positive weight, scored on at least one of its completions); the
    rest stay as they are and count as kept. ``p = 0`` returns ``scores`` itself."""
    import torch

    if not 0.0 <= p < 1.0:
        raise ValueError(f"rubric dropout p must be in [0, 1), got {p}")
    b, _, d = scores.shape
    candidates = usable_dimensions(scores, weights)
    if p == 0.0 or not bool(candidates.any()):
        return scores, torch.ones(b, d, dtype=torch.bool, device=scores.device)
    gen = dropout_generator(seed, step)
    draws = torch.rand(b, d, generator=gen)
    rescue_order = torch.rand(b, d, generator=gen)  # drawn every time, so the stream never depends on outcomes
    candidates = candidates.cpu()
    dropped = candidates & (draws < p)
    emptied = candidates.any(dim=1) & ~(candidates & ~dropped).any(dim=1)  # every usable dimension drawn
    rescued = torch.where(candidates, rescue_order, torch.full_like(rescue_order, -1.0)).argmax(dim=1)  # [B]
    dropped[emptied, rescued[emptied]] = False
    kept = ~dropped
    out = torch.where(kept.to(scores.device).unsqueeze(1), scores, torch.full_like(scores, float("nan")))
    return out, kept.to(scores.device)


# A training record of a per-record rubric carries its criteria's draw here: {"p": float, "seed": int}
CRITERIA_DROPOUT_FIELD = "rubric_dropout"


def with_criteria_dropout(records: list[dict[str, Any]], p: float, seed: int, step: int) -> list[dict[str, Any]]:
    """Training records of a per-record rubric (``rubric=per_record``), each given the seed of its criteria's draw
    under :data:`CRITERIA_DROPOUT_FIELD`: the judge drops each criterion with probability p before it summarises
    them (``rlkit_plugins.judges.per_record``), because the frame's dimensions are summaries of criteria, not items
    a policy could learn around. The seed is a function of the run seed, the step and the record's prompt, so every
    process and a resumed run draw the same. ``p = 0`` returns ``records`` themselves."""
    import zlib

    if p == 0.0:
        return records
    base = dropout_seed(seed, step)
    return [{**record, CRITERIA_DROPOUT_FIELD: {
        "p": p, "seed": (base + zlib.crc32(json.dumps(record.get("prompt"), sort_keys=True, default=str).encode()))
        % (2**63)}} for record in records]


def dropped_share(kept: torch.Tensor, scores: torch.Tensor, weights: torch.Tensor) -> float:
    """The share of a step's usable (group, dimension) pairs (positive weight, scored) that were dropped."""
    candidates = usable_dimensions(scores, weights)
    total = int(candidates.sum())
    return float((candidates & ~kept.to(candidates.device)).sum()) / total if total else 0.0


def dropout_view(batch: RewardBatch, p: float, seed: int, step: int) -> tuple[RewardBatch, dict[str, Any]]:
    """What the aggregator sees of ``batch`` under rubric dropout (each group's dropped dimensions unscored), and the
    extras the trained batch carries: ``rubric_kept`` ``[B, D]`` and ``rubric_dropped_share``."""
    import torch

    scores, kept = rubric_dropout(batch.scores, batch.weights, p, seed, step)
    mask = kept.to(batch.raw_scores.device).unsqueeze(1)
    raw = torch.where(mask, batch.raw_scores, torch.full_like(batch.raw_scores, float("nan")))
    extras = {"rubric_kept": kept.cpu(), "rubric_dropped_share": dropped_share(kept, batch.scores, batch.weights)}
    return replace(batch, raw_scores=raw, scores=scores, rewards=None), extras


def with_rubric_dropout(batch: RewardBatch, aggregator: Any, p: float, seed: int, step: int) -> RewardBatch:
    """``batch`` with its rewards aggregated over each group's kept dimensions (:func:`dropout_view`).

    The batch keeps the judge's full scores (per-dimension metrics, monitors and samples report what the judge said,
    not the draw); the rewards and the extras carry the dropout. The weights were set by the scheduler on the full
    scores, so its state does not follow the draws."""
    from rlkit.reward.pipeline import aggregated

    if p == 0.0:
        return batch
    view, extras = dropout_view(batch, p, seed, step)
    return replace(batch.with_rewards(aggregated(view, aggregator)), extras={**batch.extras, **extras})


__all__ = ["CRITERIA_DROPOUT_FIELD", "dropout_generator", "dropout_seed", "dropped_share", "rubric_dropout",
           "dropout_view", "usable_dimensions", "with_criteria_dropout", "with_rubric_dropout"]
