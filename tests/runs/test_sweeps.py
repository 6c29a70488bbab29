"""Sweeps: W&B runs named from their overrides and grouped by sweep, the per-job summary.json, the sweep summary
table written when a multirun ends, and the Optuna preset maximising what `rlkit fit` returns."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf, open_dict

from rlkit.runs.sweep import SweepSummary, collect_job_summaries, sweep_identity, write_job_summary


@pytest.fixture
def hydra_job():
    """``hydra_job(mode, **job)``: make this process look like a running Hydra job; undone afterwards."""
    from hydra import compose, initialize_config_module

    def start(mode: RunMode, sweep_dir: str = "/sweeps/s1", task: tuple[str, ...] = (), **job: object):
        with initialize_config_module(config_module="rlkit.conf", version_base="1.3"):
            cfg = compose("config", overrides=["logger=wandb"], return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.mode = mode
            cfg.hydra.sweep.dir = sweep_dir
            cfg.hydra.overrides.task = list(task)
            for key, value in job.items():
                cfg.hydra.job[key] = value
        HydraConfig.instance().set_config(cfg)
        return cfg

    yield start
    HydraConfig.instance().cfg = None


def test_multirun_job_is_named_from_its_overrides_and_grouped_by_sweep(hydra_job, monkeypatch, tmp_path):
    cfg = hydra_job(RunMode.MULTIRUN, override_dirname="advantage=gdpo,aggregator=geometric", num=3)
    assert sweep_identity() == {"name": "advantage=gdpo,aggregator=geometric", "group": "/sweeps/s1"}
    seen = {}

    class Recorder:  # stands in for Lightning's WandbLogger: what would reach wandb.init
        def __init__(self, **kwargs):
            seen.update(kwargs)

    monkeypatch.setattr("lightning.pytorch.loggers.WandbLogger", Recorder)
    from rlkit.runs.loggers import make_logger

    make_logger(cfg, tmp_path)
    assert seen["name"] == "advantage=gdpo,aggregator=geometric" and seen["group"] == "/sweeps/s1"


def test_single_run_and_no_hydra_keep_wandb_defaults(hydra_job):
    assert sweep_identity() == {}
    hydra_job(RunMode.RUN)
    assert sweep_identity() == {}
    hydra_job(RunMode.MULTIRUN, override_dirname="", num=0)
    assert sweep_identity()["name"] == "job 0"  # a sweep of one job without overrides still gets a name


def _summary(reward: float, correctness: float) -> dict:
    return {"start": {"correctness": 0.0, "reward": 0.0}, "end": {"correctness": correctness, "reward": reward},
            "steps": 2, "policy_dir": "policy"}


def test_job_summary_records_overrides_rewards_and_time(hydra_job, tmp_path):
    hydra_job(RunMode.MULTIRUN, task=("aggregator=geometric", "seed=1"), num=1)
    path = write_job_summary(tmp_path, _summary(float("nan"), 0.5), wall_time_s=12.34567)
    data = json.loads(path.read_text())
    assert data["job"] == 1 and data["overrides"] == ["aggregator=geometric", "seed=1"]
    assert data["dimensions"] == ["correctness"]
    assert data["end"] == {"correctness": 0.5, "reward": None}  # NaN is not JSON
    assert data["wall_time_s"] == 12.346 and data["steps"] == 2


def test_job_summary_adds_the_earlier_invocations_wall_time(tmp_path):
    resumed = {**_summary(0.5, 0.5), "earlier_wall_time_s": 100.0, "invocations": 3}
    data = json.loads(write_job_summary(tmp_path, resumed, wall_time_s=12.34567).read_text())
    assert (data["wall_time_s"], data["wall_time_this_invocation_s"], data["invocations"]) == (112.346, 12.346, 3)
    # resumed from a checkpoint that predates the count: the earlier time is unknown, said as null
    old = {**_summary(0.5, 0.5), "earlier_wall_time_s": 0.0, "invocations": None}
    data = json.loads(write_job_summary(tmp_path, old, wall_time_s=2.0).read_text())
    assert data["invocations"] is None and data["wall_time_s"] == data["wall_time_this_invocation_s"] == 2.0


def test_sweep_summary_table_is_printed_and_written(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for job, (aggregator, reward) in enumerate([("weighted_sum", 0.25), ("geometric", 0.5)]):
        (sweep / str(job)).mkdir(parents=True)
        (sweep / str(job) / "summary.json").write_text(json.dumps({
            "job": job, "overrides": [f"aggregator={aggregator}", "trainer.max_steps=2"],
            "dimensions": ["format", "correctness"], "end": {"format": 1.0, "correctness": None, "reward": reward},
            "steps": 2, "wall_time_s": 3.21}))
    (sweep / "2").mkdir()  # a job that failed wrote no summary
    assert [r["job"] for r in collect_job_summaries(sweep)] == [0, 1]
    SweepSummary().on_multirun_end(OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep)}}}))
    out = capsys.readouterr().out
    assert "aggregator=geometric" in out and "every job: trainer.max_steps=2" in out
    with (sweep / "sweep_summary.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert [r["overrides"] for r in rows] == ["aggregator=weighted_sum", "aggregator=geometric"]
    assert rows[1]["reward"] == "0.5000" and rows[1]["format"] == "1.0000" and rows[1]["correctness"] == ""
    assert rows[0]["wall_time_s"] == "3.2"
    md = (sweep / "sweep_summary.md").read_text()
    assert "| job | overrides | format | correctness | reward | steps | wall_time_s |" in md
    assert "Every job: `trainer.max_steps=2`" in md


def test_optuna_preset_composes_maximising_the_fit_metric():
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="rlkit.conf", version_base="1.3"):
        cfg = compose("config", overrides=["hydra/sweeper=optuna_reward"], return_hydra_config=True)
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "maximize"
    assert set(sweeper.params) == {"optim.lr", "objective.params.beta"}
    assert cfg.hydra.callbacks.sweep_summary._target_ == "rlkit.runs.sweep.SweepSummary"


@pytest.mark.slow
def test_optuna_sweep_of_two_trials_writes_the_summary_and_wandb_groups(tmp_path, monkeypatch, capsys):
    import warnings

    with warnings.catch_warnings():  # optuna 2.10 on SQLAlchemy 2 warns of a rename on import; rlkit's main
        warnings.simplefilter("ignore")  # shows every warning, so the import happens here, quietly
        pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
        pytest.importorskip("optuna.storages")
    from rlkit.cli import main

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    sweep = tmp_path / "sweep"
    code = main(["fit", "-m", "hydra/sweeper=optuna_reward", "hydra.sweeper.n_trials=2", "trainer.max_steps=1",
                 "batch_size=2", "num_generations=2", "log_samples.every=0", f"hydra.sweep.dir={sweep}"])
    assert code == 0
    out = capsys.readouterr().out
    assert out.count("final held-out mean normalised reward") == 2 and "sweep_summary.md" in out
    jobs = collect_job_summaries(sweep)
    assert [j["job"] for j in jobs] == [0, 1]
    assert all(any(o.startswith("optim.lr=") for o in j["overrides"]) for j in jobs)
    with (sweep / "sweep_summary.csv").open() as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 2 and all("optim.lr=" in r["overrides"] and r["reward"] for r in rows)
    results = yaml.safe_load((sweep / "optimization_results.yaml").read_text())
    assert results["best_value"] == pytest.approx(max(j["end"]["reward"] for j in jobs))
    for job in jobs:  # each trial's offline W&B run carries its name (the overrides) and the sweep as group
        (record,) = (sweep / job["dir"]).glob("wandb/offline-run-*/run-*.wandb")
        data = record.read_bytes()
        assert str(sweep).encode() in data and b"optim.lr=" in data
