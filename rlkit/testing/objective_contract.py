"""The contract suite for objective plugins: subclass it and provide an ``objective`` fixture.

It builds the inputs the training loop would hand the objective (``rlkit.plugin.CompletionLossInputs`` or
``PairLossInputs``, by the objective's ``signal``) from seeded random tensors, and checks what the loop relies on:
a finite scalar loss and detached scalar metrics; zero loss (and gradient) on zero advantages for a policy-gradient
objective, zero gradient on identical pairs for a preference one, or on no demonstration tokens for a supervised
one; gradient through the policy's log-probs only; and padding positions that cannot change the loss.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from rlkit.core.objective import SIGNALS, CompletionLossInputs, PairLossInputs


def example_completion_inputs(n: int = 6, c: int = 5, seed: int = 0, *, zero_advantages: bool = False,
                              reference: bool = True) -> CompletionLossInputs:
    """``n`` completions of up to ``c`` tokens; ``logp`` requires grad, the old and reference log-probs are
    nearby constants, the mask cuts rows at different lengths."""
    gen = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(n, c, generator=gen) * 3).requires_grad_(True)
    old = logp.detach() + 0.05 * torch.randn(n, c, generator=gen)
    ref = logp.detach() + 0.1 * torch.randn(n, c, generator=gen) if reference else None
    lengths = torch.randint(1, c + 1, (n,), generator=gen)
    mask = (torch.arange(c).expand(n, -1) < lengths.unsqueeze(1)).float()
    advantages = torch.zeros(n) if zero_advantages else torch.randn(n, generator=gen)
    group_size = 2 if n % 2 == 0 else 1  # groups of consecutive rows, as the loop hands them
    group_tokens = mask.sum(-1).reshape(-1, group_size).sum(-1).repeat_interleave(group_size)
    return CompletionLossInputs(logp=logp, old_logp=old, ref_logp=ref, advantages=advantages, mask=mask,
                                num_sequences=n, num_tokens=float(mask.sum()), max_completion_length=c,
                                group_tokens=group_tokens, num_groups=n // group_size)


def example_pair_inputs(p: int = 5, seed: int = 0, *, identical: bool = False,
                        reference: bool = True) -> PairLossInputs:
    """``p`` pairs of summed log-probs (the policy's require grad); ``identical`` makes each pair's chosen and
    rejected the same completion (one tensor on both sides, the same lengths and reference)."""
    gen = torch.Generator().manual_seed(seed)
    chosen = (-torch.rand(p, generator=gen) * 20).requires_grad_(True)
    rejected = chosen if identical else (-torch.rand(p, generator=gen) * 20).requires_grad_(True)
    ref_c = chosen.detach() + torch.randn(p, generator=gen) if reference else None
    ref_r = (ref_c if identical else rejected.detach() + torch.randn(p, generator=gen)) if reference else None
    len_c = torch.randint(1, 9, (p,), generator=gen).float()
    len_r = len_c if identical else torch.randint(1, 9, (p,), generator=gen).float()
    return PairLossInputs(chosen_logp=chosen, rejected_logp=rejected, ref_chosen_logp=ref_c,
                          ref_rejected_logp=ref_r, chosen_lengths=len_c, rejected_lengths=len_r,
                          labels=torch.ones(p), weights=torch.rand(p, generator=gen) + 0.5)


def _policy_tensors(inputs: Any) -> list[torch.Tensor]:
    if isinstance(inputs, CompletionLossInputs):
        return [inputs.logp]
    return [inputs.chosen_logp] if inputs.rejected_logp is inputs.chosen_logp else [inputs.chosen_logp,
                                                                                     inputs.rejected_logp]


class ObjectiveContract:
    """What the training loop relies on from an objective. Provide ``objective``."""

    @pytest.fixture
    def objective(self) -> Any:  # pragma: no cover - supplied by the subclass
        raise NotImplementedError("provide an `objective` fixture")

    def _inputs(self, objective: Any, **kw: Any) -> Any:
        reference = objective.reference_use is not None
        if objective.signal in ("advantages", "demonstrations"):
            return example_completion_inputs(reference=reference, **kw)
        return example_pair_inputs(reference=reference, **kw)

    def test_declares_what_it_needs(self, objective: Any) -> None:
        assert objective.signal in SIGNALS
        assert isinstance(objective.num_iterations, int) and objective.num_iterations >= 1
        assert isinstance(objective.needs_old_logprobs, bool)
        assert isinstance(objective.mask_truncated_completions, bool)
        assert objective.reference_use is None or (isinstance(objective.reference_use, str) and objective.reference_use)
        if objective.signal == "pairs":
            assert callable(getattr(objective, "pair_targets", None))

    def test_scalar_loss_and_detached_scalar_metrics(self, objective: Any) -> None:
        loss, metrics = objective.loss(self._inputs(objective))
        assert loss.dim() == 0 and torch.isfinite(loss) and loss.requires_grad
        for key, value in metrics.items():
            value = torch.as_tensor(value)
            assert isinstance(key, str) and value.dim() == 0 and not value.requires_grad
            assert torch.isfinite(value), key

    def test_nothing_to_learn_gives_no_gradient(self, objective: Any) -> None:
        if objective.signal == "demonstrations":
            # no demonstration tokens: nothing to imitate
            inputs = example_completion_inputs(reference=objective.reference_use is not None)
            inputs.mask = torch.zeros_like(inputs.mask)
            inputs.num_tokens = 0.0
            loss, _ = objective.loss(inputs)
            assert abs(float(loss.detach())) < 1e-6
        elif objective.signal == "advantages":
            inputs = example_completion_inputs(zero_advantages=True, reference=objective.reference_use is not None)
            # on-policy and at the reference: zero advantages leave nothing to move towards
            inputs.old_logp = inputs.logp.detach()
            if inputs.ref_logp is not None:
                inputs.ref_logp = inputs.logp.detach().clone()
            loss, _ = objective.loss(inputs)
            assert abs(float(loss.detach())) < 1e-6
        else:
            inputs = example_pair_inputs(identical=True, reference=objective.reference_use is not None)
            loss, _ = objective.loss(inputs)
        loss.backward()
        for tensor in _policy_tensors(inputs):
            assert tensor.grad is None or torch.allclose(tensor.grad, torch.zeros_like(tensor.grad), atol=1e-6)

    def test_gradient_flows_only_through_the_policy_log_probs(self, objective: Any) -> None:
        inputs = self._inputs(objective)
        constants = []
        for name, value in vars(inputs).items():
            if isinstance(value, torch.Tensor) and value.is_floating_point() and not value.requires_grad \
                    and name not in ("mask", "chosen_lengths", "rejected_lengths", "labels", "weights"):
                value.requires_grad_(True)
                constants.append(value)
        loss, _ = objective.loss(inputs)
        loss.backward()
        assert any(t.grad is not None and bool(t.grad.abs().sum() > 0) for t in _policy_tensors(inputs))
        for tensor in constants:
            assert tensor.grad is None or not bool(tensor.grad.abs().sum() > 0)

    def test_padding_positions_do_not_matter(self, objective: Any) -> None:
        if objective.signal == "pairs":
            pytest.skip("pair objectives see summed log-probs: the loop has already masked them")
        inputs = self._inputs(objective)
        loss, _ = objective.loss(inputs)
        pad = inputs.mask == 0
        noisy = CompletionLossInputs(**{**vars(inputs), "logp": torch.where(pad, float("nan"), inputs.logp.detach())
                                        .requires_grad_(True),
                                        "old_logp": torch.where(pad, float("inf"), inputs.old_logp)})
        noisy_loss, _ = objective.loss(noisy)
        assert torch.allclose(loss, noisy_loss)
        noisy_loss.backward()
        assert torch.isfinite(noisy.logp.grad).all() and bool((noisy.logp.grad[pad] == 0).all())
