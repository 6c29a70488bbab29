"""`rlkit fit` writes every held-out evaluation's answers to ``heldout_samples.jsonl`` (start, each ``heldout_every``,
end), shows them before/after in its report, and a run resumed into a new folder carries the earlier ones."""

from __future__ import annotations

import statistics

import pytest

from rlkit.cli import main
from rlkit.runs.heldout_answers import SAMPLES_FILE, read_heldout_answers, read_heldout_samples
from rlkit.runs.history import read_history

ARGS = ["fit", "model=tiny_random", "logger=none", "batch_size=2", "num_generations=2", "data.num_prompts=24",
        "heldout_every=2", "checkpoint_every=2"]


def test_every_evaluation_is_kept_as_text_and_a_resumed_run_holds_the_whole_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first, resumed = tmp_path / "first", tmp_path / "resumed"
    assert main([*ARGS, "trainer.max_steps=2", f"hydra.run.dir={first}"]) == 0
    earlier = read_heldout_samples(first / SAMPLES_FILE)
    # the end evaluation at step 2 is the heldout_every one: written once
    assert [e.step for e in earlier] == [0, 2]
    n = len(earlier[0].rows)
    assert n >= 2 and len(earlier[1].rows) == n
    assert set(earlier[0].rows[0]) == {"step", "prompt", "reference", "completion", "reward", "scores", "record"}
    assert earlier[0].rows[0]["record"]["reference"] == earlier[0].rows[0]["reference"]
    assert set(earlier[0].rows[0]["scores"]) == {"format", "correctness", "brevity", "repetition"}
    assert not (first / "heldout").exists(), "one file, not start.jsonl and end.jsonl beside it"
    # the end is evaluated afresh: the trained policy's own answers (two steps from random weights change them), and
    # the end figures are those answers' means, not the start's carried over
    assert [r["completion"] for r in earlier[1].rows] != [r["completion"] for r in earlier[0].rows]
    end_mean = statistics.fmean(r["reward"] for r in earlier[1].rows)
    assert dict(read_history(first / "metrics.jsonl"))[2]["heldout/reward"] == pytest.approx(end_mean)
    assert "## What the model said, before and after" in (first / "report" / "report.md").read_text()

    assert main([*ARGS, "trainer.max_steps=4", f"ckpt_path={first / 'checkpoints' / 'last.ckpt'}",
                 f"hydra.run.dir={resumed}"]) == 0
    whole = read_heldout_samples(resumed / SAMPLES_FILE)
    assert [e.step for e in whole] == [0, 2, 4]
    assert [e.rows for e in whole[:2]] == [e.rows for e in earlier], "the earlier run's evaluations, as written"
    assert read_heldout_answers(resumed, "start") == earlier[0].rows
    assert {r["step"] for r in read_heldout_answers(resumed, "end")} == {4}
    assert "step 0 and step 4 (all 3 evaluations" in (resumed / "report" / "report.md").read_text()
