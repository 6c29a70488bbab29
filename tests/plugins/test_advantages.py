"""The gdpo, rank, rloo, reinforce_pp, pass_at_k and opo advantage estimators against values computed by hand."""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import pytest
import torch
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from rlkit import ConfigError
from rlkit.cli import main
from rlkit.testing import example_reward_batch
from rlkit_plugins.advantages.gdpo import GroupDecoupledAdvantage, gdpo_advantages
from rlkit_plugins.advantages.grpo import group_normalized_advantages
from rlkit_plugins.advantages.opo import OptimalBaselineAdvantage, opo_advantages
from rlkit_plugins.advantages.pass_at_k import PassAtKAdvantage, pass_at_k_advantages
from rlkit_plugins.advantages.rank import RankAdvantage, group_ranks, rank_advantages
from rlkit_plugins.advantages.reinforce_pp import ReinforcePlusPlusAdvantage, reinforce_pp_advantages
from rlkit_plugins.advantages.rloo import LeaveOneOutAdvantage, leave_one_out_advantages

NAN = float("nan")
EPS = 1e-4
CONF = Path(__file__).resolve().parents[2] / "conf" / "advantage"
ESTIMATORS = {"gdpo": GroupDecoupledAdvantage, "rank": RankAdvantage, "rloo": LeaveOneOutAdvantage,
              "reinforce_pp": ReinforcePlusPlusAdvantage, "pass_at_k": PassAtKAdvantage}


def _unbiased_std(values: list[float]) -> float:
    m = sum(values) / len(values)
    return math.sqrt(sum((v - m) ** 2 for v in values) / (len(values) - 1))


# --- gdpo ---------------------------------------------------------------------------------------


def test_gdpo_matches_hand_computation():
    # scores [B=2, G=3, D=2], weights [2, 1]
    scores = torch.tensor([
        [[0.0, 0.5], [1.0, NAN], [1.0, 0.0]],
        [[0.0, 1.0], [1.0, 1.0], [NAN, NAN]],   # dim 1 saturated; completion 2 unscored
    ])
    weights = torch.tensor([2.0, 1.0])
    s00 = _unbiased_std([0, 1, 1]) + EPS      # group 0, dim 0: mean 2/3
    s01 = _unbiased_std([0.5, 0.0]) + EPS     # group 0, dim 1 over its scored values: mean 1/4
    s10 = _unbiased_std([0, 1]) + EPS         # group 1, dim 0: mean 1/2
    summed = [
        2 * (-2 / 3) / s00 + 0.25 / s01,
        2 * (1 / 3) / s00,                    # its NaN dimension adds 0; the weights are not renormalised
        2 * (1 / 3) / s00 - 0.25 / s01,
        2 * (-0.5) / s10 + 0.0,               # a saturated dimension contributes 0
        2 * 0.5 / s10 + 0.0,
    ]
    group_level = torch.tensor([summed[:3], [*summed[3:], 0.0]])
    assert torch.allclose(gdpo_advantages(scores, weights, batch_normalize=False), group_level, atol=1e-6)

    # eq. 7 over the five scored completions, mean subtracted explicitly although it is 0
    m = sum(summed) / len(summed)
    sd = _unbiased_std(summed) + EPS
    expected = torch.tensor([[(v - m) / sd for v in summed[:3]], [(v - m) / sd for v in summed[3:]] + [0.0]])
    adv = gdpo_advantages(scores, weights)
    assert adv.dtype == torch.float32
    assert torch.allclose(adv, expected, atol=1e-6)
    assert adv[1, 2] == 0


