"""A short ``rlkit fit`` of the random tiny policy with monitors, for the monitors' end-to-end tests: its exit code,
run folder and the training rows of its CSV log."""

from __future__ import annotations

import csv
from pathlib import Path


def fit_rows(tmp_path: Path, monkeypatch, steps: int, *overrides: str) -> tuple[int, Path, list[dict[str, str]]]:
    from rlkit.cli import main

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "run"
    code = main(["fit", "model=tiny_random", "logger=csv", f"trainer.max_steps={steps}", "batch_size=2",
                 "num_generations=2", "max_completion_length=8", "data.num_prompts=16", *overrides,
                 f"hydra.run.dir={run_dir}"])
    rows: list[dict[str, str]] = []
    if code == 0:
        (path,) = run_dir.glob("csv/version_0/metrics.csv")
        with path.open() as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("reward/mean")]
    return code, run_dir, rows
