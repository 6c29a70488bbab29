"""``experiment=gdpo_note`` is the multi-reward note's recipe (004 §4, issue 54 item 3): its per-prompt conflict counter
and soft-label figures checked by hand, the preset's settings against the note's, and two steps of it on the tiny
policy logging them."""

from __future__ import annotations

import math

import pytest
import torch

from rlkit import RewardBatch, rubric_from_dict
from rlkit.cli import main
from rlkit.core.registry import load_registry
from rlkit.reward.diagnostics import conflict_rate, group_conflict_rates
from rlkit.runs.history import read_history
from rlkit_plugins.objectives.group_dpo import prompt_conflict_metrics

NAN = math.nan
REGISTRY = load_registry()


def _batch(scores: list, weights: list[float]) -> RewardBatch:
    s = torch.tensor(scores, dtype=torch.float32)
    names = ["correctness", "format", "style"][:s.shape[-1]]
    rubric = rubric_from_dict({"name": "t", "version": "1", "dimensions": [
        {"name": n, "range": [0, 1], "priority": k + 1} for k, n in enumerate(names)]})
    return RewardBatch(rubric=rubric, raw_scores=s, scores=s, weights=torch.tensor(weights), rewards=None)


def test_conflict_counter_per_prompt_by_hand():
    # (correctness, format). Group 0: (1, 0) / (0, 1) conflict, (1, 0) / (1, 1) and (0, 1) / (1, 1) do not: 1/3.
    # Group 1: every pair agrees: 0. Group 2: a NaN takes no side, so only (0, 1) / (0.5, 0) conflicts: 1/3.
    scores = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]],
                           [[0.0, 0.0], [1.0, 1.0], [0.5, 0.5]],
                           [[1.0, NAN], [0.0, 1.0], [0.5, 0.0]]])
    rates = group_conflict_rates(scores)
    assert rates.tolist() == pytest.approx([1 / 3, 0.0, 1 / 3])
    assert rates.mean().item() == pytest.approx(conflict_rate(scores))  # the step's rate is the prompts' mean
    assert math.isnan(group_conflict_rates(scores[:, :1])[0])             # a group of one has no pair
    # the note's 20%: groups 0 and 2 pass it; a prompt with no rate never does
    metrics = prompt_conflict_metrics(torch.tensor([1 / 3, 0.0, NAN]), torch.tensor([True, False, False]))
    assert metrics == pytest.approx({"conflicts/prompts_over_threshold": 1 / 3, "conflicts/prompt_rate_max": 1 / 3})


def test_the_objective_logs_the_counter_and_the_soft_labels_by_hand():
    # weights (1, 1, 4), weighted sums /6. Group 0: (1, 0, 0) 1/6, (0, 1, .5) 1/2, (1, 1, 1) 1: win rates W = 0, ½, 1;
    # labels 2>1 ¾, 2>0 1, 1>0 ¾; conflicts: only (0, 1), 1/3. Group 1: (1, 1, 0) 1/3, (0, 0, 1) 2/3 twice: W = 0,
    # ¾, ¾; labels 1>0 and 2>0 ⅞, the tie unpaired; conflicts: style against the rest in (0, 1) and (0, 2), 2/3.
    batch = _batch([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.5], [1.0, 1.0, 1.0]],
                    [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]], [1.0, 1.0, 4.0])
    objective = REGISTRY.create("objective", "group_dpo", {"min_gap": 0.0, "conflict_threshold": 0.5})
    winrate = REGISTRY.create("preference_constructor", "winrate", {"label": "group_winrate"})
    targets, metrics = objective.pair_targets(batch, torch.zeros(6, dtype=torch.bool), constructor=winrate,
                                              aggregator=REGISTRY.create("aggregator", "weighted_sum"), step=0)
    assert sorted(targets.labels.tolist()) == pytest.approx([0.75, 0.75, 0.875, 0.875, 1.0])
    assert metrics["pairs/label_mean"] == pytest.approx(4.25 / 5)
    assert metrics["conflicts/prompts_over_threshold"] == 0.5       # group 1 alone passes 0.5
    assert metrics["conflicts/prompt_rate_max"] == pytest.approx(2 / 3)
    # hard pairs: no label figure to log
    topk = REGISTRY.create("preference_constructor", "topk")
    _, hard = objective.pair_targets(batch, torch.zeros(6, dtype=torch.bool), constructor=topk,
                                     aggregator=REGISTRY.create("aggregator", "weighted_sum"), step=0)
    assert "pairs/label_mean" not in hard and "conflicts/prompt_rate_max" in hard


def test_the_preset_follows_the_note():
    from rlkit.commands.common import compose_and_check
    from rlkit.config.schemas import OptimConfig

    result = compose_and_check(["experiment=gdpo_note"])
    run, objective = result.run, result.plugins["objective"].params
    assert result.plugin_names["preference_constructor"] == "winrate"
    assert result.plugins["preference_constructor"].params.label == "group_winrate"   # 004 §4.4, §5.3
    assert objective.conflict_scope == "prompt" and objective.conflict_threshold == 0.2  # §4.3
    assert run.num_generations == 8 and objective.beta == 0.1 and objective.min_gap == 0.1  # §4.2
    # §4.2: "1/2 to 1/3 of GRPO's rate"; the preset's 0.4 of the default, which must move with it
    assert run.optim.lr == pytest.approx(0.4 * OptimConfig().lr)
    assert 1 / 3 <= run.optim.lr / OptimConfig().lr <= 1 / 2


@pytest.mark.slow
def test_two_steps_of_the_preset_log_the_note_figures(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["fit", "experiment=gdpo_note", "trainer.max_steps=2", "batch_size=2", "data.heldout_fraction=0",
                 "logger=none", f"hydra.run.dir={run_dir}"]) == 0
    steps = [m for _, m in read_history(run_dir / "metrics.jsonl") if "pairs/built" in m]
    assert len(steps) == 2
    for m in steps:
        assert 0.0 <= m["conflicts/prompts_over_threshold"] <= 1.0
        assert 0.0 <= m["conflicts/prompt_rate_max"] <= 1.0
        assert m["lr"] == pytest.approx(8e-5)
    labels = [m["pairs/label_mean"] for m in steps if m["pairs/used"] > 0]
    assert labels and all(0.5 < x <= 1.0 for x in labels)  # soft: above ½, and not every pair a hard 1
    assert any(x < 1.0 for x in labels)
