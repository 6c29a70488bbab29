"""``rubric=per_record`` for the ``rule`` and ``llm`` judges: each record is scored against its own rubric.

A record names its per-prompt rubric in ``rubric`` (a file path, relative to the working directory as every rlkit
path is, or the rubric itself as a mapping) and may pin it with ``rubric_hash``. That rubric's dimensions are
criteria (binary, tagged Essential / Important / Optional / Pitfall, as ``rlkit rubric generate`` writes them);
the judge answers each criterion with 0 or 1, and :func:`summarise` turns those answers into the frame rubric's
dimensions, so every record yields the same ``[G, D]`` columns whatever its number of criteria.

``criteria`` is Rubrics as Rewards' explicit aggregation (Gunjal et al. 2025, arXiv:2507.17746), with pitfalls as
penalties: ``(Σ_pos w·met − Σ_pitfall w·made) / Σ_pos w``, clipped to [0, 1]. A pitfall criterion describes a
mistake, so its 1 means the response makes it. Criteria left unscored (NaN) are out of both sums.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rlkit.plugin import (
    CRITERIA_DROPOUT_FIELD,
    Rollout,
    Rubric,
    RubricError,
    load_rubric,
    resolve_path,
    rubric_from_dict,
)

if TYPE_CHECKING:
    import torch

FRAME_DIMENSIONS = ("criteria", "essential", "important", "optional", "pitfalls_avoided")


def check_frame(rubric: Rubric, judge: str) -> None:
    """The frame's dimensions must be ones :func:`summarise` computes."""
    for i, dim in enumerate(rubric.dimensions):
        if dim.name not in FRAME_DIMENSIONS:
            raise RubricError(f"judge {judge} with a per_record rubric computes only {', '.join(FRAME_DIMENSIONS)}",
                              f"{rubric.source or '<rubric>'}: dimensions[{i}]({dim.name})")


class RecordRubrics:
    """Each record's own rubric, loaded and checked once per file (or inline mapping)."""

    def __init__(self) -> None:
        self._loaded: dict[str, Rubric] = {}

    def of(self, record: dict[str, Any], index: int) -> Rubric:
        where = f"record {index} (prompt {str(record.get('prompt'))[:40]!r}): rubric"
        ref = record.get("rubric")
        if isinstance(ref, str) and ref:
            key = str(resolve_path(ref))
            if key not in self._loaded:
                self._loaded[key] = load_rubric(key)
        elif isinstance(ref, dict):
            key = json.dumps(ref, sort_keys=True, default=str)
            if key not in self._loaded:
                self._loaded[key] = rubric_from_dict(ref, where)
        else:
            raise RubricError("rubric=per_record needs each record's own rubric: a file path or a mapping "
                              "(`rlkit rubric generate` writes both the files and records that name them)", where)
        rubric = self._loaded[key]
        if not rubric.is_criteria_rubric:
            raise RubricError("not a per-prompt rubric: each dimension needs a category (essential, important, "
                              "optional or pitfall)", rubric.source or where)
        pinned = record.get("rubric_hash")
        if isinstance(pinned, str) and pinned and not rubric.content_hash.startswith(pinned):
            raise RubricError(f"the rubric changed since the record was written (record pins {pinned[:12]}, the "
                              f"file hashes to {rubric.short_hash}); regenerate the records or drop rubric_hash",
                              rubric.source or where)
        return rubric


def check_record_rubrics(records: Sequence[dict[str, Any]], rubrics: RecordRubrics,
                         check: Callable[[Rubric], Any] | None = None) -> None:
    """Load every record's own rubric (and pass it to the judge's ``check``), raising the first ``RubricError``
    scoring would meet: ``rlkit validate`` finds what ``fit`` would, before any model is loaded."""
    for i, record in enumerate(records, 1):
        own = rubrics.of(record, i)
        if check is not None:
            check(own)


# the frame's category dimensions and the criterion category each summarises
_CATEGORY_OF = {"essential": "essential", "important": "important", "optional": "optional",
                "pitfalls_avoided": "pitfall"}


