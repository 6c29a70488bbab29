"""The ranking judge's ``reference_leak_check`` (issue 39, item 6): the llm judge's check, shared, on the group prompt.

The judge is built offline (the tiny judge's backend, which is shown the reference by default) and answered in
process, so nothing is trained: what is counted is the prompt, not the answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlkit import Rollout
from rlkit.core.registry import load_registry
from rlkit.core.rubric import load_rubric
from rlkit.judging import Completion

RUBRIC = Path(__file__).parents[2] / "conf" / "rubric_files" / "arithmetic.yaml"
FULL = "judge/rank_group.jinja"  # shows the prompt and, when asked, the reference


class FirstIsBest:
    """A backend that ranks A first and keeps every prompt it is asked."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def identity(self) -> dict[str, str]:
        return {"backend": "first-is-best"}

    def complete(self, prompts):
        self.asked += [chat[0]["content"] for chat in prompts]
        return [Completion(text="A > B") for _ in prompts]

    def close(self) -> None:
        pass


def _score(rollout: Rollout, **params) -> tuple[dict[str, float], list[str]]:
    judge = load_registry().create("judge", "ranking", {"repetitions": 1, **params})
    backend = FirstIsBest()
    judge.backend.get = lambda *size: backend  # the offline tiny judge would be trained otherwise
    judgement = judge.assess(rollout, load_rubric(RUBRIC))
    return judgement.metrics, backend.asked


def _rollout() -> Rollout:
    # 1 of 3 prompts holds its answer; every group holds it in a completion, which is no leak
    return Rollout(records=[{"prompt": "7+5= (hint: 12)", "reference": "12"}, {"prompt": "3+4=", "reference": "7"},
                            {"prompt": "9+9=", "reference": "18"}],
                   completions=[["12", "13"], ["7", "8"], ["18", "81"]])


def test_shown_on_purpose_is_no_leak_and_a_prompt_holding_the_answer_is_one():
    with pytest.warns(UserWarning, match=r"judge ranking: the reference answer appears verbatim in the judge's "
                                         r"prompt for 1 of 3 records \(first: '7\+5= \(hint: 12\)'"):
        metrics, asked = _score(_rollout(), template=FULL, show_reference=True, reference_leak_check=True)
    assert all("REFERENCE ANSWER" in text for text in asked), "show_reference put every reference in the prompt"
    assert metrics["judge/reference_leaks"] == 1.0


def test_the_same_count_with_the_reference_hidden():
    with pytest.warns(UserWarning, match="for 1 of 3 records"):
        metrics, asked = _score(_rollout(), template=FULL, show_reference=False, reference_leak_check=True)
    assert not any("REFERENCE ANSWER" in text for text in asked)
    assert metrics["judge/reference_leaks"] == 1.0


def test_no_prompt_holds_its_answer():
    clean = Rollout(records=[{"prompt": "3+4=", "reference": "7"}, {"prompt": "9+9=", "reference": "18"}],
                    completions=[["7", "8"], ["18", "81"]])
    metrics, _ = _score(clean, template=FULL, show_reference=True, reference_leak_check=True)
    assert metrics["judge/reference_leaks"] == 0.0


def test_the_compact_template_never_shows_the_prompt_beside_the_reference():
    # the tiny judge's compact prompt writes the reference in the prompt's place: the hint never reaches it
    metrics, asked = _score(_rollout(), reference_leak_check=True)
    assert not any("hint" in text for text in asked)
    assert metrics["judge/reference_leaks"] == 0.0


def test_off_by_default_no_check_and_no_metric():
    metrics, _ = _score(_rollout(), template=FULL, show_reference=True)
    assert "judge/reference_leaks" not in metrics, "as the llm judge: no check, no metric (rlkit doctor skips it)"
    assert metrics.get("judge/reference_leaks", 0.0) == 0.0
