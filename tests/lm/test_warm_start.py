"""The warm start of the embedded tiny policy, the default policy: supervised on draws of the task that exclude the
held-out prompts, built once and cached, and only where it means something (the embedded policy, the synthetic
task)."""

from __future__ import annotations

import json

import pytest
import torch

import rlkit.lm.warm_start as warm_start
from rlkit import ConfigError
from rlkit.cli import main
from rlkit.config import check_config, compose_config
from rlkit.data.records import arithmetic_task, disjoint_task_records
from rlkit.lm.models import WARM_START_CACHE_ENV, build_tiny_policy, load_policy


def test_demonstrations_never_hold_an_excluded_prompt():
    held = arithmetic_task(32, seed=0)
    pool = disjoint_task_records("arithmetic", 2000, seed=7, exclude=held)
    assert pool and not {r["prompt"] for r in pool} & {r["prompt"] for r in held}
    assert all(r["reference"] == str(eval(r["prompt"].rstrip("="))) for r in pool[:50])


def test_warm_start_trains_once_and_is_reused(tmp_path, monkeypatch):
    monkeypatch.delenv(WARM_START_CACHE_ENV)  # the session's shared home (tests/conftest.py): here, beside the base
    base = build_tiny_policy(cache_dir=tmp_path)
    assert warm_start.warm_start_policy(base, [], steps=0, batch_size=4, lr=1e-3, seed=0, max_new_tokens=8) == base
    records = arithmetic_task(64, seed=3)
    kwargs = dict(steps=12, batch_size=16, lr=3e-3, seed=0, max_new_tokens=8)
    folder = warm_start.warm_start_policy(base, records, **kwargs)
    assert folder != base and folder.parent == base.parent
    info = json.loads((folder / "warm_start.json").read_text())
    assert info["steps"] == 12 and info["last_loss"] < info["first_loss"]
    warm, _ = load_policy(folder)
    cold, _ = load_policy(base)
    assert any(not torch.equal(a, b) for a, b in zip(warm.parameters(), cold.parameters(), strict=True))

    def no_training(*args, **kw):  # a second run with the same demonstrations must not train again
        raise AssertionError("trained twice")

    monkeypatch.setattr(warm_start, "train_on_demonstrations", no_training)
    assert warm_start.warm_start_policy(base, list(reversed(records)), **kwargs) == folder
    with pytest.raises(AssertionError, match="trained twice"):  # other demonstrations: another policy
        warm_start.warm_start_policy(base, records[:10], **kwargs)


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.warm_start.steps=10", "model.name_or_path={model}"], "warm-starts only the embedded tiny policy"),
    (["model.warm_start.steps=10", "data.path={data}"], "with data.path, warm-start with `rlkit sft`"),
])
def test_a_warm_start_where_it_means_nothing_is_refused(registry, tmp_path, overrides, message):
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "reference": "2"}) + "\n")
    model = build_tiny_policy(cache_dir=tmp_path)
    cfg = compose_config(registry, [o.format(model=model, data=data) for o in overrides])
    with pytest.raises(ConfigError, match=message) as err:
        check_config(cfg, registry)
    assert err.value.where == "model.warm_start.steps"


def test_warm_starts_go_where_the_environment_says(tmp_path, monkeypatch):
    base = build_tiny_policy(cache_dir=tmp_path / "cache")
    monkeypatch.setenv(WARM_START_CACHE_ENV, str(tmp_path / "shared"))
    kwargs = dict(steps=2, batch_size=4, lr=1e-3, seed=0, max_new_tokens=8)
    folder = warm_start.warm_start_policy(base, arithmetic_task(16, seed=1), **kwargs)
    assert folder.parent == tmp_path / "shared" and folder.name.startswith(f"{base.name}-warm-")
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [base.name], "nothing else in the rlkit cache"


def _warm_steps(registry, overrides):
    from omegaconf import OmegaConf

    cfg = compose_config(registry, overrides)
    return OmegaConf.to_container(cfg.model, resolve=True)["warm_start"]["steps"], cfg.optim.lr


def test_the_default_policy_is_warm_started_and_tiny_random_is_not(registry, tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "1+1=", "reference": "2"}) + "\n")
    model = build_tiny_policy(cache_dir=tmp_path)
    assert _warm_steps(registry, []) == (600, 2e-4)  # RL at a fine-tuning rate: 2e-3 undoes the warm start
    assert _warm_steps(registry, ["model=tiny_random"]) == (0, 2e-3)
    assert _warm_steps(registry, ["model=tiny_random", "optim.lr=1e-3"]) == (0, 1e-3), "the command line still wins"
    # where no warm start can be made, the default asks for none, so a model or data file of the user's just runs
    for overrides in ([f"model.name_or_path={model}"], [f"data.path={data}"]):
        assert _warm_steps(registry, overrides)[0] == 0
        assert check_config(compose_config(registry, overrides), registry).model.warm_start.steps == 0


@pytest.mark.slow
def test_fit_warm_starts_once_per_cache_and_tiny_random_starts_cold(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv(WARM_START_CACHE_ENV, str(tmp_path / "warm"))  # a fresh one: this test trains it
    monkeypatch.chdir(tmp_path)
    small = ["model.warm_start.steps=20", "trainer.max_steps=2", "batch_size=4", "num_generations=4", "logger=none"]
    assert main(["fit", *small, f"hydra.run.dir={tmp_path / 'first'}"]) == 0
    assert "final held-out mean normalised reward" in capsys.readouterr().out
    (warm,) = (tmp_path / "warm").glob("tiny-policy-*-warm-*")
    assert json.loads((warm / "warm_start.json").read_text())["steps"] == 20
    trained = warm.stat().st_mtime_ns
    assert main(["fit", *small, "seed=7", f"hydra.run.dir={tmp_path / 'again'}"]) == 0
    assert [p.stat().st_mtime_ns for p in (tmp_path / "warm").glob("tiny-policy-*-warm-*")] == [trained], \
        "another run seed reuses the warm start"
    held = [json.loads(line)["metrics"] for line in (tmp_path / "first" / "metrics.jsonl").read_text().splitlines()]
    start = next(m["heldout/format"] for m in held if "heldout/format" in m)
    cold = tmp_path / "cold"
    assert main(["fit", "model=tiny_random", *small[1:], f"hydra.run.dir={cold}"]) == 0
    held = [json.loads(line)["metrics"] for line in (cold / "metrics.jsonl").read_text().splitlines()]
    assert start > next(m["heldout/format"] for m in held if "heldout/format" in m), \
        "20 supervised steps teach the answer's format that random weights lack"


def test_a_warm_start_leaves_the_callers_random_state_alone(tmp_path, monkeypatch):
    monkeypatch.delenv(WARM_START_CACHE_ENV)  # trained here, not found in the session's shared home
    base = build_tiny_policy(cache_dir=tmp_path)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    warm_start.warm_start_policy(base, arithmetic_task(16, seed=1), steps=3, batch_size=4, lr=1e-3, seed=0,
                                 max_new_tokens=8)
    assert torch.equal(torch.rand(3), expected), "a cached warm start and a fresh one must leave the same RNG"
