"""The built-in aggregators beyond weighted_sum: hand-computed values, NaN, ordering rules, config errors."""

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

from rlkit import ConfigError, RewardBatch, Rubric, rubric_from_dict
from rlkit.core.rubric import load_rubric
from rlkit.reward.pipeline import normalize_scores
from rlkit.testing import example_reward_batch
from rlkit_plugins.aggregators.geometric import GeometricAggregator, nan_geometric_mean
from rlkit_plugins.aggregators.layered import LayeredAggregator
from rlkit_plugins.aggregators.lexicographic import LexicographicAggregator, lexicographic_keys, priority_order
from rlkit_plugins.aggregators.min_first import MinFirstAggregator
from rlkit_plugins.aggregators.minimum import MinAggregator
from rlkit_plugins.aggregators.pareto import ParetoAggregator
from rlkit_plugins.aggregators.weighted_sum import nan_weighted_sum

NAN = math.nan
CONF = Path(__file__).resolve().parents[2] / "conf"
ARITHMETIC = load_rubric(CONF / "rubric_files" / "arithmetic.yaml")
NAMES = ["geometric", "min_first", "min", "lexicographic", "pareto", "layered"]
FAST = settings(max_examples=40, deadline=None)


def unit_rubric(*names: str, **extra: dict) -> Rubric:
    """Scale dimensions on [0, 1] (raw = normalised), weight 1, with per-dimension extras."""
    return rubric_from_dict({"name": "t", "version": "1", "dimensions": [
        {"name": n, "range": [0, 1], **extra.get(n, {})} for n in names]})


def make_batch(raw, rubric: Rubric, weights=None) -> RewardBatch:
    raw = torch.tensor(raw, dtype=torch.float32)
    if raw.ndim == 2:
        raw = raw.unsqueeze(0)
    w = torch.tensor(weights if weights is not None else rubric.initial_weights(), dtype=torch.float32)
    return RewardBatch(rubric=rubric, raw_scores=raw, scores=normalize_scores(raw, rubric), weights=w)


def close(actual: torch.Tensor, expected) -> bool:
    expected = torch.tensor(expected, dtype=torch.float32).reshape(actual.shape)
    return torch.allclose(actual, expected, atol=1e-6, equal_nan=True)


# --- geometric ---------------------------------------------------------------------------------


def test_geometric_by_hand():
    agg = GeometricAggregator(GeometricAggregator.Params())
    rubric = unit_rubric("a", "b", "c")
    out = agg.aggregate(make_batch([[0.25, 1.0, NAN], [0.5, 0.125, 1.0]], rubric, [1.0, 1.0, 5.0]))
    # NaN skipped, weights renormalised: √0.25; (0.5·0.125·1⁵)^(1/7)
    assert close(out, [[0.5, (0.5 * 0.125) ** (1 / 7)]])
    weighted = agg.aggregate(make_batch([[0.5, 0.125, 1.0]], rubric, [2.0, 1.0, 0.0]))
    assert close(weighted, [[(0.25 * 0.125) ** (1 / 3)]])


def test_geometric_floor_and_hard_zero():
    rubric = unit_rubric("a", "b", "c")
    batch = make_batch([[0.0, 1.0, 1.0], [0.5, 0.5, 0.0], [NAN, NAN, NAN]], rubric, [1.0, 1.0, 0.0])
    floored = GeometricAggregator(GeometricAggregator.Params()).aggregate(batch)
    assert close(floored, [[0.1, 0.5, NAN]]), "a zero counts as the floor 0.01: √0.01"
    hard = GeometricAggregator(GeometricAggregator.Params(hard_zero=True)).aggregate(batch)
    assert close(hard, [[0.0, 0.5, NAN]]), "a zero on a dimension of weight 0 does not count"
    assert torch.isnan(nan_geometric_mean(torch.tensor([[NAN, 0.7]]), torch.tensor([1.0, 0.0]))).all()


