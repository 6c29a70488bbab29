"""DAPO's soft overlong penalty as a rule check, at lengths whose penalty is worked out by hand."""

from __future__ import annotations

import pytest
import torch

from rlkit.core.errors import RubricError
from rlkit.core.rubric import rubric_from_dict
from rlkit.core.types import Rollout
from rlkit_plugins.judges.rule import RuleJudge


def _rubric(check: dict, dim_range: list[float] | None = None):
    return rubric_from_dict({"name": "overlong", "version": "1", "dimensions": [
        {"name": "length_penalty", "type": "scale", "range": dim_range or [-1, 0], "checks": [check]}]})


def test_soft_overlong_penalty_at_hand_computed_lengths():
    # DAPO (arXiv 2503.14476, eq. 13) with L_max = 20, L_cache = 5: 0 up to 15 tokens, (15 - |y|) / 5 up to 20, then -1
    rubric = _rubric({"type": "overlong", "max_len": 20, "cache": 5})
    tokens = torch.tensor([[10, 15, 16, 18, 20, 25]])
    rollout = Rollout(records=[{"prompt": "p"}], completions=[["a"] * 6], completion_token_counts=tokens)
    scores = RuleJudge().score(rollout, rubric)
    assert torch.allclose(scores[0, :, 0], torch.tensor([0.0, 0.0, -0.2, -0.6, -1.0, -1.0]), atol=1e-6)


def test_overlong_counts_words_or_chars_and_maps_onto_any_range():
    rubric = _rubric({"type": "overlong", "max_len": 4, "cache": 2, "unit": "words"}, dim_range=[0, 1])
    rollout = Rollout(records=[{"prompt": "p"}], completions=[["a b", "a b c", "a b c d", "a b c d e"]])
    # 2 words: 1; 3: 1 - 1/2; 4 and more: 0 (a [0, 1] dimension reads the check's share directly)
    assert RuleJudge().score(rollout, rubric)[0, :, 0].tolist() == [1.0, 0.5, 0.0, 0.0]


@pytest.mark.parametrize(("check", "where", "message"), [
    ({"type": "overlong", "max_len": 20}, "checks[0].cache", "needs 'cache'"),
    ({"type": "overlong", "max_len": 4, "cache": 5}, "checks[0].cache", "greater than max_len"),
    ({"type": "overlong", "max_len": 0, "cache": 1}, "checks[0].max_len", "integer >= 1"),
    ({"type": "overlong", "max_len": 8, "cache": 2, "unit": "lines"}, "checks[0].unit", "one of chars"),
])
def test_bad_overlong_checks_name_the_key(check, where, message):
    with pytest.raises(RubricError, match=message) as err:
        RuleJudge().check_rubric(_rubric(check))
    assert str(err.value.where).endswith(where)


def test_token_lengths_are_required():
    rollout = Rollout(records=[{"prompt": "p"}], completions=[["a"]])
    with pytest.raises(Exception, match="overlong check with unit: tokens"):
        RuleJudge().score(rollout, _rubric({"type": "overlong", "max_len": 8, "cache": 2}))
