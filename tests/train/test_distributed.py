"""Multi-process training: the sampler's split, and a two-process gloo DDP run against a one-process run of
the same global batch (same rewards, advantages and losses; the same parameters on every process)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlkit.lm.sampling import micro_batches
from rlkit.train.datamodule import EpochShuffleSampler
from rlkit.train.distributed import Spread


def _batches(sampler: EpochShuffleSampler, size: int) -> list[list[int]]:
    order = list(sampler)
    return [order[i:i + size] for i in range(0, len(order) - size + 1, size)]


@pytest.mark.parametrize("skip", [0, 8])
def test_ranks_together_see_the_single_process_batches(skip):
    single = EpochShuffleSampler(22, seed=3, batch_size=8)
    ranks = [EpochShuffleSampler(22, seed=3, batch_size=4, rank=r, world_size=2) for r in range(2)]
    for sampler in (single, *ranks):
        sampler.set_epoch(1)
        sampler.resume_at(1, skip)  # the position a checkpoint stores counts every process's prompts
    expected = _batches(single, 8)[: (22 - skip) // 8]
    if skip == 0:  # len is the whole epoch, also when a resumed epoch yields only its rest
        assert [len(r) for r in ranks] == [8, 8] and len(single) == 22
    per_rank = [_batches(r, 4) for r in ranks]
    assert len(per_rank[0]) == len(per_rank[1]) == len(expected)
    assert [a + b for a, b in zip(*per_rank, strict=True)] == expected
    assert not set(sum(per_rank[0], [])) & set(sum(per_rank[1], [])), "a prompt on two processes"


def test_exact_micro_batches_give_every_process_the_same_number_of_passes():
    assert micro_batches(5, 3, exact=True) == [slice(0, 2), slice(2, 4), slice(4, 5)]
    assert micro_batches(1, 3, exact=True) == [slice(0, 1), slice(1, 1), slice(1, 1)]
    assert micro_batches(0, 2, exact=True) == [slice(0, 0), slice(0, 0)]
    assert micro_batches(0, 2) == []


def test_a_single_process_spread_is_the_identity():
    spread = Spread.current()
    t = torch.arange(6.0).view(3, 2)
    assert not spread.distributed
    assert spread.gather(t) is t and spread.local(t) is t
    assert spread.sum(torch.tensor(2.5)) == 2.5 and spread.sum_all({"a": 1, "b": torch.tensor(2.0)}) == {"a": 1.0,
                                                                                                      "b": 2.0}


def _fit(tmp_path: Path, name: str, *overrides: str) -> Path:
    run_dir = tmp_path / name
    env = {**os.environ, "RLKIT_CACHE": str(tmp_path / "cache"), "WANDB_SILENT": "true", "PYTHONHASHSEED": "0"}
    env.pop("LOCAL_RANK", None)
    proc = subprocess.run([sys.executable, "-m", "rlkit", "fit", *overrides, f"hydra.run.dir={run_dir}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    (run_dir / "stdout.txt").write_text(proc.stdout)
    return run_dir


def _fit_in_this_process(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, *overrides: str) -> Path:
    """The one-process reference run, as `rlkit fit` runs it but without a subprocess's start-up (seconds of
    imports a run): only the gloo pair needs processes of its own."""
    from rlkit.cli import main

    run_dir = tmp_path / name
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.delenv("LOCAL_RANK", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["fit", *overrides, f"hydra.run.dir={run_dir}"]) == 0
    return run_dir


def _rows(run_dir: Path) -> list[dict[str, float]]:
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        return [{k: float(v) for k, v in row.items() if v != ""} for row in csv.DictReader(fh)
                if row.get("reward/mean")]


# grad_norm catches a gradient scale error that Adam would hide in the parameters
_COMPARED = ("loss", "grad_norm", "kl", "reward/mean", "reward/std", "advantages/mean", "advantages/std",
             "advantages/frac_zero",
             "completion_length", "frac_truncated", "rewards/correctness/mean", "rewards/format/mean",
             "weights/correctness", "clip_ratio", "unscored_completions", "pairs/built", "pairs/used",
             "rewards/accuracies")


@pytest.mark.slow
@pytest.mark.parametrize("objective", [
    # 3 length buckets of 8 rows on each process, of 16 in one: the processes cut their rows differently from
    # the single process and must still make as many backward passes as each other
    ["advantage=gdpo", "weights=variance", "optim.length_buckets=3"],
    ["objective=group_dpo", "preference=winrate", "optim.gradient_accumulation_steps=2"],
    # the policy-gradient options of issue 38: a token-normalised loss split over processes and micro-batches, and
    # a sequence-level ratio whose completions each process holds whole
    ["objective.params.loss_type=cispo", "objective.params.kl.estimator=k2", "optim.gradient_accumulation_steps=2"],
    ["objective.params.importance_sampling_level=sequence", "objective.params.num_iterations=2"],
    # each process's groups normalised by their own tokens, over the step's groups of both processes; the
    # top-entropy tokens by the quantile over both processes' tokens
    ["objective.params.loss_type=prompt_mean", "objective.params.top_entropy_quantile=0.5",
     "optim.gradient_accumulation_steps=3"],
    # the other normalisations: the step's tokens, a constant, none
    ["objective.params.loss_type=dapo", "optim.gradient_accumulation_steps=2"],
    ["objective.params.loss_type=dr_grpo", "optim.length_buckets=2"],
    ["objective.params.loss_type=token_sum", "optim.gradient_accumulation_steps=2"],
], ids=["gdpo", "group_dpo", "cispo-k2", "gspo", "prompt_mean-top_entropy", "dapo", "dr_grpo", "token_sum"])
def test_two_gloo_processes_match_one_process_on_the_same_global_batch(tmp_path, monkeypatch, objective):
    from rlkit.lm.models import build_tiny_policy, load_policy

    # from the random weights the comparison below starts from, at the rate they train at
    common = ["model=tiny_random", "logger=csv", "trainer.max_steps=3", "batch_size=4", "num_generations=4",
              "data.num_prompts=24",
              "generator.params.per_prompt_seed=true", "checkpoint_every=100", "log_samples.every=0", *objective]
    single = _fit_in_this_process(tmp_path, monkeypatch, "single", *common)
    ddp = _fit(tmp_path, "ddp", *common, "trainer=ddp")
    assert "2 processes hold the same parameters" in (ddp / "stdout.txt").read_text()
    one, two = _rows(single), _rows(ddp)
    assert len(one) == len(two) >= 2  # a rollout per step; with num_iterations=2 every other step
    compared = [k for k in _COMPARED if k in one[0]]
    assert len(compared) >= 8
    for step, (a, b) in enumerate(zip(one, two, strict=True)):
        for key in compared:
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), f"step {step}: {key}"
    p1, _ = load_policy(single / "policy")
    p2, _ = load_policy(ddp / "policy")
    start, _ = load_policy(build_tiny_policy())
    moved = 0.0
    for (name, a), (_, b), (_, s) in zip(p1.named_parameters(), p2.named_parameters(), start.named_parameters(),
                                         strict=True):
        # Adam turns float-rounding differences of near-zero gradients into 1e-5 to 1.3e-4 (the latter seen on one
        # CPU for group_dpo, whose pair losses sum in another order over two processes); one unsynchronised step
        # would move a weight by up to optim.lr = 2e-3
        assert torch.allclose(a, b, atol=5e-4), (name, float((a - b).abs().max()))
        moved = max(moved, float((a - s).detach().abs().max()))
    assert moved > 1e-4, "training did not move the policy: the comparison would prove nothing"


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="Lightning's FSDP strategy needs CUDA (it refuses accelerator=cpu); no GPU here")
def test_fsdp_trains_on_a_gpu(tmp_path):
    run = _fit(tmp_path, "fsdp", "trainer=fsdp", "trainer.devices=1", "trainer.max_steps=2", "batch_size=4",
               "num_generations=4", "logger=csv", "log_samples.every=0")
    rows = _rows(run)
    assert len(rows) == 2 and all(torch.isfinite(torch.tensor(r["loss"])) for r in rows)


def test_a_trainer_setting_lightning_refuses_is_one_config_error(tmp_path, monkeypatch, capsys):
    from rlkit.cli import main

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:  # raised inside the Hydra job, as `rlkit fit` exits
        main(["fit", "trainer=fsdp", "trainer.accelerator=cpu", "trainer.devices=2", "logger=none",
              f"hydra.run.dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert err.startswith("rlkit: error: trainer (passed to lightning.Trainer): The strategy `fsdp` requires a GPU")
    assert len(err.strip().splitlines()) == 1
