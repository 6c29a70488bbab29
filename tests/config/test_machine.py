"""`rlkit validate` refuses, in one line and before anything loads, a config this machine cannot run: an accelerator
it lacks, more GPUs than it has, a policy that cannot fit its memory (rlkit.config.machine)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from rlkit.cli import main
from rlkit.config import machine
from rlkit.lm.models import build_tiny_policy

# Llama 3.1 405B's sizes: no machine that runs these tests holds its training state (about 8 TB in float32)
HUGE = {"model_type": "llama", "hidden_size": 16384, "num_hidden_layers": 126, "vocab_size": 128256,
        "intermediate_size": 53248, "num_attention_heads": 128, "num_key_value_heads": 8}


def _one_line(code: int, err: str, where: str) -> str:
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith(f"rlkit: error: {where}"), lines
    return lines[0]


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU")
def test_a_gpu_accelerator_on_a_machine_without_one_is_refused(capsys):
    line = _one_line(main(["validate", "trainer.accelerator=gpu"]), capsys.readouterr().err, "trainer.accelerator")
    assert "no CUDA GPU" in line


def test_more_gpus_than_the_machine_has_are_refused(capsys, monkeypatch):
    monkeypatch.setattr(machine, "_gpu_count", lambda: 1)  # the probe: this test runs on machines with none
    line = _one_line(main(["validate", "trainer.accelerator=gpu", "trainer.devices=4"]), capsys.readouterr().err,
                     "trainer.devices")
    assert "asks for 4 GPUs; this machine has 1" in line
    assert main(["validate", "trainer.accelerator=gpu", "trainer.devices=[1]"]) == 2, "index 1 is a second GPU"
    assert main(["validate", "trainer.accelerator=gpu", "trainer.devices=1"]) == 0
    assert main(["validate", "trainer.accelerator=gpu", "trainer.devices=-1"]) == 0


def test_cpu_processes_are_not_limited_by_the_machine(capsys):
    assert main(["validate", "trainer=ddp", "trainer.devices=64"]) == 0


def test_a_policy_too_big_for_the_machine_is_refused_with_its_estimate(tmp_path, capsys):
    folder = tmp_path / "huge"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(HUGE))
    line = _one_line(main(["validate", f"model.name_or_path={folder}", "optim.lr=1e-5"]), capsys.readouterr().err,
                     "model.name_or_path")
    assert str(folder) in line and "403.75B parameters" in line and "GiB to train" in line


def test_the_estimate_counts_the_weights_of_a_real_model():
    from safetensors import safe_open

    folder = Path(build_tiny_policy())
    counted = 0
    for file in folder.glob("*.safetensors"):
        with safe_open(file, "pt") as weights:
            counted += sum(math.prod(weights.get_slice(k).get_shape()) for k in weights.keys())  # noqa: SIM118
    estimated = machine.estimate_parameters(json.loads((folder / "config.json").read_text()))
    assert estimated is not None and 0.95 * counted <= estimated <= counted, "a floor within 5% (norms left out)"
    assert machine.estimate_parameters({"model_type": "custom"}) is None


def test_memory_is_read_from_the_machine():
    available = machine.available_memory()
    assert available is not None and available > 0
