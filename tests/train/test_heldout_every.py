"""heldout_every: held-out evaluations during training, at their steps, without changing what training does."""

from __future__ import annotations

import json
from pathlib import Path

from rlkit.cli import main


def _history(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_heldout_every_evaluates_mid_run_and_leaves_training_as_it_was(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    common = ["fit", "trainer.max_steps=4", "batch_size=2", "num_generations=4", "logger=none",
              "model.warm_start.steps=5"]
    assert main([*common, "heldout_every=2", "hydra.run.dir=every"]) in (0, None)
    assert main([*common, "hydra.run.dir=ends"]) in (0, None)
    every, ends = _history(tmp_path / "every"), _history(tmp_path / "ends")
    held = sorted({row["step"] for row in every if "heldout/correctness" in row["metrics"]})
    assert held == [0, 2, 4] and sorted({r["step"] for r in ends if "heldout/correctness" in r["metrics"]}) == [0, 4]

    def training(rows):
        return [{k: v for k, v in r["metrics"].items() if not k.startswith(("time/", "tokens_per_sec"))}
                for r in rows if "reward/mean" in r["metrics"]]
    assert training(every) == training(ends)
    last = lambda rows: [r["metrics"] for r in rows if "heldout/correctness" in r["metrics"]][-1]  # noqa: E731
    assert last(every) == last(ends)
