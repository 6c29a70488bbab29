"""Dynamic sampling (DAPO, arXiv 2503.14476, §3.2): groups that teach nothing are dropped and replaced by groups of
more prompts, and the reward of completions cut at the length limit follows a chosen policy.

A group whose completions all get the same reward, and the same score in every weighted dimension, has zero advantage
under every group-relative estimator: its generation and judge calls are wasted. With ``filter: zero_spread`` such
groups are dropped (a group whose totals tie but whose dimensions differ is kept: GDPO learns from it); ``mean_range``
keeps groups whose mean reward lies in ``[lo, hi]`` (drop the always-solved and the never-solved). The step then samples
more prompts, read on in the data sampler's order, until it holds ``batch_size`` informative groups or ``max_rounds``
extra rounds are spent (veRL's and OpenRLHF's ``max_num_gen_batches``); short of that it trains on the informative
groups it has and reports it (``sampling/informative_frac`` < 1), which is not an error. An extra round draws as many
prompts as the step's informative rate so far says the missing groups take, at most a batch: veRL draws whole batches,
which on a task where most groups are informative doubles the generations to replace one group.

A filtering step reads its prompts itself, from its own position in the sampler's order (every sample of each epoch,
on into the next), so the checkpointed position counts every prompt drawn; the loader still paces the steps.

Everything here but :func:`informative_rollout` (the loop of rounds, which samples and judges through the functions
and the reward pipeline it is handed) is a pure function of tensors.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from rlkit.core.errors import ConfigError
from rlkit.core.stats import nan_mean_std
from rlkit.lm.sampling import SampledBatch
from rlkit.train.distributed import Spread

Filter = Literal["none", "zero_spread", "mean_range"]
TruncatedPolicy = Literal["keep", "value", "mask"]


@dataclass(frozen=True)
class SamplingSettings:
    """The ``sampling`` block, as the loop reads it (defaults and constraints live in ``rlkit.config.schemas``)."""

    filter: Filter = "none"
    tol: float = 1e-6
    lo: float = 0.0
    hi: float = 1.0
    max_rounds: int = 3
    truncated: TruncatedPolicy = "keep"
    truncated_value: float = 0.0

    @property
    def filters(self) -> bool:
        return self.filter != "none"


def spread_exceeds(values: torch.Tensor, tol: float) -> torch.Tensor:
    """``values [B, G, ...]`` (NaN = unscored) → ``bool [B, ...]``: at least two scored values in the group, and
    their max minus min above ``tol``."""
    valid = ~torch.isnan(values)
    hi = torch.where(valid, values, torch.full_like(values, -torch.inf)).amax(dim=1)
    lo = torch.where(valid, values, torch.full_like(values, torch.inf)).amin(dim=1)
    return (valid.sum(dim=1) >= 2) & (hi - lo > tol)


def informative_groups(rewards: torch.Tensor, settings: SamplingSettings,
                       components: torch.Tensor | None = None) -> torch.Tensor:
    """``rewards [B, G]`` (NaN = unscored) → ``bool [B]``: the groups the filter keeps (all of them for ``none``).

    ``zero_spread`` keeps a group whose rewards differ by more than ``tol``, or where any of ``components``
    (``[B, G, D]``, the weighted dimensions' normalised scores) does: GDPO normalises each dimension within its group,
    so completions whose totals tie can still get non-zero advantages (three binary dimensions, (1, 1, 0) twice beside
    (1, 0, 1) and (0, 1, 1)). Looking at the total alone dropped exactly the groups GDPO exists for (SkyRL PR #2104's
    review found its own filter had this shape). ``tol`` keeps float noise in a judge's scores from counting as
    signal (SkyRL's ``zero_variance_filter_tol``)."""
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [B, G], got {tuple(rewards.shape)}")
    if components is not None and (components.ndim != 3 or components.shape[:2] != rewards.shape):
        raise ValueError(f"components must be [B, G, D] with [B, G] = {list(rewards.shape)}, "
                         f"got {list(components.shape)}")
    if settings.filter == "none":
        return torch.ones(rewards.shape[0], dtype=torch.bool)
    if settings.filter == "zero_spread":
        keep = spread_exceeds(rewards, settings.tol)
        if components is not None and components.shape[2]:
            # a completion without a reward (masked when cut at the limit) carries no component either
            masked = torch.where(torch.isnan(rewards).unsqueeze(-1), torch.full_like(components, torch.nan), components)
            keep = keep | spread_exceeds(masked, settings.tol).any(dim=1)
        return keep
    if settings.filter == "mean_range":
        mean, _, n = nan_mean_std(rewards, dim=1)
        return (n.reshape(-1) >= 1) & (mean >= settings.lo) & (mean <= settings.hi)
    raise ValueError(f"filter must be none, zero_spread or mean_range, got {settings.filter!r}")


def shape_truncated(rewards: torch.Tensor, truncated: torch.Tensor, policy: TruncatedPolicy,
                    value: float = 0.0) -> torch.Tensor:
    """The reward of completions cut at the length limit (``truncated``: ``bool [B, G]``): ``keep`` the judge's,
    replace it by ``value``, or ``mask`` it (NaN: no reward, so the estimator gives advantage 0 and leaves it out of
    its group's statistics, and the completion does not train the policy). A cut completion's answer is often
    just missing, so its judged reward says more about the limit than about the policy (DAPO §3.4)."""
    if truncated.shape != rewards.shape:
        raise ValueError(f"truncated must be {list(rewards.shape)}, got {list(truncated.shape)}")
    if policy == "keep":
        return rewards
    if policy == "value":
        return torch.where(truncated, torch.full_like(rewards, value), rewards)
    if policy == "mask":
        return torch.where(truncated, torch.full_like(rewards, torch.nan), rewards)
    raise ValueError(f"truncated must be keep, value or mask, got {policy!r}")


def group_rows(groups: torch.Tensor, group_size: int) -> torch.Tensor:
    """The flat ``[B*G]`` row indices of the groups ``groups`` (``int64 [K]``), group after group."""
    return (groups.reshape(-1, 1) * group_size + torch.arange(group_size)).reshape(-1)


def select_groups(sampled: SampledBatch, groups: torch.Tensor) -> SampledBatch:
    """The groups ``groups`` (``int64 [K]``, indices into the batch) of a sampled batch, texts included."""
    group_size = len(sampled.texts[0]) if sampled.texts else 1
    rows = group_rows(groups, group_size).to(sampled.input_ids.device)
    picked = sampled.rows(rows)
    picked.texts = [sampled.texts[int(i)] for i in groups]
    return picked


def concat_sampled(parts: list[SampledBatch], pad_id: int) -> SampledBatch:
    """Sampled batches of one step joined row-wise: prompts left-padded and completions right-padded to the widest
    (the log-prob pass cuts columns that are padding in every row, and rotary positions do not see the shift)."""
    if len(parts) == 1:
        return parts[0]
    p = max(b.prompt_length for b in parts)
    c = max(b.completion_mask.shape[1] for b in parts)
    ids, attention, completion, engine = [], [], [], []
    for b in parts:
        left, right = p - b.prompt_length, c - b.completion_mask.shape[1]
        ids.append(torch.nn.functional.pad(b.input_ids, (left, right), value=pad_id))
        attention.append(torch.nn.functional.pad(b.attention_mask, (left, right), value=0))
        completion.append(torch.nn.functional.pad(b.completion_mask, (0, right), value=0))
        if b.engine_logprobs is not None:
            engine.append(torch.nn.functional.pad(b.engine_logprobs, (0, right), value=0.0))
    if engine and len(engine) != len(parts):
        raise ValueError("every round of a step must come from the same generator (engine log-probs in some only)")
    first = parts[0]
    return SampledBatch(torch.cat(ids), torch.cat(attention), torch.cat(completion), p,
                        [group for b in parts for group in b.texts], torch.cat([b.truncated for b in parts]),
                        torch.cat(engine) if engine else None, first.policy_version, first.policy_lag)


def take(order: Callable[[int], Sequence[int]], position: tuple[int, int],
         count: int) -> tuple[list[int], tuple[int, int]]:
    """The next ``count`` sample indices of an epoch-by-epoch order (``order(epoch)``, every sample of each epoch) from
    ``position = (epoch, samples done)``, and the position after them."""
    epoch, done = position
    out: list[int] = []
    while len(out) < count:
        current = order(epoch)
        if done >= len(current):
            if not current:
                raise ValueError("an empty epoch: no prompts to read")
            epoch, done = epoch + 1, 0
            continue
        piece = current[done:done + count - len(out)]
        out.extend(piece)
        done += len(piece)
    return out, (epoch, done)


def extra_round_size(missing: int, kept: int, drawn: int, batch_size: int) -> int:
    """Prompts to draw for ``missing`` informative groups: as many as the step's informative rate so far says it takes
    (all ``batch_size`` while nothing was informative), at most a batch. Drawing a whole batch per round when one group
    is missing costs a batch of generations for one group."""
    if kept == 0:
        return batch_size
    return max(1, min(batch_size, math.ceil(missing * drawn / kept)))


@dataclass
class SamplingRound:
    """One round of a step: its prompts, what was sampled and judged for them, and which groups the filter keeps."""

    records: list[dict[str, Any]]
    sampled: SampledBatch
    judged: Any  # rlkit.train.step_rewards.Judged: the judge's raw scores with what aggregation needs
    keep: torch.Tensor  # bool [B]


def pick_informative(rounds: list[SamplingRound], wanted: int) -> list[tuple[int, torch.Tensor]]:
    """``(round, group indices)`` of the first ``wanted`` informative groups, in the order they were sampled; when
    no round has one, the first round's every group (the step then trains as it would without the filter)."""
    picked, left = [], wanted
    for i, r in enumerate(rounds):
        groups = r.keep.nonzero().reshape(-1)[:left]
        if len(groups):
            picked.append((i, groups))
            left -= len(groups)
        if left <= 0:
            break
    return picked or [(0, torch.arange(len(rounds[0].records)))]


def sampling_metrics(rounds: list[SamplingRound], wanted: int) -> dict[str, float]:
    """``sampling/groups_dropped`` (groups the filter dropped, every round), ``sampling/extra_rounds``,
    ``sampling/extra_prompts`` (prompts the extra rounds drew) and ``sampling/informative_frac`` (informative groups
    trained on over the step's batch)."""
    kept = sum(int(r.keep.sum()) for r in rounds)
    total = sum(len(r.keep) for r in rounds)
    return {"sampling/groups_dropped": float(total - kept), "sampling/extra_rounds": float(len(rounds) - 1),
            "sampling/extra_prompts": float(total - len(rounds[0].keep)),
            "sampling/informative_frac": min(kept, wanted) / wanted}


def informative_rollout(step: int, wanted: int, *, data: Any, position: Any, rewards: Any,
                        rollout: Callable[[list[dict[str, Any]], tuple[int, int]], SampledBatch],
                        sample_more: Callable[[list[dict[str, Any]], int], SampledBatch],
                        pad_id: int, device: torch.device | None = None,
                        ) -> tuple[list[dict[str, Any]], SampledBatch, Any, dict[str, float]]:
    """Dynamic sampling's step: ``wanted`` prompts read from ``data`` (the run's data module, which reads its order
    ahead) at the sampling position (``position``: the run's
    ``rlkit.train.run_position.RunPosition``), then more while fewer than ``wanted`` groups are informative and
    ``max_rounds`` allows. ``rollout(records, ahead_from)`` samples the first round (requested ahead where the
    generator does); ``sample_more(records, first_row)`` an extra round, never requested ahead (which prompts a step
    adds is known only now); ``rewards``: the run's ``rlkit.train.step_rewards.RewardPipeline``. Returns the prompts,
    completions and judged scores of the informative groups kept, and the ``sampling/`` metrics."""
    settings = rewards.settings.sampling
    if not callable(getattr(data, "read", None)):
        raise ConfigError("filtering groups needs a data module that reads its order ahead (rlkit's own)",
                          "sampling.filter")
    spread = Spread.current()
    at = position.next_sampling
    rounds: list[SamplingRound] = []
    drawn = kept = 0
    while True:
        count = wanted if not rounds else extra_round_size(wanted - kept, kept, drawn, wanted)
        records, at = data.read(*at, count)
        sampled = rollout(records, at) if not rounds else sample_more(records, drawn)
        judged = rewards.judge(records, sampled, step, device)
        # The filter sees rewards from copies of the stateful parts; the kept groups' batch advances them once.
        truncated = spread.gather(sampled.truncated.float(), device)
        batch = rewards.batch(judged, step, copy.deepcopy(rewards.parts.scheduler),
                              debias=copy.deepcopy(rewards.parts.debias), truncated=truncated)
        weighted = batch.scores[..., batch.weights != 0]  # a dimension of weight 0 moves no advantage
        rounds.append(SamplingRound(records, sampled, judged,
                                    informative_groups(batch.rewards.cpu(), settings, weighted.cpu())))
        drawn, kept = drawn + len(records), kept + int(rounds[-1].keep.sum())
        if kept >= wanted or len(rounds) > settings.max_rounds:
            break
    position.sampling = at
    picked = pick_informative(rounds, wanted)
    sampled = concat_sampled([select_groups(rounds[i].sampled, groups) for i, groups in picked], pad_id)
    judged = type(rounds[0].judged).cat([rounds[i].judged.groups(groups) for i, groups in picked])
    records = [rounds[i].records[int(g)] for i, groups in picked for g in groups]
    return records, sampled, judged, sampling_metrics(rounds, wanted)
