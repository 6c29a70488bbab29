"""A non-finite loss or gradient skips its update and changes nothing; several in a row stop the run with a
checkpoint (``optim.max_nonfinite``, exit 4)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch

import rlkit.core.registry
from rlkit import hookimpl
from rlkit.cli import main
from rlkit.train.settings import RewardParts, TrainingSettings
from rlkit.train.updates import NonFiniteWatch, OptimizerPort, UpdateContext, optimizer_step
from rlkit_plugins.advantages.grpo import GroupNormalizedAdvantage


def _context(policy: torch.nn.Module, opt: torch.optim.Optimizer) -> UpdateContext:
    settings = TrainingSettings(num_generations=2, max_completion_length=4, temperature=1.0, lr=0.1, weight_decay=0.0,
                                warmup_steps=0, gradient_clip_val=1.0)
    port = OptimizerPort(opt, None, lambda loss: loss.backward(),
                         lambda o, value: torch.nn.utils.clip_grad_norm_(policy.parameters(), value))
    parts = RewardParts(judge=None, judge_name="none", aggregator=None, estimator=None, scheduler=None)
    return UpdateContext(policy, None, SimpleNamespace(sync_weights=lambda policy: None), settings, parts, port,
                         torch.device("cpu"), 0)


@pytest.mark.parametrize("poison", ["gradient", "loss"])
def test_a_non_finite_update_changes_no_weight_and_no_optimiser_state(poison):
    torch.manual_seed(0)
    policy = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(policy.parameters(), lr=0.1)
    ctx = _context(policy, opt)
    loss = policy(torch.ones(1, 3)).sum()
    loss.backward()
    assert optimizer_step(ctx, opt, loss.detach())[1], "a finite step updates"
    weights = [p.detach().clone() for p in policy.parameters()]
    state = {k: {n: v.clone() if torch.is_tensor(v) else v for n, v in s.items()} for k, s in opt.state.items()}
    opt.zero_grad()
    bad = policy(torch.ones(1, 3)).sum() * (float("inf") if poison == "gradient" else 1.0)
    bad.backward()
    skipped_loss = bad.detach() if poison == "gradient" else torch.tensor(float("nan"))
    _, updated = optimizer_step(ctx, opt, skipped_loss)
    assert not updated
    for before, after in zip(weights, policy.parameters(), strict=True):
        assert torch.equal(before, after)
    for key, saved in state.items():
        assert all(torch.equal(saved[n], opt.state[key][n]) if torch.is_tensor(saved[n]) else saved[n] ==
                   opt.state[key][n] for n in saved), "AdamW's moments and step count are untouched"


def test_the_watch_says_each_skip_and_stops_after_the_limit_in_a_row():
    watch = NonFiniteWatch(limit=2)
    assert watch.update(0, {"train/skipped_nonfinite": 0.0}) is None
    assert "step 1: the loss or gradient was not finite" in watch.update(1, {"train/skipped_nonfinite": 1.0,
                                                                              "grad_norm": float("nan")})
    assert not watch.exhausted
    watch.update(2, {"train/skipped_nonfinite": 0.0})  # a good step resets the count
    watch.update(3, {"train/skipped_nonfinite": 1.0})
    watch.update(4, {"train/skipped_nonfinite": 1.0})
    assert watch.exhausted and watch.total == 3
    error = watch.error(4)
    assert error.where == "optim.max_nonfinite" and error.exit_code == 4 and "2 steps in a row" in error.message
    assert not NonFiniteWatch(limit=0).exhausted


class InfAdvantage(GroupNormalizedAdvantage):
    """GRPO, except on the calls in ``bad_calls`` (counted from 0; None: every call), where one advantage is inf."""

    bad_calls: set[int] | None = set()
    calls = 0

    def advantages(self, batch):
        out = super().advantages(batch)
        call, type(self).calls = type(self).calls, type(self).calls + 1
        if self.bad_calls is None or call in self.bad_calls:
            out = out.clone()
            out[0, 0] = float("inf")
        return out


class _Estimators:
    @hookimpl
    def rlkit_register_advantage_estimators(self, register):
        register("inf_grpo", InfAdvantage)


@pytest.fixture
def inf_estimator(monkeypatch):
    real = rlkit.core.registry.create_plugin_manager
    monkeypatch.setattr(rlkit.core.registry, "create_plugin_manager",
                        lambda **kw: real(**{**kw, "extra": [*kw.get("extra", ()), _Estimators()]}))
    monkeypatch.setattr(InfAdvantage, "calls", 0)
    return InfAdvantage


RUN = ["advantage.name=inf_grpo", "model=tiny_random", "batch_size=2", "num_generations=2", "logger=none",
       "data.heldout_fraction=0", "trainer.max_steps=5"]


def _skipped(run) -> list[float]:
    rows = [json.loads(line)["metrics"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r["train/skipped_nonfinite"] for r in rows if "train/skipped_nonfinite" in r]


def test_an_inf_advantage_once_skips_that_step_and_the_run_goes_on(tmp_path, capsys, inf_estimator, monkeypatch):
    monkeypatch.setattr(InfAdvantage, "bad_calls", {2})
    assert main(["fit", *RUN, f"hydra.run.dir={tmp_path}"]) == 0
    assert _skipped(tmp_path) == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert "step 2: the loss or gradient was not finite" in capsys.readouterr().err


def test_inf_advantages_every_step_stop_the_run_with_a_checkpoint(tmp_path, capsys, inf_estimator, monkeypatch):
    monkeypatch.setattr(InfAdvantage, "bad_calls", None)
    with pytest.raises(SystemExit) as exited:
        main(["fit", *RUN, "optim.max_nonfinite=3", f"hydra.run.dir={tmp_path}"])
    assert exited.value.code == 4
    err = capsys.readouterr().err
    line = [x for x in err.splitlines() if x.startswith("rlkit: error:")]
    assert len(line) == 1 and "optim.max_nonfinite" in line[0] and "3 steps in a row" in line[0], err[-2000:]
    assert "ckpt_path=" in line[0] and "Traceback" not in err
    checkpoint = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=False)
    assert checkpoint["global_step"] == 3
    assert _skipped(tmp_path) == [1.0, 1.0, 1.0]
