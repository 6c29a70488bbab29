"""``group_dpo``: each group's completions, ordered by the aggregated reward, become chosen/rejected pairs (the
``preference`` group picks which), trained with a DPO-family loss (:mod:`.dpo_losses`) against the reference.

This is the multi-reward note's GDPO ("group direct preference optimisation", §3), not ``advantage=gdpo``, which
is NVIDIA's decoupled normalisation (GDPO, arXiv 2601.05242) for the policy-gradient objective: the same acronym
for two methods.

Before pairing, a dimension saturated within a group leaves that group's ordering (``mask_saturated``; saturated
means all equal, or with ``saturation_majority_share`` < 1 a majority that large, e.g. 0.875 for the note's "one
differs, the rest identical" in a group of 8), pairs whose gap is under ``min_gap`` are dropped as likely judge
noise, and the judge's group confidence scales the pair weights. The gap is measured on the ordering that produced
the pair (:func:`rlkit.reward.preferences.pair_gaps`): the reward gap under a scalar aggregator (the weighted sum by
default), the gap on the deciding dimension under ``lexicographic``, the largest per-dimension margin for ``pareto``
pairs.

With ``auto_lexicographic`` (on by default) the ordering turns to the ``lexicographic`` aggregator when dimensions
contradict each other, where a weighted sum trades one for another at random. Two ways to count (``conflict_scope``):

* ``batch`` (default): the batch's conflict rate averaged over ``conflict_window`` steps; once above
  ``conflict_threshold``, every group is ordered lexicographically for the rest of the run.
* ``prompt``: the multi-reward note's per-prompt counter (§4.3): a group whose pairs are ordered oppositely by two
  dimensions in more than ``conflict_threshold`` (20%) of cases is ordered lexicographically this step, the others
  by the aggregator. ``conflict_dimensions`` names the two the note counts (correctness against format); empty
  counts a conflict between any two dimensions (in both scopes).

In both scopes each step logs the per-prompt counter (``conflicts/prompts_over_threshold``,
``conflicts/prompt_rate_max``) and, with soft labels (``preference=winrate``), ``pairs/label_mean``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import pydantic

from rlkit.plugin import (
    AggregatorRef,
    ConfigError,
    ConflictWatch,
    PairLossInputs,
    PairTargets,
    PluginRef,
    PreferencePairs,
    RewardBatch,
    Rubric,
    chosen_win_share,
    confidence_weighted,
    conflict_rate,
    drop_close_pairs,
    group_conflict_rates,
    hookimpl,
    ordering_batch,
    pair_gaps,
)
from rlkit_plugins.objectives.dpo_losses import preference_loss, sft_loss

if TYPE_CHECKING:
    import torch


def prompt_conflict_metrics(rates: torch.Tensor, over: torch.Tensor) -> dict[str, float]:
    """The per-prompt conflict counter of a step (004 §4.3): the share of the step's prompts whose own pairs conflict
    above the threshold (``over``, those ``conflict_scope: prompt`` orders lexicographically) and the highest rate."""
    import torch
    scored = rates[~torch.isnan(rates)]
    return {"conflicts/prompts_over_threshold": float(over.double().mean()) if len(over) else float("nan"),
            "conflicts/prompt_rate_max": float(scored.max()) if len(scored) else float("nan")}


class GroupDpoObjective:
    """The multi-reward note's GDPO (group preference pairs, DPO loss; not ``advantage=gdpo``, NVIDIA's GDPO).

    See the module docstring for the ordering, saturation, gap and confidence rules."""

    signal = "pairs"
    group_relative = True  # pairs come from within a group; `rlkit validate` asks for num_generations >= 2
    needs_old_logprobs = False  # each inner iteration recomputes the policy's sums; the reference's are fixed

    class Params(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)

        loss_type: Literal["sigmoid", "ipo", "simpo"] = "sigmoid"
        beta: float = pydantic.Field(default=0.1, gt=0)  # TRL DPOConfig's default
        label_smoothing: float = pydantic.Field(default=0.0, ge=0, lt=0.5)
        simpo_gamma: float = 0.5
        sft_weight: float = pydantic.Field(default=0.0, ge=0)
        min_gap: float = pydantic.Field(default=0.1, ge=0)
        mask_saturated: bool = True
        saturation_majority_share: float = pydantic.Field(default=1.0, gt=0.5, le=1)
        auto_lexicographic: bool = True
        conflict_scope: Literal["batch", "prompt"] = "batch"
        conflict_dimensions: list[str] = pydantic.Field(default_factory=list)
        lexicographic: AggregatorRef = pydantic.Field(default_factory=lambda: PluginRef.to("aggregator",
                                                                                          "lexicographic"))
        conflict_threshold: float = pydantic.Field(default=0.2, ge=0, le=1)
        conflict_window: int = pydantic.Field(default=50, ge=1)
        num_iterations: int = pydantic.Field(default=1, ge=1)
        mask_truncated_completions: bool = False

        @pydantic.field_validator("conflict_dimensions")
        @classmethod
        def _two_or_none(cls, names: list[str]) -> list[str]:
            if len(names) == 1 or len(set(names)) != len(names):
                raise ValueError("name two or more distinct dimensions (one alone never conflicts), or none for all")
            return names

    def __init__(self, params: Params) -> None:
        self.params = params
        self.num_iterations = params.num_iterations
        self.mask_truncated_completions = params.mask_truncated_completions
        self.watch = ConflictWatch(params.conflict_window, params.conflict_threshold)
        self.lexicographic_ordering = False

    @property
    def reference_use(self) -> str | None:
        if self.params.loss_type == "simpo":
            return None
        return (f"objective.params.loss_type={self.params.loss_type}, which compares the policy with a reference; "
                "use loss_type=simpo (reference-free) or a reference")

    def pair_targets(self, batch: RewardBatch, truncated: torch.Tensor, *, constructor: Any, aggregator: Any,
                     step: int) -> tuple[PairTargets, dict[str, float]]:
        import torch
        p = self.params
        fallback = p.lexicographic.plugin
        counted = self.conflict_scores(batch)
        per_prompt = p.auto_lexicographic and p.conflict_scope == "prompt"
        group_rates = group_conflict_rates(counted)  # the note's counter per prompt (NaN: a group of one)
        over = group_rates > p.conflict_threshold
        if (p.auto_lexicographic and not per_prompt and not self.lexicographic_ordering
                and self.watch.update(conflict_rate(counted))):
            self.lexicographic_ordering = True
            from lightning.pytorch.utilities import rank_zero_info  # here: importing Lightning costs seconds

            rank_zero_info(f"rlkit: dimension conflicts averaged {self.watch.mean:.0%} over {self.watch.window} "
                           f"steps; pairs are ordered lexicographically from step {step} on")
        orderer = fallback if self.lexicographic_ordering else aggregator
        order = ordering_batch(batch, orderer, mask_saturated=p.mask_saturated,
                               majority_share=p.saturation_majority_share)
        # each ordering that paired some group, with the groups it ordered (None: all): min_gap is measured on it
        orderings: list[tuple[Any, RewardBatch, torch.Tensor | None]] = [(orderer, order, None)]
        lexicographic_share = float(self.lexicographic_ordering)
        if per_prompt:
            switch = over  # each group's own conflict rate; NaN never passes the threshold
            if switch.any():
                lex = ordering_batch(batch, fallback, mask_saturated=p.mask_saturated,
                                     majority_share=p.saturation_majority_share)
                orderings.append((fallback, lex, switch))
                order = order.with_rewards(torch.where(switch.to(order.rewards.device).unsqueeze(1), lex.rewards,
                                                       order.rewards))
            lexicographic_share = float(switch.float().mean()) if len(switch) else 0.0
        pairs = constructor.pairs(order)
        built = len(pairs)
        if p.mask_truncated_completions and built:
            # a completion cut at the length limit is neither a good nor a bad example of the rubric
            g = batch.shape[1]
            cut = truncated.to(pairs.chosen.device)
            keep = ~(cut[pairs.prompt_index * g + pairs.chosen] | cut[pairs.prompt_index * g + pairs.rejected])
            pairs = PreferencePairs(pairs.prompt_index[keep], pairs.chosen[keep], pairs.rejected[keep],
                                    pairs.weight[keep])
        gaps = None
        if p.min_gap > 0 and len(pairs):
            for ordering, ordered, groups in orderings:
                measured = pair_gaps(pairs, ordered, aggregator=ordering, constructor=constructor)
                gaps = measured if groups is None else torch.where(
                    groups.to(measured.device)[pairs.prompt_index], measured, gaps)
        pairs, dropped = drop_close_pairs(pairs, order, p.min_gap, gaps=gaps)
        soft = bool(getattr(constructor, "soft_labels", False))
        pairs = confidence_weighted(pairs, batch, soft)
        # soft labels (winrate): the pair weight is the probability that chosen wins; else it weighs the pair
        labels = pairs.weight if soft else torch.full((len(pairs),), 1.0 - p.label_smoothing)
        weights = torch.ones(len(pairs)) if soft else pairs.weight
        metrics = {"pairs/built": float(built), "pairs/used": float(len(pairs)), "pairs/dropped_by_gap": dropped,
                   "ordering/lexicographic": lexicographic_share, **prompt_conflict_metrics(group_rates, over)}
        if soft and len(pairs):  # how sure the soft labels are: 1 is a hard pair, 0.5 no information
            metrics["pairs/label_mean"] = float(labels.double().mean())
        if len(pairs):
            for name, share in zip(batch.rubric.dimension_names, chosen_win_share(pairs, batch).tolist(), strict=True):
                metrics[f"pairs/chosen_wins/{name}"] = share
        return PairTargets(pairs, labels.float(), weights.float()), metrics

    def check_rubric(self, rubric: Rubric) -> None:
        """``rlkit validate``: every name in ``conflict_dimensions`` is a dimension of the rubric the scores follow."""
        known = rubric.dimension_names
        unknown = [n for n in self.params.conflict_dimensions if n not in known]
        if unknown:
            raise ConfigError(f"no dimension {', '.join(map(repr, unknown))} in rubric {rubric.name} "
                              f"(dimensions: {', '.join(known)})", "objective.params.conflict_dimensions")

    def conflict_scores(self, batch: RewardBatch) -> torch.Tensor:
        """The normalised scores conflicts are counted on: ``conflict_dimensions``' columns, or every dimension."""
        names = self.params.conflict_dimensions
        if not names:
            return batch.scores
        self.check_rubric(batch.rubric)
        return batch.scores[..., [batch.rubric.dimension_names.index(n) for n in names]]

    def loss(self, inputs: PairLossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        p = self.params
        loss, metrics = preference_loss(
            inputs.chosen_logp, inputs.rejected_logp, inputs.ref_chosen_logp, inputs.ref_rejected_logp,
            loss_type=p.loss_type, beta=p.beta, labels=inputs.labels, weights=inputs.weights,
            chosen_lengths=inputs.chosen_lengths, rejected_lengths=inputs.rejected_lengths, simpo_gamma=p.simpo_gamma)
        if p.sft_weight > 0:
            loss = loss + p.sft_weight * sft_loss(inputs.chosen_logp, inputs.chosen_lengths, inputs.weights)
        return loss, metrics

    def state_dict(self) -> dict[str, Any]:
        return {"lexicographic": self.lexicographic_ordering, "recent_conflicts": list(self.watch.recent),
                "flagged": self.watch.raised}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lexicographic_ordering = bool(state["lexicographic"])
        self.watch.recent.extend(state["recent_conflicts"])
        self.watch.raised = bool(state["flagged"])


@hookimpl
def rlkit_register_objectives(register):
    register("group_dpo", GroupDpoObjective)
