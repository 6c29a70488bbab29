"""Rollouts requested ahead of their step: the data module reads the next steps' prompts exactly as its loader will
yield them (across epochs, after a resume, per process), and the queue hands a step only the rollout asked for it."""

from __future__ import annotations

import pytest
import torch

from rlkit.config import DataConfig
from rlkit.lm.sampling import SampledBatch
from rlkit.train.datamodule import EpochShuffleSampler, PromptDataModule
from rlkit.train.lookahead import FinishedRollout, RolloutQueue, batch_state


class _Place:
    def __init__(self, rank: int, world: int) -> None:
        self.global_rank, self.world_size = rank, world


def _module(num_prompts: int, batch_size: int, rank: int = 0, world: int = 1) -> PromptDataModule:
    dm = PromptDataModule(DataConfig(num_prompts=num_prompts, heldout_fraction=0.0), batch_size, seed=5)
    dm.trainer = _Place(rank, world)
    dm.setup()
    return dm


def _loader_steps(dm: PromptDataModule, epochs: int, resume: tuple[int, int] | None = None) -> list[tuple]:
    """(epoch, samples done after the step, the step's prompts) for every step the loader yields."""
    if resume is not None:
        dm.resume_at(*resume)
    loader = dm.train_dataloader()
    out, world = [], dm.trainer.world_size
    for epoch in range(resume[0] if resume else 0, epochs):
        loader.sampler.set_epoch(epoch)
        done = resume[1] if resume and epoch == resume[0] else 0
        for batch in loader:
            done += len(batch) * world
            out.append((epoch, done, [r["prompt"] for r in batch]))
    return out


@pytest.mark.parametrize(("num_prompts", "batch_size"), [(22, 4), (3, 8), (16, 4)])
def test_upcoming_prompts_are_what_the_loader_yields_next(num_prompts, batch_size):
    dm = _module(num_prompts, batch_size)
    steps = _loader_steps(dm, epochs=3)
    assert len({s[0] for s in steps}) == 3
    for i, (epoch, done, _) in enumerate(steps[:-2]):
        ahead = dm.upcoming(epoch, done, 2)
        assert [[r["prompt"] for r in b] for b in ahead] == [steps[i + 1][2], steps[i + 2][2]], f"after step {i}"


def test_upcoming_prompts_after_a_resume_and_on_each_of_two_processes():
    single = _module(22, 8)
    resumed = _loader_steps(_module(22, 8), epochs=2, resume=(0, 8))
    assert [[r["prompt"] for r in b] for b in single.upcoming(0, 8, 3)] == [s[2] for s in resumed[:3]]
    for rank in range(2):
        dm = _module(22, 8, rank=rank, world=2)
        steps = _loader_steps(dm, epochs=2)
        for i, (epoch, done, _) in enumerate(steps[:-1]):
            assert [r["prompt"] for r in dm.upcoming(epoch, done, 1)[0]] == steps[i + 1][2]


def test_batches_from_share_the_samplers_order():
    sampler = EpochShuffleSampler(10, seed=1, batch_size=3)
    sampler.set_epoch(1)
    order = list(sampler)
    assert sampler.batches_from(1, 0, 3, drop_last=True) == [order[0:3], order[3:6], order[6:9]]
    nxt = EpochShuffleSampler(10, seed=1, batch_size=3).epoch_order(2)
    assert sampler.batches_from(1, 6, 2, drop_last=True) == [order[6:9], nxt[0:3]], "the 10th sample is dropped"


class _Ready:
    def __init__(self, tag: int) -> None:
        self.tag = tag

    def result(self) -> int:
        return self.tag


class _AskingGenerator:
    max_lag = 2

    def submit(self, *args):  # only its presence matters to the queue
        raise AssertionError


def test_the_queue_hands_a_step_only_the_rollout_asked_for_it():
    queue = RolloutQueue(_AskingGenerator())
    assert queue.depth == 2 and RolloutQueue(object()).depth == 0, "no submit: the synchronous loop"
    asked: list[int] = []

    def submit(records, step):
        asked.append(step)
        return _Ready(step)

    a, b, c = [{"prompt": "a"}], [{"prompt": "b"}], [{"prompt": "c"}]
    assert queue.take(0, a) is None and queue.misses == 1
    queue.top_up(0, [b, c, a], submit)
    assert asked == [1, 2] and len(queue) == 2, "up to max_lag steps ahead"
    queue.top_up(0, [b, c], submit)
    assert asked == [1, 2], "nothing asked twice"
    assert queue.take(1, b).result() == 1
    queue.top_up(1, [c, a], submit)
    assert asked == [1, 2, 3]
    assert queue.take(2, [{"prompt": "other"}]) is None, "other prompts than asked for: sample synchronously"
    assert len(queue) == 0 and queue.misses == 2


def test_a_restored_rollout_is_rebuilt_on_the_policys_device_when_taken():
    batch = SampledBatch(torch.ones(2, 3, dtype=torch.long), torch.ones(2, 3), torch.ones(2, 1), 2, [["x", "y"]],
                         torch.zeros(2, dtype=torch.bool), torch.full((2, 1), -0.5), 4, 1)
    queue = RolloutQueue(_AskingGenerator())
    queue.load_state_dict([{"step": 7, "records": [{"prompt": "p"}], "batch": batch_state(batch)}],
                          lambda: torch.device("cpu"))
    pending = queue.take(7, [{"prompt": "p"}])
    assert isinstance(pending, FinishedRollout)
    out = pending.result()
    assert torch.equal(out.engine_logprobs, batch.engine_logprobs) and (out.policy_version, out.policy_lag) == (4, 1)
    assert out.texts == [["x", "y"]]