def absent_categories(records: Sequence[dict[str, Any]], frame: Rubric, rubrics: RecordRubrics) -> list[str]:
    """The frame's category dimensions with nothing to score on any of ``records``: no record's rubric has a
    criterion of that category (hand-written rubrics without pitfalls, say). They are not applicable, not unscored."""
    present = {d.category for i, record in enumerate(records, 1) for d in rubrics.of(record, i).dimensions}
    return [d.name for d in frame.dimensions if d.name in _CATEGORY_OF and _CATEGORY_OF[d.name] not in present]


def summarise(met: torch.Tensor, rubric: Rubric, frame: Rubric) -> torch.Tensor:
    """Criteria answers ``[G, C]`` (1 met / 0 not / NaN unscored) → the frame's dimensions ``[G, D]``."""
    import torch
    met = met.to(torch.float64)
    scored = ~torch.isnan(met)
    answer = met.nan_to_num(0.0)
    weights = torch.tensor([d.weight for d in rubric.dimensions], dtype=torch.float64)
    pitfall = torch.tensor([d.category == "pitfall" for d in rubric.dimensions])
    positive = ~pitfall
    gained = (answer * weights * positive).sum(dim=1)
    lost = (answer * weights * pitfall).sum(dim=1)
    possible = (scored * weights * positive).sum(dim=1)
    columns: dict[str, torch.Tensor] = {
        "criteria": torch.where(possible > 0, ((gained - lost) / possible.clamp(min=1e-300)).clamp(0.0, 1.0),
                                math.nan)}
    for category in ("essential", "important", "optional", "pitfall"):
        mask = torch.tensor([d.category == category for d in rubric.dimensions])
        count = (scored & mask).sum(dim=1)
        share = (answer * mask).sum(dim=1) / count.clamp(min=1)
        share = torch.where(count > 0, share, math.nan)
        columns["pitfalls_avoided" if category == "pitfall" else category] = \
            1.0 - share if category == "pitfall" else share
    return torch.stack([columns[d.name] for d in frame.dimensions], dim=1).to(torch.float32)


def drop_criteria(met: torch.Tensor, rubric: Rubric, p: float, seed: int) -> torch.Tensor:
    """Criteria answers ``[G, C]`` with each criterion the group was scored on left out (NaN) with probability p,
    the same for the whole group; at least one positively weighted criterion is kept, so the summary stays defined.
    :func:`summarise` leaves a NaN criterion out of both sums: the kept ones are renormalised over their weights
    (``rubric.dropout`` with a per-record rubric; the draw's seed comes with the record)."""
    import torch

    gen = torch.Generator().manual_seed(int(seed))
    c = met.shape[1]
    draws, rescue = torch.rand(c, generator=gen), torch.rand(c, generator=gen)
    scored = ~torch.isnan(met).all(dim=0)
    dropped = scored & (draws < p)
    positive = torch.tensor([d.category != "pitfall" and d.weight > 0 for d in rubric.dimensions]) & scored
    if bool(positive.any()) and not bool((positive & ~dropped).any()):
        dropped[int(torch.where(positive, rescue, torch.full_like(rescue, -1.0)).argmax())] = False
    return torch.where(dropped.unsqueeze(0), torch.full_like(met, math.nan), met)


def score_per_record(rollout: Rollout, frame: Rubric, rubrics: RecordRubrics,
                     score: Callable[[Rollout, Rubric], torch.Tensor]) -> torch.Tensor:
    """``[B, G, D]`` in the frame's dimensions: each record's group scored by ``score`` against its own rubric."""
    import torch
    b, g = rollout.num_prompts, rollout.group_size
    out = torch.full((b, g, len(frame.dimensions)), math.nan)
    counts = rollout.completion_token_counts
    for i, record in enumerate(rollout.records):
        own = rubrics.of(record, i)
        one = Rollout(records=[record], completions=[list(rollout.completions[i])],
                      completion_token_counts=counts[i:i + 1] if counts is not None else None)
        met = score(one, own)[0]
        draw = record.get(CRITERIA_DROPOUT_FIELD)
        if isinstance(draw, dict):  # a training record under rubric.dropout
            met = drop_criteria(met, own, float(draw["p"]), int(draw["seed"]))
        out[i] = summarise(met, own, frame)
    return out
