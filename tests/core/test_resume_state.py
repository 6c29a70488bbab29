"""The pieces of exact resume that need no Trainer: the epoch-seeded sampler and the RNG snapshot."""

from __future__ import annotations

import random

import numpy as np
import torch

from rlkit.core.rng import capture_rng_state, restore_rng_state
from rlkit.train.datamodule import EpochShuffleSampler


def test_sampler_order_depends_on_seed_and_epoch_only():
    a, b = EpochShuffleSampler(10, seed=3), EpochShuffleSampler(10, seed=3)
    list(a)  # drawing an epoch leaves no state behind
    assert list(a) == list(b)
    a.set_epoch(1)
    assert list(a) != list(b) and sorted(a) == list(range(10))
    assert list(EpochShuffleSampler(10, seed=4)) != list(b)


def test_sampler_resumes_mid_epoch_once():
    full = EpochShuffleSampler(10, seed=0)
    full.set_epoch(2)
    resumed = EpochShuffleSampler(10, seed=0)
    resumed.resume_at(epoch=2, samples_done=4)
    resumed.set_epoch(2)
    assert list(resumed) == list(full)[4:]
    assert list(resumed) == list(full), "the skip applies to the resumed epoch's first pass only"
    assert len(resumed) == 10


def test_sampler_skip_is_ignored_in_other_epochs():
    s = EpochShuffleSampler(6, seed=0)
    s.resume_at(epoch=1, samples_done=6)  # checkpoint at the end of epoch 1; Lightning moves on to epoch 2
    s.set_epoch(2)
    assert len(list(s)) == 6


def test_rng_snapshot_round_trips_every_generator():
    state = capture_rng_state()
    first = (random.random(), float(np.random.rand()), torch.rand(3))
    restore_rng_state(state)
    again = (random.random(), float(np.random.rand()), torch.rand(3))
    assert first[:2] == again[:2] and torch.equal(first[2], again[2])


def test_rng_snapshot_loads_with_weights_only(tmp_path):
    torch.save({"rng": capture_rng_state()}, tmp_path / "s.pt")
    restore_rng_state(torch.load(tmp_path / "s.pt", weights_only=True)["rng"])
