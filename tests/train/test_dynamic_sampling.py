"""Dynamic sampling: which groups a filter keeps, how a step refills dropped groups from further prompts of the data
order, what happens when ``max_rounds`` runs out, the reward of cut completions, and exact resume of a filtering run."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from rlkit.config import DataConfig
from rlkit.core.errors import ConfigError
from rlkit.core.rubric import rubric_from_dict
from rlkit.lm.sampling import SampledBatch
from rlkit.train.datamodule import PromptDataModule
from rlkit.train.dynamic_sampling import (
    SamplingSettings,
    concat_sampled,
    extra_round_size,
    informative_groups,
    select_groups,
    shape_truncated,
    take,
)
from rlkit.train.module import RewardParts, RubricRLModule, TrainingSettings

NAN = float("nan")
G = 4


# --- pure pieces --------------------------------------------------------------------------------


def test_zero_spread_keeps_groups_whose_scored_rewards_differ():
    rewards = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5], [NAN, 0.2, NAN, 0.2], [NAN, 0.2, NAN, 0.9],
                            [NAN, NAN, NAN, 0.3]])
    keep = informative_groups(rewards, SamplingSettings(filter="zero_spread"))
    assert keep.tolist() == [True, False, False, True, False]
    assert informative_groups(rewards, SamplingSettings()).all(), "none keeps every group"


def _binary_rubric(*names: str):
    return rubric_from_dict({"name": "dims", "version": "1", "dimensions": [
        {"name": n, "type": "binary", "checks": [{"type": "regex", "pattern": n}]} for n in names]})


def test_zero_spread_keeps_tied_totals_whose_dimensions_differ_as_gdpo_learns_from_them(registry):
    from rlkit.core.types import RewardBatch
    from rlkit.reward.diagnostics import saturated_groups

    scores = torch.tensor([[[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [1.0, 0.0, 1.0], [0.0, 1.0, 1.0]],  # totals tie
                           [[1.0, 1.0, 0.0]] * 4,                                                # nothing differs
                           [[0.0, 0.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]]])  # totals differ
    weights = torch.ones(3)
    totals = scores.mean(-1)
    assert (totals[0] == totals[0, 0]).all(), "the first group's totals tie"
    batch = RewardBatch(_binary_rubric("a", "b", "c"), scores, scores, weights, totals)
    gdpo = registry.create("advantage_estimator", "gdpo", {}).advantages(batch)
    grpo = registry.create("advantage_estimator", "grpo", {}).advantages(batch)
    assert gdpo[0].abs().min() > 0.05 and grpo[0].abs().max() < 1e-6, "GDPO learns from the tied group, GRPO cannot"
    settings = SamplingSettings(filter="zero_spread")
    assert informative_groups(totals, settings, scores).tolist() == [True, False, True]
    assert informative_groups(totals, settings).tolist() == [False, False, True], "the total alone drops it"
    # the diagnostics agree: the kept groups are saturated in no dimension, the dropped one in every one
    assert saturated_groups(scores).tolist() == [[False] * 3, [True] * 3, [False] * 3]


def test_zero_spread_keeps_skyrls_case_of_two_binary_dimensions_trading_places():
    """SkyRL PR #2104's case: two binary dimensions of equal weight, totals tied, components different: kept (with
    exactly two such dimensions GDPO's per-dimension z-scores cancel, b = 1 - a; a third dimension or unequal
    weights make them count, as above)."""
    scores = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0]] * 4])
    totals = scores.mean(-1)
    keep = informative_groups(totals, SamplingSettings(filter="zero_spread"), scores)
    assert keep.tolist() == [True, False]


def test_zero_spread_counts_a_spread_within_tol_as_none():
    rewards = torch.tensor([[0.5, 0.5000003, 0.5, 0.5], [0.5, 0.52, 0.5, 0.5]])  # float32 tells 0.5000003 apart
    components = torch.tensor([[[0.3], [0.3], [0.3000001], [0.3]], [[0.3], [0.3], [0.3], [0.3]]])
    assert informative_groups(rewards, SamplingSettings(filter="zero_spread"), components).tolist() == [False, True]
    assert informative_groups(rewards, SamplingSettings(filter="zero_spread", tol=0.05), components).tolist() == \
        [False, False]
    assert informative_groups(rewards, SamplingSettings(filter="zero_spread", tol=0.0), components).tolist() == \
        [True, True]
    # a completion without a reward (cut and masked) contributes no component: one scored value is no spread
    masked = torch.tensor([[0.5, NAN, NAN, NAN]])
    assert not informative_groups(masked, SamplingSettings(filter="zero_spread"),
                                  torch.tensor([[[0.0], [1.0], [0.0], [1.0]]])).any()


def test_mean_range_keeps_groups_whose_mean_lies_in_the_bounds():
    # means 0.75, 0.5, 0.2 (NaN left out), 0.0, 1.0
    rewards = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5], [NAN, 0.2, NAN, 0.2], [0.0] * 4, [1.0] * 4])
    keep = informative_groups(rewards, SamplingSettings(filter="mean_range", lo=0.2, hi=0.75))
    assert keep.tolist() == [True, True, True, False, False]


def test_truncated_reward_policies():
    rewards = torch.tensor([[0.9, 0.2], [NAN, 0.4]])
    cut = torch.tensor([[True, False], [True, True]])
    assert shape_truncated(rewards, cut, "keep") is rewards
    assert torch.equal(shape_truncated(rewards, cut, "value", -1.0), torch.tensor([[-1.0, 0.2], [-1.0, -1.0]]))
    masked = shape_truncated(rewards, cut, "mask")
    assert torch.isnan(masked[cut]).all() and masked[0, 1] == 0.2


@pytest.mark.parametrize(("num_prompts", "batch_size"), [(22, 4), (3, 8)])
def test_prompts_are_read_on_in_the_samplers_order_across_epochs(num_prompts, batch_size):
    dm = PromptDataModule(DataConfig(num_prompts=num_prompts, heldout_fraction=0.0), batch_size, seed=5)
    dm.setup()
    loader_first = dm.upcoming(0, 0, 1)[0]  # 3 prompts make a step of 3 (the step asks for what the loader yields)
    first, position = dm.read(0, 0, len(loader_first))
    assert first == loader_first, "a filtering run starts where the loader does"
    read = list(first)
    for count in (1, 3, 2, 5, 7, 4, 6):
        more, position = dm.read(*position, count)
        assert len(more) == count
        read += more
    sampler = dm._sampler()
    every = [dm.train_records[i] for e in range(20) for i in sampler.epoch_order(e)]
    assert read == every[:len(read)], "every sample of each epoch, in order, then the next epoch"
    assert position == (len(read) // num_prompts, len(read) % num_prompts)


def test_take_and_the_size_of_an_extra_round():
    orders = {0: [2, 0, 1], 1: [1, 2, 0]}
    assert take(orders.__getitem__, (0, 2), 3) == ([1, 1, 2], (1, 2))
    assert take(orders.__getitem__, (0, 3), 1) == ([1], (1, 1))
    assert extra_round_size(missing=1, kept=7, drawn=8, batch_size=8) == 2  # ceil(1 * 8 / 7)
    assert extra_round_size(missing=3, kept=1, drawn=4, batch_size=4) == 4  # 12 capped at a batch
    assert extra_round_size(missing=4, kept=0, drawn=4, batch_size=4) == 4


def _sampled(b: int, prompt: int, completion: int, tag: int) -> SampledBatch:
    n = b * G
    ids = torch.full((n, prompt + completion), tag)
    return SampledBatch(ids, torch.ones(n, prompt + completion, dtype=torch.long),
                        torch.ones(n, completion, dtype=torch.long), prompt,
                        [[f"{tag}.{i}.{g}" for g in range(G)] for i in range(b)], torch.zeros(n, dtype=torch.bool))


def test_groups_of_rounds_join_with_padding():
    first, second = _sampled(3, prompt=2, completion=3, tag=7), _sampled(2, prompt=4, completion=1, tag=8)
    picked = [select_groups(first, torch.tensor([0, 2])), select_groups(second, torch.tensor([1]))]
    joined = concat_sampled(picked, pad_id=0)
    assert joined.texts == [first.texts[0], first.texts[2], second.texts[1]]
    assert joined.input_ids.shape == (3 * G, 4 + 3) and joined.prompt_length == 4
    assert joined.attention_mask[:2 * G, :2].sum() == 0, "shorter prompts are left-padded"
    assert joined.completion_mask[2 * G:].sum(dim=1).tolist() == [1] * G, "shorter completions are right-padded"
    assert (joined.input_ids[:2 * G, 2:] == 7).all() and (joined.input_ids[2 * G:, :5] == 8).all()


# --- a step's rounds, on scripted prompts ------------------------------------------------------------


RUBRIC = rubric_from_dict({"name": "solved", "version": "1", "dimensions": [
    {"name": "solved", "type": "binary", "checks": [{"type": "regex", "pattern": "x"}]}]})


class _Judge:
    """A record's ``kind`` decides its group: all solved, none solved, or half."""

    def score(self, rollout: Any, rubric: Any) -> torch.Tensor:
        pattern = {"all": [1.0] * G, "none": [0.0] * G, "mixed": [1.0, 0.0] * (G // 2)}
        return torch.tensor([pattern[r["kind"]] for r in rollout.records]).unsqueeze(-1)


class _Generator:
    def __init__(self) -> None:
        self.requests: list[Any] = []

    def generate(self, policy: Any, tokenizer: Any, request: Any) -> SampledBatch:
        self.requests.append(request)
        return _sampled(len(request.records), prompt=2, completion=3, tag=len(self.requests))


class _Data:
    """Scripted prompts read in order, as ``PromptDataModule.read`` and ``upcoming`` read the sampler's."""

    def __init__(self, kinds: list[list[str]]) -> None:
        self.prompts = [{"prompt": f"p{i}.{j}", "kind": k} for i, row in enumerate(kinds) for j, k in enumerate(row)]
        self.size = len(kinds[0])

    def read(self, epoch: int, done: int, count: int) -> tuple[list[dict[str, Any]], tuple[int, int]]:
        return self.prompts[done:done + count], (epoch, done + count)

    def upcoming(self, epoch: int, done: int, count: int) -> list[list[dict[str, Any]]]:
        return [self.prompts[done + i * self.size:done + (i + 1) * self.size] for i in range(count)]


def _module(kinds: list[list[str]], **sampling: Any) -> tuple[RubricRLModule, _Generator]:
    parts = RewardParts(judge=_Judge(), judge_name="scripted",
                        aggregator=SimpleNamespace(aggregate=lambda batch: batch.scores[..., 0]), estimator=None,
                        scheduler=SimpleNamespace(weights=lambda step, scores, rubric: torch.ones(1)),
                        objective=SimpleNamespace(signal="advantages"))
    settings = TrainingSettings(num_generations=G, max_completion_length=3, temperature=1.0, lr=0.0, weight_decay=0.0,
                                warmup_steps=0, gradient_clip_val=None, sampling=SamplingSettings(**sampling))
    generator = _Generator()
    module = RubricRLModule(torch.nn.Linear(1, 1), SimpleNamespace(pad_token_id=0, eos_token_id=1), RUBRIC, parts,
                            settings, generator=generator)
    module._trainer = SimpleNamespace(datamodule=_Data(kinds), global_step=0)
    return module, generator


def _step(module: RubricRLModule, step: int) -> tuple[list[dict[str, Any]], SampledBatch, Any, dict[str, float]]:
    """A step's rollout, as ``training_step`` asks for it with the loader's batch size."""
    return module.informative_rollout(step, module._trainer.datamodule.size)


def test_dropped_groups_are_refilled_to_a_batch_of_informative_groups():
    module, generator = _module([["none", "mixed", "all", "mixed"], ["all", "mixed", "none", "none"],
                                 ["mixed", "mixed", "mixed", "mixed"]], filter="zero_spread", max_rounds=3)
    records, sampled, judged, metrics = _step(module, 0)
    assert [r["prompt"] for r in records] == ["p0.1", "p0.3", "p1.1", "p2.0"]
    # round sizes: 4, then 2 missing at a rate of 2/4 → 4, then 1 missing at 3/8 → ceil(8/3) = 3
    assert metrics == {"sampling/groups_dropped": 5.0, "sampling/extra_rounds": 2.0, "sampling/extra_prompts": 7.0,
                       "sampling/informative_frac": 1.0}
    assert sampled.input_ids.shape[0] == 4 * G and len(sampled.texts) == 4
    assert sampled.texts[2] == ["2.1.0", "2.1.1", "2.1.2", "2.1.3"], "round 2's second group"
    batch = module.rewards.batch(judged, 0)
    assert (batch.rewards.amax(dim=1) > batch.rewards.amin(dim=1)).all(), "every group trained on is informative"
    # what a length-weighted estimator (advantage=opo) reads: the kept completions' token counts
    assert torch.equal(batch.extras["completion_lengths"], sampled.completion_token_counts.view(4, G).float())
    assert module.position.sampling == (0, 11), "the data position counts every prompt drawn"
    seeds = [s for request in generator.requests for s in request.seeds]
    assert len(set(seeds)) == len(seeds) == 11, "each round's prompts get their own sampling noise"


def test_reaching_max_rounds_trains_on_what_there_is_and_says_so():
    kinds = [["none", "all", "none", "mixed"], ["all", "all", "none", "none"], ["mixed"] * 4]
    module, generator = _module(kinds, filter="zero_spread", max_rounds=1)
    records, sampled, _, metrics = _step(module, 0)
    assert [r["prompt"] for r in records] == ["p0.3"] and len(generator.requests) == 2
    assert metrics == {"sampling/groups_dropped": 7.0, "sampling/extra_rounds": 1.0, "sampling/extra_prompts": 4.0,
                       "sampling/informative_frac": 0.25}
    # nothing informative at all: the step trains on its first batch, as without the filter
    module, _ = _module([["none", "all"], ["all", "none"]], filter="zero_spread", max_rounds=1)
    records, _, _, metrics = _step(module, 0)
    assert [r["prompt"] for r in records] == ["p0.0", "p0.1"] and metrics["sampling/informative_frac"] == 0.0


def test_mean_range_and_the_truncated_policy_decide_together():
    # cut completions masked: a "mixed" group whose solved completions were all cut has nothing left to contrast
    module, _ = _module([["mixed", "mixed"], ["mixed", "mixed"]], filter="zero_spread", max_rounds=0,
                        truncated="mask")
    generate = module.generator.generate

    def cut_solved(policy: Any, tokenizer: Any, request: Any) -> SampledBatch:
        batch = generate(policy, tokenizer, request)
        batch.truncated = torch.tensor([True, False] * (len(request.records) * G // 2))
        return batch

    module.generator.generate = cut_solved
    _, _, _, metrics = _step(module, 0)
    assert metrics["sampling/groups_dropped"] == 2.0
    module, _ = _module([["all", "mixed", "none"]], filter="mean_range", lo=0.25, hi=0.75, max_rounds=0)
    records, _, _, _ = _step(module, 0)
    assert [r["kind"] for r in records] == ["mixed"]


class _AskingGenerator(_Generator):
    """Samples ahead (``max_lag`` 1): what ``submit`` was asked for is kept, to see what a step trained on."""

    max_lag = 1

    def submit(self, policy: Any, tokenizer: Any, request: Any) -> Any:
        batch = self.generate(policy, tokenizer, request)
        return SimpleNamespace(result=lambda: batch)


def test_rollouts_requested_ahead_fall_back_to_sampling_now_after_a_step_drew_extra_prompts():
    kinds = [["none", "mixed"], ["mixed", "mixed"], ["mixed", "all"], ["mixed", "mixed"], ["mixed", "mixed"]]
    module, _ = _module(kinds, filter="zero_spread", max_rounds=2)
    module.generator = generator = _AskingGenerator()
    module.rollouts = type(module.rollouts)(generator)
    records, _, _, metrics = _step(module, 0)  # asks ahead for batch 1, then draws it as an extra
    assert metrics["sampling/extra_rounds"] == 1.0 and [r["prompt"] for r in records] == ["p0.1", "p1.0"]
    assert [r["prompt"] for r in generator.requests[1].records] == ["p1.0", "p1.1"], "requested ahead for step 1"
    module._trainer.global_step = 1
    records, sampled, _, metrics = _step(module, 1)  # step 1 starts at batch 2: not what was asked
    assert not module.requested_ahead and module.rollouts.misses == 2
    assert [r["prompt"] for r in records] == ["p2.0", "p3.0"] and sampled.texts[0][0].startswith("4.")
    module._trainer.global_step = 2
    _step(module, 2)  # step 1 drew an extra batch too; what it asked ahead for is dropped
    assert module.rollouts.misses == 3


def test_rollouts_requested_ahead_are_used_when_no_extra_prompts_were_drawn():
    module, _ = _module([["mixed", "mixed"], ["mixed", "mixed"], ["mixed", "mixed"]], filter="zero_spread")
    module.generator = generator = _AskingGenerator()
    module.rollouts = type(module.rollouts)(generator)
    _step(module, 0)
    module._trainer.global_step = 1
    records, sampled, _, _ = _step(module, 1)
    assert module.requested_ahead and [r["prompt"] for r in records] == ["p1.0", "p1.1"]
    assert sampled.texts[0][0].startswith("2."), "the rollout requested during step 0"


def test_a_filter_with_demonstrations_is_a_config_error():
    parts = RewardParts(judge=_Judge(), judge_name="scripted", aggregator=None, estimator=None, scheduler=None,
                        objective=SimpleNamespace(signal="demonstrations"))
    settings = TrainingSettings(num_generations=G, max_completion_length=3, temperature=1.0, lr=0.0, weight_decay=0.0,
                                warmup_steps=0, gradient_clip_val=None, sampling=SamplingSettings(filter="zero_spread"))
    with pytest.raises(ConfigError) as err:
        RubricRLModule(torch.nn.Linear(1, 1), None, RUBRIC, parts, settings, generator=_Generator())
    assert err.value.where == "sampling.filter"


# --- end to end ---------------------------------------------------------------------------------------------


def _rows(run_dir: Any) -> dict[int, dict[str, str]]:
    import csv

    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        return {int(r["step"]): r for r in csv.DictReader(fh) if r.get("reward/mean")}


@pytest.mark.slow
def test_resume_after_a_kill_reproduces_a_zero_spread_run(tmp_path, monkeypatch):
    from rlkit.cli import main
    from rlkit.testing.runs import fit_killed_at_first_checkpoint

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    args = ["model=tiny_random", "logger=csv", "batch_size=4", "num_generations=4", "checkpoint_every=2",
            "data.num_prompts=24", "sampling.filter=zero_spread", "sampling.max_rounds=2"]
    ckpt = fit_killed_at_first_checkpoint(args, tmp_path / "killed")
    state = torch.load(ckpt, weights_only=True)
    k = state["global_step"]
    assert k % 2 == 0 and k > 0
    assert "sampling_position" in state["rlkit"]

    end = k + 4
    assert main(["fit", *args, f"trainer.max_steps={end}", f"ckpt_path={ckpt}",
                 f"hydra.run.dir={tmp_path / 'resumed'}"]) == 0
    assert main(["fit", *args, f"trainer.max_steps={end}", f"hydra.run.dir={tmp_path / 'straight'}"]) == 0
    resumed, straight = _rows(tmp_path / "resumed"), _rows(tmp_path / "straight")
    assert sorted(resumed) == list(range(k, end))
    assert sum(float(r["sampling/extra_rounds"]) for r in straight.values()) > 0, "some step drew extra prompts"
    # the seeded run draws extra prompts before its first checkpoint: the saved position is ahead of the loader's
    assert sum(float(straight[s]["sampling/extra_rounds"]) for s in range(k)) > 0
    assert tuple(state["rlkit"]["sampling_position"]) != tuple(state["rlkit"]["data_position"])
    for step in resumed:
        compared = {key: v for key, v in straight[step].items() if not key.startswith(("time/", "tokens_per_sec",
                                                                                      "epoch")) and v != ""}
        assert len(compared) > 20 and "sampling/informative_frac" in compared
        assert {key: resumed[step][key] for key in compared} == compared, f"step {step} differs"
        assert math.isfinite(float(resumed[step]["loss"]))


@pytest.mark.parametrize(("override", "where"), [("sampling.filter=spread", "sampling.filter"),
                                                  ("sampling.lo=0.8", "sampling")])
def test_bad_sampling_config_is_one_line_naming_the_key(override, where, capsys):
    from rlkit.cli import main

    assert main(["validate", override, "sampling.hi=0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"rlkit: error: {where}")


@pytest.mark.slow
def test_the_reward_of_cut_completions_follows_the_truncated_policy(tmp_path, monkeypatch):
    from rlkit.cli import main

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    args = ["model=tiny_random", "logger=csv", "trainer.max_steps=1", "batch_size=4", "num_generations=4"]
    rows = {}
    for policy in ("keep", "value", "mask"):
        assert main(["fit", *args, f"sampling.truncated={policy}", "sampling.truncated_value=-1.0",
                     f"hydra.run.dir={tmp_path / policy}"]) == 0
        rows[policy] = _rows(tmp_path / policy)[0]
    cut = float(rows["keep"]["frac_truncated"])
    assert cut > 0 and all(float(r["frac_truncated"]) == cut for r in rows.values()), "the same first rollout"
    # rewards lie in [0, 1]: a cut completion's reward falls by at least 1 when it becomes -1
    assert float(rows["value"]["reward/mean"]) <= float(rows["keep"]["reward/mean"]) - cut + 1e-6
    assert float(rows["mask"]["unscored_completions"]) == cut * 16 and float(rows["keep"]["unscored_completions"]) == 0
