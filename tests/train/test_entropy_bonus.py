"""`objective.params.entropy_coef`: the loop hands the objective each pass's entropy with its gradient, and the
step's loss is lower by coef times the mean token entropy (loss_type dapo: both are means over the step's tokens)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.cli import main


def _first_step(tmp_path: Path, name: str, *overrides: str) -> dict[str, float]:
    run = tmp_path / name
    assert main(["fit", "model=tiny_random", "trainer.max_steps=1", "batch_size=2", "num_generations=4",
                 "data.num_prompts=8", "objective.params.loss_type=dapo", "objective.params.beta=0", "logger=none",
                 "log_samples.every=0", *overrides, f"hydra.run.dir={run}"]) == 0
    rows = [json.loads(line)["metrics"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    return next(r for r in rows if "loss" in r)


@pytest.mark.slow
def test_the_bonus_lowers_the_first_steps_loss_by_coef_times_its_entropy(tmp_path):
    plain = _first_step(tmp_path, "plain")
    bonus = _first_step(tmp_path, "bonus", "objective.params.entropy_coef=0.05")
    assert bonus["entropy"] == pytest.approx(plain["entropy"], rel=1e-5), "the same rollout, the same policy"
    assert bonus["loss"] == pytest.approx(plain["loss"] - 0.05 * plain["entropy"], rel=1e-4, abs=1e-6)
