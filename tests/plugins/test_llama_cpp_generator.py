"""The ``llama_cpp`` generator on a real llama.cpp engine (the judge-server extra's xllamacpp) serving the tiny policy
exported to GGUF: its log-probs against the trainer's (full weights and LoRA, merged), the stale-weights rule with
``max_lag`` 1, a dying engine, the missing extra, and ``rlkit fit`` for two steps. The generator contract suite runs
on it too (tests/plugins/test_contracts.py)."""

from __future__ import annotations

import copy
import json
import os
import signal

import pytest

from rlkit.cli import main
from rlkit.core.errors import EngineError
from rlkit.core.registry import Registry, create_plugin_manager
from rlkit.testing import example_prompts, one_error_line

torch = pytest.importorskip("torch")
pytest.importorskip("xllamacpp", reason="llama.cpp's engine is the judge-server extra")

from rlkit.lm.models import build_tiny_policy, load_policy  # noqa: E402
from rlkit.lm.sampling import GenerationRequest, sequence_log_probs  # noqa: E402

_REGISTRY = Registry(create_plugin_manager())
# Both sides compute in float32 from the same float32 weights (the engine's KV cache f32 and its flash attention off,
# as the generator asks for f32 weights) and differ only in the order of summation, ggml's kernels against torch's:
# measured at most 4.8e-7 on log-probs around -4.6, i.e. float32's rounding (2^-23 relative = 5.5e-7 there). 1e-5 is
# 20 times that and still fails what a real fault does: llama.cpp's flash attention alone moved them by 1.5e-4, a
# missed LoRA delta or stale weights by 1e-2 or more.
F32_ATOL = 1e-5


@pytest.fixture
def policy():
    model, tokenizer = load_policy(build_tiny_policy())
    return model.eval(), tokenizer


def _generator(**params):
    return _REGISTRY.create("generator", "llama_cpp", {"threads": 1, **params})


def _request(g: int = 4, seeds=(11, 22, 33), greedy: bool = False) -> GenerationRequest:
    records = example_prompts()[:3]
    return GenerationRequest(records, g, 12, temperature=1.0, greedy=greedy, seeds=None if greedy else list(seeds))


def _perturb(model, seed: int = 0, scale: float = 0.05) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(scale * torch.randn(p.shape, generator=gen))


def _gap(model, batch) -> float:
    """The largest gap between the engine's log-probs and ``model``'s over the completion tokens."""
    with torch.no_grad():
        ours = sequence_log_probs(model, batch)
    mask = batch.completion_mask.bool()
    assert mask.sum() > 10
    return float((ours - batch.engine_logprobs)[mask].abs().max())


def test_engine_logprobs_equal_the_trainers_after_a_sync(policy):
    model, tokenizer = policy
    generator = _generator()
    try:
        generator.setup(model, tokenizer)
        first = generator.generate(model, tokenizer, _request())
        assert first.policy_version == 0 and first.policy_lag == 0
        assert first.input_ids.shape[0] == 12 and _gap(model, first) < F32_ATOL
        assert generator.server.settings.slots == 12, "slots sized to the request's B x G"
        _perturb(model)
        generator.sync_weights(model)
        second = generator.generate(model, tokenizer, _request())
        assert second.policy_version == 1 and second.policy_lag == 0
        assert _gap(model, second) < F32_ATOL, "the engine reloaded on the synced weights"
        metrics = generator.metrics()
        assert metrics["time/sync"] > 0 and metrics["sync/bytes"] > 100_000  # the tiny policy's f32 file
        # the same seeds draw the same completions from the same weights; the G of a group differ
        again = generator.generate(model, tokenizer, _request())
        assert torch.equal(again.input_ids, second.input_ids)
        assert len({tuple(row.tolist()) for row in second.input_ids[:4]}) > 1
    finally:
        generator.close()
    assert generator.server is None


