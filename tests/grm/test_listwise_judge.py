"""``judge=grm`` asks a GRM the question it was trained on: a listwise GRM is shown the whole group (in its order and
reversed) and read by Plackett-Luce over its label logits, a pairwise one is asked every pair in both orders;
``judge.params.objective`` overrides, and ``train-grm``'s held-out check asks the trained objective's question too."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from rlkit.cli import main
from rlkit.core.errors import ConfigError
from rlkit.core.registry import load_registry
from rlkit.core.types import Rollout
from rlkit.data.pairs import PreferencePair
from rlkit.grm.model import GRM_INFO, GenerativeRewardModel, GrmFormat, read_grm_format
from rlkit.grm.training import GrmModule, GrmTrainConfig
from rlkit.judging.tiny_judge import shipped_rubric
from rlkit.testing import JudgeContract

# A GRM small enough to train a few steps in seconds: what it learns is not the point, which question it is asked is.
MICRO = ["grm.model.tiny.hidden_size=32", "grm.model.tiny.intermediate_size=64", "grm.model.tiny.num_hidden_layers=1",
         "grm.model.tiny.num_attention_heads=2", "grm.model.tiny.num_key_value_heads=1",
         "grm.data.synthetic_records=24", "grm.batch_size=8", "grm.eval_batch_size=64", "grm.epochs=1", "logger=csv"]
COMPACT = GrmFormat("grm/pairwise_compact.jinja", "grm/listwise_compact.jinja", 16)
RECORDS = [{"prompt": "3+4=", "reference": "7"}, {"prompt": "12+5=", "reference": "17"}]
GROUPS = [["7", "8", "x7"], ["17", "1 7", "71"]]


@pytest.fixture(scope="module")
def trained(tmp_path_factory, cache) -> dict[str, Path]:
    """``rlkit train-grm`` for a few steps on micro settings, once per objective: {objective: the saved GRM}."""
    folders = {}
    with pytest.MonkeyPatch.context() as env:  # module-scoped: the function-scoped monkeypatch cannot serve
        env.setenv("RLKIT_CACHE", str(cache))
        env.setenv("WANDB_SILENT", "true")
        for objective in ("pairwise", "listwise"):
            run = tmp_path_factory.mktemp(f"grm-{objective}")
            assert main(["train-grm", *MICRO, f"grm.objective={objective}", f"hydra.run.dir={run}"]) == 0
            folders[objective] = run / "grm"
    return folders


@pytest.fixture(scope="module")
def untrained(cache) -> tuple[Any, Any]:
    from rlkit.lm.models import TinyPolicySpec, build_model, build_tokenizer

    spec = TinyPolicySpec(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                          num_key_value_heads=1)
    tokenizer = build_tokenizer(spec)
    model = build_model(spec, tokenizer).eval()
    # freshly initialised, the tiny model answers every question within 1e-5 of the next: wide random weights make
    # its answers depend on what it reads, so two questions' answers can be told apart
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for weight in model.parameters():
            if weight.dim() > 1:
                weight.copy_(torch.randn(weight.shape, generator=generator) * 0.3)
    return model, tokenizer


def _judge(folder: Path, **params: Any) -> Any:
    return load_registry().create("judge", "grm", {"model": str(folder), **params})


def _assess(judge: Any) -> Any:
    return judge.assess(Rollout(records=RECORDS, completions=GROUPS), shipped_rubric("arithmetic"))


def _load(folder: Path) -> GenerativeRewardModel:
    return GenerativeRewardModel.load(folder, fmt=read_grm_format(folder))


@torch.no_grad()
def listwise_by_hand(grm: GenerativeRewardModel) -> tuple[torch.Tensor, torch.Tensor]:
    """Win rates and order consistency from the listwise question, computed directly: each group's label logits u in
    its order and reversed, P(i before j) = σ(u_i - u_j) (Plackett-Luce), averaged over the two orders."""
    wins, consistency = torch.zeros(len(GROUPS), 3), torch.zeros(len(GROUPS))
    for b, (record, group) in enumerate(zip(RECORDS, GROUPS, strict=True)):
        shown = grm.label_logits([grm.listwise_question(record["prompt"], group, record["reference"])], 3)[0]
        back = grm.label_logits([grm.listwise_question(record["prompt"], group[::-1], record["reference"])], 3)[0]
        back = back.flip(0)  # label A of the reversed question is the group's last response
        gap = 0.0
        for i, j in itertools.permutations(range(3), 2):
            p_shown, p_back = torch.sigmoid(shown[i] - shown[j]), torch.sigmoid(back[i] - back[j])
            wins[b, i] += (p_shown + p_back) / 2 / 2
            gap += abs(float(p_shown - p_back)) / 2
        consistency[b] = 1 - gap / 3
    return wins, consistency


@torch.no_grad()
def pairwise_by_hand(grm: GenerativeRewardModel) -> torch.Tensor:
    """Win rates from the pairwise question, every pair asked as (a, b) and (b, a)."""
    wins = torch.zeros(len(GROUPS), 3)
    for b, (record, group) in enumerate(zip(RECORDS, GROUPS, strict=True)):
        for i, j in itertools.combinations(range(3), 2):
            questions = [grm.pairwise_question(record["prompt"], group[i], group[j], record["reference"]),
                         grm.pairwise_question(record["prompt"], group[j], group[i], record["reference"])]
            p_a = torch.softmax(grm.label_logits(questions, 2), dim=-1)[:, 0]
            q = float(p_a[0] + 1 - p_a[1]) / 2
            wins[b, i] += q / 2
            wins[b, j] += (1 - q) / 2
    return wins


@pytest.mark.slow  # trains two tiny GRMs (module fixture) for a few steps
def test_a_listwise_grm_is_asked_the_listwise_question(trained):
    folder = trained["listwise"]
    assert json.loads((folder / GRM_INFO).read_text())["objective"] == "listwise"
    grm = _load(folder)
    assert grm.objective == "listwise"
    said = _assess(_judge(folder))
    wins, consistency = listwise_by_hand(grm)
    torch.testing.assert_close(said.scores[..., 0], wins, atol=1e-5, rtol=0)
    torch.testing.assert_close(said.confidence, consistency, atol=1e-5, rtol=0)
    assert not torch.allclose(said.scores[..., 0], pairwise_by_hand(grm), atol=1e-4), "not the pairwise answer"
    assert said.metrics["judge/grm_questions"] == 2 * len(GROUPS), "one question per group, in two orders"


@pytest.mark.slow  # trains two tiny GRMs (module fixture) for a few steps
def test_objective_param_overrides_the_trained_one(trained):
    folder = trained["listwise"]
    said = _assess(_judge(folder, objective="pairwise"))
    torch.testing.assert_close(said.scores[..., 0], pairwise_by_hand(_load(folder)), atol=1e-5, rtol=0)
    assert said.metrics["judge/grm_questions"] == len(GROUPS) * 3 * 2


@pytest.mark.slow  # trains two tiny GRMs (module fixture) for a few steps
def test_a_pairwise_grm_is_still_asked_pairwise(trained):
    folder = trained["pairwise"]
    grm = _load(folder)
    assert grm.objective == "pairwise"
    said = _assess(_judge(folder))
    torch.testing.assert_close(said.scores[..., 0], pairwise_by_hand(grm), atol=1e-5, rtol=0)
    assert not torch.allclose(said.scores[..., 0], listwise_by_hand(grm)[0], atol=1e-4), "not the listwise answer"
    assert said.metrics["judge/grm_questions"] == len(GROUPS) * 3 * 2


@pytest.mark.slow  # trains two tiny GRMs (module fixture) for a few steps
class TestListwiseGrmJudgeContract(JudgeContract):
    @pytest.fixture
    def judge(self, trained):
        return _judge(trained["listwise"])


def test_a_grm_without_grm_json_is_pairwise_and_a_bad_objective_is_one_error(untrained, tmp_path):
    from rlkit.lm.models import save_policy

    folder = tmp_path / "grm"
    save_policy(*untrained, folder, "merged")
    assert GenerativeRewardModel.load(folder).objective == "pairwise"
    with pytest.raises(ConfigError, match=r"judge\.params\.objective.*auto, pairwise, listwise"):
        _judge(folder, objective="ranked")
    (folder / GRM_INFO).write_text(json.dumps({"objective": "ranked"}))
    with pytest.raises(ConfigError, match="objective 'ranked'"):
        GenerativeRewardModel.load(folder)


@pytest.mark.parametrize("objective", ["pairwise", "listwise"])
def test_the_held_out_check_asks_the_trained_objective(objective, untrained):
    grm = GenerativeRewardModel(*untrained, COMPACT, objective)
    module = GrmModule(grm, GrmTrainConfig(objective=objective), total_steps=1)
    pairs = [PreferencePair("3+4=", "7", "8", "d", 1, "7"), PreferencePair("12+5=", "17", "x17", "d", 2, "17")]
    module.validation_step(pairs, 0)
    seen = torch.tensor([outcome.p_chosen for outcome in module._outcomes])
    items = [(p.prompt, p.chosen, p.rejected, p.reference) for p in pairs]
    torch.testing.assert_close(seen, grm.prefer_first(items, objective=objective))
    other = "pairwise" if objective == "listwise" else "listwise"
    assert not torch.allclose(seen, grm.prefer_first(items, objective=other), atol=1e-4)
    # a pair as a listwise question of two: the pairwise formula, read from the listwise template
    if objective == "listwise":
        with torch.no_grad():
            shown = torch.softmax(grm.label_logits([grm.listwise_question("3+4=", ["7", "8"], "7")], 2), -1)[0, 0]
            back = torch.softmax(grm.label_logits([grm.listwise_question("3+4=", ["8", "7"], "7")], 2), -1)[0, 0]
        assert float(seen[0]) == pytest.approx(float(shown + 1 - back) / 2, abs=1e-5)
