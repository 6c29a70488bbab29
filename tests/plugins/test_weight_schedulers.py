"""The built-in weight schedulers: schedule (curricula), variance (collapse) and saturation (removal)."""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import pytest
import torch

from rlkit import ConfigError, Rubric, load_rubric, rubric_from_dict
from rlkit.cli import main
from rlkit.core.registry import Registry, create_plugin_manager

CONF = Path(__file__).resolve().parents[2] / "conf"
_REGISTRY = Registry(create_plugin_manager())
# format 1, correctness 2, brevity .5, repetition .5
ARITHMETIC = load_rubric(CONF / "rubric_files" / "arithmetic.yaml")


def make(name: str, **params: Any) -> Any:
    return _REGISTRY.create("weight_scheduler", name, params)


def xyz_rubric() -> Rubric:
    """Three binary dimensions, base weights 1, 2, 1 (total 4)."""
    return rubric_from_dict({"name": "xyz", "version": "1", "dimensions": [
        {"name": "x", "type": "binary", "weight": 1.0},
        {"name": "y", "type": "binary", "weight": 2.0},
        {"name": "z", "type": "binary", "weight": 1.0},
    ]})


def batch(*columns: torch.Tensor | float, groups: int = 4, size: int = 8) -> torch.Tensor:
    """``[groups, size, D]`` scores, one column per dimension: a float fills it, a tensor ``[size]``
    is repeated in every group."""
    out = torch.empty(groups, size, len(columns))
    for d, col in enumerate(columns):
        out[..., d] = col if isinstance(col, torch.Tensor) else float(col)
    return out


def varied(size: int = 8) -> torch.Tensor:
    return torch.arange(size).remainder(2).float()  # 0, 1, 0, 1, ...: variance ~0.29 in every group


def run(scheduler: Any, batches: list[torch.Tensor], rubric: Rubric, first_step: int = 0) -> list[list[float]]:
    return [scheduler.weights(first_step + i, s, rubric).tolist() for i, s in enumerate(batches)]


def torch_round_trip(state: dict[str, Any]) -> dict[str, Any]:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


# --- every scheduler --------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["schedule", "variance", "saturation"])
def test_yaml_validates(name):
    assert main(["validate", f"weights={name}"]) == 0


@pytest.mark.parametrize(("name", "override"), [
    ("schedule", "++weights.params.curricula={nope: {type: linear, start: 0, end: 1, steps: 10}}"),
    ("variance", "weights.params.fixed=[nope]"),
    ("saturation", "weights.params.fixed=[nope]"),
])
def test_unknown_dimension_names_the_valid_ones(name, override, capsys):
    assert main(["validate", f"weights={name}", override]) != 0
    err = capsys.readouterr().err
    assert "'nope'" in err and "['format', 'correctness', 'brevity', 'repetition']" in err


@pytest.mark.parametrize(("name", "params", "field"), [
    ("schedule", {"curricula": {"brevity": {"type": "linar"}}}, "weights.params.curricula.brevity.type"),
    ("schedule", {"curricula": {"brevity": {"type": "linear", "start": 0, "end": 1}}},
     "weights.params.curricula.brevity"),
    ("schedule", {"curricula": {"brevity": {"type": "linear", "start": -1, "end": 1, "steps": 5}}},
     "weights.params.curricula.brevity.start"),
    ("schedule", {"curricula": {"brevity": {"type": "linear", "start": 0, "end": 1, "steps": 0}}},
     "weights.params.curricula.brevity.steps"),
    ("schedule", {"curricula": {"brevity": {"type": "step", "milestones": {}}}},
     "weights.params.curricula.brevity.milestones"),
    ("variance", {"window": 0}, "weights.params.window"),
    ("variance", {"min_factor": 1.5}, "weights.params.min_factor"),
    ("variance", {"max_change": 0}, "weights.params.max_change"),
    ("variance", {"collapse_threshold": -1}, "weights.params.collapse_threshold"),
    ("saturation", {"majority_share": 0}, "weights.params.majority_share"),
    ("saturation", {"max_saturated_share": 1.5}, "weights.params.max_saturated_share"),
    ("saturation", {"patience": 0}, "weights.params.patience"),
])
def test_bad_params_name_the_field(name, params, field):
    with pytest.raises(ConfigError) as err:
        make(name, **params)
    assert err.value.where == field


# --- schedule ---------------------------------------------------------------------------------


