"""``policy_gradient``: the clipped policy-gradient (GRPO-family) objective with a KL term to the reference.

Follows TRL's ``GRPOTrainer._compute_loss`` (loss types grpo, bnpo, dr_grpo, dapo, cispo; asymmetric
``epsilon_low``/``epsilon_high``; ``importance_sampling_level``; clip-ratio metrics), DeepSeekMath's GRPO
(arXiv 2402.03300) for the k3 KL estimator, Dr. GRPO (arXiv 2503.20783) and DAPO (arXiv 2503.14476) for the
normalisations, GSPO (arXiv 2507.18071) for the sequence-level ratio and CISPO (MiniMax-M1, arXiv 2506.13585) for the
clipped importance-weight surrogate.

* ``importance_sampling_level: sequence`` (GSPO): one ratio per completion, the geometric mean of its tokens' ratios,
  ``s_i = exp(mean_t(log π_θ - log π_old))``, clipped as a whole; GSPO's paper clips it at ``epsilon`` 3e-4 /
  ``epsilon_high`` 4e-4 (TRL's GSPO recipe). Only with ``loss_type: grpo``: a token-summed loss weighs each
  completion's one ratio by its length (TRL PR #6042 warns of it; here it is refused).
* ``loss_type: cispo``: ``-sg(min(r, 1 + epsilon_high)) · A · log π_θ`` per token, normalised like ``dapo`` (every
  token of the step weighs the same). The weight is clipped, not the gradient: a token PPO's clip would silence
  still trains, its step bounded. TRL caps ``r`` at ``epsilon_high`` itself; here the cap is ``1 + epsilon_high``,
  as every other clip in rlkit, so TRL's ``epsilon_high=5.0`` is ``epsilon_high: 4.0`` here.
* ``loss_type: prompt_mean`` (SkyRL): each group's token mean, then the mean over the step's groups; a group of
  long completions weighs as much as one of short ones (``dapo`` weighs each token the same, ``grpo`` each
  completion).
* ``entropy_coef``: an entropy bonus, ``-coef · H`` per token normalised as the rest of the loss (veRL's
  ``entropy_coeff``), against entropy collapse; the loop then computes each pass's entropy with its gradient.
* ``top_entropy_quantile``: the policy-gradient term of the highest-entropy tokens only (the 80/20 paper, arXiv
  2506.01939, trains on the top 20%: 0.2; TRL's ``top_entropy_quantile``); the loop hands the mask
  (``CompletionLossInputs.entropy_mask``), the step's quantile under the policy that sampled.
* ``kl.estimator``: Schulman's estimators of ``KL(π_θ || π_ref)`` per token with ``d = log π_θ - log π_ref``:
  ``k1 = d`` (veRL ``kl``, unbiased, can be negative), ``k2 = d² / 2`` (veRL ``mse``), ``k3 = exp(-d) + d - 1``
  (veRL ``low_var_kl``, TRL's and DeepSeekMath's; the default).
* ``kl.where``: ``loss`` (``β·KL`` per token in the loss) or ``reward`` (``β·Σ_t KL_t`` off each completion's
  reward before the advantages: veRL's ``use_kl_in_reward``, whose ``kl_penalty`` defaults to ``kl``, k1).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

import pydantic

from rlkit.plugin import CompletionLossInputs, hookimpl

if TYPE_CHECKING:
    import torch

LossType = Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "token_sum", "prompt_mean"]
ImportanceSamplingLevel = Literal["token", "sequence"]
KlEstimator = Literal["k1", "k2", "k3"]
LOSS_TYPES = get_args(LossType)


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_θ || π_ref): ``exp(ref - logp) - (ref - logp) - 1`` (≥ 0)."""
    # DeepSeekMath arXiv 2402.03300 eq. (4) (Schulman's k3): unbiased and always non-negative, unlike log(p/q).
    import torch
    diff = ref_logp - logp
    return torch.exp(diff) - diff - 1


# Schulman's estimators of KL(π_θ || π_ref) per token, by name (the module docstring says which is veRL's which)
KL_ESTIMATORS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "k1": lambda logp, ref_logp: logp - ref_logp,
    "k2": lambda logp, ref_logp: 0.5 * (logp - ref_logp) ** 2,
    "k3": k3_kl,
}


def kl_estimate(logp: torch.Tensor, ref_logp: torch.Tensor, estimator: KlEstimator = "k3") -> torch.Tensor:
    """Per-token estimate of KL(π_θ || π_ref) by ``estimator`` (see the module docstring)."""
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator must be k1, k2 or k3, got {estimator!r}")
    return KL_ESTIMATORS[estimator](logp, ref_logp)


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    # clamp(min=1) as in TRL so an all-empty batch reports 0 instead of NaN.
    return (x * mask).sum() / mask.sum().clamp(min=1.0)