@pytest.mark.parametrize("floor", [0.0, 1.0, -0.1, NAN])
def test_geometric_rejects_bad_floor(floor):
    with pytest.raises(ConfigError, match="floor") as err:
        GeometricAggregator(GeometricAggregator.Params(floor=floor))
    assert err.value.where == "aggregator.params.floor"


# --- min ---------------------------------------------------------------------------------------


def test_min_by_hand_and_nan():
    rubric = unit_rubric("a", "b", "c")
    agg = MinAggregator(MinAggregator.Params())
    out = agg.aggregate(make_batch([[0.2, 0.8, NAN], [NAN, NAN, NAN], [0.9, 0.3, 0.6]], rubric, [5.0, 0.1, 1.0]))
    assert close(out, [[0.2, NAN, 0.3]]), "weights only switch dimensions on or off"
    off = agg.aggregate(make_batch([[0.2, 0.8, NAN], [0.4, NAN, NAN]], rubric, [0.0, 1.0, 1.0]))
    assert close(off, [[0.8, NAN]]), "weight 0 removes a dimension; nothing counted left → NaN"


def test_min_does_not_declare_order_invariance():
    # Cubing dimension a flips which completion's minimum is lower, so the property cannot hold.
    rubric = unit_rubric("a", "b")
    agg = MinAggregator(MinAggregator.Params())
    before = agg.aggregate(make_batch([[0.5, 0.3], [0.4, 1.0]], rubric))
    after = agg.aggregate(make_batch([[0.5 ** 3, 0.3], [0.4 ** 3, 1.0]], rubric))
    assert before[0, 0] < before[0, 1] and after[0, 0] > after[0, 1]
    assert not getattr(agg, "order_invariant", False)


# --- min_first ---------------------------------------------------------------------------------

GATED = rubric_from_dict({"name": "gated", "version": "1", "dimensions": [
    {"name": "safe", "type": "binary", "gate": 1},
    {"name": "format", "range": [1, 5], "gate": 3, "weight": 7.0},
    {"name": "quality", "range": [0, 10], "weight": 1.0},
    {"name": "brevity", "type": "binary", "weight": 3.0},
]})


def test_min_first_gates_then_weighted_sum_of_the_rest():
    agg = MinFirstAggregator(MinFirstAggregator.Params())
    out = agg.aggregate(make_batch([
        [1, 3, 5, 1],          # gates pass (format exactly at 3): (0.5·1 + 1·3) / 4
        [1, 2.9, 10, 1],       # format below its gate
        [0, 5, 10, 1],         # safe failed
        [NAN, 5, 10, 1],       # safe not scored: counted as failed
        [1, 4, NAN, 0],        # quality unscored, skipped: brevity only
        [1, 5, NAN, NAN],      # gates pass, nothing else scored → 1.0
        [NAN, NAN, NAN, NAN],  # nothing scored → NaN
        [NAN, NAN, 10, 1],     # gates unscored, rest scored → floor, not NaN
    ], GATED))
    assert close(out, [[3.5 / 4, 0.0, 0.0, 0.0, 0.0, 1.0, NAN, 0.0]])


def test_min_first_floor_and_gate_only_rubric():
    only_gates = rubric_from_dict({"name": "g", "version": "1", "dimensions": [
        {"name": "safe", "type": "binary", "gate": 1}, {"name": "ok", "range": [0, 10], "gate": 6}]})
    agg = MinFirstAggregator(MinFirstAggregator.Params(floor=0.25))
    out = agg.aggregate(make_batch([[1, 6], [1, 5], [0, 10], [NAN, NAN]], only_gates))
    assert close(out, [[1.0, 0.25, 0.25, NAN]])


def test_min_first_check_rubric():
    agg = MinFirstAggregator(MinFirstAggregator.Params())
    agg.check_rubric(GATED)
    agg.check_rubric(ARITHMETIC)
    with pytest.raises(ConfigError, match="needs at least one gate dimension.*dimensions: a, b"):
        agg.check_rubric(unit_rubric("a", "b"))
    with pytest.raises(ConfigError, match="floor"):
        MinFirstAggregator(MinFirstAggregator.Params(floor=1.5))


