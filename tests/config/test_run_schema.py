"""The whole run config has one schema: every top-level value is checked before anything heavy runs, with one line
naming the key and the rule; defaults live only in the schema; checkpoints and model folders are read without
weights; outputs are probed before any work."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from rlkit import ConfigError
from rlkit.cli import main
from rlkit.config import RunConfig, check_config, check_run, compose_config
from rlkit.config.checkpoints import check_checkpoint
from rlkit.config.outputs import check_writable
from rlkit.config.schemas import ModelConfig
from rlkit.config.validate import run_keys
from rlkit.core.rubric import load_rubric
from rlkit.testing import one_error_line

CONF = Path(__file__).resolve().parents[2] / "conf"


@pytest.mark.parametrize(("override", "expected"), [
    ("batch_size=0", "batch_size: must be >= 1, got 0"),
    ("max_completion_length=-1", "max_completion_length: must be >= 1, got -1"),
    ("temperature=-1", "temperature: must be > 0"),
    ("temperature=0", "temperature: must be > 0"),
    ("temperature=nan", "temperature: must be a finite number"),
    ("checkpoint_every=0", "checkpoint_every: must be >= 1, got 0"),
    ("seed=1.5", "seed: input should be a valid integer"),
    ("torch_threads=true", "torch_threads: input should be a valid integer, got True"),
    ("score_normalization=rank", "score_normalization: must be one of 'range' or 'quantile', got 'rank'"),
    ("optim.lr=-1", "optim.lr: must be >= 0"),
    ("optim.gradient_accumulation_steps=0", "optim.gradient_accumulation_steps: must be >= 1"),
    ("log_samples.rows=0", "log_samples.rows: must be >= 1"),
    ("serve.port=70000", "serve.port: must be <= 65535, got 70000"),
    ("serve.timeout_s=0", "serve.timeout_s: must be > 0"),
    ("score.shard_size=0", "score.shard_size: must be >= 1, got 0"),
    ("eval.batch_size=0", "eval.batch_size: must be >= 1"),
    ("eval.output=results.md", "eval.output: must be a .jsonl path"),
    ("calibrate.threshold=2", "calibrate.threshold: must be <= 1"),
    ("debias.window=0", "debias.window: must be >= 1"),
    ("+batch_sise=4", "batch_sise: unknown key; valid keys: seed, batch_size,"),
    ("+optim.learning_rate=1", "optim.learning_rate: unknown key; valid keys: lr, weight_decay"),
    ("+trainer.max_step=3", "trainer.max_step: unknown key: not an argument of lightning.Trainer (it takes: "),
    ("trainer.max_steps=-2", "trainer.max_steps: must be an integer >= -1 (-1: no limit), got -2"),
    ("+trainer.callbacks=[]", "trainer.callbacks: set by rlkit itself"),
    ("logger.mode=sync", "logger.mode ("),
])
def test_validate_rejects_each_bad_run_value_naming_key_and_rule(capsys, override, expected):
    line = one_error_line(main(["validate", override]), capsys.readouterr().err)
    assert line.startswith(f"rlkit: error: {expected}"), line


@pytest.mark.parametrize(("override", "expected"), [
    # each once passed validation and failed inside the run (islice, Lightning's seed_everything, torch)
    ("batch_size=99999999999999999999999", "batch_size: must be <= 65536, got 99999999999999999999999"),
    ("num_generations=100000", "num_generations: must be <= 1024, got 100000"),
    ("seed=-1", "seed: must be >= 0, got -1"),
    ("seed=4294967296", "seed: must be <= 4294967295"),
    ("torch_threads=99999999999999999999999", "torch_threads: must be <= 1024"),
    ("checkpoint_every=99999999999999999999999", "checkpoint_every: must fit in 64 bits"),
    ("score.batch_size=99999999999999999999999", "score.batch_size: must fit in 64 bits"),
])
def test_a_count_too_large_for_the_run_is_named_by_validate(capsys, override, expected):
    line = one_error_line(main(["validate", override]), capsys.readouterr().err)
    assert line.startswith(f"rlkit: error: {expected}"), line


def test_fit_stops_at_an_oversized_batch_before_the_run_starts(capsys, tmp_path):
    run = tmp_path / "run"
    line = one_error_line(main(["fit", "batch_size=99999999999999999999999", f"hydra.run.dir={run}"]),
                          capsys.readouterr().err)
    assert line.startswith("rlkit: error: batch_size: must be <= 65536"), line
    assert not run.exists()


def test_bad_run_values_fail_in_milliseconds(registry):
    cfg = compose_config(registry, ["batch_size=0"])
    start = time.perf_counter()
    with pytest.raises(ConfigError, match="batch_size"):
        check_config(cfg, registry)
    assert time.perf_counter() - start < 0.5  # checked before the rubric, any plugin or any file is read


@pytest.mark.parametrize("overrides", [["num_generations=1"], ["num_generations=1", "advantage=rloo"],
                                       ["num_generations=1", "objective=group_dpo", "preference=best_worst"],
                                       ["num_generations=1", "aggregator=lexicographic"]])
def test_a_group_of_one_is_refused_for_group_relative_parts(capsys, overrides):
    line = one_error_line(main(["validate", *overrides]), capsys.readouterr().err)
    assert "num_generations: must be >= 2, got 1" in line and "within their group" in line


def test_defaults_live_in_the_schema_alone(registry):
    composed = run_keys(compose_config(registry, []))
    assert composed == RunConfig().model_dump(mode="json")
    primary = OmegaConf.load(CONF / "config.yaml")
    assert set(primary) == {"defaults", "hydra"}, "run keys belong in rlkit/config/schemas.py, not config.yaml"
    assert check_run(compose_config(registry, ["batch_size=3"])).batch_size == 3


def test_model_folder_whose_config_transformers_cannot_read(capsys, tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 8}')
    line = one_error_line(main(["validate", f"model.name_or_path={folder}"]), capsys.readouterr().err)
    assert "model.name_or_path" in line and "model_type" in line


def _fake_checkpoint(path: Path, **rlkit_state) -> Path:
    torch.save({"pytorch-lightning_version": "2.6.0", "state_dict": {"w": torch.zeros(3)}, "rlkit": rlkit_state},
               path)
    return path


def test_checkpoint_checks(tmp_path):
    rubric = load_rubric(CONF / "rubric_files" / "arithmetic.yaml")
    model = ModelConfig()
    with pytest.raises(ConfigError, match="no such file"):
        check_checkpoint(tmp_path / "missing.ckpt", rubric, model)
    with pytest.raises(ConfigError, match="is a folder"):
        check_checkpoint(tmp_path, rubric, model)
    good = _fake_checkpoint(tmp_path / "good.ckpt", rubric=rubric.identity())
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(good.read_bytes()[:200])
    with pytest.raises(ConfigError, match="not a readable checkpoint") as err:
        check_checkpoint(corrupt, rubric, model)
    assert err.value.where == "ckpt_path" and "\n" not in str(err.value)
    plain = tmp_path / "plain.pt"
    torch.save({"weights": torch.zeros(2)}, plain)
    with pytest.raises(ConfigError, match="not a Lightning checkpoint"):
        check_checkpoint(plain, rubric, model)
    grm = tmp_path / "grm.ckpt"
    torch.save({"pytorch-lightning_version": "2.6.0", "state_dict": {}}, grm)
    with pytest.raises(ConfigError, match="not of an `rlkit fit` run"):
        check_checkpoint(grm, rubric, model)
    other = _fake_checkpoint(tmp_path / "other.ckpt", rubric={**rubric.identity(), "hash": "f" * 64})
    with pytest.raises(ConfigError, match="trained with rubric arithmetic"):
        check_checkpoint(other, rubric, model)
    shaped = _fake_checkpoint(tmp_path / "shaped.ckpt", rubric=rubric.identity(),
                              model={"model_type": "qwen2", "hidden_size": 999, "num_hidden_layers": 2, "lora_r": 0})
    with pytest.raises(ConfigError, match="hidden_size 999 there, 64 here"):
        check_checkpoint(shaped, rubric, model)
    assert check_checkpoint(good, rubric, model)["rubric"]["hash"] == rubric.content_hash


def test_fit_with_a_corrupt_checkpoint_is_one_line_before_training(capsys, tmp_path):
    corrupt = tmp_path / "last.ckpt"
    corrupt.write_bytes(b"PK\x03\x04 not really a zip")
    line = one_error_line(main(["fit", f"ckpt_path={corrupt}", f"hydra.run.dir={tmp_path / 'run'}"]),
                          capsys.readouterr().err)
    assert line.startswith("rlkit: error: ckpt_path: ") and "not a readable checkpoint" in line
    assert not (tmp_path / "run" / "policy").exists()


def test_check_writable(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    deep = tmp_path / "new" / "deeper" / "out.jsonl"
    assert check_writable(deep, "score.output") == deep
    assert not (tmp_path / "new").exists(), "the probe creates nothing"
    with pytest.raises(ConfigError, match="afile is not a folder"):
        check_writable(afile / "out.jsonl", "score.output")
    with pytest.raises(ConfigError, match="is a folder; name a file"):
        check_writable(tmp_path, "eval.output")
    with pytest.raises(ConfigError, match="exists and is not a folder"):
        check_writable(afile, "calibrate.output", folder=True)
    assert check_writable(tmp_path, "calibrate.output", folder=True) == tmp_path
