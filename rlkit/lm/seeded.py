"""Sampling whose noise is a function of a seed alone: each completion is drawn by the Gumbel-max trick from noise
that is a hash of its record's seed, its position in the group and the decoding step. A record's completions then
depend on its seed only, not on the other prompts in the batch, how many processes share the batch, or (in an
inference server) which other requests were decoded beside it. The ``hf`` generator (``per_prompt_seed``) and
``rlkit.testing.openai_server`` both draw this way."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

MASK32 = 0xFFFFFFFF


def mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash on int64 tensors holding values in [0, 2^32) (the ``lowbias32`` constants of
    Chris Wellons' hash-prospector). Products may pass 2^63 and wrap; the low 32 bits kept are still exact."""
    x = x & MASK32
    x = x ^ (x >> 16)
    x = (x * 0x7FEB352D) & MASK32
    x = x ^ (x >> 15)
    x = (x * 0x846CA68B) & MASK32
    return x ^ (x >> 16)


def group_row_seeds(seeds: list[int], group: int) -> torch.Tensor:
    """One noise seed per completion: ``group`` consecutive rows per record seed (``int64 [len(seeds) * group]``)."""
    import torch
    base = torch.tensor([int(s) & MASK32 for s in seeds], dtype=torch.int64)
    return mix32(base.repeat_interleave(group) * group + torch.arange(group).repeat(len(seeds)))


def seeded_gumbel(row_seeds: torch.Tensor, step: int, vocab_size: int, device: torch.device) -> torch.Tensor:
    """Standard Gumbel noise ``[N, V]``: entry (n, v) is a function of ``row_seeds[n]``, ``step`` and v only."""
    import torch
    base = mix32(mix32(row_seeds.to(device)) ^ step)
    idx = torch.arange(vocab_size, device=device, dtype=torch.int64)
    bits = mix32(base.unsqueeze(1) ^ mix32(idx + 0x9E3779B9).unsqueeze(0))
    u = (bits.to(torch.float64) + 0.5) / 2.0**32  # in (0, 1), never 0 or 1
    return -torch.log(-torch.log(u)).to(torch.float32)


class SeededSampling:
    """A logits processor that turns greedy decoding into sampling at ``temperature``: argmax of
    logits / T + Gumbel noise is a draw from softmax(logits / T) (the Gumbel-max trick)."""

    def __init__(self, row_seeds: torch.Tensor, prompt_length: int, temperature: float) -> None:
        self.row_seeds = row_seeds
        self.prompt_length = prompt_length
        self.temperature = temperature

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        step = input_ids.shape[1] - self.prompt_length
        noise = seeded_gumbel(self.row_seeds, step, scores.shape[-1], scores.device)
        return scores.float() / self.temperature + noise
