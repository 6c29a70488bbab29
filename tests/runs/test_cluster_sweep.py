"""The SLURM launcher path, run locally: hydra-submitit-launcher's ``submitit_local`` runs a two-job
``rlkit fit -m`` sweep, each job in its own process, and the shipped ``slurm`` preset composes."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_submitit_local_runs_a_two_job_sweep(tmp_path):
    sweep = tmp_path / "sweep"
    env = {**os.environ, "RLKIT_CACHE": str(tmp_path / "cache"), "WANDB_SILENT": "true"}
    proc = subprocess.run(
        [sys.executable, "-m", "rlkit", "fit", "-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=15",
         "logger=csv", "trainer.max_steps=2", "batch_size=4", "num_generations=4", "log_samples.every=0",
         "seed=1,2", f"hydra.sweep.dir={sweep}"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    jobs = sorted(p for p in sweep.iterdir() if p.name.isdigit())
    assert [p.name for p in jobs] == ["0", "1"]
    rewards = []
    for job in jobs:
        assert (job / "policy" / "config.json").is_file(), f"job {job.name} saved no policy"
        (metrics,) = job.glob("csv/version_0/metrics.csv")
        with metrics.open() as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("reward/mean")]
        assert len(rows) == 2
        rewards.append([r["reward/mean"] for r in rows])
    assert rewards[0] != rewards[1], "seed=1 and seed=2 trained identically: the override did not reach the jobs"
    # submitit's own records: each job ran as its own process and returned the held-out reward
    logs = list((sweep / ".submitit").glob("*/*_result.pkl"))
    assert len(logs) == 2


def test_the_slurm_preset_composes_with_the_keys_a_cluster_user_sets():
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="rlkit.conf", version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu", "trainer=ddp",
                                        "hydra.launcher.tasks_per_node=2"], return_hydra_config=True)
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert launcher.partition == "gpu" and launcher.tasks_per_node == 2 and launcher.timeout_min == 240
    assert cfg.trainer.strategy == "ddp" and cfg.trainer.devices == 2