def _trl_normalize_then_sum(scores: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """A transcription of TRL's GRPOTrainer ``normalize_then_sum`` branch on ``[B, G, D]``."""
    b, g, d = scores.shape
    x = scores.double()
    mean_k = torch.nanmean(x, dim=1, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=1, keepdim=True)
    var = torch.nanmean((x - mean_k) ** 2, dim=1, keepdim=True) * count / (count - 1)
    reward_k = (x - mean_k) / (var.sqrt() + 1e-4)
    rewards = (reward_k.reshape(-1, d) * weights.double()).nansum(dim=1)
    return ((rewards - rewards.mean()) / (rewards.std() + 1e-4)).reshape(b, g)


def test_gdpo_matches_trl_normalize_then_sum():
    gen = torch.Generator().manual_seed(3)
    scores = torch.rand(5, 8, 3, generator=gen)
    scores[0, 2, 1] = NAN  # NaN dimensions (never a whole completion: TRL would count it as a 0)
    scores[3, :3, 2] = NAN
    weights = torch.tensor([1.0, 0.5, 2.0])
    assert torch.allclose(gdpo_advantages(scores, weights), _trl_normalize_then_sum(scores, weights).float(),
                          atol=1e-5)


def test_gdpo_unscored_completion_gets_zero_and_stays_out_of_the_batch_std():
    scores = torch.tensor([[[0.0], [1.0], [NAN]], [[0.2], [0.6], [1.0]]])
    a = 0.5 / (_unbiased_std([0, 1]) + EPS)
    b = 0.4 / (_unbiased_std([0.2, 0.6, 1.0]) + EPS)
    scored = [-a, a, -b, 0.0, b]  # five values: the unscored completion is not a sixth zero
    sd = _unbiased_std(scored) + EPS
    expected = torch.tensor([[-a / sd, a / sd, 0.0], [-b / sd, 0.0, b / sd]])
    adv = gdpo_advantages(scores, torch.ones(1))
    assert torch.allclose(adv, expected, atol=1e-6)
    assert adv[0, 2] == 0


def test_gdpo_saturated_group_is_exactly_zero():
    scores = torch.full((1, 5, 3), 0.1)
    scores[0, :, 1] = 0.7
    assert torch.equal(gdpo_advantages(scores, torch.ones(3)), torch.zeros(1, 5))
    batch = example_reward_batch()
    est = GroupDecoupledAdvantage(GroupDecoupledAdvantage.Params())
    assert torch.equal(est.advantages(batch)[2], torch.zeros(batch.shape[1]))


def test_gdpo_is_nearly_invariant_to_each_dimension_range():
    # per-dimension z-scores ignore the affine range map, up to eps
    batch = example_reward_batch()
    raw = gdpo_advantages(batch.raw_scores, batch.weights)
    assert torch.allclose(raw, gdpo_advantages(batch.scores, batch.weights), atol=2e-3)


def test_gdpo_weights_scale_the_group_sum_and_not_the_batch_normalised_result():
    batch = example_reward_batch()
    group = gdpo_advantages(batch.scores, batch.weights, batch_normalize=False)
    assert torch.allclose(gdpo_advantages(batch.scores, 3 * batch.weights, batch_normalize=False), 3 * group,
                          atol=1e-5)
    assert torch.allclose(gdpo_advantages(batch.scores, 3 * batch.weights),
                          gdpo_advantages(batch.scores, batch.weights), atol=1e-3)


def test_gdpo_ignores_the_aggregated_reward():
    batch = example_reward_batch()
    est = GroupDecoupledAdvantage(GroupDecoupledAdvantage.Params())
    assert torch.equal(est.advantages(batch), est.advantages(batch.with_rewards(-batch.rewards)))


def _distinct_groups(adv: torch.Tensor, decimals: int = 3) -> set[tuple[float, ...]]:
    # A group's advantages as a sorted tuple: the order of the rollouts is arbitrary.
    return {tuple(sorted(round(float(a), decimals) + 0.0 for a in row)) for row in adv}


def test_gdpo_paper_section_2_enumeration():
    """GDPO §2 / fig. 2: G = 2 rollouts, two binary rewards, every configuration ((r1, r2) ∈ {0,1}² each).

    Advantage "groups" are counted as the distinct sorted advantage pairs (rounded to 3 decimals so that
    eps-level differences such as 0.5/(0.7071+eps) vs 1/(1.4142+eps) do not count). GRPO on r1 + r2 gives
    2: {0, 0} and {-0.707, 0.707}; the reward pairs with sums (0,1), (0,2), (1,2) all collapse onto the
    latter. The decoupled group-level sum (before batch normalisation) gives 3, adding {-1.414, 1.414}
    for (0,0) vs (1,1). Batch normalisation is one positive scaling of the whole batch, so with all 16
    configurations in one batch the count stays 3, as the paper says. It only collapses to 2 if each
    configuration is its own batch of one group: z-scoring a lone pair (a, -a) always gives ±1/√2.
    """
    configs = [pair for pair in itertools.product(itertools.product((0.0, 1.0), repeat=2), repeat=2)]
    scores = torch.tensor(configs)  # [16, G=2, D=2]
    weights = torch.ones(2)
    assert scores.shape == (16, 2, 2)

    grpo = group_normalized_advantages(scores.sum(dim=-1))
    assert _distinct_groups(grpo) == {(0.0, 0.0), (-0.707, 0.707)}

    decoupled = gdpo_advantages(scores, weights, batch_normalize=False)
    assert _distinct_groups(decoupled) == {(0.0, 0.0), (-0.707, 0.707), (-1.414, 1.414)}

    one_batch = gdpo_advantages(scores, weights)
    assert len(_distinct_groups(one_batch)) == 3

    one_batch_per_config = torch.cat([gdpo_advantages(scores[i:i + 1], weights) for i in range(16)])
    assert _distinct_groups(one_batch_per_config) == {(0.0, 0.0), (-0.707, 0.707)}


def test_gdpo_bad_shapes_and_params():
    with pytest.raises(ValueError, match=r"\[B, G, D\]"):
        gdpo_advantages(torch.zeros(2, 3), torch.ones(3))
    with pytest.raises(ValueError, match="weights"):
        gdpo_advantages(torch.zeros(2, 3, 4), torch.ones(3))
    with pytest.raises(ConfigError) as err:
        GroupDecoupledAdvantage(GroupDecoupledAdvantage.Params(eps=0.0))
    assert err.value.where == "advantage.params.eps"


# --- rank ---------------------------------------------------------------------------------------


def test_rank_linear_matches_gopo():
    # ranks 4, 1, 2, 3 → 2 - 4 (rank - 1) / 3
    adv = rank_advantages(torch.tensor([[0.1, 0.9, 0.5, 0.3]]))
    assert torch.allclose(adv, torch.tensor([[-2.0, 2.0, 2 / 3, -2 / 3]]))


def test_rank_ties_are_averaged_and_nan_is_left_out():
    # scored {1, 3, 3, 0}, n = 4: the 3s share ranks 1 and 2 → 1.5; 1 → 3; 0 → 4
    rewards = torch.tensor([[1.0, 3.0, 3.0, NAN, 0.0]])
    rank, wins, n = group_ranks(rewards)
    assert n.item() == 4
    assert torch.equal(rank[0, [0, 1, 2, 4]], torch.tensor([3.0, 1.5, 1.5, 4.0], dtype=rank.dtype))
    assert torch.equal(wins[0, [0, 1, 2, 4]], torch.tensor([1.0, 2.5, 2.5, 0.0], dtype=wins.dtype))
    linear = rank_advantages(rewards)
    assert torch.allclose(linear, torch.tensor([[2 - 8 / 3, 2 - 2 / 3, 2 - 2 / 3, 0.0, -2.0]]))
    wins_adv = rank_advantages(rewards, "wins")
    assert torch.allclose(wins_adv, torch.tensor([[1 / 3 - 0.5, 2.5 / 3 - 0.5, 2.5 / 3 - 0.5, 0.0, -0.5]]))


def test_rank_softmax_matches_hand_computation():
    # ranks 4, 1, 2, 3; p ∝ exp(-rank / 2); A = n p - 1
    adv = rank_advantages(torch.tensor([[0.1, 0.9, 0.5, 0.3]]), "softmax", temperature=2.0)
    e = [math.exp(-r / 2) for r in (4, 1, 2, 3)]
    assert torch.allclose(adv, torch.tensor([[4 * x / sum(e) - 1 for x in e]]))
    sharper = rank_advantages(torch.tensor([[0.1, 0.9, 0.5, 0.3]]), "softmax", temperature=0.5)
    assert sharper[0, 1] > adv[0, 1]


def test_rank_wins_is_linear_over_four():
    rewards = torch.randint(0, 4, (6, 7), generator=torch.Generator().manual_seed(1)).float()
    rewards[0, 3] = NAN
    assert torch.allclose(rank_advantages(rewards, "wins"), rank_advantages(rewards, "linear") / 4, atol=1e-6)


@pytest.mark.parametrize("method", ["linear", "softmax", "wins"])
def test_rank_groups_without_an_order_get_exact_zero(method):
    rewards = torch.tensor([[0.7, 0.7, 0.7], [NAN, 0.4, NAN], [NAN, NAN, NAN], [0.2, NAN, 0.2]])
    assert torch.equal(rank_advantages(rewards, method), torch.zeros(4, 3))


_TRANSFORMS = {
    "affine": lambda x: 3.0 * x - 7.0,
    "exp": torch.exp,
    "cube_plus": lambda x: x ** 3 + x,
    "sigmoid": torch.sigmoid,
    "log_shift": lambda x: torch.log(x + 10.0),
}

_groups = st.integers(1, 3).flatmap(lambda b: st.integers(1, 6).flatmap(lambda g: st.lists(
    st.lists(st.one_of(st.integers(-4, 4).map(float), st.just(NAN)), min_size=g, max_size=g),
    min_size=b, max_size=b)))


@settings(max_examples=40, deadline=None)
@given(rows=_groups, method=st.sampled_from(["linear", "softmax", "wins"]),
       transform=st.sampled_from(sorted(_TRANSFORMS)), temperature=st.sampled_from([0.3, 1.0, 4.0]))
def test_rank_invariant_under_increasing_transforms(rows, method, transform, temperature):
    rewards = torch.tensor(rows, dtype=torch.float64)
    adv = rank_advantages(rewards.float(), method, temperature)
    moved = rank_advantages(_TRANSFORMS[transform](rewards).float(), method, temperature)
    assert torch.equal(adv, moved)
    valid = ~torch.isnan(rewards)
    assert (adv[~valid] == 0).all()
    assert torch.allclose(adv.sum(dim=1), torch.zeros(adv.shape[0]), atol=1e-5)  # zero mean over valid entries


def test_rank_params_are_checked():
    with pytest.raises(ConfigError) as err:
        RankAdvantage(RankAdvantage.Params(method="borda"))  # type: ignore[arg-type]
    assert err.value.where == "advantage.params.method"
    with pytest.raises(ConfigError) as err:
        RankAdvantage(RankAdvantage.Params(temperature=0.0))
    assert err.value.where == "advantage.params.temperature"
    with pytest.raises(ValueError, match="method"):
        rank_advantages(torch.zeros(1, 2), "borda")  # type: ignore[arg-type]


# --- rloo ---------------------------------------------------------------------------------------


def test_rloo_matches_hand_computation():
    # scored {1, 3, 3, 0}: 1 - (3+3+0)/3, 3 - (1+3+0)/3, ..., 0 - (1+3+3)/3
    rewards = torch.tensor([[1.0, 3.0, 3.0, NAN, 0.0]])
    expected = torch.tensor([[-1.0, 5 / 3, 5 / 3, 0.0, -7 / 3]])
    assert torch.allclose(leave_one_out_advantages(rewards), expected)
    # scale=group divides by the unbiased std of {1, 3, 3, 0} = 1.5
    assert torch.allclose(leave_one_out_advantages(rewards, "group"), expected / (1.5 + EPS))


def test_rloo_is_scaled_group_centring():
    rewards = torch.rand(4, 6, generator=torch.Generator().manual_seed(2))
    centred = group_normalized_advantages(rewards, "none")
    assert torch.allclose(leave_one_out_advantages(rewards), 6 / 5 * centred, atol=1e-6)


def test_rloo_degenerate_groups_get_exact_zero():
    rewards = torch.tensor([[0.1, 0.1, 0.1], [NAN, 0.5, NAN], [NAN, NAN, NAN], [0.3, NAN, 0.3]])
    for scale in ("none", "group"):
        assert torch.equal(leave_one_out_advantages(rewards, scale), torch.zeros(4, 3))


def test_rloo_params_are_checked():
    with pytest.raises(ConfigError) as err:
        LeaveOneOutAdvantage(LeaveOneOutAdvantage.Params(scale="batch"))  # type: ignore[arg-type]
    assert err.value.where == "advantage.params.scale"
    with pytest.raises(ConfigError) as err:
        LeaveOneOutAdvantage(LeaveOneOutAdvantage.Params(eps=-1.0))
    assert err.value.where == "advantage.params.eps"


# --- all three ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(ESTIMATORS))
def test_yaml_spells_out_every_default(name):
    node = yaml.safe_load((CONF / f"{name}.yaml").read_text())
    assert node["name"] == name
    assert node["params"] == dataclasses.asdict(ESTIMATORS[name].Params())


@pytest.mark.parametrize("name", [*sorted(ESTIMATORS), "opo"])
def test_cli_validates(name):
    assert main(["validate", f"advantage={name}"]) == 0


@pytest.mark.parametrize("name", ["rank", "rloo", "reinforce_pp", "pass_at_k", "opo"])
def test_reward_estimators_need_rewards(name):
    batch = example_reward_batch()
    est = OptimalBaselineAdvantage() if name == "opo" else ESTIMATORS[name](ESTIMATORS[name].Params())
    with pytest.raises(ValueError, match="aggregated rewards"):
        est.advantages(type(batch)(rubric=batch.rubric, raw_scores=batch.raw_scores, scores=batch.scores,
                                   weights=batch.weights))


# --- reinforce_pp -------------------------------------------------------------------------------


def test_reinforce_pp_matches_hand_computation():
    # REINFORCE++-baseline (arXiv 2501.03262): A = r - group mean, then (A - batch mean) / (batch std + eps).
    rewards = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.5, 0.5, 0.5, 0.5], [1.0, 0.75, 0.25, 0.0]])
    centred = [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0, 0.5, 0.25, -0.25, -0.5]  # the saturated group enters as zeros
    sd = _unbiased_std(centred) + EPS  # sqrt(1.625 / 11); the batch mean is 0
    expected = torch.tensor([[0.5, -0.5, -0.5, 0.5], [0.0] * 4, [0.5, 0.25, -0.25, -0.5]]) / sd
    adv = reinforce_pp_advantages(rewards)
    assert torch.allclose(adv, expected, atol=1e-6)
    # unlike GRPO, a group whose rewards barely differ is not blown up to its own unit std
    close = torch.tensor([[1.0, 0.0, 0.0, 1.0], [0.55, 0.45, 0.5, 0.5]])
    assert reinforce_pp_advantages(close)[1, 0] < 0.2 < 1.0 < group_normalized_advantages(close)[1, 0]


