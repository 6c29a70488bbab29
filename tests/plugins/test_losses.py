"""GRPO-family loss pieces against values computed by hand."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlkit.lm.logprobs import mask_after_eos, selective_log_softmax, truncated_rows
from rlkit_plugins.objectives.policy_gradient import k3_kl, policy_gradient_loss

LN2 = math.log(2.0)


def _loss(logp, old_logp, adv, mask=None, ref_logp=None, **kw):
    mask = torch.ones_like(logp) if mask is None else mask
    kw.setdefault("beta", 0.0)
    kw.setdefault("epsilon", 0.2)
    return policy_gradient_loss(logp, old_logp, ref_logp, adv, mask, **kw)


def _grad_at_ratio(ratio: float, adv: float, **kw) -> tuple[float, float]:
    """One token with exp(logp - old) = ratio: (loss, d loss / d logp)."""
    logp = torch.tensor([[math.log(ratio)]], requires_grad=True)
    loss, _ = _loss(logp, torch.zeros(1, 1), torch.tensor([adv]), **kw)
    loss.backward()
    return loss.item(), logp.grad.item()


# --- selective_log_softmax -------------------------------------------------------------------------


def test_selective_log_softmax_hand_value():
    # softmax([0, ln 3]) = [1/4, 3/4]
    logits = torch.tensor([[[0.0, math.log(3.0)], [0.0, math.log(3.0)]]])
    out = selective_log_softmax(logits, torch.tensor([[1, 0]]))
    assert torch.allclose(out, torch.tensor([[math.log(0.75), math.log(0.25)]]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_selective_log_softmax_equals_log_softmax_gather(dtype):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g, dtype=dtype) * 4
    tokens = torch.randint(0, 11, (3, 5), generator=g)
    expected = torch.log_softmax(logits, -1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    out = selective_log_softmax(logits, tokens)
    assert out.shape == (3, 5) and out.dtype == dtype
    assert torch.allclose(out, expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_selective_log_softmax_gives_the_same_values_in_chunks_of_rows(monkeypatch, dtype):
    import rlkit.lm.logprobs as logprobs

    g = torch.Generator().manual_seed(2)
    logits = (torch.randn(5, 3, 13, generator=g) * 4).to(dtype).requires_grad_()
    tokens = torch.randint(0, 13, (5, 3), generator=g)
    whole = selective_log_softmax(logits, tokens)
    (grad_whole,) = torch.autograd.grad(whole.float().sum(), logits)
    monkeypatch.setattr(logprobs, "LOG_SOFTMAX_CHUNK_ELEMENTS", 2 * 3 * 13)  # chunks of 2, 2 and 1 rows
    chunked = selective_log_softmax(logits, tokens)
    (grad_chunked,) = torch.autograd.grad(chunked.float().sum(), logits)
    assert torch.equal(whole, chunked) and torch.equal(grad_whole, grad_chunked)
    assert selective_log_softmax(logits[:0], tokens[:0]).shape == (0, 3)


def test_selective_log_softmax_of_half_precision_logits_is_float32_of_the_same_values():
    g = torch.Generator().manual_seed(1)
    logits = torch.randn(2, 4, 7, generator=g).bfloat16()
    tokens = torch.randint(0, 7, (2, 4), generator=g)
    out = selective_log_softmax(logits, tokens)
    # upcast before the softmax, not after: exactly the float32 result for these bf16 values
    assert out.dtype == torch.float32 and torch.equal(out, selective_log_softmax(logits.float(), tokens))


def test_selective_log_softmax_gradient_matches():
    logits = torch.randn(2, 3, 5, requires_grad=True)
    tokens = torch.tensor([[0, 1, 2], [4, 3, 2]])
    selective_log_softmax(logits, tokens).sum().backward()
    ref = logits.detach().clone().requires_grad_(True)
    torch.log_softmax(ref, -1).gather(-1, tokens.unsqueeze(-1)).sum().backward()
    assert torch.allclose(logits.grad, ref.grad)


# --- k3_kl -----------------------------------------------------------------------------------------


def test_k3_is_zero_when_equal_and_nonnegative():
    x = torch.linspace(-5, 0, 11)
    assert torch.equal(k3_kl(x, x), torch.zeros(11))
    grid_p, grid_r = torch.meshgrid(x, x, indexing="ij")
    assert (k3_kl(grid_p, grid_r) >= 0).all()


def test_k3_hand_value():
    # ref - logp = -ln 2: exp(-ln 2) + ln 2 - 1 = 0.5 + ln 2 - 1
    out = k3_kl(torch.tensor([[0.0]]), torch.tensor([[-LN2]]))
    assert torch.allclose(out, torch.tensor([[LN2 - 0.5]]))


# --- clipping --------------------------------------------------------------------------------------


def test_positive_advantage_inside_clip_has_gradient():
    # d(-ratio * A)/d logp = -ratio * A
    loss, grad = _grad_at_ratio(1.1, 1.0)
    assert loss == pytest.approx(-1.1) and grad == pytest.approx(-1.1)


def test_positive_advantage_above_clip_has_zero_gradient():
    # min(1.5 * 1, 1.2 * 1) = 1.2, constant in logp
    loss, grad = _grad_at_ratio(1.5, 1.0)
    assert loss == pytest.approx(-1.2) and grad == 0.0


def test_negative_advantage_below_clip_has_zero_gradient():
    # min(0.5 * -1, 0.8 * -1) = -0.8, constant in logp
    loss, grad = _grad_at_ratio(0.5, -1.0)
    assert loss == pytest.approx(0.8) and grad == 0.0


def test_negative_advantage_above_clip_is_not_clipped():
    # pessimistic bound: min(1.5 * -1, 1.2 * -1) = -1.5, so the gradient survives: -ratio * A = 1.5
    loss, grad = _grad_at_ratio(1.5, -1.0)
    assert loss == pytest.approx(1.5) and grad == pytest.approx(1.5)


def test_epsilon_high_is_asymmetric():
    # ratio 1.25 > 1.2 is clipped with the symmetric bound but not with epsilon_high = 0.28
    assert _grad_at_ratio(1.25, 1.0)[1] == 0.0
    loss, grad = _grad_at_ratio(1.25, 1.0, epsilon_high=0.28)
    assert loss == pytest.approx(-1.25) and grad == pytest.approx(-1.25)
    # the low side still uses epsilon: 0.75 < 1 - 0.2 is clipped for A < 0
    loss, grad = _grad_at_ratio(0.75, -1.0, epsilon_high=0.28)
    assert loss == pytest.approx(0.8) and grad == 0.0


# --- normalisation ---------------------------------------------------------------------------------

# Row 0: 3 tokens, A = 1; row 1: 1 token (2 padded), A = -2. At ratio 1 each token's loss is -A.
MASK = torch.tensor([[1, 1, 1], [1, 0, 0]])
ADV = torch.tensor([1.0, -2.0])


@pytest.mark.parametrize(("loss_type", "expected"), [
    ("grpo", (-3 / 3 + 2 / 1) / 2),  # per-sequence mean, then mean over 2 rows = 0.5
    ("bnpo", (-3 + 2) / 4),          # all tokens / 4 tokens = -0.25
    ("dapo", (-3 + 2) / 4),
    ("dr_grpo", (-3 + 2) / (2 * 4)),  # / (N * max_completion_length) = -0.125
    ("token_sum", -3 + 2),            # no normaliser
    ("prompt_mean", (-3 + 2) / 4),    # one group of both rows: its 4 tokens' mean, over 1 group
])
def test_loss_type_normalisation(loss_type, expected):
    logp = torch.zeros(2, 3)
    loss, _ = _loss(logp, logp, ADV, MASK, loss_type=loss_type, max_completion_length=4,
                    group_tokens=torch.tensor([4.0, 4.0]), num_groups=1)
    assert loss.item() == pytest.approx(expected)


def test_prompt_mean_weighs_each_prompt_the_same_whatever_its_completions_lengths():
    # group 0: two rows of 3 tokens, A = 1 (token loss -1); group 1: two rows of 1 token, A = -2 (token loss +2)
    mask = torch.tensor([[1, 1, 1], [1, 1, 1], [1, 0, 0], [1, 0, 0]])
    adv = torch.tensor([1.0, 1.0, -2.0, -2.0])
    logp = torch.zeros(4, 3)
    groups = torch.tensor([6.0, 6.0, 2.0, 2.0])
    prompt_mean, _ = _loss(logp, logp, adv, mask, loss_type="prompt_mean", group_tokens=groups, num_groups=2)
    dapo, _ = _loss(logp, logp, adv, mask, loss_type="dapo")
    assert prompt_mean.item() == pytest.approx((-1 + 2) / 2)   # each group's token mean, then their mean
    assert dapo.item() == pytest.approx((-6 + 4) / 8)          # the long group's tokens outweigh the short one's


def test_prompt_mean_without_the_groups_raises():
    with pytest.raises(ValueError, match="group_tokens"):
        _loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), loss_type="prompt_mean")


def test_dr_grpo_needs_max_completion_length():
    with pytest.raises(ValueError, match="max_completion_length"):
        _loss(torch.zeros(2, 3), torch.zeros(2, 3), ADV, MASK, loss_type="dr_grpo")


def test_unknown_loss_type_raises():
    with pytest.raises(ValueError, match="loss_type"):
        _loss(torch.zeros(2, 3), torch.zeros(2, 3), ADV, MASK, loss_type="ppo")


def test_grpo_gradient_at_ratio_one():
    # logp == old_logp (same tensor, first inner iteration): d loss / d logp = -A_i / |o_i| / N
    logp = torch.zeros(2, 3, requires_grad=True)
    loss, metrics = _loss(logp, logp, ADV, MASK)
    loss.backward()
    expected = torch.tensor([[-1 / 3 / 2] * 3, [2 / 1 / 2, 0.0, 0.0]])
    assert torch.allclose(logp.grad, expected)
    assert metrics["ratio_mean"].item() == 1.0 and metrics["clip_ratio"].item() == 0.0


# --- KL term ---------------------------------------------------------------------------------------


def test_beta_zero_ignores_ref():
    logp = torch.zeros(2, 3)
    plain, m_plain = _loss(logp, logp, ADV, MASK)
    with_ref, m_ref = _loss(logp, logp, ADV, MASK, ref_logp=torch.full((2, 3), -7.0))
    assert plain.item() == with_ref.item()
    assert m_plain["kl"].item() == 0.0 and m_ref["kl"].item() == 0.0


def test_beta_positive_without_ref_raises():
    with pytest.raises(ValueError, match="ref_logp"):
        _loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.ones(1), beta=0.1)


def test_beta_adds_k3_kl():
    # one token, ratio 1, A = 1, ref - logp = -ln 2: loss = -1 + 0.1 * (ln 2 - 0.5)
    logp = torch.zeros(1, 1)
    loss, metrics = _loss(logp, logp, torch.ones(1), ref_logp=torch.tensor([[-LN2]]), beta=0.1)
    assert loss.item() == pytest.approx(-1 + 0.1 * (LN2 - 0.5))
    assert metrics["kl"].item() == pytest.approx(LN2 - 0.5)


# --- masking ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dapo", "dr_grpo"])
def test_all_zero_mask_row_is_finite_and_contributes_nothing(loss_type):
    # row 1 is fully masked and holds garbage; row 0: 2 tokens at ratio 1, A = 1 → per-token loss -1
    logp = torch.tensor([[0.0, 0.0], [float("inf"), float("nan")]], requires_grad=True)
    old = torch.tensor([[0.0, 0.0], [float("-inf"), 0.0]])
    ref = torch.tensor([[0.0, 0.0], [float("nan"), 50.0]])
    mask = torch.tensor([[1, 1], [0, 0]])
    loss, metrics = _loss(logp, old, torch.tensor([1.0, 3.0]), mask, ref_logp=ref, beta=0.1,
                          loss_type=loss_type, max_completion_length=2)
    loss.backward()
    expected = {"grpo": -2 / 2 / 2, "bnpo": -2 / 2, "dapo": -2 / 2, "dr_grpo": -2 / (2 * 2)}[loss_type]
    assert loss.item() == pytest.approx(expected)
    assert torch.isfinite(logp.grad).all() and torch.equal(logp.grad[1], torch.zeros(2))
    assert all(torch.isfinite(v) for v in metrics.values())


def test_empty_batch_is_finite():
    logp = torch.zeros(2, 2, requires_grad=True)
    loss, metrics = _loss(logp, logp, torch.ones(2), torch.zeros(2, 2))
    assert loss.item() == 0.0 and all(v.item() == 0.0 for v in metrics.values())


# --- metrics ---------------------------------------------------------------------------------------


def test_clip_metrics_count_masked_tokens():
    # row 0 (A = +1): ratios 1.5 (high clip), 1.0, 0.5 (A > 0: not clipped), 3.0 (masked, ignored)
    # row 1 (A = -1): ratios 0.5 (low clip), 1.5 (A < 0: not clipped), 1.0, 1.0
    ratios = torch.tensor([[1.5, 1.0, 0.5, 3.0], [0.5, 1.5, 1.0, 1.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])
    _, m = _loss(ratios.log(), torch.zeros(2, 4), torch.tensor([1.0, -1.0]), mask)
    assert m["clip_ratio/high"].item() == pytest.approx(1 / 7)
    assert m["clip_ratio/low"].item() == pytest.approx(1 / 7)
    assert m["clip_ratio"].item() == pytest.approx(2 / 7)
    assert m["ratio_mean"].item() == pytest.approx((1.5 + 1.0 + 0.5 + 0.5 + 1.5 + 1.0 + 1.0) / 7)
    assert not any(v.requires_grad for v in m.values())


def test_metrics_are_detached():
    logp = torch.full((1, 2), -0.1, requires_grad=True)
    _, m = _loss(logp, torch.zeros(1, 2), torch.ones(1), ref_logp=torch.zeros(1, 2), beta=0.1)
    assert not any(v.requires_grad for v in m.values())
    assert m["kl"].item() == pytest.approx(math.exp(0.1) - 0.1 - 1, rel=1e-4)


# --- EOS masks -------------------------------------------------------------------------------------


def test_mask_after_eos_and_truncated_rows():
    eos = 2
    ids = torch.tensor([
        [5, 2, 7, 2],  # first EOS at 1: keep 0..1
        [5, 6, 7, 8],  # no EOS: all kept, truncated
        [2, 0, 0, 0],  # EOS first
        [5, 6, 7, 2],  # EOS last
    ])
    assert torch.equal(mask_after_eos(ids, eos), torch.tensor([
        [1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 1],
    ]))
    assert torch.equal(truncated_rows(ids, eos), torch.tensor([False, True, False, False]))


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "token_sum", "prompt_mean"])
def test_micro_batch_losses_sum_to_the_whole_rollout(loss_type):
    torch.manual_seed(0)
    n, t = 6, 5
    base = torch.randn(n, t)
    old, ref, adv = base + 0.1 * torch.randn(n, t), base + 0.2 * torch.randn(n, t), torch.randn(n)
    mask = (torch.rand(n, t) > 0.3).float()
    mask[2] = 0  # an empty row still counts as a sequence
    kwargs = {"beta": 0.04, "loss_type": loss_type, "max_completion_length": t}

    _assert_split_is_one_pass(base, old, ref, adv, mask, [0, 1, 4, 6], atol=1e-6, group_size=3, **kwargs)


def _assert_split_is_one_pass(base, old, ref, adv, mask, bounds, atol, entropy=None, group_size=1, **kwargs):
    """The rows cut at ``bounds`` into micro-batches, each told the step's counts: the parts' losses and gradients
    (through the log-probs, and the entropy when there is a bonus) sum to the one pass's. Rows form groups of
    ``group_size`` (a cut may split a group)."""
    group_tokens = mask.sum(-1).reshape(-1, group_size).sum(-1).repeat_interleave(group_size)
    kwargs.update(num_groups=len(base) // group_size)
    whole_logp = base.clone().requires_grad_(True)
    whole_entropy = None if entropy is None else entropy.clone().requires_grad_(True)
    whole, _ = policy_gradient_loss(whole_logp, old, ref, adv, mask, entropy=whole_entropy,
                                    group_tokens=group_tokens, **kwargs)
    whole.backward()
    split_logp = base.clone().requires_grad_(True)
    split_entropy = None if entropy is None else entropy.clone().requires_grad_(True)
    total = torch.zeros(())
    for lo, hi in zip(bounds, bounds[1:], strict=False):
        part, _ = policy_gradient_loss(split_logp[lo:hi], old[lo:hi], ref[lo:hi], adv[lo:hi], mask[lo:hi],
                                       num_sequences=len(base), num_tokens=float(mask.sum()),
                                       entropy=None if split_entropy is None else split_entropy[lo:hi],
                                       group_tokens=group_tokens[lo:hi], **kwargs)
        part.backward()
        total = total + part.detach()
    assert torch.allclose(total, whole.detach(), atol=atol)
    assert torch.allclose(split_logp.grad, whole_logp.grad, atol=atol / 10)
    if entropy is not None:
        assert torch.allclose(split_entropy.grad, whole_entropy.grad, atol=atol / 10)


def test_engine_importance_weights_scale_each_tokens_surrogate():
    from rlkit_plugins.objectives.policy_gradient import policy_gradient_loss

    logp = torch.log(torch.tensor([[0.5, 0.5]]))
    mask = torch.ones(1, 2)
    common = dict(loss_type="dapo", num_sequences=1, num_tokens=2.0)
    plain, _ = policy_gradient_loss(logp, logp, None, torch.tensor([1.0]), mask, **common)
    weighted, _ = policy_gradient_loss(logp, logp, None, torch.tensor([1.0]), mask,
                                       sampling_weights=torch.tensor([[1.5, 1.0]]), **common)
    # on-policy ratio 1, advantage 1: each token's surrogate is -1, weighted 1.5 and 1, averaged over 2 tokens
    assert float(plain) == pytest.approx(-1.0) and float(weighted) == pytest.approx(-1.25)


# --- GSPO, CISPO, KL estimators (issue 38) ---------------------------------------------------------------


def test_sequence_level_ratio_is_the_geometric_mean_of_the_tokens_ratios_clipped_as_one():
    # completion 0: token log-ratios 0.2 and 0.4 (mean 0.3); completion 1: one token of log-ratio -0.1 and padding
    old = torch.zeros(2, 2)
    logp = torch.tensor([[0.2, 0.4], [-0.1, 9.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    loss, metrics = _loss(logp, old, adv, mask, epsilon=0.5, importance_sampling_level="sequence")
    s0, s1 = math.exp(0.3), math.exp(-0.1)
    # grpo: each completion's loss is its one surrogate (-s·A inside the clip), averaged over completions
    assert loss.item() == pytest.approx((-s0 * 1.0 + s1 * 1.0) / 2, rel=1e-6)
    assert metrics["ratio_mean"].item() == pytest.approx((2 * s0 + s1) / 3, rel=1e-6)
    loss.backward()
    # d/d logp_t of -s0/2 with s0 = exp(mean of 2 tokens): -s0/2 · 1/2 on each token of completion 0
    assert logp.grad[0].tolist() == pytest.approx([-s0 / 4, -s0 / 4], rel=1e-6)
    assert logp.grad[1].tolist() == pytest.approx([s1 / 2, 0.0], rel=1e-6)
    # outside the clip (s0 = 1.35 > 1 + 0.2 with A > 0) the whole completion stops: no token trains
    logp.grad = None
    clipped, metrics = _loss(logp, old, adv, mask, epsilon=0.2, importance_sampling_level="sequence")
    clipped.backward()
    assert logp.grad[0].tolist() == [0.0, 0.0] and metrics["clip_ratio/high"].item() == pytest.approx(2 / 3)


def test_cispo_clips_the_weight_not_the_gradient():
    # ratio 2 with A > 0: PPO's clip silences the token; CISPO trains it with its weight capped at 1 + epsilon_high
    ppo_loss, ppo_grad = _grad_at_ratio(2.0, 1.0, epsilon=0.2)
    cispo_loss, cispo_grad = _grad_at_ratio(2.0, 1.0, epsilon=0.2, loss_type="cispo")
    assert ppo_grad == 0.0
    assert cispo_grad == pytest.approx(-1.2) and cispo_loss == pytest.approx(-1.2 * math.log(2.0))
    # inside the cap the weight is the ratio itself: gradient -r·A, as the on-policy gradient at r = 1
    assert _grad_at_ratio(1.0, 2.0, loss_type="cispo")[1] == pytest.approx(-2.0)
    assert _grad_at_ratio(0.5, -1.0, loss_type="cispo")[1] == pytest.approx(0.5)  # no lower clip
    _, metrics = _loss(torch.log(torch.tensor([[2.0, 1.0]])), torch.zeros(1, 2), torch.tensor([-1.0]),
                       loss_type="cispo", epsilon=0.2)
    assert metrics["clip_ratio/high"].item() == pytest.approx(0.5), "capped whatever the advantage's sign"


@pytest.mark.parametrize(("estimator", "expected"), [
    ("k1", [0.5, -0.5]),
    ("k2", [0.125, 0.125]),
    ("k3", [math.exp(-0.5) + 0.5 - 1, math.exp(0.5) - 0.5 - 1]),
])
def test_kl_estimators_hand_values(estimator, expected):
    from rlkit_plugins.objectives.policy_gradient import kl_estimate

    logp, ref = torch.tensor([0.0, -0.5]), torch.tensor([-0.5, 0.0])  # d = logp - ref = 0.5, -0.5
    assert kl_estimate(logp, ref, estimator).tolist() == pytest.approx(expected)
    logp2 = torch.tensor([[0.0, -0.5]])
    loss, metrics = _loss(logp2, logp2, torch.tensor([0.0]), ref_logp=ref.unsqueeze(0), beta=0.1,
                          kl_estimator=estimator)
    assert metrics["kl"].item() == pytest.approx(sum(expected) / 2)
    assert loss.item() == pytest.approx(0.1 * sum(expected) / 2)


def test_gspo_with_a_token_summed_loss_is_refused_naming_the_reason(registry):
    from rlkit.core.errors import ConfigError

    registry.create("objective", "policy_gradient", {"importance_sampling_level": "sequence"})
    for loss_type in ("dapo", "bnpo", "dr_grpo", "cispo"):
        with pytest.raises(ConfigError) as caught:
            registry.create("objective", "policy_gradient",
                            {"importance_sampling_level": "sequence", "loss_type": loss_type})
        assert "needs loss_type: grpo" in str(caught.value) and "TRL PR #6042" in str(caught.value)


def test_rlkit_validate_refuses_gspo_with_dapo_in_one_line(capsys):
    from rlkit.cli import main

    code = main(["validate", "objective.params.importance_sampling_level=sequence", "objective.params.loss_type=dapo"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("rlkit: error: ")
    assert "importance_sampling_level: sequence (GSPO) needs loss_type: grpo" in err


def _inputs(seed: int, n: int, t: int):
    gen = torch.Generator().manual_seed(seed)
    base = torch.randn(n, t, generator=gen)
    old = base + 0.1 * torch.randn(n, t, generator=gen)
    ref = base + 0.2 * torch.randn(n, t, generator=gen)
    adv = torch.randn(n, generator=gen)
    mask = (torch.rand(n, t, generator=gen) > 0.3).float()
    return base, old, ref, adv, mask


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), groups=st.integers(1, 4), group_size=st.integers(1, 3), t=st.integers(1, 6),
       cuts=st.lists(st.integers(1, 11), max_size=3),
       loss_type=st.sampled_from(["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "token_sum", "prompt_mean"]),
       level=st.sampled_from(["token", "sequence"]), estimator=st.sampled_from(["k1", "k2", "k3"]),
       entropy_coef=st.sampled_from([0.0, 0.05]))
def test_any_micro_batching_gives_the_loss_and_gradient_of_one_pass(seed, groups, group_size, t, cuts, loss_type,
                                                                     level, estimator, entropy_coef):
    """Split the rollout's rows anywhere (gradient accumulation over micro-batches): with the step's num_sequences
    and num_tokens passed, the parts sum to the one-pass loss and gradient, for every loss type, ratio level and KL
    estimator."""
    if level == "sequence" and loss_type != "grpo":
        return  # refused at validate time (test above)
    n = groups * group_size
    base, old, ref, adv, mask = _inputs(seed, n, t)
    kwargs = {"beta": 0.04, "loss_type": loss_type, "max_completion_length": t, "importance_sampling_level": level,
              "kl_estimator": estimator, "epsilon": 0.2}
    entropy = (base.abs() + 0.5) if entropy_coef else None  # any per-token values: the bonus is linear in them
    _assert_split_is_one_pass(base, old, ref, adv, mask, sorted({0, n, *(c for c in cuts if c < n)}), atol=1e-5,
                              entropy=entropy, entropy_coef=entropy_coef, group_size=group_size, **kwargs)


def test_k1_in_the_loss_pushes_on_every_sampled_token_even_at_the_reference():
    """k1's value is 0 at the reference but its gradient is β per token (the score function, zero only in
    expectation over samples): what veRL's ``kl_loss_type: kl`` does, and why k3 is the default."""
    logp = torch.log(torch.tensor([[0.3, 0.6]])).requires_grad_(True)
    loss, metrics = _loss(logp, logp.detach(), torch.tensor([0.0]), ref_logp=logp.detach().clone(), beta=0.1,
                          kl_estimator="k1", loss_type="dapo")
    loss.backward()
    assert metrics["kl"].item() == 0.0 and logp.grad[0].tolist() == pytest.approx([0.05, 0.05])
    for estimator in ("k2", "k3"):
        logp.grad = None
        loss, _ = _loss(logp, logp.detach(), torch.tensor([0.0]), ref_logp=logp.detach().clone(), beta=0.1,
                        kl_estimator=estimator, loss_type="dapo")
        loss.backward()
        assert logp.grad.abs().max().item() == 0.0


