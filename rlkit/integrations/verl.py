"""rlkit's rubric rewards as veRL's custom reward function.

veRL loads a custom reward function by file and name (``custom_reward_function.path`` / ``.name``) and merges
``custom_reward_function.reward_kwargs`` into every call (verl/trainer/ppo/reward.py, ``get_custom_reward_fn``).
Its ``naive`` reward manager calls ``compute_score(data_source=, solution_str=, ground_truth=, extra_info=)`` once
per response; its ``batch`` manager calls ``compute_score(data_sources=, solution_strs=, ground_truths=,
extra_infos=)`` once per batch (verl/workers/reward_manager/naive.py and batch.py). A dict result must carry
``score``, the reward; its other keys become ``reward_extra_info`` columns, so every result has the same keys.

veRL loads this file as a module of its own (``spec_from_file_location``), so it imports rlkit by absolute names
only. veRL itself is not needed, nor imported.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

from rlkit.core.errors import ConfigError
from rlkit.integrations.scorer import SCALES, FlatScores, RubricScorer

# the per-row flag that says whether any dimension could be scored, beside veRL's `score`
SCORED_KEY = "rlkit_scored"


@functools.lru_cache(maxsize=4)
def _scorer(config: str | None, overrides: tuple[str, ...]) -> RubricScorer:
    # veRL calls once per response: the judge and config are built once per process and config
    return RubricScorer.from_config(config, overrides)


def _options(rlkit_config: str | None, rlkit_overrides: Sequence[str] | None, scale: str) -> RubricScorer:
    if scale not in SCALES:
        raise ConfigError(f"must be one of {', '.join(SCALES)}, got {scale!r}", "scale")
    if isinstance(rlkit_overrides, str):
        raise ConfigError(f"a list of key=value strings, got the string {rlkit_overrides!r}", "rlkit_overrides")
    return _scorer(None if rlkit_config is None else str(rlkit_config), tuple(rlkit_overrides or ()))


def _record(data_source: Any, ground_truth: Any, extra_info: Any) -> dict[str, Any]:
    """A veRL row as an rlkit record: ``ground_truth`` becomes ``reference`` (what rubric match checks read), the
    prompt comes from ``extra_info["prompt"]`` or ``["question"]`` (veRL's reward call has no prompt of its own),
    and ``extra_info``'s other keys stay as fields."""
    extra = dict(extra_info) if isinstance(extra_info, dict) else {}
    # the naive manager adds the response's own turn count; it would split a prompt's group in two
    extra.pop("num_turns", None)
    prompt = extra.pop("prompt", None)
    if prompt is None:
        prompt = extra.get("question", "")
    reference = ground_truth
    if isinstance(reference, int | float) and not isinstance(reference, bool):
        reference = str(reference)
    return {**extra, "data_source": data_source, "reference": reference,
            "prompt": prompt if isinstance(prompt, str | list) else str(prompt)}


def _result(scores: FlatScores, row: int, scale: str, unscored_score: float) -> dict[str, float]:
    reward = float(scores.rewards[row])
    table = scores.scores if scale == "normalized" else scores.raw
    out = {"score": unscored_score if math.isnan(reward) else reward, SCORED_KEY: 0.0 if math.isnan(reward) else 1.0}
    # NaN marks a dimension nobody could score: veRL's numeric columns need a number in every row
    out.update({name: float(table[row, j]) for j, name in enumerate(scores.dimension_names)})
    return out


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: dict[str, Any] | None = None,
                  *, rlkit_config: str | None = None, rlkit_overrides: Sequence[str] | None = None,
                  scale: str = "normalized", unscored_score: float = 0.0, **kwargs: Any) -> dict[str, float]:
    """One response's reward for veRL's ``naive`` reward manager: ``{"score", "rlkit_scored", <dimension>: ...}``.

    ``rlkit_config`` (a composed config's YAML, e.g. a run's ``.hydra/config.yaml``) and ``rlkit_overrides``
    (``["judge=rule", "rubric.path=/abs/rubric.yaml"]``) choose the rubric, judge, weights and aggregator; give them
    in ``custom_reward_function.reward_kwargs``. A response alone is a group of one, so an aggregator that ranks
    within groups is refused here: use :func:`compute_score_batch`. veRL needs a number for every response:
    ``score`` is ``unscored_score`` when no dimension could be scored, and ``rlkit_scored`` says so (0.0).
    """
    scorer = _options(rlkit_config, rlkit_overrides, scale)
    if scorer.group_relative:
        raise ConfigError(f"aggregator={scorer.validated.plugin_names['aggregator']} compares responses within their "
                          "group, and compute_score sees one response at a time; use compute_score_batch with "
                          "reward_model.reward_manager=batch", "aggregator")
    scores = scorer.score([_record(data_source, ground_truth, extra_info)], [solution_str])
    return _result(scores, 0, scale, unscored_score)


def compute_score_batch(data_sources: Sequence[Any], solution_strs: Sequence[str], ground_truths: Sequence[Any],
                        extra_infos: Sequence[dict[str, Any] | None] | None = None, *,
                        rlkit_config: str | None = None, rlkit_overrides: Sequence[str] | None = None,
                        scale: str = "normalized", unscored_score: float = 0.0, group_size: int | None = None,
                        **kwargs: Any) -> list[dict[str, float]]:
    """A batch's rewards for veRL's ``batch`` reward manager, one dict per response as :func:`compute_score` gives.

    veRL repeats each prompt's rollouts side by side, so a group is a run of consecutive rows with the same data
    source, ground truth and extra info (or fixed chunks of ``group_size``, veRL's ``rollout.n``); an aggregator
    that ranks within groups compares each response with the others of its prompt.
    """
    scorer = _options(rlkit_config, rlkit_overrides, scale)
    n = len(solution_strs)
    infos = list(extra_infos) if extra_infos is not None else [None] * n
    if not len(data_sources) == len(ground_truths) == len(infos) == n:
        raise ConfigError(f"data_sources, solution_strs, ground_truths and extra_infos must be as long; got "
                          f"{len(data_sources)}, {n}, {len(ground_truths)} and {len(infos)}", "compute_score_batch")
    records = [_record(s, g, e) for s, g, e in zip(data_sources, ground_truths, infos, strict=True)]
    scores = scorer.score(records, list(solution_strs), group_size=group_size)
    return [_result(scores, i, scale, unscored_score) for i in range(n)]
