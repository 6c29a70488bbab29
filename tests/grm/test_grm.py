"""The generative reward model: its question and label reading, the losses and metrics as pure functions,
``rlkit train-grm`` end to end, and ``judge=grm`` in the judge contract suite and in ``rlkit fit``."""

from __future__ import annotations

import csv
import itertools
import json
import math
from pathlib import Path

import pytest
import torch

from rlkit.cli import main
from rlkit.core.errors import ConfigError
from rlkit.grm.data import SyntheticRanker, competition_ranks, synthetic_preferences
from rlkit.grm.metrics import PairOutcome, pair_accuracy
from rlkit.grm.model import GenerativeRewardModel, GrmFormat, label_token_ids
from rlkit.grm.training import plackett_luce_loss
from rlkit.testing import JudgeContract

# A GRM small enough to train in seconds: what it learns is not the point here, the path is.
MICRO = ["grm.model.tiny.hidden_size=32", "grm.model.tiny.intermediate_size=64", "grm.model.tiny.num_hidden_layers=1",
         "grm.model.tiny.num_attention_heads=2", "grm.model.tiny.num_key_value_heads=1",
         "grm.data.synthetic_records=60", "grm.batch_size=16", "grm.eval_batch_size=64", "logger=csv"]
COMPACT = GrmFormat("grm/pairwise_compact.jinja", "grm/listwise_compact.jinja", 16)


@pytest.fixture(scope="module")
def untrained(cache) -> GenerativeRewardModel:
    from rlkit.lm.models import TinyPolicySpec, build_model, build_tokenizer

    spec = TinyPolicySpec(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                          num_key_value_heads=1)
    tokenizer = build_tokenizer(spec)
    model = build_model(spec, tokenizer).eval()
    return GenerativeRewardModel(model, tokenizer, COMPACT)


@pytest.fixture(scope="module")
def trained_grm(tmp_path_factory, cache) -> Path:
    """``rlkit train-grm`` on micro settings, once for the module: the run folder."""
    import os

    run = tmp_path_factory.mktemp("grm-run")
    old = os.environ.get("RLKIT_CACHE")
    os.environ["RLKIT_CACHE"] = str(cache)
    os.environ["WANDB_SILENT"] = "true"
    try:
        assert main(["train-grm", *MICRO, "grm.epochs=2", f"hydra.run.dir={run}"]) == 0
    finally:
        if old is None:
            os.environ.pop("RLKIT_CACHE", None)
        else:
            os.environ["RLKIT_CACHE"] = old
    return run


# --- questions and label tokens ----------------------------------------------------------------------


def test_label_tokens_on_a_character_tokenizer(untrained):
    prefix, labels = label_token_ids(untrained.tokenizer, 3)
    tok = untrained.tokenizer
    assert tok.decode(prefix) == " " and [tok.decode([i]) for i in labels] == ["A", "B", "C"]


def test_a_question_reads_the_same_padded_or_alone(untrained):
    short = untrained.pairwise_question("1+1=", "2", "3", "2")
    long = untrained.pairwise_question("12+13=", "the answer is 25", "27", "25")
    with torch.no_grad():
        both = untrained.label_logits([short, long], 2)
        alone = untrained.label_logits([short], 2)
    # left padding with positions that skip it: the short question's answer is not changed by its neighbour
    torch.testing.assert_close(both[0], alone[0], rtol=1e-4, atol=1e-5)


def test_both_orders_make_preferences_antisymmetric(untrained):
    items = [("3+4=", "7", "12", "7"), ("3+4=", "12", "7", "7")]
    q = untrained.prefer_first(items)
    assert abs(float(q[0] + q[1]) - 1.0) < 1e-6  # an untrained model's position bias cancels exactly


def test_group_win_rates_average_one_half_and_name_consistency(untrained):
    wins, consistency = untrained.group_rewards([{"prompt": "2+2=", "reference": "4"}, {"prompt": "1+0="}],
                                                [["4", "5", "four"], ["1", "", "11"]], with_consistency=True)
    assert wins.shape == (2, 3) and consistency.shape == (2,)
    torch.testing.assert_close(wins.mean(dim=1), torch.full((2,), 0.5))
    assert ((consistency >= 0) & (consistency <= 1)).all()
    lone = untrained.group_rewards([{"prompt": "1+1="}], [["2"]])
    assert torch.isnan(lone).all(), "one answer has nothing to be preferred over"


def test_a_question_longer_than_the_model_names_the_setting(untrained):
    with pytest.raises(ConfigError, match="grm.max_response_chars"):
        untrained.encode(["x" * 500])


# --- pure functions ----------------------------------------------------------------------------------