# --- lexicographic -----------------------------------------------------------------------------

LEX = unit_rubric("a", "b", "c", a={"priority": 2}, b={"priority": 1})


def lex(raw, tolerance=0.0, rubric=LEX, weights=None) -> torch.Tensor:
    agg = LexicographicAggregator(LexicographicAggregator.Params(tolerance=tolerance))
    agg.check_rubric(rubric)
    return agg.aggregate(make_batch(raw, rubric, weights))


def test_priority_order_convention():
    # lower priority number first; no priority last, in rubric order; equal priorities keep rubric order
    rubric = unit_rubric("x", "y", "z", "w", "v", x={"priority": 3}, z={"priority": 1}, v={"priority": 3})
    assert priority_order(rubric) == [2, 0, 4, 1, 3]
    assert priority_order(LEX) == [1, 0, 2]


def test_lexicographic_by_hand_with_ties():
    #        a    b    c      order: b first, then a, then c
    out = lex([[0.2, 1.0, 0.0],   # r0: b=1, a=0.2          → third
               [0.5, 1.0, 0.0],   # r1: b=1, a=0.5          → tied best with r3
               [1.0, 0.5, 1.0],   # r2: b lower             → last, whatever a and c say
               [0.5, 1.0, 0.0]])  # r3
    # win rate: share of the 3 others beaten, ties half
    assert close(out, [[1 / 3, 2.5 / 3, 0.0, 2.5 / 3]])


def test_lexicographic_all_tie_lone_and_unscored():
    assert close(lex([[0.3, 0.3, 0.3]] * 4), [[0.5] * 4])
    assert close(lex([[0.3, NAN, 0.1], [NAN, NAN, NAN]]), [[0.5, NAN]]), "a lone scored completion: 0.5"
    # the unscored completion takes no part: the other two are ranked between themselves
    assert close(lex([[0.3, 0.1, 0.0], [NAN, NAN, NAN], [0.3, 0.2, 0.0]]), [[0.0, NAN, 1.0]])


def test_lexicographic_nan_is_worse_than_any_score_at_its_level():
    out = lex([[1.0, NAN, 1.0], [0.0, 0.0, 0.0], [1.0, NAN, 0.5]])
    assert close(out, [[0.5, 1.0, 0.0]]), "b unscored ranks below b = 0; then a ties, c decides"


def test_lexicographic_tolerance():
    raw = [[0.45, 1.0, 1.0], [0.5, 1.0, 0.0]]
    assert close(lex(raw), [[0.0, 1.0]]), "tolerance 0: a decides"
    assert close(lex(raw, tolerance=0.1), [[1.0, 0.0]]), "a within 0.1 ties, c decides"
    assert close(lex(raw, tolerance={"a": 0.1}), [[1.0, 0.0]])
    assert close(lex(raw, tolerance={"c": 0.1}), [[0.0, 1.0]])
    # a gap of exactly the tolerance ties, although float32 0.6 - 0.5 is a little over 0.1
    exact = [[0.5, 1.0, 1.0], [0.6, 1.0, 0.0]]
    assert close(lex(exact, tolerance=0.1), [[1.0, 0.0]]) and close(lex(exact), [[0.0, 1.0]])


def test_lexicographic_tolerance_tiers_are_transitive():
    # a: 0.12, 0.06, 0.00 with tolerance 0.1. Pairwise |Δ| <= 0.1 would tie 0.12~0.06 and 0.06~0.00
    # but not 0.12~0.00 and, with c breaking ties, rank in a cycle. Tiers anchor on the best value:
    # {0.12, 0.06} then {0.00}; c orders only within the first tier.
    out = lex([[0.12, 1.0, 0.0], [0.06, 1.0, 1.0], [0.0, 1.0, 1.0]], tolerance=0.1)
    assert close(out, [[0.5, 1.0, 0.0]])
    assert lexicographic_keys([[0.12, 0.0], [0.06, 1.0], [0.0, 1.0]], [0.1, 0.0]) == [(0, 1), (0, 0), (1, 0)]


