"""A synthetic preference dataset whose true order is computable: groups of answers to the default task
(``a+b=``), ranked on the shipped arithmetic rubric by a judge, weights and an aggregator the caller hands in
(``rlkit train-grm`` takes them from ``grm.data.ranked_by``: the rule judge and a weighted sum).

It is what ``rlkit train-grm`` trains on when no data is given, and the yardstick of the GRM demonstration
(``benchmarks/grm_demo.py``): a GRM that learnt the rubric orders these groups as the rubric does.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class SyntheticRanker:
    """What orders a synthetic group: a judge's raw scores on the rubric, weighted and aggregated."""

    judge: Any
    aggregator: Any
    scheduler: Any


def competition_ranks(rewards: list[float]) -> list[int]:
    """Rank 1 = best; equal rewards share the best rank of their tie (1, 2, 2, 4)."""
    return [1 + sum(other > r for other in rewards) for r in rewards]


def synthetic_preferences(num_records: int, ranker: SyntheticRanker, seed: int = 0,
                          group_size: tuple[int, int] = (3, 6), operands: tuple[int, int] = (0, 20),
                          near_miss: float = 0.5) -> list[dict[str, Any]]:
    """Listwise records ``{prompt, reference, domain, responses: [{text, rank}]}`` ranked by ``ranker``.

    Answers come from the default task's mix, or with probability ``near_miss`` from :func:`near_miss_answer`.
    Each record's answers are distinct; a record whose answers all tie is skipped (it teaches no order).
    ``domain`` is ``one-digit`` when both operands are below 10, else ``two-digit``.
    """
    from rlkit.core.types import Rollout
    from rlkit.judging.tiny_judge import default_task_answer, near_miss_answer, shipped_rubric
    from rlkit.lm.models import TinyPolicySpec
    from rlkit.reward.pipeline import aggregate_rewards

    rubric = shipped_rubric("arithmetic")
    rng = random.Random(seed)
    alphabet = "".join(c for c in TinyPolicySpec().alphabet if c != "\n")
    out: list[dict[str, Any]] = []
    while len(out) < num_records:
        a, b = rng.randint(*operands), rng.randint(*operands)
        size = rng.randint(*group_size)
        texts: list[str] = []
        for _ in range(size * 4):  # distinct answers; the generator repeats itself now and then
            text = near_miss_answer(a, b, rng) if rng.random() < near_miss else default_task_answer(a, b, rng, alphabet)
            if text not in texts:
                texts.append(text)
            if len(texts) == size:
                break
        record = {"prompt": f"{a}+{b}=", "reference": str(a + b)}
        raw = ranker.judge.score(Rollout(records=[record], completions=[texts]), rubric)
        rewards = aggregate_rewards(raw, rubric, ranker.scheduler, ranker.aggregator).rewards[0]
        if torch.isnan(rewards).any() or len(set(rewards.tolist())) < 2:
            continue
        ranks = competition_ranks(rewards.tolist())
        out.append({**record, "domain": "one-digit" if a < 10 and b < 10 else "two-digit",
                    "responses": [{"text": t, "rank": r} for t, r in zip(texts, ranks, strict=True)]})
    return out
