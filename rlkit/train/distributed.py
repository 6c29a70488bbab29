"""What the loop needs from a multi-process run (``trainer=ddp``): each process holds whole groups, and the
step's batch-level arithmetic runs on the gathered global batch so it matches a single-process run.

Every helper is the identity when no process group is initialised, so single-process code paths are the
same calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Spread:
    """This process's place in the run: ``rank`` of ``world_size``, holding ``local_rows`` prompts a step."""

    rank: int = 0
    world_size: int = 1

    @classmethod
    def current(cls) -> Spread:
        if dist.is_available() and dist.is_initialized():
            return cls(dist.get_rank(), dist.get_world_size())
        return cls()

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def gather(self, local: torch.Tensor, device: torch.device | None = None) -> torch.Tensor:
        """Every process's ``local`` (same shape everywhere) concatenated along dim 0 in rank order, on the
        device ``local`` came from. ``device`` is where the collective runs (the accelerator under NCCL)."""
        if not self.distributed:
            return local
        moved = local.to(device) if device is not None else local
        parts = [torch.empty_like(moved) for _ in range(self.world_size)]
        dist.all_gather(parts, moved.contiguous())
        return torch.cat(parts).to(local.device)

    def local(self, global_rows: torch.Tensor) -> torch.Tensor:
        """This process's rows of a tensor gathered by :meth:`gather` (dim 0 split into equal rank blocks)."""
        if not self.distributed:
            return global_rows
        size = global_rows.shape[0] // self.world_size
        return global_rows[self.rank * size:(self.rank + 1) * size]

    def sum(self, value: float | torch.Tensor, device: torch.device | None = None) -> float:
        """The sum of ``value`` over processes."""
        if not self.distributed:
            return float(value)
        t = torch.as_tensor(value, dtype=torch.float64, device=device).clone()
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return float(t)

    def sum_all(self, values: dict[str, float | torch.Tensor], device: torch.device | None = None,
                ) -> dict[str, float]:
        """Each value summed over processes, in one collective."""
        if not self.distributed:
            return {k: float(v) for k, v in values.items()}
        # A process with nothing to report for a key (no preference pairs this step) adds 0 to it.
        key_lists: list[list[str]] = [[] for _ in range(self.world_size)]
        dist.all_gather_object(key_lists, sorted(values))
        keys = sorted({k for keys in key_lists for k in keys})
        t = torch.tensor([float(values.get(k, 0.0)) for k in keys], dtype=torch.float64, device=device)
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        return dict(zip(keys, t.tolist(), strict=True))

    def gather_objects(self, obj: object) -> list[object]:
        """Every process's ``obj`` (picklable), in rank order."""
        if not self.distributed:
            return [obj]
        out: list[object] = [None] * self.world_size
        dist.all_gather_object(out, obj)
        return out
