"""Per-dimension and across-dimension diagnostics of a reward batch: saturation, unique values,
dimension conflicts and advantage diversity. One implementation, used by the training metrics, the
weight schedulers, and later the preference constructors and monitors.

All functions take normalised scores ``[B, G, D]`` (NaN = not scored) and ignore NaN.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

    from rlkit.core.rubric import Rubric
    from rlkit.core.types import RewardBatch


def unique_counts(scores: torch.Tensor, decimals: int = 6) -> torch.Tensor:
    """``[B, D]``: the number of distinct non-NaN values of each dimension within each group."""
    import torch
    rounded = torch.round(scores, decimals=decimals)
    valid = ~torch.isnan(rounded)
    # NaN sorts last; a new value starts wherever a valid entry differs from the previous one
    ordered, _ = torch.sort(torch.where(valid, rounded, torch.full_like(rounded, float("inf"))), dim=1)
    n_valid = valid.sum(dim=1)
    position = torch.arange(scores.shape[1]).view(1, -1, 1)
    starts = torch.ones_like(ordered, dtype=torch.bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    return (starts & (position < n_valid.unsqueeze(1))).sum(dim=1)


def saturated_groups(scores: torch.Tensor, majority_share: float = 1.0, decimals: int = 6) -> torch.Tensor:
    """``bool [B, D]``: the dimension carries (almost) no signal within the group.

    A group is saturated in a dimension when its scored values are all equal (one unique value), or,
    with ``majority_share < 1``, when the most common value's share of the scored completions reaches
    ``majority_share``. The second form catches "one different, the rest identical", which a std
    threshold misses because one outlier keeps the std high. A group with nothing scored in the dimension
    is not saturated: it is unscored, which ``unscored_share`` reports (counting it here hid a judge that
    scored nothing behind a dimension that looked learnt).
    """
    import torch
    saturated = unique_counts(scores, decimals) == 1
    if majority_share >= 1.0:
        return saturated
    rounded = torch.round(scores, decimals=decimals)
    # how many scored completions share each one's value (NaN equals nothing), the largest per group and dimension
    same = (rounded.unsqueeze(2) == rounded.unsqueeze(1)).sum(dim=2)       # [B, G, D]
    scored = (~torch.isnan(rounded)).sum(dim=1)                              # [B, D]
    share = same.max(dim=1).values.double() / scored.clamp(min=1).double()  # float64, as a Python division
    return saturated | (share >= majority_share)


def unscored_share(scores: torch.Tensor) -> torch.Tensor:
    """``[D]``: the share of completions not scored on each dimension (NaN), over ``[B, G, D]``."""
    import torch
    return torch.isnan(scores).flatten(0, 1).double().mean(dim=0)


def one_differs_share(group_size: int) -> float:
    """The majority share of the multi-reward note's near-saturation, "one sample differs, the rest identical"
    (7 of 8): ``(G - 1) / G``; 1.0 (all equal) for groups of two or fewer, where one differing is all there is."""
    return (group_size - 1) / group_size if group_size > 2 else 1.0


def saturation_share(scores: torch.Tensor, majority_share: float = 1.0) -> torch.Tensor:
    """``[D]``: the share of groups saturated in each dimension (see :func:`saturated_groups`)."""
    # float64: 4 of 5 groups must compare equal to a threshold of 0.8, not 0.8000000119
    return saturated_groups(scores, majority_share).double().mean(dim=0)


def _pair_conflicts(scores: torch.Tensor) -> torch.Tensor:
    """``bool [B, P]``: for each of a group's P = G(G-1)/2 pairs, whether two dimensions order it oppositely."""
    import torch
    g = scores.shape[1]
    diff = scores.unsqueeze(2) - scores.unsqueeze(1)             # [B, G, G, D]: s_i - s_j
    sign = torch.nan_to_num(torch.sign(diff), nan=0.0)
    conflict = (sign > 0).any(dim=-1) & (sign < 0).any(dim=-1)  # [B, G, G]
    upper = torch.triu(torch.ones(g, g, dtype=torch.bool, device=scores.device), diagonal=1)
    return conflict[:, upper]


def conflict_rate(scores: torch.Tensor) -> float:
    """Share of completion pairs within a group that two dimensions order oppositely.

    Pair (i, j) conflicts when some dimension ranks i above j and another ranks j above i
    (NaN entries take no side). Returns NaN when the batch has no pair.
    """
    if scores.shape[1] < 2:
        return float("nan")
    return float(_pair_conflicts(scores).float().mean())


def group_conflict_rates(scores: torch.Tensor) -> torch.Tensor:
    """``float64 [B]``: :func:`conflict_rate` of each group alone, the multi-reward note's conflict counter per prompt
    (004 §4.3); NaN for groups of one. Every group has the same pairs, so their mean is the batch's rate."""
    import torch
    b, g, _ = scores.shape
    if g < 2:
        return torch.full((b,), float("nan"), dtype=torch.float64)
    return _pair_conflicts(scores).double().mean(dim=1).cpu()