def test_reinforce_pp_loo_baseline_and_batch_mean():
    # loo: 1 - (3+3+0)/3 = -1, 3 - 4/3 = 5/3, 5/3, 0 - 7/3; [2, 0] → 2, -2; the batch mean is not 0
    rewards = torch.tensor([[1.0, 3.0, 3.0, NAN, 0.0], [2.0, 0.0, NAN, NAN, NAN]])
    loo = [-1.0, 5 / 3, 5 / 3, -7 / 3, 2.0, -2.0]
    m, sd = sum(loo) / 6, _unbiased_std(loo) + EPS
    expected = torch.tensor([[(v - m) / sd for v in loo[:3]] + [0.0, (loo[3] - m) / sd],
                             [(2 - m) / sd, (-2 - m) / sd, 0.0, 0.0, 0.0]])
    assert torch.allclose(reinforce_pp_advantages(rewards, "loo"), expected, atol=1e-6)


def test_reinforce_pp_degenerate_groups_get_exact_zero_and_params_are_checked():
    rewards = torch.tensor([[0.1, 0.1, 0.1], [NAN, 0.5, NAN], [NAN, NAN, NAN], [0.3, NAN, 0.3], [0.0, 1.0, 0.2]])
    adv = reinforce_pp_advantages(rewards)
    assert torch.equal(adv[:4], torch.zeros(4, 3))
    assert adv[4].abs().min() > 0
    with pytest.raises(ConfigError) as err:
        ReinforcePlusPlusAdvantage(ReinforcePlusPlusAdvantage.Params(baseline="batch"))  # type: ignore[arg-type]
    assert err.value.where == "advantage.params.baseline"
    with pytest.raises(ConfigError) as err:
        ReinforcePlusPlusAdvantage(ReinforcePlusPlusAdvantage.Params(eps=0.0))
    assert err.value.where == "advantage.params.eps"