def test_the_entropy_bonus_lowers_the_loss_by_coef_times_the_mean_entropy_and_pushes_it_up():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.9]])).requires_grad_(True)
    entropy = torch.tensor([[1.0, 2.0, 7.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0, 0.0]])  # the padding position's entropy counts for nothing
    plain, _ = _loss(logp, logp.detach(), torch.tensor([1.0]), mask, loss_type="dapo")
    bonus, _ = _loss(logp, logp.detach(), torch.tensor([1.0]), mask, loss_type="dapo", entropy=entropy,
                     entropy_coef=0.1)
    assert bonus.item() == pytest.approx(plain.item() - 0.1 * (1.0 + 2.0) / 2)
    bonus.backward()
    assert entropy.grad[0].tolist() == pytest.approx([-0.05, -0.05, 0.0]), "descent raises the entropy"
    with pytest.raises(ValueError, match="entropy_coef > 0 needs"):
        _loss(logp, logp.detach(), torch.tensor([1.0]), mask, entropy_coef=0.1)


def test_entropy_with_its_gradient_matches_the_direct_formula():
    from rlkit.lm.logprobs import selective_log_softmax_and_entropy

    torch.manual_seed(0)
    logits = torch.randn(2, 3, 11, requires_grad=True)
    _, entropy = selective_log_softmax_and_entropy(logits, torch.zeros(2, 3, dtype=torch.long), entropy_grad=True)
    direct = -(torch.softmax(logits, -1) * torch.log_softmax(logits, -1)).sum(-1)
    assert torch.allclose(entropy, direct, atol=1e-6)
    (grad,) = torch.autograd.grad(entropy.sum(), logits)
    (expected,) = torch.autograd.grad(direct.sum(), logits)
    assert torch.allclose(grad, expected, atol=1e-6)
    _, detached = selective_log_softmax_and_entropy(logits, torch.zeros(2, 3, dtype=torch.long))
    assert not detached.requires_grad