@dataclass(frozen=True)
class Surrogate:
    """How one loss type turns the ratio and the advantage into each token's loss, and which tokens its clip
    silenced (``clipped(ratio, adv)`` → the low and the high side, for TRL's clip metrics)."""

    per_token: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float, float], torch.Tensor]
    clipped: Callable[[torch.Tensor, torch.Tensor, float, float], tuple[torch.Tensor, torch.Tensor]]


def _ppo_surrogate(ratio, adv, logp, eps_low, eps_high):
    # TRL _compute_loss: coef_1 = exp(logp - old), coef_2 = clamp(coef_1, 1 - eps_low, 1 + eps_high),
    # per_token_loss = -min(coef_1 * A, coef_2 * A) (PPO surrogate as used by GRPO, arXiv 2402.03300 eq. 3).
    import torch
    return -torch.min(ratio * adv, torch.clamp(ratio, 1 - eps_low, 1 + eps_high) * adv)


def _ppo_clipped(ratio, adv, eps_low, eps_high):
    # TRL clip metrics: a token counts as clipped only where the clamp actually removed its gradient.
    return (ratio < 1 - eps_low) & (adv < 0), (ratio > 1 + eps_high) & (adv > 0)


def _cispo_surrogate(ratio, adv, logp, eps_low, eps_high):
    # CISPO arXiv 2506.13585 eq. (4): the importance weight clipped and detached, the gradient through log π_θ
    import torch
    return -torch.clamp(ratio, max=1 + eps_high).detach() * adv * logp


def _cispo_clipped(ratio, adv, eps_low, eps_high):
    import torch
    return torch.zeros_like(ratio, dtype=torch.bool), ratio > 1 + eps_high  # capped above, whatever A's sign


@dataclass(frozen=True)
class LossTerms:
    """One call's masked per-token losses ``[N, T]`` and what a normaliser may divide them by (``n_seq`` and
    ``n_tok`` are the whole rollout's under gradient accumulation)."""

    per_token: torch.Tensor
    mask: torch.Tensor
    n_seq: int
    n_tok: torch.Tensor
    max_completion_length: int | None
    group_tokens: torch.Tensor | None
    num_groups: int | None


def _reduce_per_sequence(t: LossTerms) -> torch.Tensor:
    # TRL / DeepSeekMath: mean over each sequence's tokens, then over sequences. clamp(min=1) keeps an
    # all-masked row at 0 (it still counts in N, as in TRL).
    return (t.per_token.sum(-1) / t.mask.sum(-1).clamp(min=1.0)).sum() / t.n_seq


def _reduce_token_sum(t: LossTerms) -> torch.Tensor:
    # veRL's loss_agg_mode token-sum (PR #7197): no normaliser at all, so the gradient's scale grows with the
    # step's tokens; pair it with a learning rate chosen for that scale
    return t.per_token.sum()


def _reduce_prompt_mean(t: LossTerms) -> torch.Tensor:
    # SkyRL's loss_reduction prompt_mean (skyrl ppo_utils apply_loss_reduction_to_advantages_minibatch): a token
    # mean within each prompt's group, then a mean over the groups, so every prompt weighs the same whatever
    # its completions' lengths
    return (t.per_token.sum(-1) / t.group_tokens.detach().to(t.per_token.dtype).clamp(min=1.0)).sum() / t.num_groups


def _reduce_constant(t: LossTerms) -> torch.Tensor:
    # Dr. GRPO arXiv 2503.20783: a constant denominator removes the length bias of per-sequence means.
    return t.per_token.sum() / (t.n_seq * t.max_completion_length)


def _reduce_per_token(t: LossTerms) -> torch.Tensor:
    # bnpo, and DAPO's token-level loss (arXiv 2503.14476 §3.3): every token in the batch weighs the
    # same. TRL's dapo divides by the token count of the whole accumulated batch, as num_tokens does here;
    # TRL normalises cispo the same way.
    return t.per_token.sum() / t.n_tok.clamp(min=1.0)


