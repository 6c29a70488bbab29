"""``winrate``: every pair of a group with a soft label, the weighted share of dimensions chosen wins.

Common rules (as every built-in constructor; see ``all_pairs``): the order comes from ``batch.rewards``;
a NaN reward is never paired; rewards within 1e-6 are a tie and never paired; ``chosen`` has the higher
reward; a group with fewer than two scored completions or no reward gap gives no pairs; pairs are
ordered by prompt index, then chosen index, then rejected index.

Here: for each pair with ``r_i - r_j > 1e-6`` (chosen = i), over the dimensions d scored (non-NaN)
for both,

    label = (Σ_d w_d·[s_id > s_jd] + ½·Σ_d w_d·[s_id = s_jd]) / Σ_d w_d

with ``w = batch.weights`` and the normalised scores ``s``; scores within 1e-6 count as equal. A
dimension NaN on either side is left out; a pair with no dimension (or no positive weight) left is
skipped. A label of 0.5 (within 1e-6, to absorb rounding of the weights) carries no information and the
pair is dropped. The label is the probability that chosen beats rejected (``soft_labels = True``), not
a pair weight, and is kept as is when below 0.5: an aggregator such as ``lexicographic`` can rank i
above j on one decisive dimension while j wins most of the weight. O(G²·D) per group, vectorised.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from rlkit.plugin import PreferencePairs, RewardBatch, hookimpl
from rlkit_plugins.preferences.all_pairs import TIE_TOLERANCE, pairs_from_mask, require_rewards, strictly_better


def dimension_winrate(scores: torch.Tensor, weights: torch.Tensor, tol: float = TIE_TOLERANCE) -> torch.Tensor:
    """``scores [B, G, D]`` (NaN = unscored), ``weights [D]`` → ``float64 [B, G, G]`` labels.

    ``[b, i, j]`` is the weighted share of the dimensions scored for both on which i beats j (a tie
    counting ½), NaN where no dimension of positive total weight is scored for both.
    """
    s = scores.to(torch.float64)
    si, sj = s.unsqueeze(2), s.unsqueeze(1)               # [B, G, 1, D] against [B, 1, G, D]
    both = ~torch.isnan(si) & ~torch.isnan(sj)
    w = torch.where(both, weights.to(torch.float64), torch.zeros((), dtype=torch.float64, device=s.device))
    diff = si - sj
    won = (w * (diff > tol)).sum(dim=-1) + 0.5 * (w * (diff.abs() <= tol)).sum(dim=-1)
    total = w.sum(dim=-1)
    return torch.where(total > 0, won / total.clamp(min=torch.finfo(torch.float64).tiny),
                       torch.full_like(total, float("nan")))


def winrate_pairs(rewards: torch.Tensor, scores: torch.Tensor, weights: torch.Tensor,
                  tol: float = TIE_TOLERANCE) -> PreferencePairs:
    """``rewards [B, G]``, ``scores [B, G, D]``, ``weights [D]`` → reward-ordered pairs with winrate labels."""
    label = dimension_winrate(scores, weights, tol)
    # NaN labels fail the comparison, so pairs with no shared dimension drop out with the 0.5s.
    informative = (label - 0.5).abs() > tol
    return pairs_from_mask(strictly_better(rewards, tol) & informative, label.clamp(0.0, 1.0))


class WinratePreferences:
    """All reward-ordered pairs, each labelled with how much of the rubric's weight chosen wins."""

    soft_labels = True  # the host's loss reads ``weight`` as P(chosen beats rejected)

    @dataclass
    class Params:
        pass

    def __init__(self, params: Params) -> None:
        self.params = params

    def pairs(self, batch: RewardBatch) -> PreferencePairs:
        return winrate_pairs(require_rewards(batch), batch.scores, batch.weights)


@hookimpl
def rlkit_register_preference_constructors(register):
    register("winrate", WinratePreferences)