def test_lexicographic_skips_zero_weight_dimensions():
    assert close(lex([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]], weights=[1.0, 0.0, 1.0]), [[0.0, 1.0]])
    assert close(lex([[NAN, 1.0, NAN], [1.0, 0.0, 0.0]], weights=[1.0, 0.0, 1.0]), [[NAN, 0.5]])


def test_lexicographic_declares_order_invariance_only_without_tolerance():
    assert LexicographicAggregator(LexicographicAggregator.Params()).order_invariant
    assert LexicographicAggregator(LexicographicAggregator.Params(tolerance={"a": 0.0})).order_invariant
    assert not LexicographicAggregator(LexicographicAggregator.Params(tolerance={"a": 0.1})).order_invariant
    assert ParetoAggregator.order_invariant


def test_lexicographic_config_errors():
    with pytest.raises(ConfigError, match="unknown dimension.*'nope'.*dimensions: a, b, c") as err:
        LexicographicAggregator(LexicographicAggregator.Params(tolerance={"nope": 0.1})).check_rubric(LEX)
    assert err.value.where == "aggregator.params.tolerance"
    for bad in (-0.1, 2.0, {"a": NAN}):
        with pytest.raises(ConfigError, match="tolerance"):
            LexicographicAggregator(LexicographicAggregator.Params(tolerance=bad))


def grid_groups(dims: int = 3):
    """Groups of 2-6 completions with scores on a 0.1 grid, NaN sprinkled in."""
    cell = st.one_of(st.integers(0, 10).map(lambda k: k / 10), st.just(NAN))
    return st.integers(2, 6).flatmap(lambda g: st.lists(st.lists(cell, min_size=dims, max_size=dims),
                                                          min_size=g, max_size=g))


def increasing_transform():
    """Strictly increasing maps of [0, 1] into [0, 1] that keep 0.1-grid values distinct in float32."""
    power = st.floats(0.3, 3.0).map(lambda p: lambda x: x ** p)
    expo = st.floats(0.5, 5.0).map(lambda a: lambda x: math.expm1(a * x) / math.expm1(a))
    affine = st.floats(0.05, 0.45).map(lambda c: lambda x: c + (1 - 2 * c) * x)
    return st.one_of(power, expo, affine)


def _transformed(group, dim, f):
    return [[f(v) if j == dim and not math.isnan(v) else v for j, v in enumerate(row)] for row in group]


@FAST
@given(group=grid_groups(), dim=st.integers(0, 2), f=increasing_transform())
def test_lexicographic_invariant_under_increasing_transform(group, dim, f):
    assert torch.equal(lex(group).nan_to_num(-1), lex(_transformed(group, dim, f)).nan_to_num(-1))


@FAST
@given(group=grid_groups())
def test_lexicographic_orders_exactly_as_tuple_comparison(group):
    out = lex(group)[0].tolist()
    order = priority_order(LEX)
    key = [tuple(-math.inf if math.isnan(row[i]) else row[i] for i in order) for row in group]
    for i, j in itertools.permutations(range(len(group)), 2):
        if all(math.isnan(v) for v in group[i]) or all(math.isnan(v) for v in group[j]):
            continue
        assert (out[i] > out[j]) == (key[i] > key[j]) and (out[i] == out[j]) == (key[i] == key[j])


# --- pareto ------------------------------------------------------------------------------------

PAR = unit_rubric("a", "b")


def pareto(raw, method="rank", rubric=PAR, weights=None) -> torch.Tensor:
    return ParetoAggregator(ParetoAggregator.Params(method=method)).aggregate(make_batch(raw, rubric, weights))


def test_pareto_by_hand():
    raw = [[1.0, 1.0],   # front 1, dominated by none
           [1.0, 0.5],   # front 2, by p0
           [0.5, 1.0],   # front 2, by p0
           [0.5, 0.5],   # front 3, by p0, p1, p2
           [0.2, 0.2]]   # front 4, by all four
    assert close(pareto(raw), [[1.0, 2 / 3, 2 / 3, 1 / 3, 0.0]])
    assert close(pareto(raw, "count"), [[1.0, 0.75, 0.75, 0.25, 0.0]])


