"""End-to-end CPU runs of ``rlkit fit`` on the embedded tiny policy (marked slow, still in CI). The warm-started
default is trained once per session (tests/conftest.py); a test whose data settings would need a warm start of its
own, or that compares against the random weights, runs ``model=tiny_random``."""

from __future__ import annotations

import csv
import ctypes
import ctypes.util
import json
import math
from pathlib import Path

import pytest
import torch

from rlkit.cli import main
from rlkit.data.records import split_heldout

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)


def _metrics(run_dir: Path) -> list[dict[str, str]]:
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        return [row for row in csv.DictReader(fh) if row.get("reward/mean")]


def test_fit_runs_logs_checkpoints_and_saves_policy(tmp_path, capsys):
    run_dir = tmp_path / "run"
    code = main(["fit", "logger=csv", "trainer.max_steps=4", "checkpoint_every=2", "batch_size=4",
                 "num_generations=4", f"hydra.run.dir={run_dir}"])
    out = capsys.readouterr().out
    assert code == 0
    assert "final held-out mean normalised reward" in out
    assert "training diagnostics" in out and "dimension conflict rate" in out
    rows = _metrics(run_dir)
    assert len(rows) == 4
    for key in ("reward/mean", "rewards/correctness/mean", "rewards/format/std", "kl", "clip_ratio",
                "advantages/std", "frac_zero_std_groups", "completion_length", "tokens_per_sec", "time/judge",
                "rewards/format/saturated_groups", "rewards/brevity/unique_per_group", "dimension_conflict_rate",
                "advantages/frac_zero_groups", "advantages/distinct_per_group", "weights/correctness"):
        assert key in rows[0] and rows[0][key] != "", key
    assert all(0.0 <= float(r["reward/mean"]) <= 1.0 for r in rows)
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)
    assert ckpt["global_step"] == 4
    assert ckpt["rlkit"]["rubric"]["name"] == "arithmetic" and len(ckpt["rlkit"]["rubric"]["hash"]) == 64
    assert (run_dir / "policy" / "config.json").is_file()


def test_fit_from_a_saved_model_path_changes_parameters(tmp_path, capsys):
    from rlkit.lm.models import build_tiny_policy, load_policy

    src = build_tiny_policy(cache_dir=tmp_path / "models")
    before, _ = load_policy(src)
    run_dir = tmp_path / "run"
    data = tmp_path / "prompts.jsonl"
    data.write_text("\n".join(json.dumps({"prompt": f"{i}+1=", "reference": str(i + 1)}) for i in range(16)))
    code = main(["fit", "logger=csv", "trainer.max_steps=2", "batch_size=4", "num_generations=4",
                 f"model.name_or_path={src}", f"data.path={data}", f"hydra.run.dir={run_dir}"])
    assert code == 0, capsys.readouterr().err
    after, _ = load_policy(run_dir / "policy")
    changed = [n for (n, a), (_, b) in zip(before.named_parameters(), after.named_parameters(), strict=True)
               if not torch.equal(a, b)]
    assert changed, "training changed no parameter"
    assert all(torch.isfinite(torch.tensor([float(r["loss"]) for r in _metrics(run_dir)])))


