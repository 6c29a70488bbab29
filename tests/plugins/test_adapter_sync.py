"""Only the adapter moves: the ``openai_server`` generator syncs a LoRA policy's adapter alone (vLLM's runtime LoRA
routes), against a real ``OpenAICompatibleServer`` on loopback. The engine then samples what the trainer's own
weights sample, the bytes moved are the adapter's, ``auto`` falls back to full weights on a server without the
routes, and a path the server cannot read is one error line."""

from __future__ import annotations

import shutil

import httpx
import pytest
import torch

from rlkit.core.errors import GeneratorError
from rlkit.core.registry import Registry, create_plugin_manager
from rlkit.lm.models import build_tiny_policy, load_policy
from rlkit.lm.sampling import GenerationRequest, sequence_log_probs
from rlkit.testing import example_prompts
from rlkit.testing.openai_server import OpenAICompatibleServer

_REGISTRY = Registry(create_plugin_manager())


def _lora_policy():
    from peft import LoraConfig, get_peft_model

    model, tokenizer = load_policy(build_tiny_policy())
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"])), tokenizer


def _generator(server: OpenAICompatibleServer, **params):
    return _REGISTRY.create("generator", "openai_server", {"base_url": server.url, "retry_backoff": 0.01, **params})


def _update(model, seed: int = 0, scale: float = 0.5) -> None:
    """An optimiser step's worth of change to the trainable (adapter) weights, large enough to move greedy tokens."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(scale * torch.randn(p.shape, generator=gen))


def _greedy(records) -> GenerationRequest:
    return GenerationRequest(records, 1, 8, temperature=1.0, greedy=True)


def _sampled(records) -> GenerationRequest:
    return GenerationRequest(records, 2, 6, temperature=1.0, seeds=[11, 22, 33][:len(records)])


def _logprobs_match(generator, model, tokenizer) -> None:
    out = generator.generate(model, tokenizer, _sampled(example_prompts()))
    with torch.no_grad():
        own = sequence_log_probs(model, out)
    mask = out.completion_mask.bool()
    torch.testing.assert_close(out.engine_logprobs[mask], own[mask], atol=1e-5, rtol=0)


def test_auto_moves_the_adapter_alone_and_the_engine_samples_the_trainers_weights(tmp_path):
    model, tokenizer = _lora_policy()
    hf = _REGISTRY.create("generator", "hf")
    records = example_prompts()
    with OpenAICompatibleServer() as live:
        generator = _generator(live, sync_dir=str(tmp_path / "sync"))  # sync=auto, the default
        try:
            generator.setup(model, tokenizer)
            assert generator.route == "adapter" and generator.served_model == "default-v0"
            assert generator.metrics() == {"time/sync": 0.0, "sync/bytes": 0.0}, "setup's push is no step's"
            before = generator.generate(model, tokenizer, _greedy(records)).completion_ids.tolist()
            _update(model)
            generator.sync_weights(model)
            metrics = generator.metrics()
            assert generator.policy_version == 1 and list(live.adapters) == ["default-v1"]
            saved = tmp_path / "sync" / "v1"
            assert metrics["sync/bytes"] == sum(f.stat().st_size for f in saved.rglob("*") if f.is_file())
            assert (saved / "adapter_config.json").is_file() and not (saved / "config.json").exists()
            assert metrics["time/sync"] > 0 and generator.metrics()["time/sync"] == 0, "each sync reported once"
            ours = generator.generate(model, tokenizer, _greedy(records))
            theirs = hf.generate(model, tokenizer, _greedy(records))
            assert ours.completion_ids.tolist() == theirs.completion_ids.tolist(), "the trainer's greedy tokens"
            assert ours.completion_ids.tolist() != before, "the update changed them: the new adapter serves"
            assert ours.policy_version == 1
            _logprobs_match(generator, model, tokenizer)
            loads = [r for r in live.log if r.path == "/v1/load_lora_adapter"]
            assert [r.status for r in loads] == [200, 200]
            assert not any(r.path == "/update_weights_from_disk" for r in live.log)

            full = _generator(live, sync="full")  # the same policy, merged weights: what the adapter route spares
            try:
                full.setup(model, tokenizer)
                _update(model, seed=1)
                full.sync_weights(model)
                full_bytes = full.metrics()["sync/bytes"]
                _logprobs_match(full, model, tokenizer)  # the merged copy serves what the adapter computes
            finally:
                full.close()
            assert metrics["sync/bytes"] * 10 < full_bytes, (metrics["sync/bytes"], full_bytes)
            assert any(p.requires_grad for p in model.parameters()), "merging happened in a copy"
        finally:
            generator.close()


def test_auto_falls_back_to_full_weights_in_one_line_on_a_server_without_runtime_lora(capsys):
    model, tokenizer = _lora_policy()
    with OpenAICompatibleServer(runtime_lora=False) as live:
        generator = _generator(live)
        try:
            generator.setup(model, tokenizer)
            lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("rlkit:")]
            assert len(lines) == 1 and "sync=auto" in lines[0] and "HTTP 404" in lines[0], lines
            assert generator.route == "full" and generator.served_model == "default" and not live.adapters
            _update(model)
            generator.sync_weights(model)
            assert generator.policy_version == 1
            _logprobs_match(generator, model, tokenizer)
            assert [r.path for r in live.log].count("/v1/load_lora_adapter") == 1, "probed once"
        finally:
            generator.close()


def test_auto_on_full_fine_tuning_keeps_the_full_weight_route():
    model, tokenizer = load_policy(build_tiny_policy())
    with OpenAICompatibleServer() as live:
        generator = _generator(live)
        try:
            generator.setup(model, tokenizer)
            assert generator.route == "full"
            generator.sync_weights(model)
            assert generator.metrics()["sync/bytes"] > 0
            paths = [r.path for r in live.log]
            assert "/update_weights_from_disk" in paths and "/v1/load_lora_adapter" not in paths
        finally:
            generator.close()


def test_the_test_server_answers_bad_adapters_as_vllm_does(tmp_path):
    model, _ = _lora_policy()
    good = tmp_path / "good"
    model.save_pretrained(good)
    broken = tmp_path / "broken"
    broken.mkdir()
    shutil.copy(good / "adapter_config.json", broken)
    (broken / "adapter_model.safetensors").write_bytes(b"not tensors")
    with OpenAICompatibleServer() as live:
        url = live.url

        def load(name, path):
            return httpx.post(f"{url}/load_lora_adapter", json={"lora_name": name, "lora_path": str(path)},
                              timeout=30)

        missing = load("a", tmp_path / "nowhere")
        assert missing.status_code == 404
        assert missing.json()["error"]["type"] == "NotFoundError"
        assert missing.json()["error"]["message"] == f"Loading lora a failed: No adapter found for {tmp_path}/nowhere"
        base = {"prompt": [5, 6, 7], "max_tokens": 4, "temperature": 0, "logprobs": 0}
        served = httpx.post(f"{url}/completions", json=base, timeout=30).json()["choices"]
        assert load("b", broken).status_code == 400 and not live.adapters
        assert httpx.post(f"{url}/completions", json=base, timeout=30).json()["choices"] == served, "base untouched"
        assert not hasattr(live.model, "peft_config")
        assert load("c", good).status_code == 200 and list(live.adapters) == ["c"]
        assert load("c", good).status_code == 400, "loaded already, and no load_inplace"
        unknown = httpx.post(f"{url}/completions", json={"model": "d", "prompt": [5, 6], "max_tokens": 2}, timeout=30)
        assert unknown.status_code == 404 and unknown.json()["error"]["message"].startswith("The model `d` does not")
        gone = httpx.post(f"{url}/unload_lora_adapter", json={"lora_name": "d"}, timeout=30)
        assert gone.status_code == 404 and gone.json()["error"]["type"] == "NotFoundError"


def test_an_adapter_path_the_server_cannot_read_fails_the_step_in_one_line(tmp_path):
    model, tokenizer = _lora_policy()
    with OpenAICompatibleServer() as live:
        generator = _generator(live, sync="adapter", max_lag=1, sync_dir=str(tmp_path / "sync"))
        try:
            generator.setup(model, tokenizer)
            live.set_faults(delay=0.3)  # a batch is out when the sync comes: its load waits for it
            pending = generator.submit(model, tokenizer, _sampled(example_prompts()))
            _update(model)
            generator.sync_weights(model)
            shutil.rmtree(tmp_path / "sync" / "v1")  # as a sync_dir the server does not share
            live.set_faults(delay=0.0)
            with pytest.raises(GeneratorError) as caught:
                pending.result()
            message = str(caught.value)
            assert "\n" not in message and "generator.params.base_url" in message
            assert "/v1/load_lora_adapter failed: HTTP 404" in message and "No adapter found" in message
        finally:
            live.set_faults(delay=0.0)
            generator.close()