def test_pareto_ties_and_trade_offs():
    raw = [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]
    # p0 and p2 are equal (neither dominates); p0, p1, p2 trade off on the front; p3 is below p0, p1, p2
    assert close(pareto(raw), [[1.0, 1.0, 1.0, 0.0]])
    assert close(pareto(raw, "count"), [[1.0, 1.0, 1.0, 0.0]])
    assert close(pareto([[0.3, 0.3]] * 3), [[1.0] * 3]) and close(pareto([[0.3, 0.3]] * 3, "count"), [[1.0] * 3])


def test_pareto_nan():
    raw = [[NAN, 1.0], [0.0, 1.0], [NAN, NAN], [0.5, 0.0]]
    # NaN is worse than any score: p1 dominates p0; p2 is unscored and takes no part (G - 1 = 2)
    assert close(pareto(raw), [[0.0, 1.0, NAN, 1.0]])
    assert close(pareto(raw, "count"), [[0.5, 1.0, NAN, 1.0]])
    assert close(pareto([[NAN, 1.0], [1.0, 0.0]], weights=[1.0, 0.0]), [[NAN, 1.0]]), "weight 0: dimension off"


def brute_force_dominated_by(group) -> list[int]:
    val = [[-math.inf if math.isnan(v) else v for v in row] for row in group]
    scored = [not all(math.isnan(v) for v in row) for row in group]

    def dominates(i, j):
        pairs = list(zip(val[i], val[j], strict=True))
        return all(x >= y for x, y in pairs) and any(x > y for x, y in pairs)

    return [sum(dominates(i, j) for i in range(len(group)) if scored[i] and i != j) for j in range(len(group))]


@FAST
@given(group=grid_groups())
def test_pareto_count_matches_brute_force(group):
    rubric = unit_rubric("a", "b", "c")
    out = pareto(group, "count", rubric)[0].tolist()
    scored = [not all(math.isnan(v) for v in row) for row in group]
    others = max(sum(scored) - 1, 1)
    for j, count in enumerate(brute_force_dominated_by(group)):
        assert math.isnan(out[j]) if not scored[j] else out[j] == pytest.approx(1 - count / others)


@FAST
@given(group=grid_groups(), dim=st.integers(0, 2), f=increasing_transform(), method=st.sampled_from(["rank", "count"]))
def test_pareto_invariant_under_increasing_transform(group, dim, f, method):
    rubric = unit_rubric("a", "b", "c")
    before = pareto(group, method, rubric)
    assert torch.equal(before.nan_to_num(-1), pareto(_transformed(group, dim, f), method, rubric).nan_to_num(-1))
    first_front = before[0] == 1
    assert first_front.any() or torch.isnan(before).all(), "some completion is always non-dominated"


# --- layered -----------------------------------------------------------------------------------


def layered(**params) -> LayeredAggregator:
    return LayeredAggregator(LayeredAggregator.Params(**params))


def shipped_params(name: str) -> dict:
    return yaml.safe_load((CONF / "aggregator" / f"{name}.yaml").read_text())["params"]


def test_layered_without_layers_is_the_combine_method_over_all_dimensions():
    batch = example_reward_batch()
    assert torch.equal(layered().aggregate(batch).nan_to_num(-1),
                       nan_weighted_sum(batch.scores, batch.weights).nan_to_num(-1))
    assert torch.equal(layered(combine="min").aggregate(batch).nan_to_num(-1),
                       MinAggregator(None).aggregate(batch).nan_to_num(-1))


def test_layered_shipped_config_on_arithmetic_by_hand():
    agg = layered(**shipped_params("layered"))
    agg.check_rubric(ARITHMETIC)
    # format, correctness (binary); brevity, repetition (1-5). must = min(format, correctness) weight 3;
    # style = brevity·0.5 + repetition·0.5 over 1 (scheduler weights), weight 1
    out = agg.aggregate(make_batch([[1, 0, 5, 3], [1, 1, 5, 3], [1, 1, NAN, NAN], [NAN, NAN, 1, 5],
                                    [NAN, NAN, NAN, NAN]], ARITHMETIC))
    assert close(out, [[0.75 / 4, 3.75 / 4, 1.0, 0.5, NAN]])