def test_fit_bad_config_fails_fast_with_one_line(capsys):
    assert main(["fit", "judge=nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown judge 'nope'" in err[0]
    assert not Path("outputs").exists(), "no run directory for a config that cannot run"


def test_heldout_split_is_disjoint_and_deterministic():
    records = [{"prompt": f"{i}+{i}="} for i in range(40)]
    train, held = split_heldout(records, 0.25)
    assert len(held) == 10 and len(train) == 30
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in held}
    reversed_held = split_heldout(list(reversed(records)), 0.25)[1]
    assert {r["prompt"] for r in reversed_held} == {r["prompt"] for r in held}, "split depends on prompts only"


def test_multirun_gives_each_job_its_own_wandb_offline_run(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    code = main(["fit", "-m", "seed=1,2", "trainer.max_steps=1", "batch_size=2", "num_generations=2",
                 f"hydra.sweep.dir={sweep}"])
    assert code == 0
    assert capsys.readouterr().out.count("final held-out mean normalised reward") == 2
    runs = sorted(sweep.glob("*/wandb/offline-run-*"))
    assert len(runs) == 2 and runs[0].parent.parent != runs[1].parent.parent
    for run in runs:  # step 0 logs the sample table (log_samples.every divides 0)
        (table,) = run.glob("files/media/table/samples_*.table.json")
        content = json.loads(table.read_text())
        assert content["columns"][:5] == ["step", "prompt", "completion", "reward", "advantage"]
        assert len(content["data"]) == 4  # batch_size 2 × num_generations 2, under the 16-row limit
        lines = (run.parent.parent / "samples.jsonl").read_text().splitlines()
        assert len(lines) == 4 and "correctness" in json.loads(lines[0])


def _metric_rows_by_step(run_dir: Path) -> dict[int, dict[str, str]]:
    return {int(r["step"]): r for r in _metrics(run_dir)}


# Wall-clock figures differ between runs by nature; everything else must match exactly.
_TIMING_KEYS = ("time/", "tokens_per_sec", "epoch")


def test_resume_after_sigkill_reproduces_the_uninterrupted_metrics(tmp_path):
    from rlkit.testing.runs import fit_killed_at_first_checkpoint

    args = ["model=tiny_random", "logger=csv", "batch_size=4", "num_generations=4", "checkpoint_every=3",
            "data.num_prompts=24"]
    ckpt = fit_killed_at_first_checkpoint(args, tmp_path / "killed")
    k = torch.load(ckpt, weights_only=True)["global_step"]  # the save is atomic: never a torn file
    assert k % 3 == 0 and k > 0

    assert main(["fit", *args, f"trainer.max_steps={k + 3}", f"ckpt_path={ckpt}",
                 f"hydra.run.dir={tmp_path / 'resumed'}"]) == 0
    assert main(["fit", *args, f"trainer.max_steps={k + 3}", f"hydra.run.dir={tmp_path / 'straight'}"]) == 0
    resumed, straight = _metric_rows_by_step(tmp_path / "resumed"), _metric_rows_by_step(tmp_path / "straight")
    assert sorted(resumed) == [k, k + 1, k + 2]  # Lightning counts steps from 0: these are steps k+1..k+3
    for step in resumed:
        compared = {key: v for key, v in straight[step].items() if not key.startswith(_TIMING_KEYS) and v != ""}
        assert len(compared) > 20
        assert {key: resumed[step][key] for key in compared} == compared, f"step {step} differs"


def test_fit_with_lora_trains_adapters_only_against_the_adapter_off_reference(tmp_path, capsys):
    from peft import PeftModel

    from rlkit.lm.models import build_tiny_policy, load_policy

    src = build_tiny_policy(cache_dir=tmp_path / "models")
    run_dir = tmp_path / "run"
    code = main(["fit", "logger=csv", "trainer.max_steps=3", "batch_size=4", "num_generations=4",
                 "model.lora.r=4", "model.lora.save=adapter", "optim.lr=0.05", f"model.name_or_path={src}",
                 f"hydra.run.dir={run_dir}"])
    assert code == 0, capsys.readouterr().err
    rows = _metrics(run_dir)
    assert len(rows) == 3 and all(torch.isfinite(torch.tensor(float(r["loss"]))) for r in rows)
    assert float(rows[-1]["kl"]) > 0, "the adapter-off reference must differ from the trained policy"
    assert (run_dir / "policy" / "adapter_config.json").is_file()
    base, _ = load_policy(src)
    original = {n: p.clone() for n, p in base.named_parameters()}
    trained = PeftModel.from_pretrained(base, run_dir / "policy")
    lora_b = [p for n, p in trained.named_parameters() if "lora_B" in n]
    assert lora_b and any(p.abs().sum() > 0 for p in lora_b), "LoRA B starts at zero; training must move it"
    for name, param in trained.get_base_model().named_parameters():
        if "lora_" not in name:
            key = name.replace(".base_layer", "")
            assert torch.equal(param, original[key]), f"base weight {key} changed"
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert not any(k.startswith("reference.") for k in ckpt["state_dict"]), "no second copy under LoRA"


def test_gradient_accumulation_and_length_buckets_give_the_same_update(tmp_path):
    from rlkit.lm.models import load_policy

    policies, losses = [], []
    for steps, buckets in ((1, 1), (3, 1), (2, 5)):
        run_dir = tmp_path / f"accumulate{steps}-buckets{buckets}"
        # model=tiny_random: in the warm-started policy the key biases (which softmax ignores: their true gradient
        # is 0) get float-noise gradients that Adam's normalisation scales up, 2.4e-5 apart after 2 steps
        assert main(["fit", "model=tiny_random", "logger=csv", "trainer.max_steps=2", "batch_size=4",
                     "num_generations=4", f"optim.gradient_accumulation_steps={steps}",
                     f"optim.length_buckets={buckets}",
                     f"hydra.run.dir={run_dir}"]) == 0
        policies.append(load_policy(run_dir / "policy")[0])
        losses.append([float(r["loss"]) for r in _metrics(run_dir)])
    # Adam hides a gradient scale error in the parameters; the logged loss does not.
    for other, policy in zip(losses[1:], policies[1:], strict=True):
        assert other == pytest.approx(losses[0], rel=1e-4, abs=1e-7)
        for (name, a), (_, b) in zip(policies[0].named_parameters(), policy.named_parameters(), strict=True):
            assert torch.allclose(a, b, atol=1e-5), name


def test_bf16_mixed_precision_trains_with_gradient_clipping(tmp_path):
    # the fused AdamW used in full precision cannot be clipped under Lightning's mixed-precision plugins
    run_dir = tmp_path / "run"
    assert main(["fit", "logger=csv", "trainer.max_steps=2", "batch_size=4", "num_generations=4",
                 "trainer.precision=bf16-mixed", "optim.gradient_clip_val=1.0", f"hydra.run.dir={run_dir}"]) == 0
    rows = _metrics(run_dir)
    assert len(rows) == 2 and all(math.isfinite(float(r["loss"])) for r in rows)


def test_several_iterations_per_rollout_train_on_log_probs_from_inference_mode(tmp_path):
    # old and reference log-probs come from torch.inference_mode; autograd refuses to save inference tensors
    run_dir = tmp_path / "run"
    # Lightning counts optimiser steps: 4 of them are 2 rollouts of 2 iterations each
    assert main(["fit", "logger=csv", "trainer.max_steps=4", "batch_size=4", "num_generations=4",
                 "objective.params.num_iterations=2", "model.reference=ema", f"hydra.run.dir={run_dir}"]) == 0
    rows = _metrics(run_dir)
    assert len(rows) == 2 and all(math.isfinite(float(r["loss"])) and float(r["kl"]) >= 0 for r in rows)


def test_full_fine_tuning_trains_in_train_mode_and_checkpointing_recomputes_without_changing_the_update(tmp_path):
    """A loaded policy is in eval mode and Lightning leaves it there; checkpointing then did nothing at all."""
    from rlkit.lm.models import load_policy

    policies, losses, passes = [], [], []
    for checkpointing in ("false", "true"):
        mlp_calls: list[bool] = []  # module.training of each decoder MLP call that records a graph

        def count(module: torch.nn.Module, _args: object, calls: list[bool] = mlp_calls) -> None:
            if type(module).__name__.endswith("MLP") and torch.is_grad_enabled():
                calls.append(module.training)

        handle = torch.nn.modules.module.register_module_forward_pre_hook(count)
        run_dir = tmp_path / f"checkpointing-{checkpointing}"
        try:
            assert main(["fit", "model=tiny_random", "logger=csv", "trainer.max_steps=2", "batch_size=2",
                         "num_generations=2", "data.num_prompts=16", "max_completion_length=8",
                         f"model.gradient_checkpointing={checkpointing}", f"hydra.run.dir={run_dir}"]) == 0
        finally:
            handle.remove()
        assert mlp_calls and all(mlp_calls), "the policy must be in train mode while it trains"
        passes.append(len(mlp_calls))
        policies.append(load_policy(run_dir / "policy")[0])
        losses.append([float(r["loss"]) for r in _metrics(run_dir)])
    # checkpointing recomputes every layer in backward: each MLP runs twice per gradient pass
    assert passes[1] == 2 * passes[0]
    assert losses[1] == pytest.approx(losses[0], rel=1e-5, abs=1e-7)
    for (name, a), (_, b) in zip(policies[0].named_parameters(), policies[1].named_parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-6), name


def _save_peak_mb(io, checkpoint: dict, path: Path) -> float:
    """The RSS a save adds over what was resident before it (Linux: VmHWM reset through clear_refs)."""
    status = Path("/proc/self/status")

    def read(field: str) -> int:
        return next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith(field))

    # freed heap given back first: a save whose buffer fits in pages an earlier test left resident adds no RSS, and
    # the measurement then depends on which test files ran before on this worker (it read 0 MB once in CI)
    ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)
    before = read("VmRSS:")
    Path("/proc/self/clear_refs").write_text("5")
    io.save_checkpoint(checkpoint, path)
    return (read("VmHWM:") - before) / 1024