def distinct_values_per_group(values: torch.Tensor, decimals: int = 5) -> torch.Tensor:
    """``[B]``: distinct values in each group of ``[B, G]`` (e.g. advantages), NaN left out."""
    import torch
    rounded = torch.round(values, decimals=decimals)
    return torch.tensor([torch.unique(row[~torch.isnan(row)]).numel() for row in rounded], dtype=torch.long)


class ConflictWatch:
    """Flags, once, when the dimension-conflict rate averaged over the last ``window`` steps passes
    ``threshold`` (defaults: 50 steps, 20%)."""

    def __init__(self, window: int = 50, threshold: float = 0.2) -> None:
        self.window, self.threshold = window, threshold
        self.recent: deque[float] = deque(maxlen=window)
        self.raised = False

    @property
    def mean(self) -> float:
        return sum(self.recent) / len(self.recent) if self.recent else float("nan")

    def update(self, rate: float) -> bool:
        """Record one step's rate; True the first time a full window's mean exceeds the threshold."""
        if not math.isnan(rate):
            self.recent.append(rate)
        if self.raised or len(self.recent) < self.window or self.mean <= self.threshold:
            return False
        self.raised = True
        return True


class RunningMeans:
    """Means of per-step float metrics over the whole run and over the last ``tail`` steps, for the
    end-of-run summary."""

    def __init__(self, tail: int = 10) -> None:
        self.sums: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.recent: dict[str, deque[float]] = {}
        self.tail = tail

    def update(self, metrics: dict[str, float]) -> None:
        for key, value in metrics.items():
            if math.isnan(value):
                continue
            self.sums[key] = self.sums.get(key, 0.0) + value
            self.counts[key] = self.counts.get(key, 0) + 1
            self.recent.setdefault(key, deque(maxlen=self.tail)).append(value)

    def mean(self, key: str) -> float:
        return self.sums[key] / self.counts[key] if self.counts.get(key) else float("nan")

    def last(self, key: str) -> float:
        values = self.recent.get(key)
        return sum(values) / len(values) if values else float("nan")


NO_SIGNAL_STEPS = 3  # steps in a row without a gradient from the rewards before a run is told it learns nothing


ALIKE_TOLERANCE = 1e-6  # a dimension's std over a step below this: every completion got the same score


class SignalWatch:
    """Says, at the step it starts, when a run trains on less than it seems to: a dimension that no completion of a
    step could be scored on (a weighted reward is then made of the other dimensions in silence), ``patience``
    steps in a row without a learning signal (every group's advantages zero, or no preference pair formed: the
    update moves nothing), and, once, a judge (``judge``: its config name) that gave every completion of a step the
    same score on every dimension (a model that is not a judge answers this way: every reply its lowest level).
    Counts each over the run for the end-of-run summary.

    It reads a step's metrics: ``rewards/<dimension>/unscored`` (share of completions not scored),
    ``rewards/<dimension>/mean`` and ``/std`` (over the step's completions), ``advantages/frac_zero_groups`` or
    ``pairs/used`` (a step without either, a demonstrations step, sampled nothing to tell apart).
    """

    def __init__(self, dimensions: list[str], patience: int = NO_SIGNAL_STEPS, judge: str | None = None) -> None:
        self.dimensions, self.patience, self.judge = list(dimensions), patience, judge
        self.steps = 0
        self.unscored_steps = dict.fromkeys(self.dimensions, 0)
        self.no_signal_steps = 0
        self.alike_steps = 0
        self._streak = 0
        self._unscored_now: set[str] = set()

    def _all_alike(self, metrics: dict[str, float]) -> dict[str, float] | None:
        """Each dimension's one score when the judge scored every completion of the step alike on all of them."""
        if "advantages/frac_zero_groups" not in metrics and "pairs/used" not in metrics:
            return None
        levels = {}
        for name in self.dimensions:
            mean, std = metrics.get(f"rewards/{name}/mean"), metrics.get(f"rewards/{name}/std")
            if mean is None or std is None or math.isnan(mean) or not std <= ALIKE_TOLERANCE:
                return None  # told completions apart, or scored none of them (said above)
            levels[name] = mean
        return levels or None

    def update(self, step: int, metrics: dict[str, float]) -> list[str]:
        """What this step starts, as messages to show the user (none in a healthy step)."""
        self.steps += 1
        messages = []
        alike = self._all_alike(metrics)
        if alike is not None:
            self.alike_steps += 1
            if self.alike_steps == 1:
                judge = f"judge={self.judge}" if self.judge else "the judge"
                scores = ", ".join(f"{name} {value:g}" for name, value in alike.items())
                messages.append(f"step {step}: {judge} gave every completion the same score on every dimension "
                                f"({scores}), so the rewards tell no completion from another; if it goes on, the "
                                "judge cannot tell them apart (check it on labelled completions: rlkit calibrate)")
        for name in self.dimensions:
            if metrics.get(f"rewards/{name}/unscored") == 1.0:
                self.unscored_steps[name] += 1
                if name not in self._unscored_now:
                    messages.append(f"step {step}: the judge scored dimension {name} on none of the step's "
                                    "completions; rewards are made of the other dimensions until it does")
                self._unscored_now.add(name)
            else:
                self._unscored_now.discard(name)
        if metrics.get("advantages/frac_zero_groups") == 1.0 or metrics.get("pairs/used") == 0.0:
            self.no_signal_steps += 1
            self._streak += 1
            if self._streak == self.patience:
                messages.append(f"steps {step - self.patience + 1}-{step}: no learning signal: in {self.patience} "
                                "steps in a row every group's completions scored alike (advantages all zero, or no "
                                "preference pair), so the rewards train nothing; see rewards/*/saturated_groups")
        else:
            self._streak = 0
        return messages

    def summary_lines(self) -> list[str]:
        """The run's totals, one line each, for what is wrong; none for a run with a signal throughout."""
        lines = []
        if self.no_signal_steps:
            whole = " (the rewards trained nothing)" if self.no_signal_steps == self.steps else ""
            lines.append(f"no learning signal in {self.no_signal_steps} of {self.steps} steps{whole}: every group's "
                         "completions scored alike")
        lines += [f"dimension {name} was scored on no completion in {n} of {self.steps} steps"
                  for name, n in self.unscored_steps.items() if n]
        if self.alike_steps:
            judge = f"judge={self.judge}" if self.judge else "the judge"
            lines.append(f"{judge} gave every completion the same score on every dimension in {self.alike_steps} of "
                         f"{self.steps} steps")
        return lines


