"""``rubric.dropout`` with a per-record rubric: each record's criteria are dropped (not the frame's dimensions, which
summarise them), renormalised by the criteria aggregation, drawn from a seed the record carries."""

from __future__ import annotations

import math

import pytest
import torch
import yaml

from rlkit.config import resolve_path
from rlkit.core.registry import load_registry
from rlkit.core.rubric import load_rubric, rubric_from_dict
from rlkit.core.types import Rollout
from rlkit.reward.dropout import CRITERIA_DROPOUT_FIELD, with_criteria_dropout
from rlkit_plugins.judges.per_record import drop_criteria, summarise

FRAME = load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/per_record.yaml"))
DIMS = [{"name": "essential_1", "type": "binary", "category": "essential", "weight": 1.0,
         "checks": [{"type": "regex", "pattern": r"\b4\b"}]},
        {"name": "important_1", "type": "binary", "category": "important", "weight": 0.5,
         "checks": [{"type": "keywords", "any": ["plus"]}]},
        {"name": "optional_1", "type": "binary", "category": "optional", "weight": 0.25,
         "checks": [{"type": "keywords", "any": ["four"]}]},
        {"name": "pitfall_1", "type": "binary", "category": "pitfall", "weight": 0.5,
         "checks": [{"type": "keywords", "any": ["maybe"]}]}]
# rubric_from_dict wants 7-20 criteria for a per-prompt rubric: pad with optional criteria nobody meets
PAD = [{"name": f"optional_{i}", "type": "binary", "category": "optional", "weight": 0.25,
        "checks": [{"type": "keywords", "any": [f"never{i}"]}]} for i in range(2, 5)]
OWN = rubric_from_dict({"name": "own", "version": "1", "dimensions": DIMS + PAD}, "test")
WEIGHTS = [1.0, 0.5, 0.25, 0.5, 0.25, 0.25, 0.25]
POSITIVE = [True, True, True, False, True, True, True]


def by_hand(met: list[float]) -> float:
    """The criteria aggregation over the criteria not NaN: (Σ_pos w·met − Σ_pitfall w·made) / Σ_pos w, clipped."""
    kept = [(m, w, pos) for m, w, pos in zip(met, WEIGHTS, POSITIVE, strict=True) if not math.isnan(m)]
    gained = sum(m * w for m, w, pos in kept if pos)
    lost = sum(m * w for m, w, pos in kept if not pos)
    possible = sum(w for _, w, pos in kept if pos)
    return min(1.0, max(0.0, (gained - lost) / possible))


MET = torch.tensor([[1.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],   # "4 plus"
                    [1.0, 0.0, 1.0, 1.0, 0.0, 0.0, 0.0]])  # "4 four maybe"


def test_no_dropout_leaves_the_answers_as_they_are():
    assert torch.equal(drop_criteria(MET, OWN, 0.0, seed=3), MET)


@pytest.mark.parametrize("seed", range(6))
def test_dropped_criteria_leave_the_sums_and_the_kept_are_renormalised(seed):
    out = drop_criteria(MET, OWN, 0.5, seed)
    dropped = out.isnan().all(dim=0)
    assert torch.equal(out.isnan(), dropped.expand_as(out))  # the whole group drops the same criteria
    assert not dropped.all() and bool((~dropped & torch.tensor(POSITIVE)).any())  # a positive criterion is kept
    assert torch.equal(drop_criteria(MET, OWN, 0.5, seed).isnan(), out.isnan())  # the seed decides
    frame = summarise(out, OWN, FRAME)
    criteria = FRAME.dimension_names.index("criteria")
    for g in range(2):
        assert float(frame[g, criteria]) == pytest.approx(by_hand(out[g].tolist()), abs=1e-6)


def test_when_every_criterion_is_drawn_one_positive_is_kept():
    out = drop_criteria(MET, OWN, 0.999999, seed=0)
    kept = (~out.isnan().all(dim=0)).nonzero().flatten().tolist()
    assert len(kept) == 1 and POSITIVE[kept[0]]
    # one positive criterion left: the group's reward is whether each completion met it
    frame = summarise(out, OWN, FRAME)
    criteria = FRAME.dimension_names.index("criteria")
    assert frame[:, criteria].tolist() == MET[:, kept[0]].tolist()


def test_the_records_carry_a_seed_of_the_run_seed_the_step_and_the_prompt():
    records = [{"prompt": "2+2?"}, {"prompt": "3+3?"}]
    assert with_criteria_dropout(records, 0.0, 1, 5) is records
    drawn = with_criteria_dropout(records, 0.3, 1, 5)
    assert all(r[CRITERIA_DROPOUT_FIELD]["p"] == 0.3 for r in drawn) and CRITERIA_DROPOUT_FIELD not in records[0]
    seeds = [r[CRITERIA_DROPOUT_FIELD]["seed"] for r in drawn]
    assert seeds == [r[CRITERIA_DROPOUT_FIELD]["seed"] for r in with_criteria_dropout(records, 0.3, 1, 5)]  # resume
    assert seeds[0] != seeds[1]
    assert seeds[0] != with_criteria_dropout(records, 0.3, 1, 6)[0][CRITERIA_DROPOUT_FIELD]["seed"]
    assert seeds[0] != with_criteria_dropout(records, 0.3, 2, 5)[0][CRITERIA_DROPOUT_FIELD]["seed"]


def test_the_rule_judge_drops_the_criteria_of_a_record_that_carries_a_draw(tmp_path):
    own = tmp_path / "own.yaml"
    own.write_text(yaml.safe_dump({"name": "own", "version": "1", "dimensions": DIMS + PAD}), encoding="utf-8")
    judge = load_registry().create("judge", "rule", {})
    completions = [["4 plus", "4 four maybe"]]
    plain = judge.score(Rollout(records=[{"prompt": "2+2?", "rubric": str(own)}], completions=completions), FRAME)
    (record,) = with_criteria_dropout([{"prompt": "2+2?", "rubric": str(own)}], 0.5, seed=7, step=3)
    dropped = judge.score(Rollout(records=[record], completions=completions), FRAME)
    criteria = FRAME.dimension_names.index("criteria")
    expected = drop_criteria(MET, OWN, 0.5, record[CRITERIA_DROPOUT_FIELD]["seed"])
    assert dropped[0, :, criteria].tolist() == pytest.approx([by_hand(expected[g].tolist()) for g in range(2)])
    assert plain[0, :, criteria].tolist() == pytest.approx([by_hand(MET[g].tolist()) for g in range(2)])


def test_about_p_of_the_criteria_are_dropped():
    drops = [int(drop_criteria(MET, OWN, 0.3, seed).isnan().all(dim=0).sum()) for seed in range(200)]
    assert 0.25 < sum(drops) / (200 * MET.shape[1]) < 0.35