def test_a_lora_policy_is_served_merged(policy):
    peft = pytest.importorskip("peft")
    model, tokenizer = policy
    lora = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                      init_lora_weights=False))
    before = {k: v.clone() for k, v in lora.state_dict().items()}
    generator = _generator()
    try:
        generator.setup(lora, tokenizer)
        batch = generator.generate(lora, tokenizer, _request())
        assert _gap(lora, batch) < F32_ATOL
        with lora.disable_adapter():
            assert _gap(lora, batch) > 10 * F32_ATOL, "the adapter's update reached the engine"
    finally:
        generator.close()
    assert all(torch.equal(before[k], v) for k, v in lora.state_dict().items()), "training weights left as they were"


def test_with_max_lag_a_batch_out_keeps_the_version_that_sampled_it(policy):
    """A batch requested before an update is answered by the weights it was requested on and says it is one step
    behind; the next batch comes from the new version."""
    model, tokenizer = policy
    generator = _generator(max_lag=1)
    try:
        generator.setup(model, tokenizer)
        pending = generator.submit(model, tokenizer, _request())
        old = copy.deepcopy(model)
        _perturb(model)
        generator.sync_weights(model)
        stale = pending.result()
        assert stale.policy_version == 0 and stale.policy_lag == 1
        assert _gap(old, stale) < F32_ATOL and _gap(model, stale) > 10 * F32_ATOL, "sampled by the old weights"
        fresh = generator.generate(model, tokenizer, _request())
        assert fresh.policy_version == 1 and fresh.policy_lag == 0 and _gap(model, fresh) < F32_ATOL
        assert generator.state_dict() == {"policy_version": 1, "steps": 1, "pushed_at": 1}
    finally:
        generator.close()


def test_an_engine_that_dies_is_restarted_once_then_stops_the_run(policy):
    model, tokenizer = policy
    generator = _generator()
    try:
        generator.setup(model, tokenizer)
        generator.generate(model, tokenizer, _request())
        generator.server.crash_for_test()
        with pytest.warns(UserWarning, match="restarting it once"):
            batch = generator.generate(model, tokenizer, _request())
        assert _gap(model, batch) < F32_ATOL and generator.server.restarts == 1
        # frozen first, so the batch is surely out when the engine dies: the tiny policy answers in milliseconds, and
        # killed right after submit a fast engine had sometimes answered the whole batch already (CI, "did not raise")
        os.kill(generator.server.pid, signal.SIGSTOP)
        pending = generator.submit(model, tokenizer, _request())
        generator.server.crash_for_test()  # with the batch out
        with pytest.raises(EngineError, match="stopped again") as failed:
            pending.result()
        assert "\n" not in str(failed.value)
    finally:
        generator.close()


def test_without_the_engine_validate_and_fit_name_the_pip_command(monkeypatch, capsys):
    import rlkit_plugins.generators.llama_cpp as plugin

    monkeypatch.setattr(plugin, "engine_installed", lambda: False)
    for command in ("validate", "fit"):
        try:
            code = main([command, "generator=llama_cpp", "logger=none"])
        except SystemExit as exc:
            code = exc.code
        line = one_error_line(code, capsys.readouterr().err)
        assert "pip install 'rlkit[judge-server]'" in line, line


@pytest.mark.slow
@pytest.mark.parametrize("max_lag", [0, 1])
def test_fit_samples_from_llama_cpp_for_two_steps(tmp_path, max_lag):
    assert main(["fit", "generator=llama_cpp", f"generator.params.max_lag={max_lag}", "generator.params.threads=1",
                 "trainer.max_steps=2", "batch_size=2", "num_generations=2", "logger=none",
                 f"hydra.run.dir={tmp_path / 'run'}"]) == 0
    rows = [json.loads(line)["metrics"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout/policy_lag" in r]
    assert [r["rollout/policy_lag"] for r in steps] == [0.0, float(max_lag)]
    assert all(r["time/sync"] > 0 for r in steps)
    # the first step samples from the policy itself: every importance ratio is 1 to float rounding
    assert steps[0]["rollout/mismatch_kl"] == pytest.approx(0.0, abs=1e-6)
    assert steps[0]["rollout/is_ratio_mean"] == pytest.approx(1.0, abs=1e-4)