def test_schedule_linear_step_and_cosine_values():
    s = make("schedule", curricula={
        "brevity": {"type": "linear", "start": 0.0, "end": 1.0, "steps": 100},
        "correctness": {"type": "step", "milestones": {10: 1.0, "50": 3.0}},
        "repetition": {"type": "cosine", "start": 1.0, "end": 0.0, "steps": 10, "delay": 20},
    })
    none = torch.zeros(2, 4, 4)
    at = {step: s.weights(step, none, ARITHMETIC).tolist() for step in (0, 9, 10, 25, 49, 50, 100, 150)}
    names = ARITHMETIC.dimension_names
    col = {n: {step: w[names.index(n)] for step, w in at.items()} for n in names}
    assert col["brevity"] == pytest.approx({0: 0.0, 9: 0.09, 10: 0.1, 25: 0.25, 49: 0.49, 50: 0.5, 100: 1.0,
                                            150: 1.0})
    # before the first milestone: the rubric's weight (2.0)
    assert col["correctness"] == {0: 2.0, 9: 2.0, 10: 1.0, 25: 1.0, 49: 1.0, 50: 3.0, 100: 3.0, 150: 3.0}
    # start until the delay, half-way at delay + steps/2, end afterwards
    assert col["repetition"][10] == 1.0 and col["repetition"][25] == pytest.approx(0.5)
    assert col["repetition"][50] == 0.0
    assert set(col["format"].values()) == {1.0}  # no curriculum: the rubric's weight throughout
    assert s.state_dict() == {}
    assert s.weights(25, none, ARITHMETIC).tolist() == at[25]  # a repeated step is harmless


def test_schedule_refuses_a_point_where_every_weight_is_zero():
    s = make("schedule", curricula={d: {"type": "linear", "start": 1.0, "end": 0.0, "steps": 10}
                                    for d in ARITHMETIC.dimension_names})
    with pytest.raises(ConfigError, match="every dimension weight is 0 at step 10"):
        s.check_rubric(ARITHMETIC)


# --- variance ---------------------------------------------------------------------------------


def test_variance_moves_weight_off_a_collapsed_dimension_at_a_bounded_rate():
    rubric = xyz_rubric()
    s = make("variance", window=3, max_change=0.1, min_factor=0.1)
    history = run(s, [batch(varied(), varied(), 1.0)] * 14, rubric)
    assert history[0] == history[1] == [1.0, 2.0, 1.0], "nothing collapses before the window is full"
    for prev, cur in zip(history, history[1:], strict=False):
        assert sum(cur) == pytest.approx(4.0, abs=1e-5)
        for d, base in enumerate([1.0, 2.0, 1.0]):
            assert abs(cur[d] - prev[d]) <= 0.1 * base + 1e-6
    # z falls by its bound (0.1) a step, the others rise in proportion to base weight (1 : 2)
    z = [w[2] for w in history]
    assert z[2:12] == pytest.approx([0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.1], abs=1e-6)
    # target: z = 0.1 · 1, freed 0.9 → x = 1 + 0.3, y = 2 + 0.6
    assert history[-1] == pytest.approx([1.3, 2.6, 0.1], abs=1e-6)
    assert s.collapsed == ["z"]

    # z varies again: the pooled window variance jumps, the target is the base, reached at the same bound
    back = run(s, [batch(varied(), varied(), varied())] * 10, rubric, first_step=14)
    assert s.collapsed == []
    assert back[0][2] == pytest.approx(0.2, abs=1e-6)
    assert back[-1] == pytest.approx([1.0, 2.0, 1.0], abs=1e-6)


def test_variance_window_fills_then_slides():
    rubric = xyz_rubric()
    s = make("variance", window=5, max_change=10.0)  # a large bound: weights reach the target at once
    lively, flat = batch(varied(), varied(), varied()), batch(varied(), varied(), 1.0)
    z_after = [w[2] for w in run(s, [lively] * 3 + [flat] * 12, rubric)]
    # the pooled variance of 3 lively steps among 5 stays above the threshold: z holds its weight
    # until the last of them (step 2) has left the window at step 7, then collapses and stays so
    assert z_after[:7] == [1.0] * 7
    assert z_after[7:] == pytest.approx([0.1] * 8)
    assert s.collapsed == ["z"]


def test_variance_keeps_base_weights_when_everything_collapsed_or_nothing_did():
    rubric = xyz_rubric()
    flat = make("variance", window=2)
    assert run(flat, [batch(1.0, 0.0, 1.0)] * 5, rubric)[-1] == [1.0, 2.0, 1.0]
    assert sorted(flat.collapsed) == ["x", "y", "z"]
    lively = make("variance", window=2)
    assert run(lively, [batch(varied(), varied(), varied())] * 5, rubric)[-1] == [1.0, 2.0, 1.0]


def test_variance_ignores_unscored_and_single_score_groups():
    rubric = xyz_rubric()
    s = make("variance", window=2, max_change=10.0)  # a large bound: weights reach the target at once
    unscored = batch(varied(), varied(), math.nan)
    one_each = unscored.clone()
    one_each[:, 0, 2] = 1.0  # one scored completion per group: no variance, no evidence of collapse
    assert run(s, [unscored, one_each, one_each], rubric)[-1] == [1.0, 2.0, 1.0]
    # fixed dimensions neither lose nor gain weight
    fixed = make("variance", window=2, max_change=10.0, fixed=["y"])
    assert run(fixed, [batch(varied(), varied(), 1.0)] * 3, rubric)[-1] == pytest.approx([1.9, 2.0, 0.1])