def test_plackett_luce_matches_its_definition():
    u = torch.tensor([0.3, -1.0, 2.0])
    ranks = [2, 3, 1]  # C best, then A, then B
    expected = -(u[2] - torch.logsumexp(u, 0)) - (u[0] - torch.logsumexp(u[[0, 1]], 0))
    torch.testing.assert_close(plackett_luce_loss(u, ranks), expected)
    assert plackett_luce_loss(torch.tensor([3.0, 2.0, 1.0]), [1, 2, 3]) < plackett_luce_loss(
        torch.tensor([1.0, 2.0, 3.0]), [1, 2, 3])


def test_pair_accuracy_controls_for_length_and_splits_domains():
    outcomes = [PairOutcome(0.9, 1, 5, "a"), PairOutcome(0.8, 2, 6, "a"),  # chosen shorter: right, right
                PairOutcome(0.2, 9, 3, "b"), PairOutcome(0.7, 8, 2, "b"),  # chosen longer: wrong, right
                PairOutcome(0.5, 4, 4, "b")]  # equal length: undecided, half right
    m = pair_accuracy(outcomes)
    assert m["accuracy"] == pytest.approx(3.5 / 5)
    assert m["accuracy/chosen_shorter"] == 1.0 and m["accuracy/chosen_longer"] == 0.5
    assert m["length_controlled_accuracy"] == pytest.approx(0.75)
    assert m["accuracy/domain/a"] == 1.0 and m["accuracy/domain/b"] == pytest.approx(1.5 / 3)
    assert math.isnan(pair_accuracy([PairOutcome(0.9, 1, 5)])["length_controlled_accuracy"])


def test_competition_ranks_share_ties():
    assert competition_ranks([0.5, 1.0, 0.5, 0.1]) == [2, 1, 2, 4]


def test_synthetic_preferences_follow_the_rubric_and_repeat_under_a_seed():
    from rlkit.core.registry import load_registry
    from rlkit.core.types import Rollout
    from rlkit.judging.tiny_judge import shipped_rubric
    from rlkit.reward.pipeline import aggregate_rewards

    registry, rubric = load_registry(), shipped_rubric("arithmetic")
    ranker = SyntheticRanker(registry.create("judge", "rule"), registry.create("aggregator", "weighted_sum"),
                             registry.create("weight_scheduler", "constant"))
    records = synthetic_preferences(20, ranker, seed=3)
    assert records == synthetic_preferences(20, ranker, seed=3) and records != synthetic_preferences(20, ranker, seed=4)
    for r in records:
        texts = [x["text"] for x in r["responses"]]
        assert len(set(texts)) == len(texts) and len({x["rank"] for x in r["responses"]}) >= 2
        raw = registry.create("judge", "rule").score(Rollout(records=[r], completions=[texts]), rubric)
        reward = aggregate_rewards(raw, rubric, registry.create("weight_scheduler", "constant"),
                                   registry.create("aggregator", "weighted_sum")).rewards[0].tolist()
        for (i, a), (j, b) in itertools.combinations(enumerate(r["responses"]), 2):
            assert (a["rank"] < b["rank"]) == (reward[i] > reward[j])


# --- rlkit train-grm ---------------------------------------------------------------------------------


def _metrics(run: Path) -> list[dict[str, str]]:
    [path] = (run / "csv").rglob("metrics.csv")
    with path.open() as fh:
        return list(csv.DictReader(fh))


@pytest.mark.slow  # trains a GRM (module fixture) or a policy: end-to-end
def test_train_grm_logs_checkpoints_and_saves_a_loadable_grm(trained_grm):
    run = trained_grm
    info = json.loads((run / "grm" / "grm.json").read_text())
    assert info["objective"] == "pairwise" and info["format"]["pairwise_template"] == "grm/pairwise_compact.jinja"
    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert (run / "data" / "synthetic_preferences.jsonl").is_file()
    rows = _metrics(run)
    losses = [float(r["train/loss"]) for r in rows if r.get("train/loss")]
    accuracies = [float(r["val/accuracy"]) for r in rows if r.get("val/accuracy")]
    assert len(accuracies) == 3, "before training, then once per epoch"
    assert {"val/length_controlled_accuracy", "val/accuracy/domain/one-digit"} <= set(rows[0])
    assert losses and losses[-1] < math.log(len(GenerativeRewardModel.load(run / "grm").tokenizer)), \
        "the label was learnt: below the loss of a uniform guess over the vocabulary"
    grm = GenerativeRewardModel.load(run / "grm")
    assert grm.prefer_first([("1+1=", "2", "x", "2")]).shape == (1,)


