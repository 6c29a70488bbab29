"""DPO-family preference losses against values computed by hand with math."""

import math

import pytest
import torch

from rlkit.lm.logprobs import sequence_logp_sums
from rlkit_plugins.objectives.dpo_losses import preference_loss, sft_loss

LN2 = math.log(2.0)
BETA = 0.1

# Three pairs: summed log-probs of chosen/rejected under the policy and the reference.
PC = [-10.0, -20.0, -5.0]
PR = [-12.0, -18.0, -5.0]
RC = [-11.0, -19.0, -5.5]
RR = [-11.0, -19.0, -4.0]
LC = [4.0, 10.0, 2.0]
LR = [8.0, 5.0, 1.0]
# h_i = (pc - rc) - (pr - rr) = [1 - (-1), -1 - 1, 0.5 - (-1)]
H = [2.0, -2.0, 1.5]


def _log_sigmoid(x: float) -> float:
    return -math.log1p(math.exp(-x))


def _t(values, requires_grad: bool = False) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64, requires_grad=requires_grad)


def _inputs(requires_grad: bool = False):
    return _t(PC, requires_grad), _t(PR, requires_grad), _t(RC), _t(RR)


# --- sigmoid (DPO) ---------------------------------------------------------------------------------


def test_sigmoid_hand_values_equal_minus_log_sigmoid_beta_h():
    assert [(pc - rc) - (pr - rr) for pc, pr, rc, rr in zip(PC, PR, RC, RR, strict=True)] == H
    loss, _ = preference_loss(*_inputs(), beta=BETA)
    expected = sum(-_log_sigmoid(BETA * h) for h in H) / 3
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_sigmoid_soft_label_half_at_h_zero_is_log2():
    x = _t([-3.0, -7.0])
    loss, _ = preference_loss(x, x.clone(), x.clone(), x.clone(), beta=BETA, labels=_t([0.5, 0.5]))
    assert loss.item() == pytest.approx(LN2, rel=1e-12)


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_label_smoothing_equivalence_with_trl_formula(eps):
    # TRL: -logsigmoid(β·h)·(1 - ε) - logsigmoid(-β·h)·ε  ==  labels = 1 - ε
    loss, _ = preference_loss(*_inputs(), beta=BETA, labels=_t([1.0 - eps] * 3))
    expected = sum(-(1 - eps) * _log_sigmoid(BETA * h) - eps * _log_sigmoid(-BETA * h) for h in H) / 3
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_label_zero_is_swapped_pair():
    pc, pr, rc, rr = _inputs()
    flipped, _ = preference_loss(pc, pr, rc, rr, beta=BETA, labels=torch.zeros(3, dtype=torch.float64))
    swapped, _ = preference_loss(pr, pc, rr, rc, beta=BETA)
    assert flipped.item() == pytest.approx(swapped.item(), rel=1e-12)


def test_sigmoid_needs_reference():
    pc, pr, _, _ = _inputs()
    with pytest.raises(ValueError, match="ref_chosen"):
        preference_loss(pc, pr, None, None)


# --- IPO -------------------------------------------------------------------------------------------


def _ipo_h() -> list[float]:
    # TRL: policy and reference log-probs are both per-token means before the IPO loss.
    return [
        (pc / lc - rc / lc) - (pr / lr - rr / lr)
        for pc, pr, rc, rr, lc, lr in zip(PC, PR, RC, RR, LC, LR, strict=True)
    ]


def test_ipo_target_with_length_means():
    loss, _ = preference_loss(
        *_inputs(), loss_type="ipo", beta=BETA, chosen_lengths=_t(LC), rejected_lengths=_t(LR)
    )
    expected = sum((h - 1 / (2 * BETA)) ** 2 for h in _ipo_h()) / 3
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_ipo_soft_label_target():
    y = [1.0, 0.5, 0.25]
    loss, _ = preference_loss(
        *_inputs(), loss_type="ipo", beta=BETA, labels=_t(y), chosen_lengths=_t(LC), rejected_lengths=_t(LR)
    )
    expected = sum((h - (2 * yi - 1) / (2 * BETA)) ** 2 for h, yi in zip(_ipo_h(), y, strict=True)) / 3
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    # y = 0.5: target 0, so a pair with equal log-ratios has zero loss.
    x = _t([-4.0])
    zero, _ = preference_loss(x, x, x, x, loss_type="ipo", labels=_t([0.5]), chosen_lengths=_t([2.0]),
                              rejected_lengths=_t([3.0]))
    assert zero.item() == 0.0


