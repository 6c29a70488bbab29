"""``winrate``: every reward-ordered pair of a group with a soft label, the probability that chosen wins.

Common rules (as every built-in constructor; see ``all_pairs``): the order comes from ``batch.rewards``;
a NaN reward is never paired; rewards within 1e-6 are a tie and never paired; ``chosen`` has the higher
reward; a group with fewer than two scored completions or no reward gap gives no pairs; pairs are
ordered by prompt index, then chosen index, then rejected index.

Two labels (``label``), for each pair with ``r_i - r_j > 1e-6`` (chosen = i):

* ``dimension_share`` (default, rlkit's own): the weighted share of the dimensions d scored (non-NaN) for both
  on which chosen wins,

      label = (Σ_d w_d·[s_id > s_jd] + ½·Σ_d w_d·[s_id = s_jd]) / Σ_d w_d

  with ``w = batch.weights`` and the normalised scores ``s``; scores within 1e-6 count as equal. A dimension
  NaN on either side is left out; a pair with no dimension (or no positive weight) left is skipped. It says
  on how much of the rubric chosen is better, not by how much: two completions 0.001 apart on every
  dimension get 1.0.
* ``group_winrate``: the multi-reward note's soft label (§4.4, §5.3: the group's pairwise win-rate matrix
  as soft labels instead of a hard 1/0). Each completion's win frequency over its group,
  ``W_i = (#{k: r_i > r_k} + ½·#{k ≠ i: r_i = r_k}) / (n - 1)`` over the n scored completions (Copeland's
  score, normalised), and

      label = ½ + ½·(W_i − W_j)

  1 for the best over the worst of a group without ties, ½ + 1/(2(n−1)) for neighbours: close completions
  are not pushed apart as if one were clearly better. Chosen beats rejected and everything rejected beats,
  so ``W_i > W_j`` and the label is always above ½. The note also counts wins over repeated judgements; the
  batch carries one judgement per completion, so here the frequency is over the group.

A label of 0.5 (within 1e-6, to absorb rounding of the weights) carries no information and the pair is
dropped. A ``dimension_share`` label below 0.5 (the reward ranks i first, as ``lexicographic`` can on one
decisive dimension, while j wins most of the weight) would train towards the *rejected* completion:
``below_half: drop`` (default) leaves such pairs out; ``keep`` trains on them as they are (rlkit before
issue 24). The label is the probability that chosen beats rejected (``soft_labels = True``), not a pair
weight. O(G²·D) per group, vectorised.

``group_dpo``'s ``min_gap`` is measured on the reward that ordered the pair, as for the other reward-ordered
constructors (the aggregator's gap), not on the label: the label already says how sure the pair is, and a win-rate
difference is a rank distance (1/(n−1) between neighbours), which would drop every neighbour of a large group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from rlkit.plugin import ConfigError, PreferencePairs, RewardBatch, hookimpl
from rlkit_plugins.preferences.all_pairs import TIE_TOLERANCE, pairs_from_mask, require_rewards, strictly_better

if TYPE_CHECKING:
    import torch


def dimension_winrate(scores: torch.Tensor, weights: torch.Tensor, tol: float = TIE_TOLERANCE) -> torch.Tensor:
    """``scores [B, G, D]`` (NaN = unscored), ``weights [D]`` → ``float64 [B, G, G]`` labels.

    ``[b, i, j]`` is the weighted share of the dimensions scored for both on which i beats j (a tie
    counting ½), NaN where no dimension of positive total weight is scored for both.
    """
    import torch
    s = scores.to(torch.float64)
    si, sj = s.unsqueeze(2), s.unsqueeze(1)               # [B, G, 1, D] against [B, 1, G, D]
    both = ~torch.isnan(si) & ~torch.isnan(sj)
    w = torch.where(both, weights.to(torch.float64), torch.zeros((), dtype=torch.float64, device=s.device))
    diff = si - sj
    won = (w * (diff > tol)).sum(dim=-1) + 0.5 * (w * (diff.abs() <= tol)).sum(dim=-1)
    total = w.sum(dim=-1)
    return torch.where(total > 0, won / total.clamp(min=torch.finfo(torch.float64).tiny),
                       torch.full_like(total, float("nan")))


def group_winrate(rewards: torch.Tensor, tol: float = TIE_TOLERANCE) -> torch.Tensor:
    """``rewards [B, G]`` (NaN = unscored) → ``float64 [B, G, G]`` labels ``½ + ½·(W_i − W_j)``, ``W`` each
    completion's win frequency over the other scored completions of its group (a tie counting ½); NaN where
    either reward is NaN."""
    import torch
    valid = ~torch.isnan(rewards)
    diff = rewards.unsqueeze(2) - rewards.unsqueeze(1)          # the comparison strictly_better makes
    others = valid.unsqueeze(2) & valid.unsqueeze(1) & ~torch.eye(rewards.shape[1], dtype=torch.bool,
                                                                  device=rewards.device)
    credit = ((diff > tol) & others).double() + 0.5 * ((diff.abs() <= tol) & others).double()
    wins = credit.sum(dim=2) / (valid.sum(dim=1, keepdim=True) - 1).clamp(min=1).double()   # [B, G]
    label = 0.5 + 0.5 * (wins.unsqueeze(2) - wins.unsqueeze(1))
    return torch.where(valid.unsqueeze(2) & valid.unsqueeze(1), label, torch.full_like(label, float("nan")))


LabelRule = Literal["dimension_share", "group_winrate"]
BelowHalf = Literal["drop", "keep"]


def winrate_pairs(rewards: torch.Tensor, scores: torch.Tensor, weights: torch.Tensor,
                  tol: float = TIE_TOLERANCE, *, label: LabelRule = "dimension_share",
                  below_half: BelowHalf = "keep") -> PreferencePairs:
    """``rewards [B, G]``, ``scores [B, G, D]``, ``weights [D]`` → reward-ordered pairs with winrate labels
    (``label``); ``below_half="drop"`` leaves out pairs whose label favours the rejected completion."""
    p = dimension_winrate(scores, weights, tol) if label == "dimension_share" else group_winrate(rewards, tol)
    # NaN labels fail the comparison, so pairs with no shared dimension drop out with the 0.5s.
    informative = (p - 0.5 > tol) if below_half == "drop" else ((p - 0.5).abs() > tol)
    return pairs_from_mask(strictly_better(rewards, tol) & informative, p.clamp(0.0, 1.0))


class WinratePreferences:
    """All reward-ordered pairs, each with a soft label: the rubric weight chosen wins, or its win frequency."""

    soft_labels = True  # the host's loss reads ``weight`` as P(chosen beats rejected)

    @dataclass
    class Params:
        label: LabelRule = "dimension_share"
        """``dimension_share``: the weighted share of dimensions chosen wins; ``group_winrate``: the multi-reward
        note's ½ + ½·(W_chosen − W_rejected), W the win frequency over the group."""
        below_half: BelowHalf = "drop"
        """A label below 0.5 (``dimension_share`` only) favours the rejected one: ``drop`` the pair or ``keep`` it."""

    def __init__(self, params: Params) -> None:
        for key, allowed in (("label", LabelRule), ("below_half", BelowHalf)):
            if getattr(params, key) not in get_args(allowed):
                raise ConfigError(f"must be one of {', '.join(get_args(allowed))}, got {getattr(params, key)!r}",
                                  f"preference.params.{key}")
        self.params = params

    def pairs(self, batch: RewardBatch) -> PreferencePairs:
        return winrate_pairs(require_rewards(batch), batch.scores, batch.weights, label=self.params.label,
                             below_half=self.params.below_half)


@hookimpl
def rlkit_register_preference_constructors(register):
    register("winrate", WinratePreferences)
