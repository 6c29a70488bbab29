"""`rlkit validate` warns when a model judge asks the policy's own model or one of its base: the rubric design note's
collusion risk. ``allow_self_judge=true`` says it is meant."""

from __future__ import annotations

import json
import shutil

import pytest

from rlkit.cli import main
from rlkit.lm.models import build_tiny_policy


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    return build_tiny_policy(cache_dir=tmp_path_factory.mktemp("models"))


def _validate(capsys, policy, judge_model, *extra: str) -> list[str]:
    backend = f"{{name: hf, params: {{model: '{judge_model}'}}}}"
    assert main(["validate", f"model.name_or_path={policy}", "optim.lr=1e-5", "judge=llm",
                 f"++judge.params.backend={backend}", *extra]) == 0
    return [line for line in capsys.readouterr().err.splitlines() if "collusion" in line]


def test_the_policys_own_model_as_judge_is_warned(capsys, policy):
    (line,) = _validate(capsys, policy, policy)
    assert line.startswith(f"rlkit: warning: judge=llm: its model {policy.resolve()} is the policy's own model")
    assert "allow_self_judge=true" in line
    assert _validate(capsys, policy, policy, "allow_self_judge=true") == []


def test_a_model_of_the_policys_base_is_warned_and_another_architecture_is_not(capsys, policy, tmp_path):
    sibling = tmp_path / "fine-tuned"  # a fine-tune keeps its base's config: same architecture and size
    shutil.copytree(policy, sibling)
    (line,) = _validate(capsys, policy, sibling)
    assert "shares the policy's base (model_type " in line
    other = tmp_path / "other"
    shutil.copytree(policy, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "num_hidden_layers": config["num_hidden_layers"] + 1}))
    assert _validate(capsys, policy, other) == []


def test_a_composite_judge_is_checked_through_its_members(capsys, policy):
    member = f"{{name: llm, params: {{backend: {{name: hf, params: {{model: '{policy}'}}}}}}}}"
    assert main(["validate", f"model.name_or_path={policy}", "optim.lr=1e-5", "judge=ensemble",
                 f"++judge.params.members=[rule, {member}]"]) == 0
    assert "judge=ensemble: its model" in capsys.readouterr().err


def test_the_embedded_policy_and_the_offline_judge_are_not_warned(capsys):
    assert main(["validate", "judge=llm"]) == 0
    assert "collusion" not in capsys.readouterr().err
