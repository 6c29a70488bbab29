"""The reference policy the KL term is measured against.

``model.reference`` picks one: ``frozen`` (a frozen copy of the initial policy), ``ema``, ``adapter_off`` (the
LoRA policy with its adapters disabled: the base model, no second copy in memory), ``engine`` (the reference model
the inference engine serves, scored there: no copy and no pass on the trainer) or ``none``. With LoRA,
``frozen`` is served by ``adapter_off``, which is the same model at a fraction of the memory. ``ema``
is a copy that follows the policy slowly (``model.ema_decay``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any, Protocol

import torch

from rlkit.lm.sampling import SampledBatch, demonstration_batch, sequence_log_probs


class ReferencePolicy(Protocol):
    def log_probs(self, policy: Any, sampled: SampledBatch) -> torch.Tensor:
        """Per-token log-probs ``[N, C]`` of the sampled completions under the reference."""

    def on_optimizer_step(self, policy: Any) -> None:
        """Called after every optimiser step (an EMA reference updates here)."""


class FrozenCopyReference(torch.nn.Module):
    """A frozen deep copy of the policy taken before training. A submodule of the LightningModule, so it
    follows the policy's device and precision and is part of the checkpoint."""

    def __init__(self, policy: Any) -> None:
        super().__init__()
        self.model = copy.deepcopy(policy).requires_grad_(False)
        self.eval()

    def log_probs(self, policy: Any, sampled: SampledBatch) -> torch.Tensor:
        return sequence_log_probs(self.model, sampled)

    def on_optimizer_step(self, policy: Any) -> None:
        pass

    def train(self, mode: bool = True) -> FrozenCopyReference:
        # Lightning switches the whole LightningModule to train mode; the reference stays in eval (no dropout).
        return super().train(False)


class AdapterOffReference:
    """The base model under a peft policy: the same forward with every adapter disabled."""

    def log_probs(self, policy: Any, sampled: SampledBatch) -> torch.Tensor:
        was_training = policy.training
        policy.eval()  # no adapter dropout either way; the base model's own dropout off as for a frozen copy
        try:
            with policy.disable_adapter():
                return sequence_log_probs(policy, sampled)
        finally:
            policy.train(was_training)

    def on_optimizer_step(self, policy: Any) -> None:
        pass


class EmaReference(FrozenCopyReference):
    """A copy of the policy that follows it slowly: after every optimiser step
    ``ref ← decay·ref + (1 − decay)·policy`` (parameters and floating buffers). Part of the checkpoint,
    so a resumed run continues from the same reference."""

    def __init__(self, policy: Any, decay: float) -> None:
        super().__init__(policy)
        self.decay = decay

    @torch.no_grad()
    def on_optimizer_step(self, policy: Any) -> None:
        for ref, live in zip(self.model.parameters(), policy.parameters(), strict=True):
            ref.lerp_(live.detach().to(ref.dtype), 1.0 - self.decay)
        for ref, live in zip(self.model.buffers(), policy.buffers(), strict=True):
            if ref.is_floating_point():
                ref.lerp_(live.to(ref.dtype), 1.0 - self.decay)


class EngineReference:
    """The reference model an inference engine serves beside the policy it samples, scored there: the generator's
    ``score_reference(sampled)`` returns a pending result. ``request`` lets the loop ask before the policy's own
    pass and read the answer after it, so the engine's pass overlaps the trainer's; a batch the generator read from
    the engine was asked for already, when it was read."""

    def __init__(self, generator: Any) -> None:
        self.generator = generator

    def request(self, sampled: SampledBatch) -> Any:
        return self.generator.score_reference(sampled)

    def log_probs(self, policy: Any, sampled: SampledBatch) -> torch.Tensor:
        return self.request(sampled).result()

    def on_optimizer_step(self, policy: Any) -> None:
        pass


REFERENCE_KINDS = ("frozen", "adapter_off", "ema", "engine", "none")


def build_reference(kind: str, policy: Any, *, uses_lora: bool, needed: bool,
                    ema_decay: float = 0.99, generator: Any = None) -> ReferencePolicy | None:
    """The reference for ``model.reference=kind``; None when the objective needs none."""
    if not needed or kind == "none":
        return None
    if kind == "engine":
        return EngineReference(generator)
    if kind == "ema":
        return EmaReference(policy, ema_decay)
    if kind == "adapter_off" or (kind == "frozen" and uses_lora):
        return AdapterOffReference()
    if kind == "frozen":
        return FrozenCopyReference(policy)
    raise ValueError(f"unknown reference {kind!r}; expected one of {', '.join(REFERENCE_KINDS)}")


@torch.no_grad()
def mean_log_probs_of_texts(policy: Any, reference: ReferencePolicy | None, tokenizer: Any,
                            records: Sequence[dict[str, Any]], texts: Sequence[Sequence[str]],
                            max_new_tokens: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Each text of ``texts [N][G]`` as record ``i``'s completion (prompt tokenised as for sampling, EOS after the
    text, cut at ``max_new_tokens``): its mean per-token log-prob ``float32 [N, G]`` under ``policy`` and under
    ``reference`` (None without one). Dropout off for the pass, the policy's mode restored after."""
    from rlkit.lm.logprobs import sequence_logp_sums

    sizes = [len(group) for group in texts]
    if len(set(sizes)) > 1:
        raise ValueError(f"every record needs the same number of texts, got {sizes}")
    flat = [{**record, "completion": text} for record, group in zip(records, texts, strict=True) for text in group]
    device = next(policy.parameters()).device
    batch = demonstration_batch(tokenizer, flat, max_new_tokens, device)
    was_training = policy.training
    policy.eval()
    try:
        mask = batch.completion_mask
        sums, lengths = sequence_logp_sums(sequence_log_probs(policy, batch), mask)
        on_policy = (sums / lengths.clamp(min=1)).float().cpu().view(len(records), sizes[0] if sizes else 0)
        if reference is None:
            return on_policy, None
        sums, lengths = sequence_logp_sums(reference.log_probs(policy, batch), mask)
        return on_policy, (sums / lengths.clamp(min=1)).float().cpu().view_as(on_policy)
    finally:
        policy.train(was_training)
