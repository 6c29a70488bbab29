"""Per-dimension and across-dimension diagnostics of a reward batch: saturation, unique values,
dimension conflicts and advantage diversity. One implementation, used by the training metrics, the
weight schedulers, and later the preference constructors and monitors.

All functions take normalised scores ``[B, G, D]`` (NaN = not scored) and ignore NaN.
"""

from __future__ import annotations

import torch


def unique_counts(scores: torch.Tensor, decimals: int = 6) -> torch.Tensor:
    """``[B, D]``: the number of distinct non-NaN values of each dimension within each group."""
    b, _, d = scores.shape
    rounded = torch.round(scores, decimals=decimals)
    out = torch.zeros(b, d, dtype=torch.long)
    for i in range(b):
        for j in range(d):
            col = rounded[i, :, j]
            out[i, j] = torch.unique(col[~torch.isnan(col)]).numel()
    return out


def saturated_groups(scores: torch.Tensor, majority_share: float = 1.0, decimals: int = 6) -> torch.Tensor:
    """``bool [B, D]``: the dimension carries (almost) no signal within the group.

    A group is saturated in a dimension when its scored values are all equal (one unique value, or
    none scored), or, with ``majority_share < 1``, when the most common value's share of the scored
    completions reaches ``majority_share``. The second form catches "one different, the rest
    identical", which a std threshold misses because one outlier keeps the std high.
    """
    b, _, d = scores.shape
    rounded = torch.round(scores, decimals=decimals)
    out = torch.zeros(b, d, dtype=torch.bool)
    for i in range(b):
        for j in range(d):
            col = rounded[i, :, j]
            col = col[~torch.isnan(col)]
            if col.numel() <= 1:
                out[i, j] = True
                continue
            _, counts = torch.unique(col, return_counts=True)
            out[i, j] = counts.numel() == 1 or float(counts.max()) / col.numel() >= majority_share
    return out


def saturation_share(scores: torch.Tensor, majority_share: float = 1.0) -> torch.Tensor:
    """``[D]``: the share of groups saturated in each dimension (see :func:`saturated_groups`)."""
    return saturated_groups(scores, majority_share).float().mean(dim=0)


def conflict_rate(scores: torch.Tensor) -> float:
    """Share of completion pairs within a group that two dimensions order oppositely.

    Pair (i, j) conflicts when some dimension ranks i above j and another ranks j above i
    (NaN entries take no side). Returns NaN when the batch has no pair.
    """
    b, g, _ = scores.shape
    if g < 2:
        return float("nan")
    diff = scores.unsqueeze(2) - scores.unsqueeze(1)             # [B, G, G, D]: s_i - s_j
    sign = torch.nan_to_num(torch.sign(diff), nan=0.0)
    conflict = (sign > 0).any(dim=-1) & (sign < 0).any(dim=-1)  # [B, G, G]
    upper = torch.triu(torch.ones(g, g, dtype=torch.bool), diagonal=1)
    return float(conflict[:, upper].float().mean())


def distinct_values_per_group(values: torch.Tensor, decimals: int = 5) -> torch.Tensor:
    """``[B]``: distinct values in each group of ``[B, G]`` (e.g. advantages), NaN left out."""
    rounded = torch.round(values, decimals=decimals)
    return torch.tensor([torch.unique(row[~torch.isnan(row)]).numel() for row in rounded], dtype=torch.long)
