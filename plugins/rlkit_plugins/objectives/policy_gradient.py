"""``policy_gradient``: the clipped policy-gradient (GRPO-family) objective with a k3 KL term to the reference.

Follows TRL's ``GRPOTrainer._compute_loss`` (loss types grpo, bnpo, dr_grpo, dapo; asymmetric
``epsilon_low``/``epsilon_high``; clip-ratio metrics), DeepSeekMath's GRPO (arXiv 2402.03300) for the
k3 KL estimator, Dr. GRPO (arXiv 2503.20783) and DAPO (arXiv 2503.14476) for the normalisations.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import pydantic

from rlkit.plugin import CompletionLossInputs, hookimpl

if TYPE_CHECKING:
    import torch

LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo"]


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_θ || π_ref): ``exp(ref - logp) - (ref - logp) - 1`` (≥ 0)."""
    # DeepSeekMath arXiv 2402.03300 eq. (4) (Schulman's k3): unbiased and always non-negative, unlike log(p/q).
    import torch
    diff = ref_logp - logp
    return torch.exp(diff) - diff - 1


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # clamp(min=1) as in TRL so an all-empty batch reports 0 instead of NaN.
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


def policy_gradient_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    beta: float = 0.0,
    epsilon: float = 0.2,
    epsilon_high: float | None = None,
    loss_type: LossType = "grpo",
    max_completion_length: int | None = None,
    num_sequences: int | None = None,
    num_tokens: float | None = None,
    sampling_weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped-surrogate GRPO loss over ``[N, T]`` token log-probs; returns ``(loss, detached metrics)``.

    For gradient accumulation over micro-batches of one rollout, pass the whole rollout's
    ``num_sequences`` and ``num_tokens`` (masked tokens): the micro-batch losses then sum to the loss of
    the whole rollout, for every ``loss_type``. By default both are this call's own.
    """
    import torch
    if beta > 0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp (the reference model's token log-probs)")
    if loss_type == "dr_grpo" and max_completion_length is None:
        raise ValueError("loss_type 'dr_grpo' needs max_completion_length")
    if loss_type not in ("grpo", "dr_grpo", "dapo", "bnpo"):
        raise ValueError(f"loss_type must be grpo, dr_grpo, dapo or bnpo, got {loss_type!r}")
    eps_low = epsilon
    # DAPO arXiv 2503.14476 §3.1 "clip-higher": a separate upper bound; TRL defaults epsilon_high to epsilon.
    eps_high = epsilon if epsilon_high is None else epsilon_high
    keep = mask > 0
    mask = mask.to(logp.dtype)
    # Padding positions may hold anything (inf, NaN); zeroing the inputs there with where (not *) gives
    # ratio 1 and kl 0 in the forward pass and an exactly-zero gradient, so no inf * 0 = NaN anywhere.
    # old/ref log-probs are sampling-time constants: detaching them keeps the gradient on logp only, even
    # when the caller passes old_logp = logp on the first inner iteration (TRL uses logp.detach() there).
    logp = torch.where(keep, logp, 0.0)
    old_logp = torch.where(keep, old_logp.detach(), 0.0)
    adv = advantages.detach().to(logp.dtype)
    adv = adv.unsqueeze(1) if adv.dim() == 1 else adv  # per completion [N], or per token [N, T] (multi-turn credit)

    # TRL _compute_loss: coef_1 = exp(logp - old), coef_2 = clamp(coef_1, 1 - eps_low, 1 + eps_high),
    # per_token_loss = -min(coef_1 * A, coef_2 * A) (PPO surrogate as used by GRPO, arXiv 2402.03300 eq. 3).
    ratio = torch.exp(logp - old_logp)
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(ratio * adv, clipped * adv)
    if sampling_weights is not None:
        # TRL: the engine's importance-sampling weight multiplies the surrogate, before the KL term is added
        per_token_loss = per_token_loss * torch.where(keep, sampling_weights.detach().to(logp.dtype), 0.0)
    kl = None
    if beta > 0 and ref_logp is not None:
        kl = k3_kl(logp, torch.where(keep, ref_logp.detach(), 0.0))
        per_token_loss = per_token_loss + beta * kl
    per_token_loss = per_token_loss * mask

    n_seq = per_token_loss.size(0) if num_sequences is None else num_sequences
    n_tok = mask.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=logp.dtype)
    if loss_type == "grpo":
        # TRL / DeepSeekMath: mean over each sequence's tokens, then over sequences. clamp(min=1) keeps an
        # all-masked row at 0 (it still counts in N, as in TRL).
        loss = (per_token_loss.sum(-1) / mask.sum(-1).clamp(min=1.0)).sum() / n_seq
    elif loss_type == "dr_grpo":
        # Dr. GRPO arXiv 2503.20783: a constant denominator removes the length bias of per-sequence means.
        loss = per_token_loss.sum() / (n_seq * max_completion_length)
    else:
        # bnpo, and DAPO's token-level loss (arXiv 2503.14476 §3.3): every token in the batch weighs the
        # same. TRL's dapo divides by the token count of the whole accumulated batch, as num_tokens does here.
        loss = per_token_loss.sum() / n_tok.clamp(min=1.0)

    with torch.no_grad():
        # TRL clip metrics: a token counts as clipped only where the clamp actually removed its gradient.
        low = ((ratio < 1 - eps_low) & (adv < 0)).to(logp.dtype)
        high = ((ratio > 1 + eps_high) & (adv > 0)).to(logp.dtype)
        metrics = {
            "kl": _masked_mean(kl, mask) if kl is not None else logp.new_zeros(()),
            "clip_ratio/low": _masked_mean(low, mask),
            "clip_ratio/high": _masked_mean(high, mask),
            "clip_ratio": _masked_mean(torch.maximum(low, high), mask),
            "ratio_mean": _masked_mean(ratio, mask),
        }
    return loss, {k: v.detach() for k, v in metrics.items()}


class PolicyGradientObjective:
    """Learns from the advantage estimator's advantages with :func:`policy_gradient_loss` (TRL's GRPO defaults:
    beta 0.04, epsilon 0.2; rubric-RL practice on real models uses beta 0.01-0.05 and clips up to 0.3)."""

    signal = "advantages"

    class Params(pydantic.BaseModel):
        beta: float = pydantic.Field(default=0.04, ge=0)
        epsilon: float = pydantic.Field(default=0.2, gt=0)
        epsilon_high: float | None = None
        num_iterations: int = pydantic.Field(default=1, ge=1)
        loss_type: LossType = "grpo"
        mask_truncated_completions: bool = False

    def __init__(self, params: Params) -> None:
        self.params = params
        self.num_iterations = params.num_iterations
        self.mask_truncated_completions = params.mask_truncated_completions

    @property
    def needs_old_logprobs(self) -> bool:
        return self.num_iterations > 1

    @property
    def reference_use(self) -> str | None:
        if self.params.beta == 0:
            return None
        return (f"the KL term of objective.params.beta={self.params.beta}; set objective.params.beta=0 or a "
                "reference (frozen, adapter_off, ema)")

    def loss(self, inputs: CompletionLossInputs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        p = self.params
        return policy_gradient_loss(
            inputs.logp, inputs.old_logp, inputs.ref_logp, inputs.advantages, inputs.mask,
            beta=p.beta if inputs.ref_logp is not None else 0.0, epsilon=p.epsilon, epsilon_high=p.epsilon_high,
            loss_type=p.loss_type, max_completion_length=inputs.max_completion_length,
            num_sequences=inputs.num_sequences, num_tokens=inputs.num_tokens, sampling_weights=inputs.sampling_weights)


@hookimpl
def rlkit_register_objectives(register):
    register("policy_gradient", PolicyGradientObjective)