def test_the_grm_trains_in_training_mode(untrained):
    from rlkit.grm.training import GrmModule, GrmTrainConfig

    module = GrmModule(untrained, GrmTrainConfig(), total_steps=1)
    untrained.model.eval()  # as from_pretrained returns it
    try:
        module.on_train_start()
        assert untrained.model.training
    finally:
        untrained.model.eval()


@pytest.mark.slow  # trains a GRM (module fixture) or a policy: end-to-end
def test_listwise_objective_with_lora_trains_from_a_pairwise_file(tmp_path):
    pairs = tmp_path / "pairs.jsonl"
    rows = [{"prompt": f"{a}+1=", "chosen": str(a + 1), "rejected": "zz" * a, "reference": str(a + 1),
             "domain": "x"} for a in range(1, 30)]
    pairs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "run"
    assert main(["train-grm", *MICRO, "grm.objective=listwise", f"grm.data.train={pairs}", "grm.data.val_fraction=0.3",
                 "grm.epochs=1", "grm.model.lora.r=4", f"hydra.run.dir={run}"]) == 0
    assert json.loads((run / "grm" / "grm.json").read_text())["objective"] == "listwise"
    saved = json.loads((run / "grm" / "config.json").read_text())
    assert "lora" not in json.dumps(saved).lower(), "the LoRA adapters are merged into a plain model"
    assert GenerativeRewardModel.load(run / "grm").prefer_first([("2+1=", "3", "zz", "3")]).shape == (1,)


def test_train_grm_bad_input_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "1+1=", "chosen": "2", "rejected": "3"}\n{"prompt": "x", "chosen": 2}\n')
    assert main(["train-grm", f"grm.data.train={bad}", f"hydra.run.dir={tmp_path / 'r'}"]) == 2
    assert f"grm.data.train ({bad}): 1 bad lines (line 2:" in capsys.readouterr().err
    assert main(["train-grm", "grm.objective=ranked"]) == 2
    assert "grm.objective" in capsys.readouterr().err
    assert main(["train-grm", f"grm.data.val={tmp_path / 'missing.jsonl'}"]) == 2
    assert "no such data file" in capsys.readouterr().err
    assert not (tmp_path / "outputs").exists(), "a config error stops before Hydra makes a run directory"


# --- judge=grm ---------------------------------------------------------------------------------------


@pytest.mark.slow  # trains a GRM (module fixture) or a policy: end-to-end
class TestGrmJudgeContract(JudgeContract):
    @pytest.fixture
    def judge(self, trained_grm):
        from rlkit.core.registry import load_registry

        return load_registry().create("judge", "grm", {"model": str(trained_grm / "grm")})


def test_grm_judge_needs_its_model(registry):
    with pytest.raises(ConfigError, match="judge.params.model"):
        registry.create("judge", "grm", {})
    with pytest.raises(ConfigError, match="judge.params.model.*no such model directory"):
        registry.create("judge", "grm", {"model": "/nowhere/grm"})


@pytest.mark.slow  # trains a GRM (module fixture) or a policy: end-to-end
def test_fit_trains_a_policy_against_the_grm(trained_grm, tmp_path):
    run = tmp_path / "fit"
    assert main(["fit", "judge=grm", f"judge.params.model={trained_grm / 'grm'}", "logger=csv",
                 "trainer.max_steps=2", "batch_size=2", "num_generations=4", f"hydra.run.dir={run}"]) == 0
    rows = _metrics(run)
    assert any(r.get("rewards/preference/mean") for r in rows)
    assert any(r.get("judge/swap_consistency") for r in rows)


@pytest.mark.slow  # trains a GRM (module fixture) or a policy: end-to-end
def test_score_ranks_each_records_completions_with_the_grm(trained_grm, tmp_path):
    records = [{"prompt": "3+4=", "reference": "7", "completions": ["7", "x"]},
               {"prompt": "5+5=", "reference": "10", "completions": ["10", "zzzz", "1"]},
               {"prompt": "1+2=", "reference": "3", "completions": ["3", "33"]}]
    data, out = tmp_path / "records.jsonl", tmp_path / "scored.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["score", "judge=grm", f"judge.params.model={trained_grm / 'grm'}", f"data.path={data}",
                 f"score.output={out}", "score.batch_size=4", "score.progress=false"]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["prompt"], r["completion"]) for r in lines] == [(r["prompt"], c) for r in records
                                                                for c in r["completions"]]
    assert all(set(r["scores"]) == {"preference"} and 0 <= r["reward"] <= 1 for r in lines)
    first = [r["scores"]["preference"] for r in lines[:2]]
    assert first[0] + first[1] == pytest.approx(1.0, abs=1e-5), "a group of two splits one preference"
    assert sorted(r["rank"] for r in lines[2:5]) in ([1, 2, 3], [1, 1, 3], [1, 2, 2], [1, 1, 1])
