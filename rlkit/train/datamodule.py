"""Prompt records for training and the held-out split, as a LightningDataModule."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch.utils.data import DataLoader, Sampler

from rlkit.config import DataConfig, resolve_path
from rlkit.data.records import read_jsonl, split_heldout
from rlkit.train.dynamic_sampling import take


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
    """Shuffled training prompts (an epoch-seeded sampler that resumes mid-epoch) and a held-out split.

    A prompt sampler plugin (``sampler=<name>``) with a ``pick`` chooses each step's prompts: the loader then yields the
    epoch shuffle's record indices, which still pace the run and resume mid-epoch, and just before each training step
    (``on_before_batch_transfer``, after Lightning's prefetch, so the pick sees every earlier step's scores) the sampler
    turns them into the step's records. ``SamplerFeedback`` hands it the step's scores afterwards; what it learnt
    travels in the checkpoint (``state_dict``). Without ``pick`` (``uniform``) the loader yields records as it is."""

    def __init__(self, data: DataConfig, batch_size: int, seed: int, sampler: Any = None,
                 sampler_name: str = "uniform") -> None:
        super().__init__()
        self.data = data
        self.batch_size = batch_size
        self.seed = seed
        self.train_records: list[dict[str, Any]] = []
        self.heldout_records: list[dict[str, Any]] = []
        self._resume: tuple[int, int] | None = None
        self.sampler = sampler  # the prompt sampler plugin; None: the epoch shuffle as it is
        self.sampler_name = sampler_name
        self._draws = 0  # steps the sampler has picked for (checkpointed)
        self._picked: tuple[int, list[int]] | None = None  # (draw, indices) of the step in progress

    @property
    def picks(self) -> bool:
        """Whether the sampler chooses each step's prompts (it has ``pick``), rather than the epoch shuffle."""
        return callable(getattr(self.sampler, "pick", None))

    def resume_at(self, epoch: int, samples_done: int) -> None:
        """Start training where a checkpointed run stopped: ``samples_done`` into ``epoch``'s order."""
        self._resume = (epoch, samples_done)

    def setup(self, stage: str | None = None) -> None:
        if self.train_records:
            return
        if self.data.path is not None:
            records = read_jsonl(resolve_path(self.data.path))
        else:
            records = self.data.synthetic_records()
        self.train_records, self.heldout_records = split_heldout(records, self.data.heldout_fraction)
        if not self.train_records:
            raise ValueError("no training prompts left after the held-out split")
        if self.sampler is not None:
            self.sampler.setup(self.train_records, self.seed)

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
        if self.picks and world > 1:
            from rlkit.core.errors import ConfigError

            raise ConfigError(f"sampler={self.sampler_name} picks each step's prompts on one process for now: "
                              "use sampler=uniform with several processes", "sampler")
        sampler = self._sampler()
        if self._resume is not None:
            sampler.resume_at(*self._resume)
        # a picking sampler turns the epoch shuffle's indices into records at each step (on_before_batch_transfer)
        dataset = list(range(len(self.train_records))) if self.picks else self.train_records
        return DataLoader(dataset, batch_size=local, sampler=sampler, collate_fn=_as_list,
                          drop_last=self._drop_last())

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """A training step's records: the sampler's pick from the epoch shuffle's indices (``batch``)."""
        trainer = self.trainer
        if not self.picks or trainer is None or not trainer.training:
            return batch
        return self.pick(list(batch))

    def pick(self, proposed: list[int]) -> list[dict[str, Any]]:
        """The records of the next step: the sampler's pick for it from ``proposed`` (the epoch shuffle's indices)."""
        indices = self._checked(self.sampler.pick(self._draws, list(proposed)), len(proposed))
        self._picked = (self._draws, indices)
        self._draws += 1
        return [self.train_records[i] for i in indices]

    def _checked(self, indices: Any, size: int) -> list[int]:
        from rlkit.core.errors import PluginError

        out = [int(i) for i in indices]
        n = len(self.train_records)
        if len(out) != size or any(not 0 <= i < n for i in out) or len(set(out)) < min(size, n):
            raise PluginError(f"sampler {self.sampler_name!r} picked {out} for a batch of {size} of {n} training "
                              "prompts; pick returns that many distinct indices into the records")
        return out

    def observe(self, records: list[dict[str, Any]], raw_scores: Any, rubric: Any) -> dict[str, float]:
        """After a training step: its records' raw scores ``[B, G, D]`` to the sampler that picked them, and the
        sampler's metrics (``sampler/<name>``). Nothing for the epoch shuffle, or for records it did not pick."""
        if not self.picks or self._picked is None:
            return {}
        draw, indices = self._picked
        self._picked = None
        if [self.train_records[i] for i in indices] != list(records):
            from rlkit.core.errors import PluginError

            raise PluginError(f"step {draw} trained on other prompts than sampler {self.sampler_name!r} picked")
        self.sampler.observe(draw, indices, raw_scores, rubric)
        metrics = getattr(self.sampler, "metrics", None)
        return {f"sampler/{k}": float(v) for k, v in metrics().items()} if callable(metrics) else {}

    def state_dict(self) -> dict[str, Any]:
        """The picking sampler's state and how many steps it picked for (empty for the epoch shuffle, whose position
        is the module's ``data_position``)."""
        if not self.picks:
            return {}
        return {"sampler": self.sampler_name, "draws": self._draws, "state": self.sampler.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not state or not self.picks:
            return  # a run that trains on the epoch shuffle needs nothing of another sampler's
        if state.get("sampler") != self.sampler_name:
            from rlkit.core.errors import ConfigError

            raise ConfigError(f"the checkpoint's prompts were picked by sampler={state.get('sampler')}, this run "
                              f"uses sampler={self.sampler_name}; resume with the same sampler", "sampler")
        self._draws = int(state["draws"])
        self.sampler.load_state_dict(state["state"])

    def _sampler(self) -> EpochShuffleSampler:
        rank, world = self._place()
        return EpochShuffleSampler(len(self.train_records), self.seed, batch_size=self.batch_size // world,
                                   rank=rank, world_size=world)

    def _drop_last(self) -> bool:
        return len(self.train_records) >= self.batch_size

    def upcoming(self, epoch: int, samples_done: int, count: int) -> list[list[dict[str, Any]]]:
        """This process's prompts of the ``count`` steps after ``samples_done`` samples of ``epoch``: what
        ``train_dataloader`` will yield next, read ahead for rollouts requested before their step."""
        if self.picks and getattr(self.sampler, "adaptive", False):
            return []  # its picks wait for this step's scores: each step samples when it starts
        batches = self._sampler().batches_from(epoch, samples_done, count, drop_last=self._drop_last())
        if self.picks:  # picks that depend on the step alone; called during a step, whose pick is done
            batches = [self.sampler.pick(self._draws + k, batch) for k, batch in enumerate(batches)]
        return [[self.train_records[i] for i in batch] for batch in batches]

    def read(self, epoch: int, samples_done: int, count: int) -> tuple[list[dict[str, Any]], tuple[int, int]]:
        """``count`` prompts of the sampler's order from ``samples_done`` into ``epoch`` (every sample of each epoch,
        on into the next; one process) and the position after them: dynamic sampling draws its prompts here."""
        if self.picks:
            from rlkit.core.errors import ConfigError

            raise ConfigError(f"sampling.filter reads its prompts on in the epoch shuffle; sampler={self.sampler_name} "
                              "picks them itself: use one of the two", "sampler")
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


class SamplerFeedback(L.Callback):
    """After each training step (before the checkpoint of that step is written), its records' scores to the data
    module's prompt sampler (``PromptDataModule.observe``), and the sampler's metrics to the step's logs."""

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        observe = getattr(trainer.datamodule, "observe", None)
        snapshot = getattr(pl_module, "last_rollout", None)
        if not callable(observe) or snapshot is None:
            return
        metrics = observe(snapshot.records, snapshot.raw_scores, pl_module.scored_rubric)
        log = getattr(pl_module, "log_step_metrics", None)
        if metrics and callable(log):
            log(metrics)
