"""``rubric.schedule`` in ``rlkit fit`` on the tiny policy: a 2-stage schedule whose first stage (a length check
every completion passes) saturates switches to the second after its window, logs the change as a rubric version
(metrics, samples, ``rubrics/``), and a run resumed from a checkpoint taken mid-window switches at the step the
uninterrupted run does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.core.rubric import load_rubric

pytestmark = pytest.mark.slow

STAGED = """name: staged
version: "1.0"
description: A loose length check first, the sum second.
dimensions:
  - name: short
    description: The answer is under 400 characters (every completion of 8 tokens is).
    type: binary
    anchors: {0: {text: "Too long"}, 1: {text: "Short enough"}}
    checks: [{type: length, max: 400, unit: chars}]
  - name: correct
    description: The last number is the sum.
    type: binary
    anchors: {0: {text: "Wrong"}, 1: {text: "Right"}}
    checks: [{type: match, field: reference, mode: numeric}]
"""


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)


def _args(tmp_path: Path) -> list[str]:
    rubric = tmp_path / "staged.yaml"
    rubric.write_text(STAGED)
    return ["model=tiny_random", "logger=none", "batch_size=2", "num_generations=4", "data.num_prompts=16",
            "max_completion_length=8", "eval.every=0", "log_samples.every=1", f"rubric.path={rubric}",
            "rubric.schedule.stages=[[short],[correct]]", "rubric.schedule.window=3", "checkpoint_every=2",
            "checkpoint_keep_last=2"]


def _steps(run_dir: Path) -> dict[int, dict[str, float]]:
    """Each step's metrics, the lines of one step merged (the schedule logs its own after the step's)."""
    out: dict[int, dict[str, float]] = {}
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        out.setdefault(row["step"], {}).update(row["metrics"])
    return out


def test_a_saturated_first_stage_switches_and_a_resume_restores_the_stage(tmp_path, capsys):
    args = _args(tmp_path)
    straight = tmp_path / "straight"
    assert main(["fit", *args, "trainer.max_steps=4", f"hydra.run.dir={straight}"]) == 0
    assert "stage 2 adds correct (rubric staged v1.0+stage.2)" in capsys.readouterr().out
    steps = _steps(straight)
    # short is saturated in every group from step 0; the window of 3 fills at step 2, so step 3 is stage 2
    assert [steps[s]["rubric/stage"] for s in range(4)] == [1, 1, 1, 2]
    assert [steps[s].get("rubric/stage_changed") for s in range(4)] == [None, None, 1, None]
    # stage 1 rewards short alone (every completion passes it); stage 2 adds correct, which the random policy fails
    assert [steps[s]["reward/mean"] for s in range(4)] == [1.0, 1.0, 1.0, 0.5]
    assert all(steps[s]["rewards/correct/saturated_groups"] == 1.0 for s in range(4))  # scored all along
    versions = {json.loads(line)["step"]: json.loads(line)["rubric_version"]
                for line in (straight / "samples.jsonl").read_text().splitlines()}
    assert versions == {0: "1.0+stage.1", 1: "1.0+stage.1", 2: "1.0+stage.1", 3: "1.0+stage.2"}
    log = [json.loads(line) for line in (straight / "rubrics" / "schedule.jsonl").read_text().splitlines()]
    assert [(r["step"], r["stage"], r["added"]) for r in log] == [(0, 1, ["short"]), (2, 2, ["correct"])]
    two = load_rubric(straight / "rubrics" / "staged" / "1.0+stage.2.yaml")
    assert (two.version, two.content_hash) == ("1.0+stage.2", log[1]["hash"])
    assert [d.weight for d in load_rubric(straight / "rubrics" / "staged" / "1.0+stage.1.yaml").dimensions] == [1, 0]
    assert "weight" in (straight / "rubrics" / "staged" / "1.0+stage.1..1.0+stage.2.diff.txt").read_text()

    # the checkpoint after step 1 holds stage 1 and two of its window's three shares: the resumed run must switch
    # after step 2, as the straight one did (a resume that lost the window would switch after step 4, one that
    # lost the stage would never be in stage 2 at step 3)
    (ckpt,) = (straight / "checkpoints").glob("*000002*.ckpt")
    resumed = tmp_path / "resumed"
    assert main(["fit", *args, "trainer.max_steps=4", f"ckpt_path={ckpt}", f"hydra.run.dir={resumed}"]) == 0
    again = _steps(resumed)
    assert {s: again[s]["rubric/stage"] for s in (2, 3)} == {2: 1, 3: 2}
    assert again[2]["rubric/stage_changed"] == 1 and again[3]["reward/mean"] == steps[3]["reward/mean"]
