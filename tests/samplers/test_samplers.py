"""Prompt samplers: their choices on a scripted pass-rate history, retirement and the minimum unsolved share, the
difficulty ratio, ``uniform`` as today's epoch shuffle, the state a checkpoint carries, and a short ``rlkit fit``."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
import torch

from rlkit.config import DataConfig
from rlkit.core.errors import ConfigError, DataError
from rlkit.core.registry import Registry, create_plugin_manager
from rlkit.plugin import allocate_shares as allocate
from rlkit.testing import example_sampler_records, example_sampler_rubric
from rlkit.train.datamodule import PromptDataModule
from rlkit_plugins.samplers.outcomes import draw_order

REGISTRY = Registry(create_plugin_manager())
RUBRIC = example_sampler_rubric()
NAN = float("nan")


def _sampler(name: str, records: list[dict], seed: int = 0, **params):
    sampler = REGISTRY.create("prompt_sampler", name, params)
    sampler.setup(records, seed)
    return sampler


def _scores(*groups: list[float]) -> torch.Tensor:
    """Raw scores ``[B, G, 2]``: each group's correctness as given, brevity 5."""
    return torch.tensor([[[c, 5.0] for c in group] for group in groups])


SOLVED, HALF, NONE = [1.0, 1.0, 1.0, 1.0], [1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]


# --- pass_rate -------------------------------------------------------------------------------------------


def test_pass_rate_retires_a_prompt_solved_k_steps_in_a_row_for_a_while():
    s = _sampler("pass_rate", example_sampler_records(4), retire_after=2, retire_for=2, min_unsolved=0.0)
    assert s.pick(0, [0, 1]) == [0, 1], "nothing scored yet: the epoch shuffle's proposal"
    s.observe(0, [0, 1], _scores(SOLVED, HALF), RUBRIC)
    assert s.pick(1, [0, 1]) == [0, 1], "solved once is not retired"
    s.observe(1, [0, 1], _scores(SOLVED, HALF), RUBRIC)  # prompt 0 solved twice in a row: out for draws 2 and 3
    assert s.rate[:2] == [1.0, 0.5] and s.streak[0] == 0 and s.back_at[0] == 4
    free = [i for i in draw_order(0, 2, 4) if i not in (0, 1)]
    assert s.pick(2, [0, 1]) == [1, free[0]], "its place goes to the next active prompt in the draw's order"
    assert 0 not in s.pick(3, [0, 1])
    assert s.pick(4, [0, 1]) == [0, 1], "back after retire_for steps"
    assert s.metrics()["retired"] == 1.0  # as of the step after the latest observed one (draw 2)


def test_pass_rate_running_rate_and_unscored_completions():
    s = _sampler("pass_rate", example_sampler_records(3), smoothing=0.5, solved_share=0.75)
    s.observe(0, [0, 1, 2], _scores(HALF, [1.0, 1.0, 1.0, NAN], [NAN] * 4), RUBRIC)
    assert s.rate == [0.5, 1.0, None], "NaN completions are left out of the share; a prompt with none has no rate"
    assert s.solved == [False, True, False] and s.streak == [0, 1, 0]
    s.observe(1, [0], _scores(SOLVED), RUBRIC)
    assert s.rate[0] == 0.75 and s.solved[0]  # 0.5 * 0.5 + 0.5 * 1.0


def test_pass_rate_keeps_a_minimum_share_of_unsolved_prompts():
    records = example_sampler_records(6)
    s = _sampler("pass_rate", records, min_unsolved=0.5, retire_after=99)
    assert s.pick(0, [0, 1, 2, 3]) == [0, 1, 2, 3]
    s.observe(0, [0, 1, 2, 3], _scores(SOLVED, SOLVED, SOLVED, HALF), RUBRIC)
    unseen = [i for i in draw_order(0, 1, 6) if i in (4, 5)]  # never scored: unsolved
    # one unsolved prompt (3) of four, two wanted: the last solved prompt (2) gives its place to an unseen one
    assert s.pick(1, [0, 1, 2, 3]) == [0, 1, unseen[0], 3]
    everything = _sampler("pass_rate", records, min_unsolved=1.0, retire_after=99)
    everything.observe(0, [0, 1, 2, 3], _scores(SOLVED, SOLVED, SOLVED, HALF), RUBRIC)
    # four wanted, only 4 and 5 left outside: solved prompts 2 then 1 give way, 0 stays
    assert everything.pick(1, [0, 1, 2, 3]) == [0, unseen[1], unseen[0], 3]


def test_pass_rate_fills_a_batch_from_prompts_that_return_soonest_when_too_few_are_active():
    s = _sampler("pass_rate", example_sampler_records(3), retire_after=1, retire_for=5, min_unsolved=0.0)
    s.observe(0, [0, 1], _scores(SOLVED, SOLVED), RUBRIC)  # both out until draw 6
    s.observe(1, [2], _scores(SOLVED), RUBRIC)  # out until draw 7
    assert s.pick(2, [2, 0]) == [0, 1]


# --- difficulty_mix ---------------------------------------------------------------------------------------