def test_ipo_soft_label_gradient_matches_bernoulli_mixture():
    y = _t([0.8, 0.3, 0.5])
    lc, lr = _t(LC), _t(LR)
    pc, pr, rc, rr = _inputs(requires_grad=True)
    preference_loss(pc, pr, rc, rr, loss_type="ipo", beta=BETA, labels=y, chosen_lengths=lc,
                    rejected_lengths=lr)[0].backward()
    # Expected IPO loss over a Bernoulli(y) label: y·(h - 1/(2β))² + (1 - y)·(h + 1/(2β))², h on token means.
    pc2, pr2, _, _ = _inputs(requires_grad=True)
    h = (pc2 / lc - rc / lc) - (pr2 / lr - rr / lr)
    t = 1 / (2 * BETA)
    (y * (h - t) ** 2 + (1 - y) * (h + t) ** 2).mean().backward()
    assert torch.allclose(pc.grad, pc2.grad) and torch.allclose(pr.grad, pr2.grad)


def test_ipo_needs_lengths_and_reference():
    pc, pr, rc, rr = _inputs()
    with pytest.raises(ValueError, match="lengths"):
        preference_loss(pc, pr, rc, rr, loss_type="ipo")
    with pytest.raises(ValueError, match="ref_chosen"):
        preference_loss(pc, pr, None, None, loss_type="ipo", chosen_lengths=_t(LC), rejected_lengths=_t(LR))


# --- SimPO -----------------------------------------------------------------------------------------


def test_simpo_reference_free_length_normalised():
    beta, gamma = 2.0, 1.0
    pc, pr, _, _ = _inputs()
    loss, metrics = preference_loss(pc, pr, None, None, loss_type="simpo", beta=beta, simpo_gamma=gamma,
                                    chosen_lengths=_t(LC), rejected_lengths=_t(LR))
    zs = [beta * (c / lc - r / lr) - gamma for c, r, lc, lr in zip(PC, PR, LC, LR, strict=True)]
    assert zs == pytest.approx([2 * (-2.5 + 1.5) - 1, 2 * (-2.0 + 3.6) - 1, 2 * (-2.5 + 5.0) - 1])
    assert loss.item() == pytest.approx(sum(-_log_sigmoid(z) for z in zs) / 3, rel=1e-12)
    chosen = sum(beta * c / lc for c, lc in zip(PC, LC, strict=True)) / 3
    rejected = sum(beta * r / lr for r, lr in zip(PR, LR, strict=True)) / 3
    assert metrics["rewards/chosen"].item() == pytest.approx(chosen)
    assert metrics["rewards/rejected"].item() == pytest.approx(rejected)
    assert metrics["rewards/accuracies"].item() == pytest.approx(2 / 3)


def test_simpo_gamma_matches_trl_and_simpo_repo_parametrisations():
    beta, ratio = 2.5, 0.4
    pc, pr, _, _ = _inputs()
    kw = dict(loss_type="simpo", beta=beta, chosen_lengths=_t(LC), rejected_lengths=_t(LR))
    loss, _ = preference_loss(pc, pr, None, None, simpo_gamma=beta * ratio, **kw)
    avg_c, avg_r = pc / _t(LC), pr / _t(LR)
    # TRL CPOTrainer: logits = Δ - simpo_gamma / β; SimPO repo: logits = Δ - gamma_beta_ratio; loss -logσ(β·logits)
    trl = -torch.nn.functional.logsigmoid(beta * ((avg_c - avg_r) - (beta * ratio) / beta)).mean()
    repo = -torch.nn.functional.logsigmoid(beta * ((avg_c - avg_r) - ratio)).mean()
    assert loss.item() == pytest.approx(trl.item(), rel=1e-12) == pytest.approx(repo.item(), rel=1e-12)


