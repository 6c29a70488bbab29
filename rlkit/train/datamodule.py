"""Prompt records for training and the held-out split, as a LightningDataModule."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Sampler

from rlkit.config import DataConfig, resolve_path
from rlkit.data.records import SYNTHETIC_TASKS, read_jsonl
from rlkit.train.dynamic_sampling import take


def _record_key(record: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record["prompt"], sort_keys=True).encode()).hexdigest()


def split_heldout(records: list[dict[str, Any]], fraction: float) -> tuple[list[dict], list[dict]]:
    """Deterministic split by prompt hash, so a prompt never lands in both halves."""
    if fraction <= 0:
        return records, []
    keyed = sorted(records, key=_record_key)
    n_held = max(1, round(len(records) * fraction)) if len(records) > 1 else 0
    held_keys = {_record_key(r) for r in keyed[:n_held]}
    train = [r for r in records if _record_key(r) not in held_keys]
    held = [r for r in records if _record_key(r) in held_keys]
    return train, held


class EpochShuffleSampler(Sampler[int]):
    """A fresh permutation per epoch drawn from ``(seed, epoch)`` alone, resumable mid-epoch.

    Lightning calls ``set_epoch`` before each epoch. Because the order depends on nothing but the seed and
    the epoch, a resumed run sees the same order as an uninterrupted one; ``resume_at`` skips the samples
    the checkpointed run had already trained on, once, in that epoch only. ``len`` stays the full epoch so
    Lightning's batch counter (restored from the checkpoint) ends the epoch at the same place.

    With ``world_size`` processes the epoch's order is cut into global batches of ``batch_size × world_size``
    and process ``rank`` takes block ``rank`` of each: gathered in rank order, a step's prompts are exactly
    those a single process with the global batch would see (the last incomplete global batch is dropped).
    """

    def __init__(self, num_samples: int, seed: int, *, batch_size: int = 1, rank: int = 0,
                 world_size: int = 1) -> None:
        self.num_samples = num_samples
        self.seed = seed
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.epoch = 0
        self._skip: tuple[int, int] | None = None  # (epoch, samples already trained on, all processes)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def resume_at(self, epoch: int, samples_done: int) -> None:
        self._skip = (epoch, samples_done)

    def __len__(self) -> int:
        if self.world_size == 1:
            return self.num_samples
        return self.num_samples // (self.batch_size * self.world_size) * self.batch_size

    def epoch_order(self, epoch: int, start: int = 0) -> list[int]:
        """This process's samples of ``epoch`` from ``start`` (samples already trained on, all processes)."""
        order = torch.randperm(self.num_samples, generator=torch.Generator().manual_seed(self.seed + epoch))[start:]
        if self.world_size > 1:
            span = self.batch_size * self.world_size
            full = len(order) // span
            order = order[:full * span].view(full, self.world_size, self.batch_size)[:, self.rank].reshape(-1)
        return order.tolist()

    def batches_from(self, epoch: int, start: int, count: int, *, drop_last: bool) -> list[list[int]]:
        """The next ``count`` batches (this process's sample indices) the loader yields once ``start`` samples of
        ``epoch`` are trained on, crossing into later epochs as Lightning's loop does. Rollouts requested ahead of
        their step read their prompts here (``rlkit.train.lookahead``)."""
        out: list[list[int]] = []
        for _ in range(count + 1):  # every epoch after the current one yields at least one batch
            order = self.epoch_order(epoch, start)
            full = len(order) // self.batch_size * self.batch_size if drop_last else len(order)
            out.extend(order[i:i + self.batch_size] for i in range(0, full, self.batch_size))
            if len(out) >= count:
                break
            epoch, start = epoch + 1, 0
        return out[:count]

    def __iter__(self):
        start = 0
        if self._skip is not None and self._skip[0] == self.epoch:
            start = self._skip[1]
            self._skip = None
        return iter(self.epoch_order(self.epoch, start))


def _as_list(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return batch


class PromptDataModule(L.LightningDataModule):
    """Shuffled training prompts (an epoch-seeded sampler that resumes mid-epoch) and a held-out split."""

    def __init__(self, data: DataConfig, batch_size: int, seed: int) -> None:
        super().__init__()
        self.data = data
        self.batch_size = batch_size
        self.seed = seed
        self.train_records: list[dict[str, Any]] = []
        self.heldout_records: list[dict[str, Any]] = []
        self._resume: tuple[int, int] | None = None

    def resume_at(self, epoch: int, samples_done: int) -> None:
        """Start training where a checkpointed run stopped: ``samples_done`` into ``epoch``'s order."""
        self._resume = (epoch, samples_done)

    def setup(self, stage: str | None = None) -> None:
        if self.train_records:
            return
        if self.data.path is not None:
            records = read_jsonl(resolve_path(self.data.path))
        else:
            records = SYNTHETIC_TASKS[self.data.task](self.data.num_prompts, self.data.seed)
        self.train_records, self.heldout_records = split_heldout(records, self.data.heldout_fraction)
        if not self.train_records:
            raise ValueError("no training prompts left after the held-out split")

    def train_dataloader(self) -> DataLoader:
        rank, world = self._place()
        if self.batch_size % world:
            from rlkit.core.errors import ConfigError

            raise ConfigError(f"{self.batch_size} prompts per step cannot be split evenly over {world} processes; "
                              f"use a multiple of {world}", "batch_size")
        local = self.batch_size // world
        if world > 1 and len(self.train_records) < self.batch_size:
            from rlkit.core.errors import DataError

            raise DataError(f"{len(self.train_records)} training prompts do not fill one global batch of "
                            f"{self.batch_size}", "batch_size")
        sampler = self._sampler()
        if self._resume is not None:
            sampler.resume_at(*self._resume)
        return DataLoader(self.train_records, batch_size=local, sampler=sampler, collate_fn=_as_list,
                          drop_last=self._drop_last())

    def _sampler(self) -> EpochShuffleSampler:
        rank, world = self._place()
        return EpochShuffleSampler(len(self.train_records), self.seed, batch_size=self.batch_size // world,
                                   rank=rank, world_size=world)

    def _drop_last(self) -> bool:
        return len(self.train_records) >= self.batch_size

    def upcoming(self, epoch: int, samples_done: int, count: int) -> list[list[dict[str, Any]]]:
        """This process's prompts of the ``count`` steps after ``samples_done`` samples of ``epoch``: what
        ``train_dataloader`` will yield next, read ahead for rollouts requested before their step."""
        batches = self._sampler().batches_from(epoch, samples_done, count, drop_last=self._drop_last())
        return [[self.train_records[i] for i in batch] for batch in batches]

    def read(self, epoch: int, samples_done: int, count: int) -> tuple[list[dict[str, Any]], tuple[int, int]]:
        """``count`` prompts of the sampler's order from ``samples_done`` into ``epoch`` (every sample of each epoch,
        on into the next; one process) and the position after them: dynamic sampling draws its prompts here."""
        indices, position = take(self._sampler().epoch_order, (epoch, samples_done), count)
        return [self.train_records[i] for i in indices], position

    def _place(self) -> tuple[int, int]:
        """(rank, world size) of this process: ``batch_size`` is the global batch, split between processes."""
        trainer = self.trainer
        if trainer is None:
            return 0, 1
        return int(trainer.global_rank), int(trainer.world_size)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.heldout_records or self.train_records[: self.batch_size],
                          batch_size=max(self.batch_size, 32), shuffle=False, collate_fn=_as_list)
