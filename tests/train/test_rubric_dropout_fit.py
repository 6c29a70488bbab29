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


def test_a_per_record_rubric_drops_criteria_not_the_frame(tmp_path):
    # each training record names its own per-prompt rubric; rubric.dropout draws its criteria (in the judge), so the
    # frame's per-dimension scores move with the draw and no dimension-level share is logged
    criteria = [{"name": f"c{i}", "type": "binary", "category": "essential" if i < 4 else "optional",
                 "weight": 1.0, "checks": [{"type": "regex", "pattern": pattern}]}
                for i, pattern in enumerate([r"\d", r"^\d+$", r"^.{1,3}$", r"[02468]$", r"1", r"5", r"^\d\d$"])]
    own = tmp_path / "own.yaml"
    own.write_text(json.dumps({"name": "own", "version": "1", "dimensions": criteria}), encoding="utf-8")
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "reference": str(a + b), "rubric": str(own)}) + "\n"
                            for a in range(6) for b in range(4)), encoding="utf-8")
    args = ["model=tiny_random", "logger=csv", "batch_size=4", "num_generations=4", "max_completion_length=8",
            "rubric=per_record", "judge=rule", f"data.path={data}", "trainer.max_steps=1"]
    assert main(["fit", *args, "rubric.dropout=0.5", f"hydra.run.dir={tmp_path / 'drop'}"]) == 0
    assert main(["fit", *args, f"hydra.run.dir={tmp_path / 'plain'}"]) == 0
    dropped, plain = _rows(tmp_path / "drop"), _rows(tmp_path / "plain")
    # step 0 samples the same completions in both runs; the criteria the judge summarised are not the same
    assert dropped[0]["rewards/criteria/mean"] != plain[0]["rewards/criteria/mean"]
    assert _logged(tmp_path / "drop", "rubric/dropped_share") == {}
    assert _heldout_start(tmp_path / "drop") == _heldout_start(tmp_path / "plain")  # held-out never drops
