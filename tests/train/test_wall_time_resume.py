"""A run's wall time across the ``rlkit fit`` invocations that trained it: each checkpoint carries the time so far and
how many invocations it spans, and a resumed run's ``summary.json`` adds them to its own; benchmarks read the total."""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import pytest
import torch

from rlkit.cli import main
from rlkit.train.run_position import RunClock

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import judged_model  # noqa: E402

ARGS = ["fit", "model=tiny_random", "logger=none", "batch_size=2", "num_generations=2", "data.num_prompts=24",
        "checkpoint_every=2"]


def test_a_clock_resumed_from_a_checkpoint_adds_its_invocations_and_one_that_predates_them_is_unknown():
    first = RunClock(started=time.monotonic() - 5.0)  # five seconds into the first invocation
    saved = first.state_dict()
    assert saved["invocations"] == 1 and saved["seconds"] >= 5.0
    second = RunClock()
    second.resume_from(saved)
    assert second.invocations == 2 and second.earlier_s == saved["seconds"]
    assert second.total_s() >= saved["seconds"] and second.state_dict()["invocations"] == 2
    old = RunClock()
    old.resume_from(None)  # a checkpoint written before the clock was saved
    assert old.invocations is None and old.earlier_s == 0.0
    assert old.state_dict()["invocations"] is None


@pytest.mark.slow
def test_a_resumed_run_reports_the_wall_time_of_both_invocations(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, resumed = tmp_path / "first", tmp_path / "resumed"
    assert main([*ARGS, "trainer.max_steps=2", f"hydra.run.dir={first}"]) == 0
    fresh = json.loads((first / "summary.json").read_text())
    assert fresh["invocations"] == 1 and fresh["wall_time_s"] == fresh["wall_time_this_invocation_s"] > 0
    checkpoint = first / "checkpoints" / "last.ckpt"
    carried = torch.load(checkpoint, weights_only=True)["rlkit"]["wall_time"]
    # saved at the last step: the first invocation's end evaluation, report and policy save came after it
    assert carried["invocations"] == 1 and 0 < carried["seconds"] <= fresh["wall_time_s"]

    assert main([*ARGS, "trainer.max_steps=4", f"ckpt_path={checkpoint}", f"hydra.run.dir={resumed}"]) == 0
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["steps"] == 4 and summary["invocations"] == 2
    this = summary["wall_time_this_invocation_s"]
    assert this > 0 and summary["wall_time_s"] == pytest.approx(carried["seconds"] + this, abs=2e-3)
    assert summary["wall_time_s"] > this
    # the benchmark that printed "unknown" for a resumed run reads the total; a summary from before does not
    assert judged_model.resumed(summary) and judged_model.resumed_wall_time(summary) == summary["wall_time_s"]
    old = {k: v for k, v in summary.items() if k not in ("invocations", "wall_time_this_invocation_s")}
    assert math.isnan(judged_model.resumed_wall_time(old))
    assert not judged_model.resumed(fresh)