def reward_step_metrics(batch: RewardBatch, rubric: Rubric, lengths: torch.Tensor,
                        truncated: torch.Tensor) -> dict[str, float]:
    """Reward, per-dimension and conflict statistics of one step over the global batch (all floats);
    ``lengths`` and ``truncated`` are every completion's token count and truncation flag."""
    import torch

    from rlkit.core.stats import nan_mean_std

    rewards = batch.rewards
    assert rewards is not None
    mean, std, _ = nan_mean_std(rewards.reshape(-1), dim=0)
    _, group_std, group_n = nan_mean_std(rewards, dim=1)
    conflicts = conflict_rate(batch.scores)
    scored = rewards[~torch.isnan(rewards)]  # min/max beside mean/std, as the ranking note's first check reads them
    out = {
        "reward/mean": float(mean), "reward/std": float(std),
        "reward/min": float(scored.min()) if scored.numel() else float("nan"),
        "reward/max": float(scored.max()) if scored.numel() else float("nan"),
        "frac_zero_std_groups": float(((group_std == 0) | (group_n < 2)).float().mean()),
        "unscored_completions": float(torch.isnan(rewards).sum()),
        "dimension_conflict_rate": conflicts,
        "completion_length": float(lengths.mean()),
        "frac_truncated": float(truncated.mean()),
    }
    unique = unique_counts(batch.scores).float().mean(dim=0)
    saturated = saturated_groups(batch.scores).float().mean(dim=0)
    # the multi-reward note's near-saturation, "one differs, the rest identical" (majority share (G-1)/G)
    near = saturated_groups(batch.scores, one_differs_share(batch.scores.shape[1])).float().mean(dim=0)
    unscored = unscored_share(batch.raw_scores)
    for i, name in enumerate(rubric.dimension_names):
        d_mean, d_std, _ = nan_mean_std(batch.raw_scores[..., i].reshape(-1), dim=0)
        out[f"rewards/{name}/mean"] = float(d_mean)
        out[f"rewards/{name}/std"] = float(d_std)
        out[f"rewards/{name}/unique_per_group"] = float(unique[i])
        out[f"rewards/{name}/saturated_groups"] = float(saturated[i])
        out[f"rewards/{name}/near_saturated_groups"] = float(near[i])
        out[f"rewards/{name}/unscored"] = float(unscored[i])
        out[f"weights/{name}"] = float(batch.weights[i])
    steps = batch.extras.get("step_raw_scores")
    if steps is not None:  # each step-scoped dimension's mean score at each turn
        for i in rubric.step_dimensions:
            name = rubric.dimensions[i].name
            for t in range(steps.shape[2]):
                column = steps[:, :, t, i]
                if (~torch.isnan(column)).any():
                    out[f"steps/{name}/turn_{t + 1}"] = float(nan_mean_std(column.reshape(-1), dim=0)[0])
    return out