def test_layered_gate_combine_and_methods():
    rubric = unit_rubric("a", "b", "c", "d")
    layers = [{"name": "must", "dimensions": ["a", "b"], "method": "min"},
              {"name": "nice", "dimensions": ["c", "d"], "method": "geometric"}]
    agg = layered(layers=layers, combine="gate", gate_threshold=0.8)
    out = agg.aggregate(make_batch([[0.9, 0.8, 0.25, 1.0],   # min 0.8 reaches the gate: √0.25
                                    [0.9, 0.7, 1.0, 1.0],    # min 0.7 fails
                                    [NAN, NAN, 1.0, 1.0],    # gate layer unscored: fails
                                    [1.0, 1.0, NAN, NAN],    # gate passes, last unscored: 1.0
                                    [NAN, NAN, NAN, NAN]], rubric))
    assert close(out, [[0.5, 0.0, 0.0, 1.0, NAN]])
    geo = layered(layers=[{"name": "x", "dimensions": ["a"], "weight": 1.0},
                          {"name": "y", "dimensions": ["b", "c"], "method": "weighted_sum", "weight": 3.0}],
                  combine="geometric")
    assert close(geo.aggregate(make_batch([[0.5, 0.0, 0.5, 0.3]], rubric)), [[(0.5 * 0.25 ** 3) ** (1 / 4)]])


def test_layered_nested_layers():
    rubric = unit_rubric("a", "b", "c", "d")
    agg = layered(layers=[
        {"name": "core", "method": "min", "weight": 1.0, "layers": [
            {"name": "ab", "dimensions": ["a", "b"], "method": "weighted_sum"},
            {"name": "c", "dimensions": ["c"]}]},
        {"name": "d", "dimensions": ["d"], "weight": 0.0},
    ])
    agg.check_rubric(rubric)
    out = agg.aggregate(make_batch([[0.2, 0.6, 0.9, 1.0], [0.2, 0.6, 0.3, 1.0]], rubric, [1.0, 3.0, 1.0, 1.0]))
    assert close(out, [[0.5, 0.3]]), "core = min((0.2 + 3·0.6)/4, c); d has layer weight 0"


@pytest.mark.parametrize(("params", "message", "where"), [
    ({"layers": [{"name": "x", "dimensions": ["a"]}, {"name": "y", "dimensions": ["b", "a"]}]},
     "dimension 'a' is in layer 'x' already", "layers[1](y).dimensions"),
    ({"layers": [{"name": "x", "dimensions": ["a", "a"]}]}, "'a' is in layer 'x' already", "layers[0](x).dimensions"),
    ({"layers": [{"name": "x", "dimensions": ["a"]}, {"name": "x", "dimensions": ["b"]}]},
     "duplicate layer name 'x'", "layers[1].name"),
    ({"layers": [{"name": "x", "dimensions": ["a"], "layers": []}]}, "either 'dimensions' or 'layers'", "layers[0](x)"),
    ({"layers": [{"name": "x"}]}, "either 'dimensions' or 'layers'", "layers[0](x)"),
    ({"layers": [{"name": "x", "dimensions": ["a"], "method": "lexicographic"}]},
     "unknown method 'lexicographic'; available: weighted_sum, geometric, min, gate", "layers[0](x).method"),
    ({"layers": [{"name": "x", "dimensions": ["a"], "wieght": 2}]}, "unknown key 'wieght'", "layers[0]"),
    ({"layers": [{"dimensions": ["a"]}]}, "non-empty 'name'", "layers[0].name"),
    ({"layers": [{"name": "x", "dimensions": []}]}, "non-empty list", "layers[0](x).dimensions"),
    ({"layers": [{"name": "x", "dimensions": ["a"], "weight": -1}]}, "weight must be", "layers[0](x).weight"),
    ({"layers": [{"name": "x", "dimensions": ["a"], "weight": 0}]}, "all layer weights are 0", "layers"),
    ({"layers": [{"name": "x", "method": "min", "layers": [{"name": "y", "dimensions": ["a"], "weight": 0}]}]},
     "all layer weights are 0", "layers[0](x).layers"),
    ({"gate_threshold": 1.5}, "gate_threshold", "gate_threshold"),
    ({"geometric_floor": 0.0}, "geometric_floor", "geometric_floor"),
    ({"combine": "sum"}, "unknown method 'sum'", "combine"),
])
def test_layered_config_errors(params, message, where):
    with pytest.raises(ConfigError, match=message) as err:
        layered(**params)
    assert err.value.where == f"aggregator.params.{where}"