def test_the_high_entropy_mask_keeps_the_steps_top_quantile_of_completion_tokens():
    from rlkit.train.distributed import Spread
    from rlkit.train.updates import high_entropy_mask

    entropy = torch.tensor([[0.1, 0.5, 0.9], [0.3, 0.7, 99.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])  # 99.0 is padding: it neither counts nor is kept
    # the 0.6 quantile of [0.1, 0.3, 0.5, 0.7, 0.9] is 0.58 (linear): the top 40% are 0.7 and 0.9
    kept = high_entropy_mask(entropy, mask, 0.4, Spread())
    assert torch.equal(kept, torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]]))
    assert torch.equal(high_entropy_mask(entropy, mask, 1.0, Spread()), mask)


def test_the_entropy_mask_silences_the_policy_gradient_of_low_entropy_tokens_but_not_their_kl():
    logp = torch.log(torch.tensor([[0.3, 0.6]])).requires_grad_(True)
    ref = torch.log(torch.tensor([[0.5, 0.5]]))
    kept = torch.tensor([[1.0, 0.0]])
    loss, _ = _loss(logp, logp.detach(), torch.tensor([1.0]), ref_logp=ref, beta=0.0, loss_type="dapo",
                    entropy_mask=kept)
    loss.backward()
    assert logp.grad[0, 0] == pytest.approx(-1 / 2) and logp.grad[0, 1] == 0.0  # -A / 2 tokens on the kept one
    logp.grad = None
    with_kl, _ = _loss(logp, logp.detach(), torch.tensor([1.0]), ref_logp=ref, beta=0.1, loss_type="dapo",
                       entropy_mask=kept)
    with_kl.backward()
    assert logp.grad[0, 1] != 0.0  # the KL term still pulls every token towards the reference


