"""A model judge's prompt says what rlkit means by an anchor's examples: a ``positive`` one is an answer of that
level, and so is a ``negative`` one, though it may look better (docs/rubrics.md, "Anchors and negative examples").
The templates once showed negatives as "(not: …)", which told the judge the opposite: chat_arithmetic's
``bare_number`` level 0 read "Anything besides the number (not: 17 + 25 = 42; …)" and the Qwen judge called restated
sums bare (benchmarks/README.md, "Calibration rounds")."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlkit.core.rubric import load_rubric
from rlkit.core.templates import render_template
from rlkit.evaluation.rubric_tightening_model import AnchorRequest, chat

CHAT_ARITHMETIC = Path(__file__).resolve().parents[2] / "conf" / "rubric_files" / "chat_arithmetic.yaml"
SAYS_SAME_LEVEL = "(also this level, though it may look better: "

# each judge template that lists the anchors, with what else it needs to render
TEMPLATES = {
    "judge/rubric_scores.jinja": {},
    "judge/step_scores.jinja": {"step": 1},
    "judge/rank_group.jinja": {"candidates": [{"label": "A", "text": "42"}, {"label": "B", "text": "17 + 25 = 42"}],
                               "labels": ["A", "B"], "reference": "42", "example_order": "A > B"},
}


def _anchor_line(text: str, dimension: str, level: str) -> str:
    """The line of ``text`` that shows ``dimension``'s anchor at ``level``."""
    block = text.split(f"* {dimension} (", 1)[1]
    return next(line for line in block.splitlines() if line.startswith(f"  - {level}: "))


@pytest.mark.parametrize("template", list(TEMPLATES))
def test_a_negative_example_is_shown_as_an_answer_of_its_own_level(template):
    rubric = load_rubric(CHAT_ARITHMETIC)
    text = render_template(template, rubric=rubric, prompt="What is 17 + 25?", completion="17 + 25 = 42",
                           **TEMPLATES[template])
    low = _anchor_line(text, "bare_number", "0")
    assert low.startswith(f"  - 0: Anything besides the number {SAYS_SAME_LEVEL}17 + 25 = 42; The answer is 42.; 42")
    assert "(not:" not in text
    assert _anchor_line(text, "bare_number", "1") == "  - 1: Only the number (e.g. 42; 42.)"
    assert _anchor_line(text, "correctness", "0") == f"  - 0: Wrong or missing sum {SAYS_SAME_LEVEL}17 + 25 = 32; " \
                                                     "The answer is a number.)"


def test_the_rubric_with_its_examples_stays_the_prompts_unchanged_first_part():
    """The engine's prefix cache serves the instructions and rubric only if every completion's prompt begins with
    them, examples included."""
    rubric = load_rubric(CHAT_ARITHMETIC)
    first, second = (render_template("judge/rubric_scores.jinja", rubric=rubric, prompt=p, completion=c)
                     for p, c in (("What is 17 + 25?", "42"), ("What is 3 + 4?", "3 + 4 = 7")))
    head = first.split("\nPROMPT:\n", 1)[0]
    assert second.startswith(head + "\nPROMPT:\n") and SAYS_SAME_LEVEL in head


def test_rubric_tighten_asks_the_model_for_negative_examples_of_the_level_they_are_written_on():
    request = AnchorRequest(name="clarity", description="Reads clearly", binary=False, levels=(1.0, 3.0, 5.0),
                            current={1: "Confusing", 5: "Clear"}, top=(("3+4=", "The sum is 7."),),
                            low=(("3+4=", "Sum: 14", 1.0),))
    text = chat(request, "arithmetic", "")[0]["content"]
    negative = text.split('"negative" examples (', 1)[1].split(")", 1)[0]
    assert negative.startswith("answers that also belong at the level"), negative
    assert "answers that do not" not in text