def test_checkpoints_stream_to_their_file_instead_of_through_a_copy_in_memory(tmp_path, registry):
    from lightning.pytorch.plugins import TorchCheckpointIO

    from rlkit.config import check_config, compose_config
    from rlkit.runs.loggers import finish_logger
    from rlkit.train.fit import build_trainer

    if not Path("/proc/self/clear_refs").exists():
        pytest.skip("peak RSS is reset through Linux's /proc/self/clear_refs")
    trainer, logger = build_trainer(check_config(compose_config(registry, ["logger=csv"]), registry), tmp_path)
    finish_logger(logger)
    io = trainer.strategy.checkpoint_io
    checkpoint = {"state_dict": {f"w{i}": torch.randn(2_000_000) for i in range(8)}, "step": 3}  # 64 MB
    streamed = _save_peak_mb(io, checkpoint, tmp_path / "checkpoints" / "last.ckpt")
    buffered = _save_peak_mb(TorchCheckpointIO(), checkpoint, tmp_path / "lightning.ckpt")
    assert buffered > 48, "Lightning's own save holds the serialised checkpoint in memory (what this avoids)"
    assert streamed < 16, f"{streamed:.0f} MB"
    loaded = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert loaded["step"] == 3 and all(torch.equal(v, loaded["state_dict"][k])
                                       for k, v in checkpoint["state_dict"].items())
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["last.ckpt"], "no temp file left behind"


