"""``gdpo``: per-dimension group normalisation, weighted sum, then batch normalisation.

GDPO, Group reward-Decoupled normalization Policy Optimization (Liu et al., arXiv 2601.05242, §3,
eqs. 4, 6, 7): each reward dimension is z-scored inside its group on its own, the z-scores are summed
with the reward weights, and the sum is z-scored over the whole batch. Summing raw rewards first (GRPO)
maps different reward combinations onto the same advantage; normalising each dimension first keeps them
apart (the paper's §2 example, checked in tests/plugins/test_advantages.py).

Not the multi-reward note's GDPO: that one ("group direct preference optimisation", pairs from ranked groups
trained with a DPO loss) is ``objective=group_dpo``. Same acronym, two methods; this one is an advantage estimator
for the policy-gradient objective.

Matches TRL's GRPOTrainer with ``multi_objective_aggregation="normalize_then_sum"``: ``nanmean`` and
Bessel-corrected ``nanstd`` per group and dimension, eps 1e-4 in both divisions, ``nansum`` over
weighted dimensions (a NaN dimension adds 0, the weights are not renormalised), then
``(x - mean) / (std + 1e-4)`` over the batch. Two deliberate differences, both only where TRL's
result is a rounding artefact or undefined:

* completions with no scored dimension get advantage 0 and are left out of the batch statistics
  (TRL's ``nansum`` counts them as a reward of 0);
* a dimension whose scored values in a group are all equal contributes exactly 0, and the batch mean
  is not subtracted because it is identically 0 (see ``gdpo_advantages``). TRL gets the same values up
  to rounding, but rounding divided by eps can leave a saturated group a residual instead of 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import ConfigError, RewardBatch, hookimpl, nan_mean_std, scored_values_differ

if TYPE_CHECKING:
    import torch


def gdpo_advantages(scores: torch.Tensor, weights: torch.Tensor, eps: float = 1e-4,
                    batch_normalize: bool = True) -> torch.Tensor:
    """``scores [B, G, D]`` (NaN = not scored), ``weights [D]`` → advantages ``float32 [B, G]``.

    Per-dimension z-scores are invariant to each dimension's affine range map, so the normalised
    ``scores`` and the judge's raw scores give the same result up to where eps sits.
    """
    import torch
    if scores.ndim != 3:
        raise ValueError(f"scores must be [B, G, D], got {tuple(scores.shape)}")
    if weights.shape != scores.shape[-1:]:
        raise ValueError(f"weights must be [{scores.shape[-1]}], got {tuple(weights.shape)}")
    scores = scores.double()  # float64 keeps every group's sum at 0 to ~1e-16, which the batch step relies on
    valid = ~torch.isnan(scores)
    mean, std, _ = nan_mean_std(scores, dim=1, keepdim=True)
    z = (scores - mean) / (std + eps)
    # A saturated dimension has z = 0 exactly; computing it would divide a rounding error in the
    # mean by eps and could leave a group of identical completions a non-zero advantage.
    z = torch.where(valid & ~scored_values_differ(scores, valid), torch.zeros_like(z), z)
    # nansum with unrenormalised weights, as TRL: an unscored dimension adds nothing.
    summed = torch.where(valid, z * weights.to(z), torch.zeros_like(z)).sum(dim=-1)
    scored = valid.any(dim=-1)
    if batch_normalize:
        # Eq. 7 subtracts the batch mean of the summed advantages. Every dimension's z-scores sum to 0
        # within each group, so every group's weighted sum does too, and so does the batch: the mean
        # is 0 by construction and subtracting it would only add rounding noise.
        _, batch_std, _ = nan_mean_std(torch.where(scored, summed, torch.full_like(summed, torch.nan)).reshape(-1),
                                       dim=0)
        summed = summed / (batch_std + eps)
    return torch.where(scored, summed, torch.zeros_like(summed)).float()


class GroupDecoupledAdvantage:
    """NVIDIA's GDPO (decoupled normalisation; not ``objective=group_dpo``, the note's GDPO) over ``batch.scores``
    and ``batch.weights``; the aggregated ``batch.rewards`` is not used."""

    zero_mean_groups = True
    group_relative = True  # compares completions within their group; `rlkit validate` asks for num_generations >= 2
    # The host's `rlkit validate` notes that the aggregator then only feeds the logged reward.
    ignores_aggregator = True

    @dataclass
    class Params:
        eps: float = 1e-4
        batch_normalize: bool = True

    def __init__(self, params: Params) -> None:
        if not params.eps > 0:
            raise ConfigError(f"eps must be > 0, got {params.eps}", "advantage.params.eps")
        self.params = params

    def advantages(self, batch: RewardBatch) -> torch.Tensor:
        import torch
        adv = gdpo_advantages(batch.scores, batch.weights, self.params.eps, self.params.batch_normalize)
        if batch.rewards is not None:
            # The estimator contract: no reward, no update, whatever the aggregator decided (e.g. a gate
            # that could not be checked).
            adv = torch.where(torch.isnan(batch.rewards), torch.zeros_like(adv), adv)
        return adv


@hookimpl
def rlkit_register_advantage_estimators(register):
    register("gdpo", GroupDecoupledAdvantage)
