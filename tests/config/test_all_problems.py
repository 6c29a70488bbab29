"""``rlkit validate`` reports every independent mistake of a config at once, one line each, exit 2 (as torchtune's
config validation does): a user fixes them in one go instead of one run of validate each."""

from __future__ import annotations

import pytest

from rlkit.cli import main
from rlkit.core.errors import ConfigError, ConfigErrors, Problems, error_lines
from rlkit.testing import one_error_line


def test_three_independent_mistakes_are_three_lines(capsys, tmp_path):
    code = main(["validate", "batch_size=0", f"rubric.path={tmp_path / 'no_rubric.yaml'}", "data=jsonl",
                 f"data.path={tmp_path / 'no_data.jsonl'}"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rlkit: error:")]
    assert code == 2 and "Traceback" not in err
    assert len(lines) == 3, err
    assert lines[0] == "rlkit: error: batch_size: must be >= 1, got 0"
    assert "no_rubric.yaml: no such rubric file" in lines[1]
    assert "no_data.jsonl: no such data file or datasets directory" in lines[2]


def test_every_field_of_a_block_is_told(capsys):
    assert main(["validate", "num_generations=0", "optim.lr=-1", "judge.name=nope"]) == 2
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("rlkit: error:")]
    assert [x.split(":")[2].strip() for x in lines[:2]] == ["num_generations", "optim.lr"]
    assert "unknown judge 'nope'" in lines[2] and len(lines) == 3


def test_mistakes_found_once_plugins_are_built_are_told_beside_the_others(capsys):
    """A block's schema, a plugin's params (found when it is built) and a rule across parts (found once the
    estimator is built: a group of one for a group-relative one): three independent mistakes, three lines."""
    code = main(["validate", "data.num_prompts=0", "judge.params.case_sensitive=maybe", "num_generations=1"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("rlkit: error:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 3, err
    assert lines[0].startswith("rlkit: error: data.num_prompts (") and lines[0].endswith("must be > 0, got 0")
    assert lines[1].startswith("rlkit: error: judge.params (") and "case_sensitive" in lines[1]
    assert lines[2].startswith("rlkit: error: num_generations: must be >= 2, got 1: advantage=grpo compares")


def test_a_check_that_reads_a_part_which_failed_is_skipped(capsys):
    """The estimator's params are wrong, so it is not built: the rules that read it (a group of one, the objective's
    parts) would say what is not so ("select an estimator"); the one mistake is one line."""
    line = one_error_line(main(["validate", "advantage.params.scale_rewards=bogus", "num_generations=1"]),
                          capsys.readouterr().err)
    assert line.startswith("rlkit: error: advantage.params (") and "scale_rewards" in line, line


def test_one_mistake_is_still_its_own_error_class():
    problems = Problems()
    problems.attempt(lambda: (_ for _ in ()).throw(ConfigError("bad", "a")))
    with pytest.raises(ConfigError) as one:
        problems.raise_if_any()
    assert not isinstance(one.value, ConfigErrors) and error_lines(one.value) == ["a: bad"]
    problems.attempt(lambda: (_ for _ in ()).throw(ConfigError("worse", "b")))
    problems.attempt(lambda: 1)  # a check that passes adds nothing
    with pytest.raises(ConfigErrors) as both:
        problems.raise_if_any()
    assert error_lines(both.value) == ["a: bad", "b: worse"] and both.value.where == "a"