def test_allocation_by_largest_remainder():
    mix = {"easy": 3.0, "medium": 5.0, "hard": 2.0}
    assert allocate(mix, 10) == {"easy": 3, "medium": 5, "hard": 2}
    assert allocate(mix, 4) == {"easy": 1, "medium": 2, "hard": 1}  # 1.2, 2.0, 0.8
    assert allocate(mix, 7) == {"easy": 2, "medium": 4, "hard": 1}  # 2.1, 3.5, 1.4
    assert allocate({"a": 1.0, "b": 1.0}, 1) == {"a": 1, "b": 0}, "a tie goes to the level listed first"


def test_difficulty_mix_holds_each_batch_to_the_ratio_of_the_difficulty_field():
    records = example_sampler_records(30)  # easy, medium, hard in turn: 10 each
    s = _sampler("difficulty_mix", records, seed=4)
    assert not s.adaptive
    shuffle = torch.randperm(30, generator=torch.Generator().manual_seed(0)).tolist()
    for draw in range(3):
        proposed = shuffle[draw * 10:(draw + 1) * 10]
        picked = s.pick(draw, proposed)
        levels = [records[i]["difficulty"] for i in picked]
        assert (levels.count("easy"), levels.count("medium"), levels.count("hard")) == (3, 5, 2)
        assert len(set(picked)) == 10
        easy_proposed = [i for i in proposed if records[i]["difficulty"] == "easy"]
        assert picked[:3] == (easy_proposed + [i for i in draw_order(4, draw, 30) if i % 3 == 0
                                               and i not in easy_proposed])[:3], "the proposal's own first"


def test_difficulty_mix_level_without_prompts_gives_its_share_to_the_others():
    records = [r for r in example_sampler_records(24) if r["difficulty"] != "hard"]  # 8 easy, 8 medium
    s = _sampler("difficulty_mix", records)
    levels = [records[i]["difficulty"] for i in s.pick(0, list(range(8)))]
    assert (levels.count("easy"), levels.count("medium")) == (3, 5)


def test_difficulty_mix_measures_pass_rate_bands_without_the_field():
    records = example_sampler_records(12, difficulty=False)
    s = _sampler("difficulty_mix", records, easy_from=0.8, hard_below=0.2)
    assert s.adaptive
    s.observe(0, [0, 1, 2, 3, 4, 5], _scores(SOLVED, SOLVED, SOLVED, NONE, NONE, HALF), RUBRIC)
    assert [s.level(i) for i in range(7)] == ["easy"] * 3 + ["hard"] * 2 + ["medium"] * 2, "unscored: medium"
    picked = s.pick(1, [6, 7, 8, 9])  # 1 easy, 2 medium, 1 hard
    assert [s.level(i) for i in picked] == ["easy", "medium", "medium", "hard"]
    assert picked[1:3] == [6, 7], "medium places go to the proposal's medium prompts first"


def test_difficulty_mix_refuses_records_it_cannot_place():
    records = example_sampler_records(6)
    with pytest.raises(DataError, match="not a level"):
        _sampler("difficulty_mix", [*records, {"prompt": "9+9=", "difficulty": "expert"}])
    with pytest.raises(DataError, match="some training records have"):
        _sampler("difficulty_mix", [*records, {"prompt": "9+9="}])
    with pytest.raises(ConfigError, match="must name exactly easy, medium and hard"):
        _sampler("difficulty_mix", example_sampler_records(6, difficulty=False), mix={"low": 1.0, "high": 1.0})


# --- the data module: uniform as today, picks, lookahead, checkpoint state ----------------------------------


def _module(sampler: str | None, num_prompts: int = 22, batch_size: int = 4, **params) -> PromptDataModule:
    plugin = REGISTRY.create("prompt_sampler", sampler, params) if sampler else None
    dm = PromptDataModule(DataConfig(num_prompts=num_prompts, heldout_fraction=0.0), batch_size, seed=5,
                          sampler=plugin, sampler_name=sampler or "uniform")
    dm.setup()
    return dm


def _epochs(dm: PromptDataModule, epochs: int) -> list[list]:
    loader = dm.train_dataloader()
    out = []
    for epoch in range(epochs):
        loader.sampler.set_epoch(epoch)
        out += [list(batch) for batch in loader]
    return out


def test_uniform_is_todays_epoch_shuffle_byte_for_byte():
    today = _epochs(_module(None), 3)
    uniform = _module("uniform")
    assert _epochs(uniform, 3) == today
    assert not uniform.picks and uniform.state_dict() == {}, "nothing new in the checkpoint"
    assert uniform.upcoming(0, 4, 2) == today[1:3]
    # a picking sampler's loader walks the same order, as indices
    picking = _module("pass_rate")
    assert [[picking.train_records[i] for i in b] for b in _epochs(picking, 3)] == today


def _step(dm: PromptDataModule, proposed: list[int], scores) -> list[dict]:
    records = dm.pick(proposed)
    dm.observe(records, scores(len(records)), RUBRIC)
    return records