# --- pass_at_k ----------------------------------------------------------------------------------


def test_pass_at_k_matches_the_analytic_formula():
    # n = 5, c = 2, k = 2 (Chen et al., arXiv 2508.10751, eqs. 9-11):
    # R = 1 - C(3,2)/C(5,2) = 0.7, sigma = sqrt(0.21), A+ = 0.3/sigma, A- = (0.3 - C(2,1)/C(4,1))/sigma
    adv = pass_at_k_advantages(torch.tensor([[1.0, 0.0, 0.0, 1.0, 0.0]]), k=2)
    sigma = math.sqrt(0.21)
    plus, minus = 0.3 / sigma, (0.3 - 0.5) / sigma
    assert torch.allclose(adv, torch.tensor([[plus, minus, minus, plus, minus]]), atol=1e-6)
    assert abs(float(adv.sum())) < 1e-5  # zero-mean group


def test_pass_at_k_agrees_with_pkpo_and_with_grpo_at_k_1():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0, 0.0, 0.0]])
    n, c, k = 6, 2, 3
    # PKPO (arXiv 2505.15201) binary transform: k/n for a success, k/n * rho(n-1, c, k-1) for a failure
    rho = 1 - math.comb(n - 1 - c, k - 1) / math.comb(n - 1, k - 1)
    gap = k / n * (1 - rho)
    adv = pass_at_k_advantages(rewards, k=k)
    mean = 1 - math.comb(n - c, k) / math.comb(n, k)
    assert math.isclose(float(adv[0, 0] - adv[0, 1]), gap * n / (k * math.sqrt(mean * (1 - mean))), rel_tol=1e-5)
    # k = 1: GRPO on the success indicator with the population std
    p = c / n
    grpo = torch.tensor([[(r - p) / math.sqrt(p * (1 - p)) for r in (1, 0, 1, 0, 0, 0)]])
    assert torch.allclose(pass_at_k_advantages(rewards, k=1), grpo, atol=1e-6)


