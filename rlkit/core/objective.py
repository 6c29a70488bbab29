"""What an objective plugin is handed by the training loop: the tensors of one micro-batch, already computed.

The loop owns sampling, the log-prob passes (policy, old policy, reference), micro-batching, the DDP arithmetic and
the optimiser step. An objective declares what it needs (``signal``, ``needs_old_logprobs``, ``reference_use``) and
turns one of these into ``(loss, metrics)`` with a pure function (see the ``rlkit_register_objectives`` hookspec).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.core.types import PreferencePairs

if TYPE_CHECKING:
    import torch

SIGNALS = ("advantages", "pairs", "demonstrations")
"""What an objective learns from: per-completion advantages (from the advantage estimator), preference pairs (from
the preference constructor), or demonstrations (the records' own completions, tokenised after the prompt instead of
sampled; the loss gets :class:`CompletionLossInputs` with zero advantages)."""


@dataclass
class CompletionLossInputs:
    """One micro-batch of ``n`` completions for an objective whose ``signal`` is ``"advantages"``.

    * ``logp`` ``float32 [n, C]``: per-token log-probs of the completion tokens under the policy (with grad);
    * ``old_logp`` ``[n, C]``: the same under the policy that sampled them (no grad; ``logp.detach()`` when the
      objective asked for no old-policy pass, so the ratio is 1 in the first inner iteration);
    * ``ref_logp`` ``[n, C]`` or None: under the reference, when the objective uses one;
    * ``advantages`` ``float32 [n]``: one per completion, no NaN; or ``[n, C]``, one per token, when the estimator
      credits each turn of a multi-turn episode (its ``per_turn`` advantages spread over the turns' tokens);
    * ``mask`` ``float32 [n, C]``: 1 on completion tokens that count, 0 on padding (values there are arbitrary);
    * ``num_sequences``, ``num_tokens``: the counts of the whole step (every micro-batch and process): a loss that
      normalises by them sums over micro-batches to the one-pass loss, which is what the loop relies on;
    * ``max_completion_length``: the run's ``max_completion_length`` (Dr. GRPO's constant normaliser);
    * ``sampling_weights`` ``[n, C]`` or None: truncated importance weights for completions an inference engine
      sampled (``min(exp(old_logp - engine_logp), cap)``, 0 off the mask); an objective multiplies each token's
      policy-gradient loss by them. None when the policy sampled its own completions.
    * ``entropy`` ``[n, C]`` or None: the policy's entropy at each completion position, from the same pass as
      ``logp`` and with its gradient, for an objective that declares ``needs_entropy = True`` (an entropy bonus);
      None otherwise.
    * ``group_tokens`` ``[n]`` and ``num_groups``: the masked token count of each completion's whole group (its
      prompt's ``num_generations`` completions, over every micro-batch) and the step's number of groups over every
      process, for a loss normalised per prompt (``loss_type: prompt_mean``). The loop always passes them.
    * ``entropy_mask`` ``float [n, C]`` or None: for an objective whose ``top_entropy_quantile`` is below 1, 1 on
      the tokens whose entropy under the sampling policy is in the step's top quantile (over every process), 0
      elsewhere; the objective multiplies its policy-gradient term by it. None otherwise.
    """

    logp: torch.Tensor
    old_logp: torch.Tensor
    ref_logp: torch.Tensor | None
    advantages: torch.Tensor
    mask: torch.Tensor
    num_sequences: int
    num_tokens: float
    max_completion_length: int
    sampling_weights: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    group_tokens: torch.Tensor | None = None
    num_groups: int | None = None
    entropy_mask: torch.Tensor | None = None


@dataclass
class PairTargets:
    """The pairs an objective whose ``signal`` is ``"pairs"`` trains on this step, with a label (the probability
    that chosen beats rejected) and a weight per pair; the loop weighs micro-batches by their share of ``weights``."""

    pairs: PreferencePairs
    labels: torch.Tensor   # float32 [P]
    weights: torch.Tensor  # float32 [P], >= 0


@dataclass
class PairLossInputs:
    """One micro-batch of ``P`` pairs: summed completion log-probs (policy with grad, reference without), the
    completions' token counts, and the labels and weights of :class:`PairTargets`. The loss is a weighted mean
    over the micro-batch's pairs; the loop scales it by the micro-batch's share of the step's weight."""

    chosen_logp: torch.Tensor
    rejected_logp: torch.Tensor
    ref_chosen_logp: torch.Tensor | None
    ref_rejected_logp: torch.Tensor | None
    chosen_lengths: torch.Tensor
    rejected_lengths: torch.Tensor
    labels: torch.Tensor
    weights: torch.Tensor