def test_picks_are_checkpointed_and_a_restored_module_picks_the_same():
    def scores(b: int) -> torch.Tensor:
        return _scores(*([SOLVED, HALF] * b)[:b])

    batches = [[0, 1, 2, 3], [0, 1, 4, 5], [2, 3, 4, 5], [0, 1, 2, 3], [6, 7, 0, 1]]
    straight = _module("pass_rate", retire_after=1, retire_for=3)
    expected = [_step(straight, b, scores) for b in batches]
    first = _module("pass_rate", retire_after=1, retire_for=3)
    got = [_step(first, b, scores) for b in batches[:2]]
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    assert state["sampler"] == "pass_rate" and state["draws"] == 2
    resumed = _module("pass_rate", retire_after=1, retire_for=3)
    resumed.load_state_dict(state)
    got += [_step(resumed, b, scores) for b in batches[2:]]
    assert got == expected
    assert expected[1][:2] != [straight.train_records[i] for i in batches[1][:2]], "prompt 0, solved, retired"
    other = _module("difficulty_mix")
    with pytest.raises(ConfigError, match="picked by sampler=pass_rate"):
        other.load_state_dict(state)
    _module("uniform").load_state_dict(state)  # the epoch shuffle needs nothing of it


def test_lookahead_reads_non_adaptive_picks_ahead_and_none_of_adaptive_ones():
    dm = _module("difficulty_mix", num_prompts=24)
    for i, record in enumerate(dm.train_records):
        record["difficulty"] = ("easy", "medium", "hard")[i % 3]
    dm.sampler.setup(dm.train_records, dm.seed)
    loader = _epochs(dm, 1)
    dm.pick(loader[0])  # step 0, in progress
    ahead = dm.upcoming(0, 4, 2)
    assert ahead == [dm.pick(loader[1]), dm.pick(loader[2])], "what steps 1 and 2 pick"
    adaptive = _module("pass_rate")
    adaptive.pick(list(range(4)))
    assert adaptive.upcoming(0, 4, 2) == [], "its picks wait for the step's scores"
    with pytest.raises(ConfigError, match="sampling.filter"):
        adaptive.read(0, 0, 4)


def test_observe_refuses_records_the_sampler_did_not_pick():
    dm = _module("pass_rate")
    dm.pick([0, 1, 2, 3])
    with pytest.raises(Exception, match="other prompts"):
        dm.observe(dm.train_records[4:8], _scores(*[SOLVED] * 4), RUBRIC)


def test_a_picking_sampler_with_dynamic_sampling_is_one_line_naming_both_keys(capsys):
    from rlkit.cli import main

    assert main(["validate", "sampler=pass_rate", "sampling.filter=zero_spread"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlkit: error: sampler, sampling.filter:")
    assert main(["validate", "sampler=uniform", "sampling.filter=zero_spread"]) == 0


# --- end to end -------------------------------------------------------------------------------------------


def _rows(run_dir: Path) -> dict[int, dict[str, str]]:
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    rows: dict[int, dict[str, str]] = {}
    with path.open() as fh:
        for row in csv.DictReader(fh):  # the sampler's metrics are a row of their own at the same step
            rows.setdefault(int(row["step"]), {}).update({k: v for k, v in row.items() if v != ""})
    return {step: row for step, row in rows.items() if "reward/mean" in row}


@pytest.mark.slow
def test_fit_with_pass_rate_resumes_exactly(tmp_path, monkeypatch):
    from rlkit.cli import main

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    # threshold 0: every scored completion succeeds, so prompts retire after one step and come back two steps later
    args = ["model=tiny_random", "logger=csv", "batch_size=4", "num_generations=2", "data.num_prompts=16",
            "max_completion_length=8", "checkpoint_every=2", "sampler=pass_rate", "sampler.params.threshold=0",
            "sampler.params.retire_after=1", "sampler.params.retire_for=2"]
    assert main(["fit", *args, "trainer.max_steps=4", f"hydra.run.dir={tmp_path / 'straight'}"]) == 0
    assert main(["fit", *args, "trainer.max_steps=2", f"hydra.run.dir={tmp_path / 'first'}"]) == 0
    ckpt = tmp_path / "first" / "checkpoints" / "last.ckpt"
    state = torch.load(ckpt, weights_only=True)["PromptDataModule"]
    assert state["draws"] == 2 and sum(b > 2 for b in state["state"]["back_at"]) == 8, "both batches retired"
    assert main(["fit", *args, "trainer.max_steps=4", f"ckpt_path={ckpt}",
                 f"hydra.run.dir={tmp_path / 'resumed'}"]) == 0
    straight, resumed = _rows(tmp_path / "straight"), _rows(tmp_path / "resumed")
    assert sorted(resumed) == [2, 3] and float(straight[1]["sampler/retired"]) == 8.0
    for step in resumed:
        compared = {k: v for k, v in straight[step].items() if not k.startswith(("time/", "tokens_per_sec", "epoch"))}
        assert len(compared) > 20 and "sampler/retired" in compared
        assert {k: resumed[step].get(k) for k in compared} == compared, f"step {step} differs"