# One row per loss type: its surrogate and what divides the summed token losses; a new loss type is a new row
# (and a LossType name).
PPO, CISPO = Surrogate(_ppo_surrogate, _ppo_clipped), Surrogate(_cispo_surrogate, _cispo_clipped)
LOSS_TABLE: dict[str, tuple[Surrogate, Callable[[LossTerms], torch.Tensor]]] = {
    "grpo": (PPO, _reduce_per_sequence),
    "dr_grpo": (PPO, _reduce_constant),
    "dapo": (PPO, _reduce_per_token),
    "bnpo": (PPO, _reduce_per_token),
    "cispo": (CISPO, _reduce_per_token),
    "token_sum": (PPO, _reduce_token_sum),
    "prompt_mean": (PPO, _reduce_prompt_mean),
}


def _check_arguments(beta, ref_logp, loss_type, max_completion_length, entropy_coef, entropy, group_tokens,
                     num_groups, importance_sampling_level) -> None:
    if beta > 0 and ref_logp is None:
        raise ValueError("beta > 0 needs ref_logp (the reference model's token log-probs)")
    if loss_type == "dr_grpo" and max_completion_length is None:
        raise ValueError("loss_type 'dr_grpo' needs max_completion_length")
    if entropy_coef and entropy is None:
        raise ValueError("entropy_coef > 0 needs the policy's per-token entropy (with its gradient)")
    if loss_type == "prompt_mean" and (group_tokens is None or num_groups is None):
        raise ValueError("loss_type 'prompt_mean' needs group_tokens (each completion's group's token count) and "
                         "num_groups")
    if loss_type not in LOSS_TABLE:
        raise ValueError(f"loss_type must be one of {', '.join(LOSS_TYPES)}, got {loss_type!r}")
    if importance_sampling_level not in ("token", "sequence"):
        raise ValueError(f"importance_sampling_level must be token or sequence, got {importance_sampling_level!r}")


