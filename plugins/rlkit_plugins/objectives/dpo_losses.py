"""Pure tensor pieces of the DPO-family pairwise preference losses: DPO (sigmoid), IPO, SimPO, an SFT term.

Inputs are per-pair *summed* completion log-probs ``[P]`` (see :func:`sequence_logp_sums`) plus, where a loss
length-normalises, completion lengths in tokens ``[P]``. Formulas follow TRL's ``DPOTrainer.dpo_loss`` /
``concatenated_forward`` (trl/trainer/dpo_trainer.py) and ``CPOTrainer.cpo_loss`` (trl/trainer/cpo_trainer.py,
which hosts TRL's SimPO), and the papers: DPO (Rafailov et al. 2023, arXiv 2305.18290), IPO (Azar et al. 2023,
arXiv 2310.12036), conservative DPO / label smoothing (Mitchell 2023, "A note on DPO with noisy preferences",
ericmitchell.ai/cdpo.pdf; TRL ``label_smoothing``), SimPO (Meng et al. 2024, arXiv 2405.14734), and RPO's NLL
term (Pang et al. 2024, arXiv 2404.19733; TRL ``rpo_alpha``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    import torch

PreferenceLossType = Literal["sigmoid", "ipo", "simpo"]


def _check_pair_shapes(**tensors: torch.Tensor | None) -> None:
    shape = None
    for name, t in tensors.items():
        if t is None:
            continue
        if t.dim() != 1:
            raise ValueError(f"{name} must be 1-D [P] (one value per pair), got shape {tuple(t.shape)}")
        if shape is None:
            shape = t.shape
        elif t.shape != shape:
            raise ValueError(f"{name} has shape {tuple(t.shape)}, expected {tuple(shape)} like the other inputs")


def _pair_weights(weights: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    import torch
    if weights is None:
        return torch.ones_like(like, dtype=like.dtype).detach()
    weights = weights.detach().to(like.dtype)
    # A negative weight would silently turn "prefer chosen" into "prefer rejected" for that pair.
    if not bool(torch.isfinite(weights).all()) or bool((weights < 0).any()):
        raise ValueError("weights must be finite and non-negative")
    return weights


def _weighted_mean(per_pair: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    # Σ w·l / Σ w. A zero-weight pair is zeroed with where (not w·l) so an inf/NaN loss there cannot leak in; the
    # denominator falls back to 1 when Σ w = 0 (or P = 0), giving a zero loss that keeps its grad_fn.
    # (Not clamp(min=1): fractional weights summing below 1 must still normalise.)
    import torch
    numer = torch.where(weights > 0, weights * per_pair, 0.0).sum()
    denom = weights.sum()
    return numer / torch.where(denom > 0, denom, torch.ones_like(denom))


def _safe_mean(x: torch.Tensor) -> torch.Tensor:
    # An empty batch reports 0, not the NaN of torch.mean([]).
    return x.sum() / max(x.numel(), 1)


def _mixed_sigmoid_loss(z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    # Bernoulli cross-entropy of σ(z) against the soft target y, in logsigmoid form for stability at large |z|.
    # TRL (dpo_trainer.py / cpo_trainer.py, loss_type "sigmoid"/"simpo"):
    #   -logsigmoid(β·logits)·(1 - label_smoothing) - logsigmoid(-β·logits)·label_smoothing,
    # i.e. y = 1 - label_smoothing (cDPO, Mitchell 2023, eq. 3); y = 1 is DPO (arXiv 2305.18290, eq. 7).
    import torch.nn.functional as F
    return -(y * F.logsigmoid(z) + (1 - y) * F.logsigmoid(-z))


def preference_loss(
    policy_chosen: torch.Tensor,
    policy_rejected: torch.Tensor,
    ref_chosen: torch.Tensor | None,
    ref_rejected: torch.Tensor | None,
    *,
    loss_type: PreferenceLossType = "sigmoid",
    beta: float = 0.1,
    labels: torch.Tensor | None = None,
    weights: torch.Tensor | None = None,
    chosen_lengths: torch.Tensor | None = None,
    rejected_lengths: torch.Tensor | None = None,
    simpo_gamma: float = 0.5,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Pairwise preference loss over ``[P]`` summed completion log-probs; returns ``(loss, detached metrics)``.

    ``labels`` ``[P]`` is the (soft) probability that chosen beats rejected (default 1); ``labels = 1 - ε`` is
    TRL's ``label_smoothing = ε``. ``weights`` ``[P]`` are non-negative pair weights (default 1); the loss is
    ``Σ w_i·loss_i / Σ w_i`` (0 when ``Σ w = 0`` or ``P = 0``).

    * ``"sigmoid"`` (DPO): ``h = (π_c - ref_c) - (π_r - ref_r)``, ``z = β·h``,
      ``loss = -[y·log σ(z) + (1-y)·log σ(-z)]``. Needs the reference log-probs.
    * ``"ipo"``: as TRL, every log-prob (policy and reference) is first averaged over its completion's tokens,
      so ``chosen_lengths``/``rejected_lengths`` are required; ``loss = (h - (2y-1)/(2β))²`` (β is the IPO τ).
    * ``"simpo"``: reference-free (passing reference log-probs is an error, so a misconfigured caller is not
      silently running a different loss), length-normalised ``z = β·(π_c/len_c - π_r/len_r) - simpo_gamma``,
      same cross-entropy as ``"sigmoid"``. ``simpo_gamma`` is TRL ``CPOConfig.simpo_gamma``: the paper's target
      margin γ in units of ``z``, **not** the γ/β ratio of the SimPO repository's ``gamma_beta_ratio``
      (``simpo_gamma = beta * gamma_beta_ratio``; the paper's Llama-3 setting β = 2, γ/β = 0.5 is
      ``simpo_gamma = 1.0``).

    Metrics (TRL names, unweighted means over pairs): ``rewards/chosen`` = β·(π_c - ref_c) (IPO: on the
    token-averaged log-probs; SimPO: β·π_c/len_c), ``rewards/rejected``, ``rewards/margins``,
    ``rewards/accuracies`` (share with chosen reward > rejected reward), ``pairs`` = P.
    """
    import torch
    if loss_type not in ("sigmoid", "ipo", "simpo"):
        raise ValueError(f"loss_type must be sigmoid, ipo or simpo, got {loss_type!r}")
    if not beta > 0:
        raise ValueError(f"beta must be > 0, got {beta}")
    _check_pair_shapes(
        policy_chosen=policy_chosen, policy_rejected=policy_rejected, ref_chosen=ref_chosen,
        ref_rejected=ref_rejected, labels=labels, weights=weights, chosen_lengths=chosen_lengths,
        rejected_lengths=rejected_lengths,
    )
    if loss_type == "simpo":
        if ref_chosen is not None or ref_rejected is not None:
            raise ValueError("loss_type 'simpo' is reference-free: pass ref_chosen=ref_rejected=None")
    elif ref_chosen is None or ref_rejected is None:
        raise ValueError(f"loss_type {loss_type!r} needs ref_chosen and ref_rejected (reference log-prob sums)")
    if loss_type in ("ipo", "simpo") and (chosen_lengths is None or rejected_lengths is None):
        raise ValueError(f"loss_type {loss_type!r} length-normalises: pass chosen_lengths and rejected_lengths")

    dtype = policy_chosen.dtype
    if labels is None:
        y = torch.ones_like(policy_chosen).detach()
    else:
        y = labels.detach().to(dtype)
        if not bool(((y >= 0) & (y <= 1)).all()):
            raise ValueError("labels must be probabilities in [0, 1]")
    w = _pair_weights(weights, policy_chosen)

    pc, pr = policy_chosen, policy_rejected
    # Reference log-probs are constants of the objective: detaching keeps the gradient on the policy only.
    rc = ref_chosen.detach().to(dtype) if ref_chosen is not None else None
    rr = ref_rejected.detach().to(dtype) if ref_rejected is not None else None
    if chosen_lengths is not None and rejected_lengths is not None and loss_type in ("ipo", "simpo"):
        # clamp(min=1): an empty completion has sum 0 and mean 0 instead of 0/0.
        lc = chosen_lengths.detach().to(dtype).clamp(min=1.0)
        lr = rejected_lengths.detach().to(dtype).clamp(min=1.0)
        # TRL DPOTrainer.concatenated_forward: `if self.loss_type == "ipo": all_logps = all_logps / loss_mask.sum(-1)`,
        # and the reference goes through the same forward, so both are per-token means. CPOTrainer likewise uses
        # average_log_prob for ipo and simpo (SimPO arXiv 2405.14734: the reward is β/|y| · log π(y|x)).
        pc, pr = pc / lc, pr / lr
        if rc is not None and rr is not None:
            rc, rr = rc / lc, rr / lr

    if loss_type == "simpo":
        chosen_reward, rejected_reward = beta * pc, beta * pr
        # TRL CPOTrainer: logits = (π_c - π_r) - simpo_gamma / β; losses use β·logits, so z = β·Δ - simpo_gamma.
        # SimPO repo: logits = Δ - gamma_beta_ratio → z = β·Δ - β·gamma_beta_ratio. Same z, different knob.
        z = beta * (pc - pr) - simpo_gamma
        per_pair = _mixed_sigmoid_loss(z, y)
    else:
        assert rc is not None and rr is not None
        chosen_logratio, rejected_logratio = pc - rc, pr - rr
        chosen_reward, rejected_reward = beta * chosen_logratio, beta * rejected_logratio
        h = chosen_logratio - rejected_logratio
        # IPO arXiv 2310.12036 eq. 17 with τ = β: (h - 1/(2τ))². For a soft label y, the expectation over a
        # Bernoulli(y) preference of the symmetric per-sample IPO loss, y·(h - 1/(2β))² + (1-y)·(h + 1/(2β))²,
        # equals (h - (2y-1)/(2β))² plus a term free of h, so the target (2y-1)/(2β) gives the same gradient
        # (y = 0.5 → target 0: no preference, pull the log-ratios together). TRL's IPO ignores label_smoothing.
        ipo_target = (2 * y - 1) / (2 * beta)
        per_pair = _mixed_sigmoid_loss(beta * h, y) if loss_type == "sigmoid" else (h - ipo_target) ** 2

    loss = _weighted_mean(per_pair, w)

    with torch.no_grad():
        margins = chosen_reward - rejected_reward
        metrics = {
            "rewards/chosen": _safe_mean(chosen_reward),
            "rewards/rejected": _safe_mean(rejected_reward),
            "rewards/margins": _safe_mean(margins),
            "rewards/accuracies": _safe_mean((margins > 0).to(dtype)),
            "pairs": torch.tensor(float(policy_chosen.numel()), dtype=dtype, device=policy_chosen.device),
        }
    return loss, {k: v.detach() for k, v in metrics.items()}


def sft_loss(
    policy_chosen: torch.Tensor, chosen_lengths: torch.Tensor, weights: torch.Tensor | None = None
) -> torch.Tensor:
    """Weighted mean over pairs of ``-π_c/len_c``: the length-normalised NLL of the chosen completion."""
    # RPO (Pang et al. 2024, arXiv 2404.19733; TRL DPOConfig.rpo_alpha, CPOConfig.cpo_alpha) adds an NLL term on
    # the chosen completion so the preference loss cannot lower the chosen likelihood along with the rejected one.
    # TRL computes it as one token-level cross-entropy over all chosen tokens of the batch; this is the per-pair
    # token mean averaged over pairs, so pairs weigh the same whatever their length (equal when lengths are).
    _check_pair_shapes(policy_chosen=policy_chosen, chosen_lengths=chosen_lengths, weights=weights)
    lengths = chosen_lengths.detach().to(policy_chosen.dtype).clamp(min=1.0)
    return _weighted_mean(-policy_chosen / lengths, _pair_weights(weights, policy_chosen))
