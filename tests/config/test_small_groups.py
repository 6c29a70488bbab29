"""`rlkit validate` warns when a group-relative advantage estimator sets each completion against a group of two or
three (the rubric design note, 000 §4.3: G = 2 makes the group normalisation unstable, 8 balances; issue 54 item 5)."""

from __future__ import annotations

import pytest

import rlkit.cli
from rlkit.cli import main


@pytest.mark.parametrize("overrides, warned", [
    (["num_generations=2"], "num_generations=2 with advantage=grpo"),
    (["num_generations=3", "advantage=rloo"], "num_generations=3 with advantage=rloo"),
    (["num_generations=4"], None),                                   # the smallest group taken without a word
    (["num_generations=2", "objective=group_dpo"], None),            # no estimator: pairs, not a group baseline
])
def test_a_small_group_is_warned_once_naming_the_key_and_the_estimator(capsys, monkeypatch, overrides, warned):
    monkeypatch.setattr(rlkit.cli, "_SHOWN", set())  # the CLI says each warning once a process
    assert main(["validate", *overrides]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if "num_generations=" in line]
    if warned is None:
        assert said == []
        return
    assert len(said) == 1, said
    assert said[0].startswith(f"rlkit: warning: {warned}, ") and "§4.3" in said[0]
    assert "use num_generations=8, or at least 4" in said[0]


def test_the_warning_comes_from_the_check_not_the_cli():
    from rlkit.commands.common import compose_and_check

    with pytest.warns(UserWarning, match=r"num_generations=3 with advantage=grpo.*baseline unstable"):
        compose_and_check(["num_generations=3"])