def test_pass_at_k_threshold_nan_and_unlearnable_groups():
    rewards = torch.tensor([[0.9, 0.2, NAN, 0.95], [1.0, 1.0, 1.0, 1.0], [0.0, 0.1, 0.2, 0.3], [0.9, NAN, NAN, 0.1]])
    adv = pass_at_k_advantages(rewards, k=2, threshold=0.9)
    # group 0: n = 3 scored, c = 2: R = 1 - 0 = 1 (every pair holds a success), so no signal at k = 2
    assert torch.equal(adv[:3], torch.zeros(3, 4))
    assert torch.equal(adv[3], torch.zeros(4))  # n = 2, c = 1: R = 1 again
    adv = pass_at_k_advantages(rewards, k=1, threshold=0.9)
    assert adv[0, 2] == 0 and adv[0, 0] > 0 > adv[0, 1]


def test_pass_at_k_params_are_checked():
    with pytest.raises(ConfigError) as err:
        PassAtKAdvantage(PassAtKAdvantage.Params(k=0))
    assert err.value.where == "advantage.params.k"
    with pytest.warns(UserWarning, match="num_generations >= 8"):
        adv = PassAtKAdvantage(PassAtKAdvantage.Params(k=8)).advantages(example_reward_batch(group=6))
    assert torch.equal(adv, torch.zeros(4, 6))