def test_a_kl_penalised_reward_sums_the_estimator_over_each_completions_tokens():
    from rlkit_plugins.objectives.policy_gradient import kl_reward_penalty

    logp = torch.tensor([[0.5, -0.5, 7.0], [0.0, 0.0, 0.0]])
    ref = torch.zeros(2, 3)
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])  # 7.0 is padding
    assert torch.allclose(kl_reward_penalty(logp, ref, mask, beta=0.1, estimator="k1"), torch.tensor([0.0, 0.0]))
    assert torch.allclose(kl_reward_penalty(logp, ref, mask, beta=0.1, estimator="k2"),
                          torch.tensor([0.1 * (0.125 + 0.125), 0.0]))


def test_kl_in_the_reward_leaves_it_out_of_the_loss(registry):
    from rlkit.testing.objective_contract import example_completion_inputs

    in_loss = registry.create("objective", "policy_gradient", {"beta": 0.5})
    in_reward = registry.create("objective", "policy_gradient", {"beta": 0.5, "kl": {"where": "reward"}})
    assert in_reward.kl_in_reward and not in_loss.kl_in_reward
    inputs = example_completion_inputs()
    with_kl, metrics = in_loss.loss(inputs)
    without, _ = in_reward.loss(inputs)
    no_beta, _ = registry.create("objective", "policy_gradient", {"beta": 0.0}).loss(inputs)
    assert float(metrics["kl"]) > 0 and float(with_kl) != pytest.approx(float(without))
    assert float(without) == pytest.approx(float(no_beta))
