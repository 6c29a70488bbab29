"""TRL's own GRPOTrainer, a few steps on the tiny policy, with rlkit's reward functions: what TRL logs per dimension
and per step equals what rlkit's pipeline gives for the same completions."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from rlkit.core.registry import load_registry
from rlkit.core.types import Rollout
from rlkit.data.records import arithmetic_task
from rlkit.integrations.scorer import load_validated
from rlkit.integrations.trl import trl_reward_funcs
from rlkit.lm.models import build_tiny_policy
from rlkit.reward.pipeline import aggregate_rewards, check_judge_output, normalize_scores

GROUP = 4
PROMPTS_PER_STEP = 2
SCHEDULE = "++weights.params.curricula={format: {type: linear, start: 0.0, end: 2.0, steps: 2}}"


@pytest.fixture(scope="module")
def policy() -> Path:
    return build_tiny_policy()  # built from config and saved once, loaded by path as any checkpoint


def _train(policy: Path, rewards, workdir: Path, steps: int) -> tuple[list[dict], dict[str, str]]:
    """Run GRPOTrainer; per logged step: TRL's logs, and the completions and per-function rewards of that step."""
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    records = arithmetic_task(PROMPTS_PER_STEP * (steps + 1), seed=3)
    reference = {r["prompt"]: r["reference"] for r in records}
    steps_seen: list[dict] = []

    class Capture(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and any(k.startswith("rewards/") for k in logs):
                # TRL keeps the last generation batch in _logs; with one generation per step, this step's
                steps_seen.append({"step": state.global_step, "logs": dict(logs),
                                   "prompts": list(trainer._logs["prompt"]),
                                   "completions": list(trainer._logs["completion"]),
                                   "rewards": {k: list(v) for k, v in trainer._logs["rewards"].items()}})

    args = GRPOConfig(output_dir=str(workdir), per_device_train_batch_size=PROMPTS_PER_STEP * GROUP,
                      num_generations=GROUP, max_completion_length=8, max_steps=steps, learning_rate=1e-3,
                      reward_weights=rewards.weights, use_cpu=True, logging_steps=1, save_strategy="no",
                      report_to="none", seed=0, dataloader_num_workers=0, disable_tqdm=True,
                      activation_checkpointing=False)
    trainer = GRPOTrainer(model=str(policy), reward_funcs=rewards.funcs, args=args,
                          train_dataset=Dataset.from_list(records),
                          processing_class=AutoTokenizer.from_pretrained(policy), callbacks=[Capture()])
    trainer.train()
    assert [s["step"] for s in steps_seen] == list(range(1, steps + 1))
    return steps_seen, reference


def _rlkit_raw(validated, prompts: list[str], completions: list[str], reference: dict[str, str]) -> torch.Tensor:
    """rlkit's judge on the same completions, each alone: ``[N, D]`` in the dimensions' own ranges."""
    records = [{"prompt": p, "reference": reference[p]} for p in prompts]
    rollout = Rollout(records=records, completions=[[c] for c in completions])
    raw = validated.plugins["judge"].score(rollout, validated.rubric)
    return check_judge_output(raw, rollout, validated.rubric, "rule")[:, 0, :]


def _same(trl_values: list[float], rlkit_values: list[float]) -> bool:
    return len(trl_values) == len(rlkit_values) and all(
        (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, abs_tol=1e-6)
        for a, b in zip(trl_values, rlkit_values, strict=True))


def _check_dimensions(step: dict, raw: torch.Tensor, rubric) -> None:
    normalized = normalize_scores(raw, rubric)
    for j, name in enumerate(rubric.dimension_names):
        expected = normalized[:, j].tolist()
        assert _same(step["rewards"][name], expected), name
        assert math.isclose(step["logs"][f"rewards/{name}/mean"], torch.tensor(expected).nanmean().item(),
                            abs_tol=1e-6), name


def test_grpo_trainer_logs_rlkit_scores_per_dimension_and_the_lexicographic_reward(policy, tmp_path):
    overrides = ["aggregator=lexicographic"]
    rewards = trl_reward_funcs(overrides=overrides, mode="both")
    assert rewards.names == ["format", "correctness", "brevity", "repetition", "lexicographic"]
    steps, reference = _train(policy, rewards, tmp_path / "trl", steps=2)
    validated = load_validated(overrides=overrides)
    rubric, registry = validated.rubric, load_registry()
    lexicographic = []
    for step in steps:
        raw = _rlkit_raw(validated, step["prompts"], step["completions"], reference)
        _check_dimensions(step, raw, rubric)
        # the aggregate: rlkit's lexicographic aggregator over each prompt's group of GROUP completions
        batch = aggregate_rewards(raw.view(-1, GROUP, raw.shape[-1]), rubric,
                                  registry.create("weight_scheduler", "constant"),
                                  registry.create("aggregator", "lexicographic"))
        expected = batch.rewards.reshape(-1).tolist()
        assert _same(step["rewards"]["lexicographic"], expected)
        assert math.isclose(step["logs"]["rewards/lexicographic/mean"], sum(expected) / len(expected), abs_tol=1e-6)
        lexicographic += expected
    assert len(set(lexicographic)) > 1  # the completions differ, so the check above compared something


def test_grpo_trainer_follows_a_moving_weight_schedule(policy, tmp_path):
    overrides = ["weights=schedule", SCHEDULE]
    rewards = trl_reward_funcs(overrides=overrides, mode="aggregate")
    assert rewards.names == ["weighted_sum"] and rewards.weights == [1.0]
    steps, reference = _train(policy, rewards, tmp_path / "trl", steps=3)
    validated = load_validated(overrides=overrides)
    rubric, registry = validated.rubric, load_registry()
    schedule = registry.create("weight_scheduler", "schedule",
                               {"curricula": {"format": {"type": "linear", "start": 0.0, "end": 2.0, "steps": 2}}})
    means = []
    for step in steps:
        trl_step = step["step"] - 1  # TRL generates step k's completions at global_step k - 1
        raw = _rlkit_raw(validated, step["prompts"], step["completions"], reference)
        batch = aggregate_rewards(raw.view(-1, GROUP, raw.shape[-1]), rubric, schedule,
                                  registry.create("aggregator", "weighted_sum"), step=trl_step)
        assert step["logs"]["rlkit/weight/format"] == pytest.approx(batch.weights[0].item())
        assert step["logs"]["rlkit/weight/correctness"] == 2.0  # no curriculum: the rubric's weight
        expected = batch.rewards.reshape(-1).tolist()
        assert _same(step["rewards"]["weighted_sum"], expected)
        assert math.isclose(step["logs"]["rewards/weighted_sum/mean"], sum(expected) / len(expected), abs_tol=1e-6)
        for j, name in enumerate(rubric.dimension_names):
            column = normalize_scores(raw, rubric)[:, j]
            assert step["logs"][f"rlkit/score/{name}"] == pytest.approx(column.nanmean().item())
        means.append(step["logs"]["rlkit/weight/format"])
    assert means == [0.0, 1.0, 2.0]  # the schedule moved with TRL's steps