# --- opo ----------------------------------------------------------------------------------------


def test_opo_length_weighted_baseline_matches_hand_computation():
    # OPO (arXiv 2505.23585, §3.2): b = sum(l r) / sum(l); A = r - b, no std
    rewards = torch.tensor([[1.0, 0.0, 0.0], [0.2, NAN, 0.8]])
    lengths = torch.tensor([[10.0, 20.0, 30.0], [30.0, 99.0, 10.0]])
    b0 = 10 / 60
    b1 = (30 * 0.2 + 10 * 0.8) / 40  # the unscored completion's length does not count
    expected = torch.tensor([[1 - b0, -b0, -b0], [0.2 - b1, 0.0, 0.8 - b1]])
    assert torch.allclose(opo_advantages(rewards, lengths), expected, atol=1e-6)
    # equal lengths: plain group centring
    assert torch.allclose(opo_advantages(rewards), group_normalized_advantages(rewards, "none"), atol=1e-6)


def test_opo_reads_lengths_from_the_batch_and_zeroes_degenerate_groups():
    batch = example_reward_batch()
    lengths = torch.arange(1, batch.shape[0] * batch.shape[1] + 1, dtype=torch.float32).view(batch.shape[:2])
    with_lengths = dataclasses.replace(batch, extras={"completion_lengths": lengths})
    est = OptimalBaselineAdvantage()
    assert torch.allclose(est.advantages(with_lengths), opo_advantages(batch.rewards, lengths))
    assert not torch.allclose(est.advantages(with_lengths), est.advantages(batch))
    rewards = torch.tensor([[0.4, 0.4], [NAN, 0.4]])
    assert torch.equal(opo_advantages(rewards, torch.tensor([[3.0, 9.0], [1.0, 1.0]])), torch.zeros(2, 2))


def test_opo_yaml_has_no_params():
    node = yaml.safe_load((CONF / "opo.yaml").read_text())
    assert node == {"name": "opo", "params": {}}


@pytest.mark.slow
@pytest.mark.parametrize("name", ["reinforce_pp", "pass_at_k", "opo"])
def test_new_estimators_train_by_config_alone(name, tmp_path, monkeypatch):
    import csv

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    # the tiny policy rarely scores 1.0: pass@2 at a reachable threshold so groups have successes and failures
    extra = ["advantage.params.k=2", "advantage.params.threshold=0.3"] if name == "pass_at_k" else []
    assert main(["fit", "model=tiny_random", "logger=csv", "trainer.max_steps=2", "batch_size=4",
                 "num_generations=4", f"advantage={name}", *extra, f"hydra.run.dir={tmp_path / 'run'}"]) == 0
    (path,) = (tmp_path / "run").glob("csv/version_0/metrics.csv")
    rows = [r for r in csv.DictReader(path.open()) if r.get("reward/mean")]
    assert len(rows) == 2 and all(math.isfinite(float(r["loss"])) for r in rows)
    assert any(float(r["advantages/std"]) > 0 for r in rows), "some group carried a signal"
