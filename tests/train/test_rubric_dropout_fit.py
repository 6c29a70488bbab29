"""``rubric.dropout`` in ``rlkit fit``: it changes the training rewards and nothing the judge said, and a run killed
at its first checkpoint and resumed draws the drops of the uninterrupted run."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch

from rlkit.cli import main

pytestmark = pytest.mark.slow

ARGS = ["model=tiny_random", "logger=csv", "batch_size=4", "num_generations=4", "data.num_prompts=24",
        "max_completion_length=8"]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)


def _rows(run_dir: Path) -> dict[int, dict[str, str]]:
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        return {int(r["step"]): r for r in csv.DictReader(fh) if r.get("reward/mean")}


def test_three_steps_with_dropout_train_on_dropped_rewards_and_report_full_scores(tmp_path):
    assert main(["fit", *ARGS, "trainer.max_steps=3", "rubric.dropout=0.3", f"hydra.run.dir={tmp_path / 'drop'}"]) == 0
    assert main(["fit", *ARGS, "trainer.max_steps=1", f"hydra.run.dir={tmp_path / 'plain'}"]) == 0
    dropped, plain = _rows(tmp_path / "drop"), _rows(tmp_path / "plain")
    assert sorted(dropped) == [0, 1, 2]
    assert all(torch.isfinite(torch.tensor(float(r["loss"]))) for r in dropped.values())
    # step 0 samples the same completions in both runs: the judge's per-dimension scores are the same, the rewards
    # (aggregated over each group's kept dimensions) are not
    for name in ("format", "correctness", "brevity", "repetition"):
        assert dropped[0][f"rewards/{name}/mean"] == plain[0][f"rewards/{name}/mean"], name
        assert dropped[0][f"rewards/{name}/unscored"] == plain[0][f"rewards/{name}/unscored"], name
    assert dropped[0]["reward/mean"] != plain[0]["reward/mean"]
    # held-out scoring never drops: before any update both runs score the held-out split alike
    assert _heldout_start(tmp_path / "drop") == _heldout_start(tmp_path / "plain")
    shares = _logged(tmp_path / "drop", "rubric/dropped_share")
    assert sorted(shares) == [0, 1, 2] and all(0 < s < 1 for s in shares.values())
    assert _logged(tmp_path / "plain", "rubric/dropped_share") == {}


def _logged(run_dir: Path, key: str) -> dict[int, float]:
    """``key`` by step, from the CSV logger's rows."""
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        return {int(r["step"]): float(r[key]) for r in csv.DictReader(fh) if r.get(key)}


def _heldout_start(run_dir: Path) -> dict[str, float]:
    first = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[0])
    assert first["step"] == 0 and "heldout/reward" in first["metrics"]
    return first["metrics"]


def test_resume_draws_the_uninterrupted_runs_drops(tmp_path):
    from rlkit.testing.runs import fit_killed_at_first_checkpoint

    args = [*ARGS, "rubric.dropout=0.3", "checkpoint_every=2"]
    ckpt = fit_killed_at_first_checkpoint(args, tmp_path / "killed")
    k = torch.load(ckpt, weights_only=True)["global_step"]
    assert main(["fit", *args, f"trainer.max_steps={k + 2}", f"ckpt_path={ckpt}",
                 f"hydra.run.dir={tmp_path / 'resumed'}"]) == 0
    assert main(["fit", *args, f"trainer.max_steps={k + 2}", f"hydra.run.dir={tmp_path / 'straight'}"]) == 0
    resumed, straight = _rows(tmp_path / "resumed"), _rows(tmp_path / "straight")
    assert sorted(resumed) == [k, k + 1]
    for step in resumed:  # the rewards, advantages and loss follow the drops: equal only if the drops are
        for key in ("reward/mean", "reward/std", "loss"):
            assert resumed[step][key] == straight[step][key], (step, key)