def test_simpo_soft_labels():
    pc, pr, _, _ = _inputs()
    loss, _ = preference_loss(pc, pr, None, None, loss_type="simpo", beta=2.0, simpo_gamma=0.5,
                              labels=_t([0.9, 0.9, 0.9]), chosen_lengths=_t(LC), rejected_lengths=_t(LR))
    zs = [2.0 * (c / lc - r / lr) - 0.5 for c, r, lc, lr in zip(PC, PR, LC, LR, strict=True)]
    assert loss.item() == pytest.approx(sum(-0.9 * _log_sigmoid(z) - 0.1 * _log_sigmoid(-z) for z in zs) / 3)


def test_simpo_rejects_reference_and_needs_lengths():
    pc, pr, rc, rr = _inputs()
    with pytest.raises(ValueError, match="reference-free"):
        preference_loss(pc, pr, rc, rr, loss_type="simpo", chosen_lengths=_t(LC), rejected_lengths=_t(LR))
    with pytest.raises(ValueError, match="lengths"):
        preference_loss(pc, pr, None, None, loss_type="simpo")


# --- weights, gradients, empty input, metrics --------------------------------------------------------


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "simpo"])
def test_zero_weight_pair_does_not_move_loss_or_get_gradient(loss_type):
    def run(pc_vals, pr_vals, weights):
        pc, pr = _t(pc_vals, True), _t(pr_vals, True)
        refs = (None, None) if loss_type == "simpo" else (_t(RC), _t(RR))
        loss, _ = preference_loss(pc, pr, *refs, loss_type=loss_type, beta=BETA, weights=weights,
                                  chosen_lengths=_t(LC), rejected_lengths=_t(LR))
        loss.backward()
        return loss.item(), pc.grad, pr.grad

    w = _t([1.0, 1.0, 0.0])
    base, gc, gr = run(PC, PR, w)
    moved, _, _ = run(PC[:2] + [500.0], PR[:2] + [-500.0], w)
    assert moved == pytest.approx(base, rel=1e-12)
    assert gc[2].item() == 0.0 and gr[2].item() == 0.0
    assert gc[:2].abs().sum().item() > 0


def test_weighted_mean_by_hand():
    loss, _ = preference_loss(*_inputs(), beta=BETA, weights=_t([2.0, 0.5, 0.0]))
    per = [-_log_sigmoid(BETA * h) for h in H]
    assert loss.item() == pytest.approx((2.0 * per[0] + 0.5 * per[1]) / 2.5, rel=1e-12)


def test_all_zero_weights_give_zero_loss_with_grad_fn():
    pc, pr, rc, rr = _inputs(requires_grad=True)
    loss, _ = preference_loss(pc, pr, rc, rr, weights=torch.zeros(3, dtype=torch.float64))
    assert loss.item() == 0.0 and loss.grad_fn is not None
    loss.backward()
    assert pc.grad.abs().sum().item() == 0.0


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "simpo"])
def test_gradient_raises_chosen_and_lowers_rejected(loss_type):
    pc, pr, rc, rr = _inputs(requires_grad=True)
    rc.requires_grad_(True)
    refs = (None, None) if loss_type == "simpo" else (rc, rr)
    # IPO pushes h towards 1/(2β) = 5 from either side; every pair here has h < 5, so it pulls upwards.
    loss, _ = preference_loss(pc, pr, *refs, loss_type=loss_type, beta=BETA,
                              chosen_lengths=_t(LC), rejected_lengths=_t(LR))
    loss.backward()
    # Gradient descent moves against .grad: a negative grad on π_c raises it, a positive grad on π_r lowers it.
    assert (pc.grad < 0).all() and (pr.grad > 0).all()
    assert rc.grad is None  # reference log-probs are constants


@pytest.mark.parametrize("loss_type", ["sigmoid", "ipo", "simpo"])
def test_empty_input_is_finite_with_grad_fn(loss_type):
    pc, pr = torch.zeros(0, requires_grad=True), torch.zeros(0, requires_grad=True)
    refs = (None, None) if loss_type == "simpo" else (torch.zeros(0), torch.zeros(0))
    loss, metrics = preference_loss(pc, pr, *refs, loss_type=loss_type, chosen_lengths=torch.zeros(0),
                                    rejected_lengths=torch.zeros(0, dtype=torch.long))
    assert torch.isfinite(loss) and loss.item() == 0.0 and loss.grad_fn is not None
    loss.backward()
    assert all(torch.isfinite(v) and v.item() == 0.0 for v in metrics.values())


