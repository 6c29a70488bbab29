"""``rubric.schedule``'s state by hand: a stage switches only when every active dimension's saturated share, averaged
over the stage's whole window, is above the threshold; the state a checkpoint keeps restores the switch step; the
stage's rubric weighs later dimensions 0 under its own version and hash; a bad schedule is one error naming its key."""

from __future__ import annotations

import pytest

from rlkit.cli import main
from rlkit.core.errors import ConfigError
from rlkit.core.rubric import load_rubric
from rlkit.reward.rubric_schedule import StagedRubric, check_stages, stage_rubric

FOUR = """name: four
version: "1.0"
dimensions:
  - {name: format, type: binary, weight: 0.5, checks: [{type: regex, pattern: '^\\d+$'}]}
  - {name: correctness, type: binary, weight: 2.0, checks: [{type: match, field: reference, mode: numeric}]}
  - {name: brevity, type: binary, checks: [{type: length, max: 8, unit: chars}]}
  - {name: repetition, type: binary, checks: [{type: regex, pattern: '(\\d)\\1', absent: true}]}
"""


@pytest.fixture
def rubric(tmp_path):
    path = tmp_path / "four.yaml"
    path.write_text(FOUR)
    return load_rubric(path)  # the dimensions of the default task's rubric, with the run's defaults' names


def test_a_stage_switches_when_every_active_dimension_saturates_over_the_window(rubric):
    staged = StagedRubric(rubric, [["format", "brevity"], ["correctness", "repetition"]], min_share=0.5, window=3)
    assert staged.mask().tolist() == [1.0, 0.0, 1.0, 0.0]
    assert staged.observe(0, {"format": 1.0, "brevity": 1.0, "correctness": 0.0, "repetition": 0.0}) is None
    assert staged.observe(1, {"format": 1.0, "brevity": 0.6, "correctness": 0.0, "repetition": 0.0}) is None
    # brevity's mean over 3 steps is (1 + 0.6 - 0.1) / 3 = 0.5: not above 0.5, so no switch
    assert staged.observe(2, {"format": 1.0, "brevity": -0.1, "correctness": 0.0, "repetition": 0.0}) is None
    # the window slides: (0.6 - 0.1 + 1.0) / 3 = 0.5 still; then (-0.1 + 1 + 1) / 3 = 0.63
    assert staged.observe(3, {"format": 1.0, "brevity": 1.0, "correctness": 0.0, "repetition": 0.0}) is None
    change = staged.observe(4, {"format": 0.9, "brevity": 1.0, "correctness": 0.0, "repetition": 0.0})
    assert change is not None and (change.step, change.old, change.new) == (4, 1, 2)
    assert change.added == ["correctness", "repetition"] and change.shares["brevity"] == pytest.approx(1.9 / 3)
    assert staged.mask().tolist() == [1.0] * 4 and staged.started == 5 and staged.shares == []
    # the last stage stays, however saturated
    for step in range(5, 20):
        assert staged.observe(step, dict.fromkeys(rubric.dimension_names, 1.0)) is None
    assert staged.metrics() == {"rubric/stage": 2.0, "rubric/active_dimensions": 4.0}


def test_the_saved_state_switches_at_the_same_step_as_the_uninterrupted_run(rubric):
    stages = [["format"], ["correctness", "brevity", "repetition"]]
    straight, first = (StagedRubric(rubric, stages, window=4) for _ in range(2))
    shares = [{n: 1.0 for n in rubric.dimension_names} for _ in range(6)]
    switched = [s for s in range(6) if straight.observe(s, shares[s]) is not None]
    for s in range(2):
        first.observe(s, shares[s])
    resumed = StagedRubric(rubric, stages, window=4)
    resumed.load_state_dict(first.state_dict())
    assert [s for s in range(2, 6) if resumed.observe(s, shares[s]) is not None] == switched == [3]
    assert resumed.current.content_hash == straight.current.content_hash
    with pytest.raises(ConfigError, match="trained with the schedule"):
        StagedRubric(rubric, [["correctness"], ["format", "brevity", "repetition"]]).load_state_dict(
            first.state_dict())


def test_a_stage_is_a_rubric_version_with_later_dimensions_at_weight_0(rubric):
    one = stage_rubric(rubric, ["format"], 1)
    two = stage_rubric(rubric, rubric.dimension_names, 2)
    assert one.version == f"{rubric.version}+stage.1" and two.version == f"{rubric.version}+stage.2"
    assert [d.weight for d in one.dimensions] == [rubric.dimensions[0].weight, 0.0, 0.0, 0.0]
    assert [d.weight for d in two.dimensions] == rubric.initial_weights()
    assert len({one.content_hash, two.content_hash}) == 2


@pytest.mark.parametrize(("stages", "says", "where"), [
    ([["format"], []], "stage 2 is empty", "rubric.schedule.stages[1]"),
    ([["format"], ["correctness", "brevity", "repetition", "style"]], "unknown dimension 'style'",
     "rubric.schedule.stages[1]"),
    ([["format", "brevity"], ["brevity", "correctness", "repetition"]], "already in stage 1",
     "rubric.schedule.stages[1]"),
    ([["format"], ["correctness"]], "brevity, repetition", "rubric.schedule.stages"),
    ([["format", "correctness", "brevity", "repetition"]], "at least two stages",
     "rubric.schedule.stages"),
])
def test_a_bad_schedule_names_its_key(rubric, stages, says, where):
    with pytest.raises(ConfigError) as err:
        check_stages(stages, rubric)
    assert says in err.value.message and err.value.where == where


@pytest.mark.parametrize(("override", "says"), [
    ("rubric.schedule.stages=[[format],[]]", "rubric.schedule.stages[1]: stage 2 is empty"),
    ("rubric.schedule.stages=[[format],[correctness,brevity,repetition,style]]",
     "rubric.schedule.stages[1]: unknown dimension 'style'"),
    ("rubric.schedule.window=0", "rubric.schedule.window"),
])
def test_validate_says_a_bad_schedule_in_one_line(capsys, override, says):
    assert main(["validate", override]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    errors = [line for line in err if line.startswith("rlkit: error:")]
    assert len(errors) == 1 and says in errors[0], err
