"""``pareto``: only pairs where one completion Pareto-dominates the other on the rubric's dimensions.

Common rules (as every built-in constructor; see ``all_pairs``): a NaN reward is never paired; hard
pairs weigh 1; a group with fewer than two scored completions gives no pairs; pairs are ordered by
prompt index, then chosen index, then rejected index.

Unlike the others, the order here is Pareto dominance on the normalised scores, not ``batch.rewards``
(which only decides, by NaN, who may be paired). Over the dimensions of positive current weight (as the
``pareto`` aggregator, a dimension the weight scheduler switched off takes no part), i dominates j when
``s_id >= s_jd`` on every dimension and ``s_id > s_jd`` on at least one, with differences within 1e-6
counting as equal; chosen = i. A pair where neither dominates (all equal: a tie; or each better
somewhere: a conflict) is dropped. NaN rule: a pair is comparable only when both completions were
scored on the same dimensions; one scored where the other was not cannot be compared there, so such a
pair is dropped. Dimensions NaN for both are left out; a pair with no shared dimension is dropped.
Because dominance, not the aggregate, decides, a pair can have equal rewards (e.g. under ``min``); for the same
reason ``group_dpo``'s ``min_gap`` is compared with the pair's largest per-dimension margin (:meth:`pair_gaps`),
not a reward gap.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import PreferencePairs, RewardBatch, hookimpl
from rlkit_plugins.aggregators.pareto import largest_margin
from rlkit_plugins.preferences.all_pairs import TIE_TOLERANCE, pairs_from_mask, require_rewards

if TYPE_CHECKING:
    import torch


def strict_dominance(scores: torch.Tensor, tol: float = TIE_TOLERANCE) -> torch.Tensor:
    """``scores [B, G, D]`` → ``bool [B, G, G]``: ``[b, i, j]`` when i dominates j (NaN rule above).

    ``rlkit_plugins.aggregators.pareto.dominance`` counts NaN as the worst score, which suits a reward
    (an unscored dimension is never an advantage) but would make a preference out of a judge's failure.
    """
    import torch
    nan = torch.isnan(scores)
    ni, nj = nan.unsqueeze(2), nan.unsqueeze(1)
    same_pattern = (ni == nj).all(dim=-1) & ~(ni & nj).all(dim=-1)
    diff = torch.nan_to_num(scores.unsqueeze(2) - scores.unsqueeze(1), nan=0.0)  # both-NaN dims: equal
    return same_pattern & (diff >= -tol).all(dim=-1) & (diff > tol).any(dim=-1)


def pareto_pairs(rewards: torch.Tensor, scores: torch.Tensor, weights: torch.Tensor,
                 tol: float = TIE_TOLERANCE) -> PreferencePairs:
    """``rewards [B, G]`` (NaN = not paired), ``scores [B, G, D]``, ``weights [D]`` → dominance pairs."""
    import torch
    counted = scores[..., weights > 0]
    paired = ~torch.isnan(rewards)
    mask = strict_dominance(counted, tol) & paired.unsqueeze(2) & paired.unsqueeze(1)
    return pairs_from_mask(mask)


class ParetoPreferences:
    """Pairs that no weighting of the dimensions could reverse: the dominating completion is chosen."""

    @dataclass
    class Params:
        pass

    def __init__(self, params: Params) -> None:
        self.params = params

    def pairs(self, batch: RewardBatch) -> PreferencePairs:
        return pareto_pairs(require_rewards(batch), batch.scores, batch.weights)

    def pair_gaps(self, batch: RewardBatch, pairs: PreferencePairs) -> torch.Tensor:
        """``[P]``: the largest margin by which chosen beats rejected on a dimension of positive weight (as the
        ``pareto`` aggregator's): dominance, not the reward, ordered the pair, so ``group_dpo``'s ``min_gap`` asks
        whether its largest advantage is more than judge noise."""
        return largest_margin(batch.scores[..., batch.weights > 0], pairs)


@hookimpl
def rlkit_register_preference_constructors(register):
    register("pareto", ParetoPreferences)