def test_metrics_values():
    pc, pr, rc, rr = _inputs(requires_grad=True)
    _, m = preference_loss(pc, pr, rc, rr, beta=BETA)
    chosen = [BETA * (c - r) for c, r in zip(PC, RC, strict=True)]
    rejected = [BETA * (c - r) for c, r in zip(PR, RR, strict=True)]
    assert m["rewards/chosen"].item() == pytest.approx(sum(chosen) / 3)
    assert m["rewards/rejected"].item() == pytest.approx(sum(rejected) / 3)
    assert m["rewards/margins"].item() == pytest.approx(BETA * sum(H) / 3)
    assert m["rewards/accuracies"].item() == pytest.approx(2 / 3)  # h = 2, -2, 1.5
    assert m["pairs"].item() == 3
    assert all(not v.requires_grad for v in m.values())


def test_ipo_metrics_use_token_means():
    _, m = preference_loss(*_inputs(), loss_type="ipo", beta=BETA, chosen_lengths=_t(LC), rejected_lengths=_t(LR))
    expected = sum(BETA * (c - r) / lc for c, r, lc in zip(PC, RC, LC, strict=True)) / 3
    assert m["rewards/chosen"].item() == pytest.approx(expected)


def test_input_validation():
    pc, pr, rc, rr = _inputs()
    with pytest.raises(ValueError, match="loss_type"):
        preference_loss(pc, pr, rc, rr, loss_type="hinge")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="shape"):
        preference_loss(pc, pr[:2], rc, rr)
    with pytest.raises(ValueError, match="non-negative"):
        preference_loss(pc, pr, rc, rr, weights=_t([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        preference_loss(pc, pr, rc, rr, labels=_t([1.0, 1.2, 1.0]))
    with pytest.raises(ValueError, match="beta"):
        preference_loss(pc, pr, rc, rr, beta=0.0)


# --- sft_loss --------------------------------------------------------------------------------------


def test_sft_loss_hand_values_and_weights():
    pc = _t(PC, True)
    loss = sft_loss(pc, _t(LC))
    assert loss.item() == pytest.approx((10 / 4 + 20 / 10 + 5 / 2) / 3, rel=1e-12)
    loss.backward()
    assert (pc.grad < 0).all()  # minimising the NLL raises the chosen log-prob
    weighted = sft_loss(_t(PC), _t(LC), weights=_t([1.0, 3.0, 0.0]))
    assert weighted.item() == pytest.approx((10 / 4 + 3 * 20 / 10) / 4, rel=1e-12)


def test_sft_loss_empty():
    pc = torch.zeros(0, requires_grad=True)
    loss = sft_loss(pc, torch.zeros(0))
    assert loss.item() == 0.0 and loss.grad_fn is not None


# --- sequence_logp_sums ----------------------------------------------------------------------------


def test_sequence_logp_sums_ignores_inf_and_nan_padding():
    x = torch.tensor([[-1.0, -2.0, float("-inf"), float("nan")], [-0.5, float("inf"), -0.25, float("-inf")]],
                     requires_grad=True)
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0]])
    sums, lengths = sequence_logp_sums(x, mask)
    assert sums.tolist() == [-3.0, -0.75] and lengths.tolist() == [2.0, 2.0]
    assert lengths.dtype == torch.float32
    sums.sum().backward()
    assert torch.equal(x.grad, mask.float())


def test_sequence_logp_sums_upcasts_half_precision_and_accepts_bool_mask():
    x = torch.full((1, 600), -0.8).bfloat16()
    sums, lengths = sequence_logp_sums(x, torch.ones(1, 600, dtype=torch.bool))
    assert sums.dtype == torch.float32 and lengths.dtype == torch.float32
    assert sums.item() == pytest.approx(600 * x[0, 0].float().item(), rel=1e-6)
    assert lengths.item() == 600.0


def test_sequence_logp_sums_feed_preference_loss():
    tok = torch.tensor([[-1.0, -1.0, float("nan")], [-2.0, -2.0, -2.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    sums, lengths = sequence_logp_sums(tok, mask)
    loss, _ = preference_loss(sums[:1], sums[1:], None, None, loss_type="simpo", beta=2.0, simpo_gamma=0.0,
                              chosen_lengths=lengths[:1], rejected_lengths=lengths[1:])
    assert loss.item() == pytest.approx(-_log_sigmoid(2.0 * (-1.0 + 2.0)), rel=1e-6)
