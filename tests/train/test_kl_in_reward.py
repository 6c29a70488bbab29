"""`objective.params.kl.where=reward`: the completions' KL to the reference comes off their reward before the
advantages are formed (veRL's use_kl_in_reward), and stays out of the loss."""

from __future__ import annotations

import json

import pytest

from rlkit.cli import main


@pytest.mark.slow
def test_the_penalty_is_taken_from_the_reward_and_grows_as_the_policy_leaves_the_reference(tmp_path):
    run = tmp_path / "run"
    assert main(["fit", "model=tiny_random", "trainer.max_steps=4", "batch_size=2", "num_generations=4",
                 "data.num_prompts=8", "objective.params.beta=0.5", "objective.params.kl.where=reward",
                 "objective.params.kl.estimator=k3", "logger=none", "log_samples.every=0",
                 f"hydra.run.dir={run}"]) == 0
    rows = [json.loads(line)["metrics"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "kl_reward/penalty" in r]
    assert len(steps) == 4
    assert steps[0]["kl_reward/penalty"] == pytest.approx(0.0, abs=1e-6), "the first rollout's policy is the reference"
    assert steps[-1]["kl_reward/penalty"] > 0, "after three updates the policy has left the reference"
    assert steps[-1]["kl_reward/reward"] == pytest.approx(steps[-1]["reward/mean"] - steps[-1]["kl_reward/penalty"],
                                                          abs=1e-5)
    assert all(r["kl"] == 0.0 for r in steps), "not in the loss as well"


def test_a_kl_penalised_reward_is_refused_where_the_estimator_does_not_read_the_reward(capsys):
    code = main(["validate", "advantage=gdpo", "objective.params.kl.where=reward"])
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("rlkit: error: ")
    assert "objective.params.kl.where" in err and "advantage=gdpo" in err