# --- saturation -------------------------------------------------------------------------------


def test_saturation_removes_a_saturated_dimension_and_restores_it():
    rubric = xyz_rubric()
    s = make("saturation")
    assert s.weights(0, batch(varied(), varied(), varied()), rubric).tolist() == [1.0, 2.0, 1.0]
    assert s.removed == []
    w = s.weights(1, batch(varied(), varied(), 1.0), rubric)
    assert s.removed == ["z"]
    assert w.tolist() == pytest.approx([4 / 3, 8 / 3, 0.0])  # z's 1.0 shared 1 : 2, total still 4
    assert s.weights(2, batch(varied(), varied(), varied()), rubric).tolist() == [1.0, 2.0, 1.0]
    assert s.removed == []


def test_saturation_share_threshold_is_strict_and_majority_share_catches_an_outlier():
    rubric = xyz_rubric()
    four_of_five = batch(varied(), varied(), varied(), groups=5)
    four_of_five[:4, :, 2] = 1.0  # z saturated in exactly 80% of the groups: not more than 0.8
    s = make("saturation")
    s.weights(0, four_of_five, rubric)
    assert s.removed == []

    outlier = torch.ones(8)
    outlier[3] = 0.0  # 7 of 8 identical: not saturated strictly, saturated at majority_share 0.875
    scores = batch(varied(), varied(), outlier)
    strict, majority = make("saturation"), make("saturation", majority_share=0.875)
    strict.weights(0, scores, rubric)
    majority.weights(0, scores, rubric)
    assert strict.removed == [] and majority.removed == ["z"]


def test_saturation_patience_and_fallbacks():
    rubric = xyz_rubric()
    sat, ok = batch(varied(), varied(), 1.0), batch(varied(), varied(), varied())
    s = make("saturation", patience=2)
    removed = []
    for step, scores in enumerate([sat, ok, sat, sat, ok, sat, ok, ok]):
        s.weights(step, scores, rubric)
        removed.append(s.removed)
    # removed after two saturated steps in a row, restored after two varied steps in a row
    assert removed == [[], [], [], ["z"], ["z"], ["z"], ["z"], []]

    everything = make("saturation")
    assert everything.weights(0, batch(1.0, 1.0, 0.0), rubric).tolist() == [1.0, 2.0, 1.0]
    assert everything.removed == []
    fixed = make("saturation", fixed=["z"])
    assert fixed.weights(0, batch(varied(), 1.0, 1.0), rubric).tolist() == pytest.approx([3.0, 0.0, 1.0])
    assert fixed.removed == ["y"]


# --- state: repeated steps and exact resume ---------------------------------------------------


def _mixed_batches(n: int, seed: int = 0) -> list[torch.Tensor]:
    """Scores whose z column saturates for a stretch, then varies, with NaN holes."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        s = (torch.rand(4, 8, 3, generator=gen) > 0.5).float()
        if 3 <= i < 12:
            s[..., 2] = 1.0
        s[0, 1, 0] = math.nan
        out.append(s)
    return out


STATEFUL = [("variance", {"window": 3}), ("saturation", {"patience": 2}), ("schedule", {"curricula": {
    "y": {"type": "linear", "start": 0.0, "end": 1.0, "steps": 10}}})]


@pytest.mark.parametrize(("name", "params"), STATEFUL, ids=[n for n, _ in STATEFUL])
def test_resume_continues_exactly(name, params):
    rubric, batches = xyz_rubric(), _mixed_batches(20)
    straight = run(make(name, **params), batches, rubric)
    first = make(name, **params)
    run(first, batches[:9], rubric)
    state = torch_round_trip(first.state_dict())
    resumed = make(name, **params)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == first.state_dict()
    assert run(resumed, batches[9:], rubric, first_step=9) == straight[9:]


@pytest.mark.parametrize(("name", "params"), STATEFUL, ids=[n for n, _ in STATEFUL])
def test_repeated_step_counts_once_with_its_last_batch(name, params):
    rubric, batches = xyz_rubric(), _mixed_batches(16)
    straight = run(make(name, **params), batches, rubric)
    s = make(name, **params)
    validation = batch(1.0, 1.0, 1.0)
    for step, scores in enumerate(batches):
        # validation at the step training is about to reach, then training at that step, twice
        s.weights(step, validation, rubric)
        first = s.weights(step, scores, rubric).tolist()
        assert s.weights(step, scores, rubric).tolist() == first == straight[step]
