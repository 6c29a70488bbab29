"""The Bradley-Terry reward model: its loss as a pure function, ``rlkit train-rm`` on a separable toy set, the saved
folder, ``judge=reward_model`` in the judge contract suite, in ``rlkit fit``, and bad input as one line."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import pytest
import torch

from rlkit.cli import main
from rlkit.core.errors import ConfigError
from rlkit.grm.reward_model import ScalarRewardModel
from rlkit.grm.rm_training import bradley_terry_loss
from rlkit.testing import JudgeContract

# A base small enough to train in seconds: the path is the point, and a toy set it can separate.
MICRO = ["rm.model.tiny.hidden_size=32", "rm.model.tiny.intermediate_size=64", "rm.model.tiny.num_hidden_layers=1",
         "rm.model.tiny.num_attention_heads=2", "rm.model.tiny.num_key_value_heads=1", "rm.batch_size=8",
         "rm.eval_batch_size=64", "logger=csv"]
WRONG = ["zz", "no idea", "x?", "hmm", "maybe"]


def toy_pairs(count: int, seed: int = 0) -> list[dict]:
    """Chosen: the sum; rejected: words, as long as the sum or longer (length alone does not separate them)."""
    rng = random.Random(seed)
    rows = []
    for i in range(count):
        a, b = i, rng.randint(0, 20)
        rows.append({"prompt": f"{a}+{b}=", "chosen": str(a + b), "rejected": rng.choice(WRONG), "domain": "toy"})
    return rows


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def trained_rm(tmp_path_factory, cache) -> Path:
    """``rlkit train-rm`` on 40 toy pairs (30% of the prompts held out), 3 epochs: the run folder."""
    root = tmp_path_factory.mktemp("rm-run")
    pairs = _jsonl(root / "train.pairs.jsonl", toy_pairs(40))
    with pytest.MonkeyPatch.context() as env:  # module-scoped: the function-scoped monkeypatch cannot serve
        env.setenv("RLKIT_CACHE", str(cache))
        env.setenv("WANDB_SILENT", "true")
        assert main(["train-rm", *MICRO, f"rm.data.train={pairs}", "rm.data.val_fraction=0.3", "rm.epochs=3",
                     "rm.center_rewards_coefficient=0.01", f"hydra.run.dir={root / 'run'}"]) == 0
    return root / "run"


# --- the loss --------------------------------------------------------------------------------------------------


def test_bradley_terry_loss_matches_its_definition():
    chosen, rejected = torch.tensor([2.0, -1.0]), torch.tensor([0.5, 1.0])
    expected = -(torch.sigmoid(chosen - rejected)).log().mean()
    torch.testing.assert_close(bradley_terry_loss(chosen, rejected), expected)
    # TRL's centring term: 0.01 · mean((r_c + r_r)²)
    torch.testing.assert_close(bradley_terry_loss(chosen, rejected, 0.01),
                               expected + 0.01 * ((chosen + rejected) ** 2).mean())
    assert bradley_terry_loss(torch.tensor([3.0]), torch.tensor([0.0])) < bradley_terry_loss(torch.tensor([0.0]),
                                                                                             torch.tensor([3.0]))


def test_a_reward_reads_the_same_padded_or_alone():
    from rlkit.lm.models import TinyPolicySpec, build_model, build_tokenizer

    spec = TinyPolicySpec(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                          num_key_value_heads=1)
    tokenizer = build_tokenizer(spec)
    tokenizer.padding_side = "left"
    rm = ScalarRewardModel(build_model(spec, tokenizer).eval(), tokenizer, max_tokens=16)
    both = rm.rewards(["1+1=2", "12+13=the answer is 25"])
    torch.testing.assert_close(both[0], rm.rewards(["1+1=2"])[0], rtol=1e-4, atol=1e-5)
    # longer than max_tokens: cut from the left, so only the last 16 tokens count
    torch.testing.assert_close(rm.rewards(["x" * 40 + "abcdefghijklmnop"]), rm.rewards(["abcdefghijklmnop"]),
                               rtol=1e-4, atol=1e-5)


# --- rlkit train-rm --------------------------------------------------------------------------------------------


def _metrics(run: Path) -> list[dict[str, str]]:
    [path] = (run / "csv").rglob("metrics.csv")
    with path.open() as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow  # trains a reward model (module fixture): end-to-end
def test_train_rm_learns_a_separable_toy_set_and_saves_a_loadable_model(trained_rm):
    accuracies = [float(r["val/accuracy"]) for r in _metrics(trained_rm) if r.get("val/accuracy")]
    assert len(accuracies) == 4, "before training, then once per epoch"
    assert accuracies[-1] >= 0.9 and accuracies[-1] > accuracies[0], accuracies
    assert (trained_rm / "checkpoints" / "last.ckpt").is_file()
    info = json.loads((trained_rm / "reward_model" / "reward_model.json").read_text())
    assert info["metrics"]["accuracy"] == accuracies[-1] and info["center_rewards_coefficient"] == 0.01
    rm = ScalarRewardModel.load(trained_rm / "reward_model")
    unseen = [("100+3=", "103", "zz"), ("120+7=", "127", "no idea")]  # prompts it never trained on
    chosen, rejected = rm.rewards([p + c for p, c, _ in unseen]), rm.rewards([p + r for p, _, r in unseen])
    assert (chosen > rejected).all()
    assert rm.center == pytest.approx(info["center"])


@pytest.mark.slow  # trains a reward model: end-to-end
def test_train_rm_with_lora_saves_a_merged_model(tmp_path):
    pairs = _jsonl(tmp_path / "pairs.jsonl", toy_pairs(20))
    run = tmp_path / "run"
    assert main(["train-rm", *MICRO, f"rm.data.train={pairs}", "rm.data.val_fraction=0.3", "rm.epochs=1",
                 "rm.model.lora.r=4", f"hydra.run.dir={run}"]) == 0
    assert "lora" not in (run / "reward_model" / "config.json").read_text().lower()
    assert ScalarRewardModel.load(run / "reward_model").rewards(["2+1=3"]).shape == (1,)


def test_train_rm_bad_input_is_one_line(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["train-rm", f"rm.data.train={empty}", f"hydra.run.dir={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("rlkit: error:") == 1 and f"rm.data.train ({empty}): the file holds no records" in err
    ties = _jsonl(tmp_path / "ties.jsonl", [{"prompt": "1+1=", "responses": [{"text": "2", "rank": 1},
                                                                            {"text": "3", "rank": 1}]}])
    assert main(["train-rm", f"rm.data.train={ties}", f"hydra.run.dir={tmp_path / 'r'}"]) == 2
    assert f"rm.data.train ({ties}): no preference pair in the file" in capsys.readouterr().err

    from transformers import BertConfig, BertForMaskedLM

    bert = tmp_path / "bert"
    BertForMaskedLM(BertConfig(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, intermediate_size=32,
                               vocab_size=40)).save_pretrained(bert)
    capsys.readouterr()
    assert main(["train-rm", f"rm.model.name_or_path={bert}", f"hydra.run.dir={tmp_path / 'r'}"]) == 2
    err = capsys.readouterr().err
    assert err.count("rlkit: error:") == 1 and "rm.model.name_or_path: not a causal LM" in err
    assert "BertForMaskedLM" in err
    assert not (tmp_path / "r").exists(), "a bad input stops before Hydra makes a run directory"


# --- judge=reward_model ----------------------------------------------------------------------------------------


@pytest.mark.slow  # trains a reward model (module fixture): end-to-end
class TestRewardModelJudgeContract(JudgeContract):
    @pytest.fixture
    def judge(self, trained_rm):
        from rlkit.core.registry import load_registry

        return load_registry().create("judge", "reward_model", {"model": str(trained_rm / "reward_model")})


def test_reward_model_judge_needs_a_trained_folder(registry):
    from rlkit.lm.models import build_tiny_policy

    with pytest.raises(ConfigError, match="judge.params.model"):
        registry.create("judge", "reward_model", {})
    with pytest.raises(ConfigError, match="judge.params.model.*no such model directory"):
        registry.create("judge", "reward_model", {"model": "/nowhere/rm"})
    with pytest.raises(ConfigError, match="without a reward head"):
        registry.create("judge", "reward_model", {"model": str(build_tiny_policy())})


@pytest.mark.slow  # trains a reward model (module fixture): end-to-end
def test_the_judge_scores_each_completion_alone_by_its_centred_reward(trained_rm, registry):
    from rlkit.core.rubric import load_rubric
    from rlkit.core.types import Rollout

    judge = registry.create("judge", "reward_model", {"model": str(trained_rm / "reward_model")})
    rubric = load_rubric(Path(__file__).resolve().parents[2] / "conf" / "rubric_files" / "arithmetic.yaml")
    rollout = Rollout(records=[{"prompt": "100+3="}, {"prompt": "120+7="}],
                      completions=[["103", "zz"], ["127", "hmm"]])
    said = judge.assess(rollout, rubric)
    assert said.scores.shape == (2, 2, 1) and [d.name for d in judge.scored_rubric(rubric).dimensions] == ["preference"]
    assert ((said.scores > 0) & (said.scores < 1)).all()
    assert (said.scores[:, 0, 0] > said.scores[:, 1, 0]).all(), "the sum is preferred over the words"
    rm = ScalarRewardModel.load(trained_rm / "reward_model")
    expected = torch.sigmoid(rm.rewards(["100+3=103"]) - rm.center)
    torch.testing.assert_close(said.scores[0, 0], expected, rtol=1e-4, atol=1e-5)
    lone = judge.assess(Rollout(records=[{"prompt": "1+1="}], completions=[["2"]]), rubric)
    assert lone.scores.shape == (1, 1, 1) and not torch.isnan(lone.scores).any(), "a group of one is scored"
    assert {"judge/rm_reward_mean", "judge/rm_reward_std"} <= set(said.metrics)


@pytest.mark.slow  # trains a reward model (module fixture) and a policy: end-to-end
def test_fit_trains_the_tiny_policy_against_the_reward_model(trained_rm, tmp_path):
    run = tmp_path / "fit"
    assert main(["fit", "judge=reward_model", f"judge.params.model={trained_rm / 'reward_model'}", "logger=csv",
                 "trainer.max_steps=2", "batch_size=2", "num_generations=4", f"hydra.run.dir={run}"]) == 0
    rows = _metrics(run)
    assert sum(1 for r in rows if r.get("rewards/preference/mean")) == 2
    assert any(r.get("judge/rm_reward_mean") for r in rows)
