"""The plugin contract is open: an objective and an ensemble member that live only on the run's plugin manager
(registered there, not installed) are chosen by config alone; and the import-layer contract fails on a bad import."""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from pathlib import Path

import pydantic
import pytest
import torch

import rlkit.core.registry
from rlkit import hookimpl
from rlkit.cli import main
from rlkit.plugin import CompletionLossInputs, Rollout, Rubric
from rlkit.testing import ObjectiveContract, validate_overrides

REPO = Path(__file__).resolve().parents[2]


class Reinforce:
    """REINFORCE with the estimator's advantage as baseline-corrected return: ``-A · Σ_t log π(y_t)`` per
    completion, averaged over the step's completions. No ratio, no clip, no reference."""

    signal = "advantages"
    num_iterations = 1
    needs_old_logprobs = False
    reference_use = None
    mask_truncated_completions = False

    class Params(pydantic.BaseModel):
        scale: float = 1.0

    def __init__(self, params: Params) -> None:
        self.params = params

    def loss(self, inputs: CompletionLossInputs):
        seq = torch.where(inputs.mask > 0, inputs.logp, 0.0).sum(-1)
        loss = -self.params.scale * (inputs.advantages.detach() * seq).sum() / inputs.num_sequences
        return loss, {"reinforce/sequence_logp": seq.detach().mean()}


class ConstantJudge:
    """Scores every dimension at its middle level: a judge nobody installed."""

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        mid = torch.tensor([(d.low + d.high) / 2 for d in rubric.dimensions], dtype=torch.float32)
        return mid.expand(rollout.num_prompts, rollout.group_size, -1).clone()


class _TestPlugins:
    def __init__(self, conf: Path) -> None:
        self.conf = conf

    @hookimpl
    def rlkit_config_search_path(self):
        return f"file://{self.conf}"

    @hookimpl
    def rlkit_register_objectives(self, register):
        register("reinforce", Reinforce)

    @hookimpl
    def rlkit_register_judges(self, register):
        register("constant_mid", lambda params: ConstantJudge())


@pytest.fixture
def test_plugins(tmp_path, monkeypatch):
    conf = tmp_path / "conf"
    (conf / "objective").mkdir(parents=True)
    (conf / "objective" / "reinforce.yaml").write_text("name: reinforce\nparams: {scale: 1.0}\n")
    plugins = _TestPlugins(conf)
    real = rlkit.core.registry.create_plugin_manager
    monkeypatch.setattr(rlkit.core.registry, "create_plugin_manager",
                        lambda **kw: real(**{**kw, "extra": [*kw.get("extra", ()), plugins]}))
    return plugins


class TestReinforceHoldsTheObjectiveContract(ObjectiveContract):
    @pytest.fixture
    def objective(self):
        return Reinforce(Reinforce.Params())


def test_the_objective_contract_catches_a_loss_that_trains_the_reference():
    class LeakyKl(Reinforce):
        reference_use = "its KL term"

        def loss(self, inputs):
            base, metrics = super().loss(inputs)
            return base + ((inputs.logp - inputs.ref_logp) * inputs.mask).sum(), metrics  # ref not detached

    suite, objective = ObjectiveContract(), LeakyKl(Reinforce.Params())
    with pytest.raises(AssertionError):
        suite.test_gradient_flows_only_through_the_policy_log_probs(objective)


def test_a_member_registered_only_on_the_run_plugin_manager_joins_an_ensemble(test_plugins):
    validated = validate_overrides(["judge=ensemble", "judge.params.members=[rule, {name: constant_mid}]"],
                                   plugins=[])
    judge = validated.plugins["judge"]
    assert [type(m).__name__ for m in judge.members] == ["RuleJudge", "ConstantJudge"]
    rubric = validated.rubric
    rollout = Rollout(records=[{"prompt": "1+1=", "reference": "2"}], completions=[["2", "7"]])
    scores = judge.score(rollout, rubric)
    assert scores.shape == (1, 2, len(rubric.dimensions)) and not torch.isnan(scores).any()


def test_a_misspelled_member_fails_validation_naming_its_path(test_plugins):
    from rlkit import ConfigError

    with pytest.raises(ConfigError) as info:
        validate_overrides(["judge=ensemble", "judge.params.members=[rule, constant_midd]"])
    assert info.value.where.startswith("judge.params.members[1]")
    assert "unknown judge 'constant_midd'" in info.value.message and "constant_mid (" in info.value.message


@pytest.mark.slow
def test_an_objective_from_a_test_plugin_trains_by_config_alone(tmp_path, test_plugins):
    run_dir = tmp_path / "run"
    assert main(["fit", "objective=reinforce", "logger=csv", "trainer.max_steps=3", "batch_size=4",
                 "num_generations=4", f"hydra.run.dir={run_dir}"]) == 0
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("reward/mean")]
    assert len(rows) == 3
    assert all(r["reinforce/sequence_logp"] and float(r["grad_norm"]) > 0 for r in rows)
    assert (run_dir / "policy" / "config.json").is_file()


def test_the_import_layer_contract_fails_on_a_plugin_that_reaches_into_the_host(tmp_path):
    pytest.importorskip("importlinter")
    shutil.copytree(REPO / "rlkit", tmp_path / "rlkit", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "plugins" / "rlkit_plugins", tmp_path / "rlkit_plugins",
                    ignore=shutil.ignore_patterns("__pycache__"))
    bad = tmp_path / "rlkit_plugins" / "judges" / "rule.py"
    bad.write_text(bad.read_text() + "\nfrom rlkit.core.registry import load_registry  # noqa: E402\n")
    command = [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
               str(REPO / "pyproject.toml"), "--no-cache"]
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode != 0, done.stdout
    out = " ".join(done.stdout.split())
    assert "rlkit_plugins is not allowed to import rlkit.core" in out
    assert "rlkit_plugins.judges.rule -> rlkit.core.registry" in out
    clean = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    assert clean.returncode == 0, clean.stdout