def test_layered_check_rubric_lists_valid_dimensions():
    agg = layered(layers=[{"name": "x", "layers": [{"name": "y", "dimensions": ["format", "corectness"]}]}])
    with pytest.raises(ConfigError, match="layer 'x' names unknown dimension.*'corectness'.*"
                                          "has: format, correctness, brevity, repetition"):
        agg.check_rubric(ARITHMETIC)
    with pytest.raises(ConfigError, match="corectness"):
        agg.aggregate(make_batch([[1, 1, 5, 5]], ARITHMETIC))


def test_layered_bad_config_through_the_registry(registry):
    with pytest.raises(ConfigError, match=r"layers\[0\]\(x\)\.method"):
        registry.create("aggregator", "layered", {"layers": [{"name": "x", "dimensions": ["a"], "method": "max"}]})


# --- shipped YAML ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_yaml_validates_with_the_default_rubric(name):
    from rlkit.cli import main

    assert main(["validate", f"aggregator={name}"]) == 0


@pytest.mark.parametrize("name", NAMES)
def test_yaml_spells_out_every_default(registry, name):
    params = shipped_params(name)
    defaults = dataclasses.asdict(registry.get("aggregator", name).schema())
    if name == "layered":
        assert defaults.pop("layers") == [] and params.pop("layers"), "layered ships layers for the arithmetic rubric"
    assert params == defaults


# --- logsumexp (soft minimum) --------------------------------------------------------------------

def test_logsumexp_by_hand():
    from rlkit_plugins.aggregators.logsumexp import soft_minimum

    scores = torch.tensor([[1.0, 0.0], [0.5, 0.5], [1.0, NAN], [NAN, NAN]])
    got = soft_minimum(scores, torch.tensor([1.0, 1.0]), 0.2)
    # -0.2 · log(0.5·e^-5 + 0.5·e^0); equal scores give that score; an unscored dimension drops out
    assert close(got, [-0.2 * math.log(0.5 * math.exp(-5) + 0.5), 0.5, 1.0, NAN])
    weighted = soft_minimum(torch.tensor([[1.0, 0.0]]), torch.tensor([3.0, 1.0]), 0.5)
    assert close(weighted, [-0.5 * math.log(0.75 * math.exp(-2) + 0.25)])


def test_logsumexp_lies_between_the_minimum_and_the_weighted_mean_and_tends_to_each():
    from rlkit_plugins.aggregators.logsumexp import soft_minimum

    scores = torch.tensor([[0.9, 0.2, 0.6]])
    w = torch.tensor([1.0, 2.0, 1.0])
    mean = float((scores * w).sum() / w.sum())
    values = [float(soft_minimum(scores, w, t)) for t in (1e-3, 0.1, 1.0, 100.0)]
    assert all(0.2 - 1e-6 <= v <= mean + 1e-6 for v in values)
    assert values == sorted(values)  # a higher temperature moves it from the minimum towards the mean
    assert values[0] == pytest.approx(0.2, abs=1e-2) and values[-1] == pytest.approx(mean, abs=1e-2)


def test_logsumexp_refuses_a_temperature_that_is_not_positive(registry):
    from rlkit.core.errors import ConfigError

    with pytest.raises(ConfigError, match="temperature"):
        registry.create("aggregator", "logsumexp", {"temperature": 0})