def _log_ratio(logp, old_logp, mask, importance_sampling_level):
    log_ratio = logp - old_logp
    if importance_sampling_level == "sequence":
        # GSPO arXiv 2507.18071 eq. (7): s_i = (π_θ(y_i|x) / π_old(y_i|x))^(1/|y_i|), one ratio [N, 1] per completion
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    return log_ratio


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
    importance_sampling_level: ImportanceSamplingLevel = "token",
    kl_estimator: KlEstimator = "k3",
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    group_tokens: torch.Tensor | None = None,
    num_groups: int | None = None,
    entropy_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Clipped-surrogate GRPO loss over ``[N, T]`` token log-probs; returns ``(loss, detached metrics)``.

    For gradient accumulation over micro-batches of one rollout, pass the whole rollout's
    ``num_sequences`` and ``num_tokens`` (masked tokens): the micro-batch losses then sum to the loss of
    the whole rollout, for every ``loss_type``. By default both are this call's own. ``prompt_mean`` needs
    ``group_tokens`` (``[N]``: the masked tokens of each completion's whole group) and ``num_groups`` (the step's).
    The loss type picks its surrogate and its normaliser from :data:`LOSS_TABLE`.
    """
    import torch
    _check_arguments(beta, ref_logp, loss_type, max_completion_length, entropy_coef, entropy, group_tokens,
                     num_groups, importance_sampling_level)
    surrogate, reduce = LOSS_TABLE[loss_type]
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

    ratio = torch.exp(_log_ratio(logp, old_logp, mask, importance_sampling_level))
    per_token_loss = surrogate.per_token(ratio, adv, logp, eps_low, eps_high)
    per_token_loss = per_token_loss.expand_as(logp)  # a sequence-level ratio's [N, 1] over every token
    if entropy_mask is not None:
        # TRL: the surrogate of the high-entropy tokens only, before the engine weights and the KL term; the
        # normaliser still counts every token
        per_token_loss = per_token_loss * torch.where(keep, entropy_mask.detach().to(logp.dtype), 0.0)
    if sampling_weights is not None:
        # TRL: the engine's importance-sampling weight multiplies the surrogate, before the KL term is added
        per_token_loss = per_token_loss * torch.where(keep, sampling_weights.detach().to(logp.dtype), 0.0)
    kl = None
    if beta > 0 and ref_logp is not None:
        kl = kl_estimate(logp, torch.where(keep, ref_logp.detach(), 0.0), kl_estimator)
        per_token_loss = per_token_loss + beta * kl
    if entropy_coef:
        # veRL's entropy_coeff: -coef · H per token, normalised as the rest of the loss, so a higher-entropy policy
        # lowers the loss
        per_token_loss = per_token_loss - entropy_coef * torch.where(keep, entropy, 0.0)
    per_token_loss = per_token_loss * mask

    n_seq = per_token_loss.size(0) if num_sequences is None else num_sequences
    n_tok = mask.sum() if num_tokens is None else torch.as_tensor(num_tokens, dtype=logp.dtype)
    loss = reduce(LossTerms(per_token_loss, mask, n_seq, n_tok, max_completion_length, group_tokens, num_groups))

    with torch.no_grad():
        low, high = (side.expand_as(logp).to(logp.dtype) for side in surrogate.clipped(ratio, adv, eps_low, eps_high))
        metrics = {
            "kl": _masked_mean(kl, mask) if kl is not None else logp.new_zeros(()),
            "clip_ratio/low": _masked_mean(low, mask),
            "clip_ratio/high": _masked_mean(high, mask),
            "clip_ratio": _masked_mean(torch.maximum(low, high), mask),
            "ratio_mean": _masked_mean(ratio.expand_as(logp), mask),
        }
    return loss, {k: v.detach() for k, v in metrics.items()}


class KlSettings(pydantic.BaseModel):
    """``estimator``: which of Schulman's estimators of KL(π_θ || π_ref); ``where``: ``loss`` adds ``β·KL`` to each
    token's loss (TRL, DeepSeekMath), ``reward`` subtracts ``β·Σ_t KL_t`` of the sampled completion from its reward
    before the advantages are formed (veRL ``algorithm.use_kl_in_reward``, InstructGPT's KL-shaped reward)."""

    model_config = pydantic.ConfigDict(extra="forbid")
    estimator: KlEstimator = "k3"
    where: Literal["loss", "reward"] = "loss"


def kl_reward_penalty(logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, beta: float,
                      estimator: KlEstimator = "k3") -> torch.Tensor:
    """``[N]``: ``β·Σ_t KL_t`` over each completion's masked tokens, the sampling policy's log-probs ``logp`` against
    the reference's; veRL's ``apply_kl_penalty`` subtracts ``β·KL_t`` from each token's reward, which an outcome
    estimator sums over the completion."""
    import torch
    keep = mask > 0
    kl = kl_estimate(torch.where(keep, logp.detach(), 0.0), torch.where(keep, ref_logp.detach(), 0.0), estimator)
    return beta * (kl * keep.to(kl.dtype)).sum(-1)


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
        importance_sampling_level: ImportanceSamplingLevel = "token"
        kl: KlSettings = pydantic.Field(default_factory=KlSettings)
        entropy_coef: float = pydantic.Field(default=0.0, ge=0)
        top_entropy_quantile: float = pydantic.Field(default=1.0, gt=0, le=1)
        mask_truncated_completions: bool = False

        @pydantic.model_validator(mode="after")
        def _sound(self) -> PolicyGradientObjective.Params:
            if self.importance_sampling_level == "sequence" and self.loss_type != "grpo":
                raise ValueError(f"importance_sampling_level: sequence (GSPO) needs loss_type: grpo; {self.loss_type} "
                                 "sums tokens, which weighs each completion's one ratio by its length (TRL PR #6042)")
            return self

    def __init__(self, params: Params) -> None:
        self.params = params
        self.num_iterations = params.num_iterations
        self.mask_truncated_completions = params.mask_truncated_completions
        self.top_entropy_quantile = params.top_entropy_quantile

    @property
    def needs_old_logprobs(self) -> bool:
        return self.num_iterations > 1

    @property
    def needs_entropy(self) -> bool:
        """An entropy bonus needs every pass's per-token entropy, with its gradient."""
        return self.params.entropy_coef > 0

    @property
    def kl_in_reward(self) -> bool:
        """The KL term penalises each completion's reward (the loop asks :meth:`reward_penalty` before forming the
        advantages) instead of joining the loss."""
        return self.params.beta > 0 and self.params.kl.where == "reward"

    def reward_penalty(self, logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[N]``: what :attr:`kl_in_reward` subtracts from each completion's reward (:func:`kl_reward_penalty`)."""
        return kl_reward_penalty(logp, ref_logp, mask, self.params.beta, self.params.kl.estimator)

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
            beta=p.beta if inputs.ref_logp is not None and not self.kl_in_reward else 0.0, epsilon=p.epsilon,
            epsilon_high=p.epsilon_high,
            loss_type=p.loss_type, max_completion_length=inputs.max_completion_length,
            num_sequences=inputs.num_sequences, num_tokens=inputs.num_tokens, sampling_weights=inputs.sampling_weights,
            importance_sampling_level=p.importance_sampling_level, kl_estimator=p.kl.estimator,
            entropy=inputs.entropy, entropy_coef=p.entropy_coef, group_tokens=inputs.group_tokens,
            num_groups=inputs.num_groups, entropy_mask=inputs.entropy_mask)


@hookimpl
def rlkit_register_objectives(register):
    register("policy_gradient", PolicyGradientObjective)
