"""``lexicographic``: rank completions within their group by dimensions in priority order."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import ConfigError, PreferencePairs, RewardBatch, Rubric, hookimpl

if TYPE_CHECKING:
    import torch

# Float32 scores differ from their decimal spelling by ~1e-7, so a gap of exactly ``tolerance``
# (0.6 - 0.5 against 0.1) would otherwise fall either side of it by chance. Only added when the
# tolerance is positive: tolerance 0 must stay exact equality.
_TOLERANCE_SLACK = 1e-6


def priority_order(rubric: Rubric) -> list[int]:
    """Dimension indices, most important first: ``priority`` ascending (1 before 2), then the
    dimensions without a priority; equal priorities keep rubric order."""
    dims = rubric.dimensions
    return sorted(range(len(dims)), key=lambda i: (dims[i].priority is None, dims[i].priority or 0, i))


def lexicographic_keys(values: Sequence[Sequence[float]], tolerances: Sequence[float]) -> list[tuple[int, ...]]:
    """One sort key per row (lower = better) that orders rows lexicographically, level by level.

    ``values[row][level]`` (NaN = not scored). At each level, the rows that tied on every earlier
    level are split into tiers: the best value left opens a tier that takes every value within
    ``tolerances[level]`` below it, the next value outside opens the next tier, and NaN rows form a
    last tier of their own (worse than any score). Anchoring tiers on their best value keeps "equal"
    transitive; a plain pairwise |a - b| <= tol rule is not, and can rank in cycles (Tversky 1969,
    "Intransitivity of preferences", the lexicographic semiorder).
    """
    rows = len(values)
    keys: list[list[int]] = [[] for _ in range(rows)]
    classes = [list(range(rows))]
    for level, tol in enumerate(tolerances):
        slack = tol + _TOLERANCE_SLACK if tol > 0 else 0.0
        split: list[list[int]] = []
        for members in classes:
            scored = sorted((m for m in members if not math.isnan(values[m][level])),
                            key=lambda m: -values[m][level])
            tiers: list[list[int]] = []
            for m in scored:
                if tiers and values[tiers[-1][0]][level] - values[m][level] <= slack:
                    tiers[-1].append(m)
                else:
                    tiers.append([m])
            unscored = [m for m in members if math.isnan(values[m][level])]
            if unscored:
                tiers.append(unscored)
            for t, tier in enumerate(tiers):
                for m in tier:
                    keys[m].append(t)
            split.extend(tiers)
        classes = split
    return [tuple(k) for k in keys]


def win_rate(keys: Sequence[tuple[int, ...]]) -> list[float]:
    """The share of the other rows each row beats (lower key), a tie counting half; 0.5 for a lone row.

    This is the normalised mid-rank: 1 for a unique best, 0 for a unique worst, 0.5 for a group
    where all tie; it is strictly monotone in the order of ``keys``.
    """
    n = len(keys)
    if n < 2:
        return [0.5] * n
    return [(sum(k < other for other in keys) + 0.5 * (sum(k == other for other in keys) - 1)) / (n - 1)
            for k in keys]


class LexicographicAggregator:
    """The reward orders each group exactly as a lexicographic comparison of the dimensions does.

    Levels are the dimensions in ``priority`` order (lower number = more important; dimensions
    without ``priority`` come after, in rubric order). A later level only breaks ties left by the
    earlier ones; two values within ``tolerance`` (normalised units, per dimension if a mapping)
    count as tied (tiers anchored on the best value, see ``lexicographic_keys``); NaN is worse than
    any score at its level. Dimensions whose current weight is 0 are left out; otherwise the
    weights are not used. The reward is the completion's win rate in its group (ties count half):
    1 = unique best, 0 = unique worst, 0.5 where all tie or the completion is alone. A completion
    with no counted dimension scored gets NaN and is left out of its group's ranking. With
    tolerance 0 the reward depends only on the order of each dimension's scores, so it is unchanged
    by any strictly increasing transform of a dimension. A pair it orders is as far apart as the level that
    decided it says (:meth:`pair_gaps`): what ``group_dpo``'s ``min_gap`` compares.
    """

    group_relative = True  # a win rate within the group: held-out rewards use heldout_aggregator instead

    @dataclass
    class Params:
        tolerance: float | dict[str, float] = 0.0
        """Values this close (normalised units) tie at a level; a mapping sets it per dimension name
        (dimensions not named get 0)."""

    def __init__(self, params: Params) -> None:
        tol = params.tolerance
        items = tol.items() if isinstance(tol, dict) else [(None, tol)]
        for name, value in items:
            if not (math.isfinite(value) and 0 <= value <= 1):
                what = f"tolerance for {name!r}" if name is not None else "tolerance"
                raise ConfigError(f"{what} must lie in [0, 1], got {value:g}", "aggregator.params.tolerance")
        self.params = params
        # A positive tolerance compares score differences, which a non-affine transform changes.
        self.order_invariant = all(value == 0 for _, value in items)  # rlkit.testing.properties checks it

    def check_rubric(self, rubric: Rubric) -> None:
        tol = self.params.tolerance
        if isinstance(tol, dict):
            unknown = sorted(set(tol) - set(rubric.dimension_names))
            if unknown:
                raise ConfigError(f"tolerance names unknown dimension(s) {', '.join(map(repr, unknown))}; "
                                  f"dimensions: {', '.join(rubric.dimension_names)}", "aggregator.params.tolerance")

    def _tolerances(self, rubric: Rubric, levels: Sequence[int]) -> list[float]:
        tol = self.params.tolerance
        if isinstance(tol, dict):
            self.check_rubric(rubric)
            return [float(tol.get(rubric.dimensions[i].name, 0.0)) for i in levels]
        return [float(tol)] * len(levels)

    def _keys(self, batch: RewardBatch) -> tuple[torch.Tensor, list[dict[int, tuple[int, ...]]]]:
        """The counted levels' scores ``[B, G, L]`` (on the CPU) and, per group, each counted completion's sort key
        (a completion with no counted dimension scored has none)."""
        import torch
        weights = batch.weights.tolist()
        levels = [i for i in priority_order(batch.rubric) if weights[i] > 0]
        tolerances = self._tolerances(batch.rubric, levels)
        scores = batch.scores[..., levels].detach().cpu()
        counted = ~torch.isnan(scores).all(dim=-1)
        keys = []
        for b in range(scores.shape[0]):
            rows = counted[b].nonzero().flatten().tolist()
            keys.append(dict(zip(rows, lexicographic_keys(scores[b, rows].tolist(), tolerances), strict=True)))
        return scores, keys

    def aggregate(self, batch: RewardBatch) -> torch.Tensor:
        import torch
        scores, keys = self._keys(batch)
        rewards = torch.full(scores.shape[:2], float("nan"), dtype=torch.float32)
        for b, group in enumerate(keys):
            rewards[b, list(group)] = torch.tensor(win_rate(list(group.values())), dtype=torch.float32)
        return rewards.to(batch.scores.device)

    def pair_gaps(self, batch: RewardBatch, pairs: PreferencePairs) -> torch.Tensor:
        """``[P]``: the gap (normalised) on the level that ordered each pair, the first at which its two completions
        fall in different tiers (beyond the tolerance), not a weighted sum the order never looked at. A NaN there
        counts as 0, the bottom of the range (the order ranks it below any score); 0 where no level separates them.
        ``group_dpo``'s ``min_gap`` compares it."""
        import torch
        scores, keys = self._keys(batch)
        gaps = torch.zeros(len(pairs), dtype=torch.float32)
        triples = zip(pairs.prompt_index.tolist(), pairs.chosen.tolist(), pairs.rejected.tolist(), strict=True)
        for p, (b, chosen, rejected) in enumerate(triples):
            first, second = keys[b].get(chosen), keys[b].get(rejected)
            if first is None or second is None:
                continue
            level = next((k for k, (x, y) in enumerate(zip(first, second, strict=True)) if x != y), None)
            if level is not None:
                values = scores[b, [chosen, rejected], level].nan_to_num(nan=0.0)
                gaps[p] = (values[0] - values[1]).abs()
        return gaps.to(batch.scores.device)


@hookimpl
def rlkit_register_aggregators(register):
    register("lexicographic", LexicographicAggregator)
