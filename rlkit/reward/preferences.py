"""The host's side of the preference objective (``group_dpo``): the ordering batch the constructor sees,
the confidence-gap filter (measured on the ordering that produced each pair), and per-dimension statistics of the
chosen samples. Constructors (plugins) only decide which pairs; these rules apply to all of them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlkit.core.stats import nan_weighted_sum
from rlkit.core.types import PreferencePairs, RewardBatch
from rlkit.reward.diagnostics import saturated_groups

if TYPE_CHECKING:
    import torch


def ordering_batch(batch: RewardBatch, aggregator: Any, *, mask_saturated: bool,
                   majority_share: float = 1.0) -> RewardBatch:
    """The batch whose ``rewards`` order each group for pairing.

    With ``mask_saturated``, a dimension saturated within a group (the host's detector,
    :func:`rlkit.reward.diagnostics.saturated_groups` at ``majority_share``: 1.0 all equal, ``(G-1)/G`` also "one
    differs, the rest identical") is left out of that group's ordering until it varies again: it cannot separate
    the group, and under non-additive aggregators (min, geometric, gates) a constant can still flatten or distort
    the order of the rest.
    """
    import torch
    if not mask_saturated and aggregator is None:
        return batch
    scores, raw = batch.scores, batch.raw_scores
    if mask_saturated:
        saturated = saturated_groups(scores, majority_share).unsqueeze(1).expand_as(scores)  # [B, G, D]
        nan = torch.full_like(scores, float("nan"))
        scores, raw = torch.where(saturated, nan, scores), torch.where(saturated, nan, raw)
    masked = RewardBatch(rubric=batch.rubric, raw_scores=raw, scores=scores, weights=batch.weights)
    return masked.with_rewards(aggregator.aggregate(masked).to(torch.float32))


def weighted_sum_gaps(pairs: PreferencePairs, batch: RewardBatch) -> torch.Tensor:
    """``[P]``: |weighted-sum(chosen) − weighted-sum(rejected)| of the normalised scores (NaN where either is)."""
    summed = nan_weighted_sum(batch.scores, batch.weights)  # [B, G]
    return (summed[pairs.prompt_index, pairs.chosen] - summed[pairs.prompt_index, pairs.rejected]).abs()


def pair_gaps(pairs: PreferencePairs, batch: RewardBatch, *, aggregator: Any = None,
              constructor: Any = None) -> torch.Tensor:
    """``[P]``, >= 0: how far apart each pair's completions are on the quantity that ordered them, in normalised
    units: what ``min_gap`` is compared with. ``batch`` is the ordering batch the constructor paired
    (:func:`ordering_batch`: saturated dimensions masked, ``rewards`` from ``aggregator``).

    The first that applies measures it:

    * the constructor's ``pair_gaps(batch, pairs)``, for one that orders by a rule of its own (``pareto``:
      dominance);
    * the aggregator's ``pair_gaps(batch, pairs)`` (``lexicographic``: the gap on the level that decided the pair);
    * an aggregator whose reward is a score (not ``group_relative``: a weighted sum, a minimum, a gate): the gap in
      ``batch.rewards``, the reward that ordered the pair;
    * otherwise (a rank-like reward that says nothing about distance, or no aggregator named): the weighted sum of
      the normalised scores.

    A gap that cannot be measured (NaN) is 0, below any positive ``min_gap``.
    """
    gaps = None
    for plugin in (constructor, aggregator):
        measure = getattr(plugin, "pair_gaps", None)
        if callable(measure):
            gaps = measure(batch, pairs)
            break
    if gaps is None:
        rewards = batch.rewards
        if aggregator is None or rewards is None or getattr(aggregator, "group_relative", False):
            gaps = weighted_sum_gaps(pairs, batch)
        else:
            gaps = rewards[pairs.prompt_index, pairs.chosen] - rewards[pairs.prompt_index, pairs.rejected]
    return gaps.to(pairs.weight.device).abs().nan_to_num(nan=0.0)


def drop_close_pairs(pairs: PreferencePairs, batch: RewardBatch, min_gap: float, *, aggregator: Any = None,
                     constructor: Any = None, gaps: torch.Tensor | None = None) -> tuple[PreferencePairs, float]:
    """Pairs whose gap on the ordering that produced them (:func:`pair_gaps`, or ``gaps`` measured already)
    reaches ``min_gap`` (a smaller gap is more likely judge noise than a preference), and the share dropped (0
    when there were no pairs)."""
    if len(pairs) == 0 or min_gap <= 0:
        return pairs, 0.0
    if gaps is None:
        gaps = pair_gaps(pairs, batch, aggregator=aggregator, constructor=constructor)
    keep = gaps >= min_gap - 1e-9
    kept = PreferencePairs(pairs.prompt_index[keep], pairs.chosen[keep], pairs.rejected[keep], pairs.weight[keep])
    return kept, 1.0 - float(keep.float().mean())


def chosen_win_share(pairs: PreferencePairs, batch: RewardBatch) -> torch.Tensor:
    """``[D]``: per dimension, the share of pairs (where both sides were scored) in which the chosen
    completion scores strictly higher. Shows which dimensions the preference signal actually follows."""
    import torch
    chosen = batch.scores[pairs.prompt_index, pairs.chosen]      # [P, D]
    rejected = batch.scores[pairs.prompt_index, pairs.rejected]
    both = ~(torch.isnan(chosen) | torch.isnan(rejected))
    wins = ((chosen > rejected) & both).sum(dim=0).float()
    return wins / both.sum(dim=0).clamp(min=1)


def confidence_weighted(pairs: PreferencePairs, batch: RewardBatch, soft_labels: bool) -> PreferencePairs:
    """Pairs with the judge's per-group confidence folded in (see :func:`rlkit.reward.pipeline.confidence_scaled`):
    a pair weight is multiplied by it; a soft label (a win probability) is pulled towards 1/2 by it, since
    scaling a probability towards 0 would turn it into the opposite preference."""
    confidence = batch.extras.get("group_confidence")
    if confidence is None or len(pairs) == 0:
        return pairs
    c = confidence.to(pairs.weight.device, pairs.weight.dtype)[pairs.prompt_index]
    weight = 0.5 + c * (pairs.weight - 0.5) if soft_labels else c * pairs.weight
    return PreferencePairs(pairs.prompt_index, pairs.chosen, pairs.rejected, weight)