@pytest.mark.parametrize(("aggregator", "advantage", "weights"), [
    ("geometric", "gdpo", "schedule"),
    ("min_first", "rank", "variance"),
    ("lexicographic", "rloo", "saturation"),
    ("pareto", "rank", "constant"),
    ("layered", "grpo", "variance"),
    ("min", "gdpo", "saturation"),
])
@pytest.mark.filterwarnings("ignore:advantage=gdpo forms advantages")
def test_every_multi_reward_plugin_trains_by_config_alone(tmp_path, aggregator, advantage, weights):
    run_dir = tmp_path / "run"
    assert main(["fit", "logger=csv", "trainer.max_steps=2", "batch_size=2", "num_generations=4",
                 f"aggregator={aggregator}", f"advantage={advantage}", f"weights={weights}",
                 f"hydra.run.dir={run_dir}"]) == 0
    rows = _metrics(run_dir)
    assert len(rows) == 2 and all(math.isfinite(float(r["loss"])) for r in rows)


@pytest.mark.parametrize("preference", ["best_worst", "topk", "adjacent", "all_pairs", "winrate", "pareto"])
def test_group_dpo_trains_with_every_constructor(tmp_path, preference):
    from rlkit.lm.models import build_tiny_policy, load_policy

    before, _ = load_policy(build_tiny_policy())
    run_dir = tmp_path / "run"
    assert main(["fit", "model=tiny_random", "objective=group_dpo", f"preference={preference}", "logger=csv",
                 "trainer.max_steps=2", "batch_size=4", "num_generations=4", "objective.params.min_gap=0",
                 f"hydra.run.dir={run_dir}"]) == 0
    rows = _metrics(run_dir)
    assert len(rows) == 2 and all(math.isfinite(float(r["loss"])) for r in rows)
    assert sum(float(r["pairs/used"]) for r in rows) > 0
    assert "rewards/accuracies" in rows[-1] and "pairs/dropped_by_gap" in rows[-1]
    after, _ = load_policy(run_dir / "policy")
    assert any(not torch.equal(a, b) for a, b in zip(before.parameters(), after.parameters(), strict=True))


def test_group_dpo_ema_reference_is_checkpointed_and_follows_the_policy(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["fit", "model=tiny_random", "objective=group_dpo", "model.reference=ema", "model.ema_decay=0.5",
                 "logger=csv", "trainer.max_steps=3", "batch_size=4", "num_generations=4", "objective.params.min_gap=0",
                 "checkpoint_every=3", f"hydra.run.dir={run_dir}"]) == 0
    state = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    ref = {k[len("reference.model."):]: v for k, v in state.items() if k.startswith("reference.model.")}
    policy = {k[len("policy."):]: v for k, v in state.items() if k.startswith("policy.")}
    assert ref and ref.keys() == policy.keys()
    from rlkit.lm.models import build_tiny_policy, load_policy

    initial = dict(load_policy(build_tiny_policy())[0].state_dict())
    moved = [k for k in ref if not torch.equal(ref[k], initial[k])]
    assert moved, "the EMA reference must move off the initial weights"
    assert any(not torch.equal(ref[k], policy[k]) for k in moved), "…but lag behind the policy"


def test_group_dpo_simpo_needs_no_reference_and_auto_lexicographic_switches(tmp_path, capsys):
    run_dir = tmp_path / "run"
    # model=tiny_random: its dimensions contradict each other from the first step; the warm-started policy's saturated
    # ones do not, so nothing would switch
    assert main(["fit", "model=tiny_random", "objective=group_dpo", "objective.params.loss_type=simpo",
                 "model.reference=none",
                 "objective.params.auto_lexicographic=true", "objective.params.conflict_threshold=0",
                 "objective.params.conflict_window=1",
                 "logger=csv", "trainer.max_steps=2", "batch_size=4", "num_generations=4",
                 f"hydra.run.dir={run_dir}"]) == 0
    rows = _metrics(run_dir)
    assert float(rows[-1]["ordering/lexicographic"]) == 1.0
    assert all(math.isfinite(float(r["loss"])) for r in rows)
