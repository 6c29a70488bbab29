"""Under LoRA a run keeps the adapter alone (issue 49): its checkpoints hold the trainable weights only and resume
exactly with the base taken from the model file again, and its ``policy/`` folder is the adapter, which every loader
by path merges into its base."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from rlkit.cli import main

pytestmark = pytest.mark.slow

_TIMING_KEYS = ("time/", "tokens_per_sec", "epoch")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)


def _rows_by_step(run_dir: Path) -> dict[int, dict[str, str]]:
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        return {int(r["step"]): r for r in csv.DictReader(fh) if r.get("reward/mean")}


def test_lora_checkpoint_holds_the_adapter_alone_and_resumes_exactly(tmp_path):
    from rlkit.lm.models import build_tiny_policy, load_policy

    src = build_tiny_policy(cache_dir=tmp_path / "models")
    args = ["logger=csv", "batch_size=4", "num_generations=4", "model.lora.r=4", "optim.lr=0.05",
            f"model.name_or_path={src}", "checkpoint_every=2", "torch_threads=1"]
    assert main(["fit", *args, "trainer.max_steps=2", f"hydra.run.dir={tmp_path / 'first'}"]) == 0
    ckpt = tmp_path / "first" / "checkpoints" / "last.ckpt"
    saved = torch.load(ckpt, weights_only=False)
    assert saved["rlkit"]["weights"] == "trainable"
    assert saved["state_dict"] and all("lora_" in key for key in saved["state_dict"]), "the base is not saved again"
    assert ckpt.stat().st_size < (src / "model.safetensors").stat().st_size

    assert main(["fit", *args, "trainer.max_steps=4", f"ckpt_path={ckpt}",
                 f"hydra.run.dir={tmp_path / 'resumed'}"]) == 0
    assert main(["fit", *args, "trainer.max_steps=4", f"hydra.run.dir={tmp_path / 'straight'}"]) == 0
    resumed, straight = _rows_by_step(tmp_path / "resumed"), _rows_by_step(tmp_path / "straight")
    assert sorted(resumed) == [2, 3]
    for step in resumed:
        compared = {k: v for k, v in straight[step].items() if not k.startswith(_TIMING_KEYS) and v != ""}
        assert len(compared) > 20
        assert {k: resumed[step][k] for k in compared} == compared, f"step {step} differs"

    # policy/ is the adapter (the default), and loading it by path gives the merged model the run trained
    policy_dir = tmp_path / "straight" / "policy"
    assert (policy_dir / "adapter_config.json").is_file() and not (policy_dir / "config.json").exists()
    from peft import PeftModel

    base, tokenizer = load_policy(src)
    expected = PeftModel.from_pretrained(base, policy_dir).merge_and_unload().eval()
    merged, _ = load_policy(policy_dir)
    assert Path(merged.config._name_or_path).parent == tmp_path / "cache"  # the merge, built in the rlkit cache
    ids = tokenizer("3+4=", return_tensors="pt").input_ids
    with torch.no_grad():
        assert torch.allclose(merged(ids).logits, expected(ids).logits, atol=1e-5)
    assert load_policy(policy_dir)[0].config._name_or_path == merged.config._name_or_path, "merged once, cached"

    # rlkit eval reads both: the adapter-only checkpoint (its base from model.name_or_path) and the adapter folder
    from rlkit.evaluation.golden import read_results

    out = tmp_path / "results.jsonl"
    for checkpoint in (tmp_path / "straight" / "checkpoints" / "last.ckpt", policy_dir):
        assert main(["eval", *args[:-1], f"eval.checkpoint={checkpoint}", f"eval.output={out}",
                     "eval.embedding=null"]) == 0
    means = {r["checkpoint"]: r["mean"] for r in read_results(out) if r["dimension"] == "reward"}
    assert len(means) == 2 and len(set(means.values())) == 1, means


def test_lora_weights_load_without_the_frozen_base_and_name_what_does_not_fit():
    from peft import LoraConfig, get_peft_model

    from rlkit.lm.adapters import frozen_weights, load_weights
    from rlkit.lm.models import build_tiny_policy, load_policy

    def lora_policy():
        model, _ = load_policy(build_tiny_policy())
        return get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))

    trained, fresh = lora_policy(), lora_policy()
    with torch.no_grad():
        for name, p in trained.named_parameters():
            if "lora_B" in name:
                p.fill_(0.5)
    frozen = frozen_weights(trained)
    adapter = {k: v for k, v in trained.state_dict().items() if k not in frozen}
    assert adapter and all("lora_" in k for k in adapter)
    load_weights(fresh, adapter)
    assert all(torch.equal(fresh.state_dict()[k], v) for k, v in adapter.items())
    with pytest.raises(RuntimeError, match="missing .*lora_"):
        load_weights(fresh, {k: v for k, v in list(adapter.items())[1:]})
