"""The warm start of the embedded tiny policy: supervised on draws of the task that exclude the held-out prompts,
built once and cached, and only where it means something (the embedded policy, the synthetic task)."""

from __future__ import annotations

import json

import pytest
import torch

import rlkit.lm.warm_start as warm_start
from rlkit import ConfigError
from rlkit.cli import main
from rlkit.config import compose_config, validate_config
from rlkit.data.records import arithmetic_task, disjoint_task_records
from rlkit.lm.models import build_tiny_policy, load_policy


def test_demonstrations_never_hold_an_excluded_prompt():
    held = arithmetic_task(32, seed=0)
    pool = disjoint_task_records("arithmetic", 2000, seed=7, exclude=held)
    assert pool and not {r["prompt"] for r in pool} & {r["prompt"] for r in held}
    assert all(r["reference"] == str(eval(r["prompt"].rstrip("="))) for r in pool[:50])


def test_warm_start_trains_once_and_is_reused(tmp_path, monkeypatch):
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
        validate_config(cfg, registry)
    assert err.value.where == "model.warm_start.steps"


@pytest.mark.slow
def test_fit_from_a_warm_start(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    assert main(["fit", "experiment=warm_start", "model.warm_start.steps=20", "trainer.max_steps=2", "batch_size=4",
                 "num_generations=4", "logger=none", f"hydra.run.dir={run}"]) == 0
    assert "final held-out mean normalised reward" in capsys.readouterr().out
    (warm,) = (tmp_path / "cache").glob("tiny-policy-*-warm-*")
    assert json.loads((warm / "warm_start.json").read_text())["steps"] == 20


def test_a_warm_start_leaves_the_callers_random_state_alone(tmp_path):
    base = build_tiny_policy(cache_dir=tmp_path)
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    warm_start.warm_start_policy(base, arithmetic_task(16, seed=1), steps=3, batch_size=4, lr=1e-3, seed=0,
                                 max_new_tokens=8)
    assert torch.equal(torch.rand(3), expected), "a cached warm start and a fresh one must leave the same RNG"
