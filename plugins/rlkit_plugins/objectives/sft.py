"""``sft``: supervised fine-tuning on demonstrations, the warm start before RL (``rlkit sft`` or
``rlkit fit objective=sft``).

The loop hands it the records' own completions (a record's ``completion``, TRL's prompt-completion field, or
its ``reference``) tokenised after the prompt and ended with EOS, instead of sampled ones; the loss is their
negative log-likelihood with the prompt masked out, averaged over the step's completion tokens (TRL's
``SFTTrainer`` with ``completion_only_loss``, its default for prompt-completion data). No reference model, no
advantages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pydantic

from rlkit.plugin import CompletionLossInputs, hookimpl, masked_nll

if TYPE_CHECKING:
    import torch


class SupervisedObjective:
    """Learns from demonstrations with :func:`masked_nll`."""

    signal = "demonstrations"
    needs_old_logprobs = False
    reference_use = None  # nothing to stay close to: the demonstrations are the target

    class Params(pydantic.BaseModel):
        model_config = pydantic.ConfigDict(extra="forbid")

        num_iterations: int = pydantic.Field(default=1, ge=1)
        """Optimiser steps per batch of demonstrations."""
        mask_truncated_completions: bool = False
        """Leave out demonstrations cut at max_completion_length (they have no EOS to learn)."""

    def __init__(self, params: Params) -> None:
        self.params = params
        self.num_iterations = params.num_iterations
        self.mask_truncated_completions = params.mask_truncated_completions

    def loss(self, inputs: CompletionLossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        import torch
        loss = masked_nll(inputs.logp, inputs.mask, inputs.num_tokens)
        tokens = inputs.mask.sum().clamp(min=1.0)
        mean_logp = torch.where(inputs.mask > 0, inputs.logp, torch.zeros_like(inputs.logp)).sum() / tokens
        return loss, {"sft/token_nll": -mean_logp.detach()}


@hookimpl
def rlkit_register_objectives(register):
    register("sft", SupervisedObjective)
