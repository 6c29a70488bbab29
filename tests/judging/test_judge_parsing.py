"""Parsing LLM-judge answers: a corpus of realistic score and ranking outputs, and the conventions for
fractions, cycles, missing and unknown labels and comma lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlkit.core.rubric import load_rubric, rubric_from_dict
from rlkit.judging.parsing import ScoreParse, parse_scores
from rlkit.judging.ranking_parsing import RankingParse, parse_ranking, ranks_from_order

REPO = Path(__file__).resolve().parents[2]
# format and correctness are binary; brevity and repetition are scales 1-5.
ARITH = load_rubric(REPO / "conf" / "rubric_files" / "arithmetic.yaml")
ONE = rubric_from_dict(
    {"name": "helpful", "version": "1", "dimensions": [{"name": "helpfulness", "type": "scale", "range": [1, 10]}]},
    "one.yaml",
)
ONE_BINARY = rubric_from_dict(
    {"name": "ok", "version": "1", "dimensions": [{"name": "ok", "type": "binary"}]}, "one_binary.yaml"
)
SPACED = rubric_from_dict(
    {
        "name": "spaced",
        "version": "1",
        "dimensions": [
            {"name": "factual accuracy", "type": "scale", "range": [0, 10]},
            {"name": "tone_and_style", "type": "binary"},
        ],
    },
    "spaced.yaml",
)
RUBRICS = {"arith": ARITH, "one": ONE, "one_binary": ONE_BINARY, "spaced": SPACED}

ALL4 = {"format": 1.0, "correctness": 0.0, "brevity": 4.0, "repetition": 5.0}

# (id, rubric, judge output, scores, out_of_range, method); missing is "every other dimension".
SCORE_CASES: list[tuple[str, str, str, dict[str, float], dict[str, float], str]] = [
    ("json", "arith", '{"format": 1, "correctness": 0, "brevity": 4, "repetition": 5}', ALL4, {}, "json"),
    (
        "json-fenced",
        "arith",
        'Here is my evaluation.\n\n```json\n{\n  "format": 1,\n  "correctness": 0,\n  "brevity": 4,\n'
        '  "repetition": 5\n}\n```\nThe answer is wrong but short.',
        ALL4, {}, "json",
    ),
    (
        "json-with-reasons",
        "arith",
        '{"format": {"score": 1, "reason": "starts with 7"}, "correctness": {"score": 0, "reason": "3+4 is 7, '
        'not 8 {sic}"}, "brevity": {"score": 4, "reason": "a little padding"}, "repetition": {"score": 5}}',
        ALL4, {}, "json",
    ),
    (
        "json-nested-scores-strings",
        "arith",
        '{"reasoning": "Short and correct.", "scores": {"Format": "1", "Correctness": "0", "Brevity": "4/5", '
        '"Repetition": "5"}}',
        ALL4, {}, "json",
    ),
    (
        "json-list-of-entries",
        "arith",
        '{"scores": [{"dimension": "format", "score": 1}, {"dimension": "correctness", "score": 0}, '
        '{"dimension": "brevity", "score": 4}, {"dimension": "repetition", "score": 5, "note": "none"}]}',
        ALL4, {}, "json",
    ),
    (
        "prose-wrapped-json",
        "arith",
        'Let me evaluate the response step by step. The number comes first, so format is met.\n'
        '{"format": 1, "correctness": 0, "brevity": 4, "repetition": 5}\nI hope this helps!',
        ALL4, {}, "json",
    ),
    (
        "json-booleans-for-binary",
        "arith",
        '{"format": true, "correctness": false, "brevity": 4, "repetition": 5}',
        ALL4, {}, "json",
    ),
    (
        "json-yes-no-strings",
        "arith",
        '{"format": "yes", "correctness": "No", "brevity": 4.0, "repetition": 5}',
        ALL4, {}, "json",
    ),
    (
        "json-gaps-filled-by-lines",
        "arith",
        '{"format": 1, "correctness": 0}\nBrevity: 4\nRepetition: 5',
        ALL4, {}, "json",
    ),
    (
        "json-null-and-na",
        "arith",
        '{"format": null, "correctness": "N/A", "brevity": 4, "repetition": 5}',
        {"brevity": 4.0, "repetition": 5.0}, {}, "json",
    ),
    (
        "truncated-json",
        "arith",
        '{"format": 1, "correctness": 0, "brevity": 4, "repet',
        {"format": 1.0, "correctness": 0.0, "brevity": 4.0}, {}, "lenient",
    ),
    (
        "truncated-json-with-reasons",
        "arith",
        '```json\n{"format": {"score": 1, "reason": "ok"}, "correctness": {"score": 0, "reason": "the sum is wr',
        {"format": 1.0, "correctness": 0.0}, {}, "lenient",
    ),
    (
        "python-dict-quotes",
        "arith",
        "{'format': 1, 'correctness': 0, 'brevity': 4, 'repetition': 5}",
        ALL4, {}, "lenient",
    ),
    (
        "out-of-range-json",
        "arith",
        '{"format": 2, "correctness": 1, "brevity": 7, "repetition": 0}',
        {"correctness": 1.0}, {"format": 2.0, "brevity": 7.0, "repetition": 0.0}, "json",
    ),
    (
        "binary-half-is-out-of-range-scale-float-kept",
        "arith",
        '{"format": 0.5, "correctness": 1.0, "brevity": 3.5, "repetition": 4.25}',
        {"correctness": 1.0, "brevity": 3.5, "repetition": 4.25}, {"format": 0.5}, "json",
    ),
    (
        "wrong-dimension-names",
        "arith",
        '{"fmt": 1, "accuracy": 1, "length": 5}',
        {}, {}, "none",
    ),
    (
        "markdown-bold-lines",
        "arith",
        "**Format**: 1\n**Correctness**: 0\n**Brevity**: 4/5\n**Repetition**: 5/5",
        ALL4, {}, "lenient",
    ),
    (
        "bold-with-colon-inside-and-range-note",
        "arith",
        "- **Format:** 1\n- **Correctness:** 0\n- **Brevity (1-5):** 4\n- **Repetition score:** 5",
        ALL4, {}, "lenient",
    ),
    (
        # A fraction is the numerator on the dimension's own scale: 4/5 on a binary dimension is 4, out of range.
        "fraction-on-binary-is-numerator",
        "arith",
        "**Correctness**: 4/5\nFormat: 1\nBrevity: 4/5\nRepetition: 5 / 5",
        {"format": 1.0, "brevity": 4.0, "repetition": 5.0}, {"correctness": 4.0}, "lenient",
    ),
    (
        # The denominator is ignored, not used to rescale: 8/10 on a 1-5 dimension is 8.
        "fraction-other-scale-not-rescaled",
        "arith",
        "format: 1, correctness: 0, brevity: 8/10, repetition: 10 out of 10",
        {"format": 1.0, "correctness": 0.0}, {"brevity": 8.0, "repetition": 10.0}, "lenient",
    ),
    (
        "mixed-separators",
        "arith",
        "Format = 1\ncorrectness: 0.0\nbrevity - 4 out of 5\nREPETITION: 5",
        ALL4, {}, "lenient",
    ),
    (
        "yes-no-binary",
        "arith",
        "Format: Yes\nCorrectness: No\nBrevity: 4\nRepetition: 5",
        ALL4, {}, "lenient",
    ),
    (
        "pass-fail-true-false",
        "arith",
        "format: PASS; correctness: fail; brevity: 4; repetition: 5",
        ALL4, {}, "lenient",
    ),
    (
        "yes-on-scale-dimension-is-missing",
        "arith",
        "Format: true\nCorrectness: false\nBrevity: yes\nRepetition: 5",
        {"format": 1.0, "correctness": 0.0, "repetition": 5.0}, {}, "lenient",
    ),
    (
        "last-occurrence-wins",
        "arith",
        "Brevity: 2 at first sight, the answer looks padded. On reflection it is fine.\n\n"
        "Final scores:\nFormat: 1\nCorrectness: 0\nBrevity: 4\nRepetition: 5",
        ALL4, {}, "lenient",
    ),
    (
        "negative-value",
        "arith",
        "format: 1\ncorrectness: 0\nbrevity: -1\nrepetition: 5",
        {"format": 1.0, "correctness": 0.0, "repetition": 5.0}, {"brevity": -1.0}, "lenient",
    ),
    ("score-line-needs-one-dimension", "arith", "Score: 4", {}, {}, "none"),
    ("single-brackets", "one", "The response answers the question fully.\n\nRating: [[8]]", {"helpfulness": 8.0}, {},
     "lenient"),
    ("single-double-brackets-last", "one", "Compared with [[3]] last time, this one is better: [[7]]",
     {"helpfulness": 7.0}, {}, "lenient"),
    ("single-score-line", "one", "Helpful and concise.\nScore: 9/10", {"helpfulness": 9.0}, {}, "lenient"),
    ("single-final-score-bold", "one", "**Final score:** 6", {"helpfulness": 6.0}, {}, "lenient"),
    ("single-out-of-range", "one", "Score: 11", {}, {"helpfulness": 11.0}, "lenient"),
    ("single-bare-number", "one", " 7.5 \n", {"helpfulness": 7.5}, {}, "lenient"),
    ("single-by-name", "one", "Helpfulness: 4\nScore: 9", {"helpfulness": 4.0}, {}, "lenient"),
    ("single-json-score-key", "one", '{"score": 6, "explanation": "mostly helpful"}', {"helpfulness": 6.0}, {}, "json"),
    ("single-binary-word", "one_binary", "Verdict: the answer is correct. [[yes]]", {"ok": 1.0}, {}, "lenient"),
    ("names-case-and-separators-json", "spaced", '{"Factual-Accuracy": 7, "Tone and Style": 1}',
     {"factual accuracy": 7.0, "tone_and_style": 1.0}, {}, "json"),
    ("names-case-and-separators-lines", "spaced", "Factual_accuracy: 7\ntone-and-style: no",
     {"factual accuracy": 7.0, "tone_and_style": 0.0}, {}, "lenient"),
    ("empty", "arith", "", {}, {}, "none"),
    ("whitespace", "one", "   \n\t ", {}, {}, "none"),
    ("garbage", "arith", "lorem ipsum {{{ ]] >> 3/5 \x00 ```json\n{not json", {}, {}, "none"),
    ("refusal", "arith", "I'm sorry, I can't evaluate this response.", {}, {}, "none"),
    ("ordinal-is-not-a-score", "arith", "Format: 1st place", {}, {}, "none"),
]


@pytest.mark.parametrize(
    ("rubric_key", "text", "scores", "out_of_range", "method"),
    [pytest.param(*case[1:], id=case[0]) for case in SCORE_CASES],
)
def test_score_corpus(rubric_key: str, text: str, scores: dict[str, float], out_of_range: dict[str, float],
                      method: str) -> None:
    rubric = RUBRICS[rubric_key]
    parsed = parse_scores(text, rubric)
    assert parsed.scores == scores
    assert parsed.out_of_range == out_of_range
    assert parsed.missing == [n for n in rubric.dimension_names if n not in scores and n not in out_of_range]
    assert parsed.method == method


def test_score_parse_shape() -> None:
    parsed = parse_scores('{"format": 1, "correctness": 1, "brevity": 5, "repetition": 5}', ARITH)
    assert parsed.complete
    assert all(isinstance(v, float) for v in parsed.scores.values())
    with pytest.raises(AttributeError):
        parsed.method = "none"  # type: ignore[misc]
    assert not parse_scores('{"format": 1}', ARITH).complete


def test_unknown_json_keys_are_reported() -> None:
    parsed = parse_scores('{"fmt": 1, "accuracy": 1, "length": 5, "comment": "ok"}', ARITH)
    assert parsed.unknown == ["fmt", "accuracy", "length"]
    assert parse_scores('{"format": 1, "extra": 3}', ARITH).unknown == ["extra"]


def test_first_json_object_with_a_dimension_wins() -> None:
    text = 'Example format: {"note": 1}\nAnswer: {"brevity": 2}\nAlso: {"brevity": 5}'
    assert parse_scores(text, ARITH).scores == {"brevity": 2.0}


def test_huge_numbers_are_out_of_range_not_errors() -> None:
    assert parse_scores('{"brevity": 1e400}', ARITH).out_of_range == {"brevity": float("inf")}
    # Too many digits for json.loads: the lenient pass reads it, as infinity.
    assert parse_scores('{"repetition": ' + "9" * 5000 + "}", ARITH).out_of_range == {"repetition": float("inf")}


# (id, labels, judge output, order, strengths, method, complete, cycles_broken, unknown)
ABC = ["A", "B", "C"]
RANKING_CASES: list[tuple[str, list[str], str, list[list[str]], list[float], str, bool, int, list[str]]] = [
    ("plain", ABC, "A > C > B", [["A"], ["C"], ["B"]], [1.0, 1.0], "chain", True, 0, []),
    ("no-spaces", ABC, "A>C>B", [["A"], ["C"], ["B"]], [1.0, 1.0], "chain", True, 0, []),
    ("prose-wrapped", ABC, "After reading all three answers carefully.\nRanking: A > C > B.",
     [["A"], ["C"], ["B"]], [1.0, 1.0], "chain", True, 0, []),
    ("double-brackets-beat-reasoning", ABC,
     "At first C > A, since C is shorter.\nBut A is correct.\n\nFinal answer: [[A > B > C]]",
     [["A"], ["B"], ["C"]], [1.0, 1.0], "chain", True, 0, []),
    ("ties", ABC, "A > C = B", [["A"], ["C", "B"]], [1.0], "chain", True, 0, []),
    ("much-better", ABC, "A >> C > B", [["A"], ["C"], ["B"]], [2.0, 1.0], "chain", True, 0, []),
    ("unicode-comparators", ABC, "B \u226b A \u2248 C", [["B"], ["A", "C"]], [2.0], "chain", True, 0, []),
    ("lowercase", ABC, "ranking: a > c > b", [["A"], ["C"], ["B"]], [1.0, 1.0], "chain", True, 0, []),
    ("response-prefix", ABC, "Response A > Response C > Response B",
     [["A"], ["C"], ["B"]], [1.0, 1.0], "chain", True, 0, []),
    ("parenthesised", ABC, "(A) > (C) > (B)", [["A"], ["C"], ["B"]], [1.0, 1.0], "chain", True, 0, []),
    ("square-bracketed", ABC, "Order: [B] > [A] > [C]", [["B"], ["A"], ["C"]], [1.0, 1.0], "chain", True, 0, []),
    ("bold", ABC, "**A** > **C** > **B**", [["A"], ["C"], ["B"]], [1.0, 1.0], "chain", True, 0, []),
    ("last-complete-chain", ABC, "On brevity C > B. Overall: A > C > B",
     [["A"], ["C"], ["B"]], [1.0, 1.0], "chain", True, 0, []),
    ("json-list", ABC, '["A", "C", "B"]', [["A"], ["C"], ["B"]], [1.0, 1.0], "json", True, 0, []),
    ("json-fenced-object", ABC,
     'My ranking:\n```json\n{"reasoning": "A is right", "ranking": ["Response B", "Response A", "Response C"]}\n```',
     [["B"], ["A"], ["C"]], [1.0, 1.0], "json", True, 0, []),
    ("json-tiers", ABC, '{"ranking": [["A", "B"], "C"]}', [["A", "B"], ["C"]], [1.0], "json", True, 0, []),
    ("json-chain-string", ABC, '{"ranking": "B > A > C"}', [["B"], ["A"], ["C"]], [1.0, 1.0], "json", True, 0, []),
    # Copeland over the stated pairs: all three score 0, label order breaks the tie, C > A is contradicted.
    ("pairwise-cycle", ABC, "A > B\nB > C\nC > A", [["A"], ["B"], ["C"]], [1.0, 1.0], "pairwise", True, 1, []),
    ("pairwise-consistent", ABC, "A > B\nA > C\nC > B", [["A"], ["C"], ["B"]], [1.0, 1.0], "pairwise", True, 0, []),
    ("pairwise-cycle-with-winner", ["A", "B", "C", "D"],
     "Comparisons:\n- A > B\n- B > C\n- C > A\n- D > A\n- D > B\n- D > C",
     [["D"], ["A"], ["B"], ["C"]], [1.0, 1.0, 1.0], "pairwise", True, 1, []),
    ("pairwise-one-line", ABC, "Pairwise: B > A, C > A, B > C", [["B"], ["C"], ["A"]], [1.0, 1.0], "pairwise", True,
     0, []),
    ("missing-labels-appended", ["A", "B", "C", "D"], "A > C",
     [["A"], ["C"], ["B", "D"]], [1.0, 1.0], "chain", False, 0, []),
    ("unknown-label-dropped", ["A", "B", "C", "D"], "A > E > C = D > B",
     [["A"], ["C", "D"], ["B"]], [1.0, 1.0], "chain", True, 0, ["E"]),
    ("unknown-gap-keeps-strongest", ABC, "A > E >> B > C", [["A"], ["B"], ["C"]], [2.0, 1.0], "chain", True, 0,
     ["E"]),
    ("repeated-label", ABC, "A > B > A > C", [["A"], ["B"], ["C"]], [1.0, 1.0], "chain", False, 0, []),
    ("comma-list", ABC, "A, C, B", [["A"], ["C"], ["B"]], [1.0, 1.0], "comma", True, 0, []),
    ("comma-list-in-prose", ABC, "Best to worst: C, A, B.", [["C"], ["A"], ["B"]], [1.0, 1.0], "comma", True, 0, []),
    ("comma-in-brackets", ABC, "[[B, C, A]]", [["B"], ["C"], ["A"]], [1.0, 1.0], "comma", True, 0, []),
    ("prose-list-is-not-an-order", ABC, "A, B, and C are all reasonable.", [["A", "B", "C"]], [], "none", False, 0,
     []),
    ("verdict-single-label", ["A", "B"], "Assistant A is more helpful. [[A]]", [["A"], ["B"]], [1.0], "chain", False,
     0, []),
    ("numeric-labels", ["1", "2", "3"], "Response 2 > Response 3 > Response 1",
     [["2"], ["3"], ["1"]], [1.0, 1.0], "chain", True, 0, []),
    ("label-scores", ABC, "A:2 B:0 C:1", [["A"], ["C"], ["B"]], [1.0, 1.0], "scores", True, 0, []),
    ("label-scores-out-of", ABC, "Response A: 6/10\nResponse B: 9 out of 10\nResponse C: 6/10",
     [["B"], ["A", "C"]], [1.0], "scores", True, 0, []),
    ("label-scores-partial", ABC, "A: 1, C: 3", [["C"], ["A"], ["B"]], [1.0, 1.0], "scores", False, 0, []),
    ("label-scores-last-wins", ABC, "A: 1 B: 2 C: 0 ... on reflection A: 3",
     [["A"], ["B"], ["C"]], [1.0, 1.0], "scores", True, 0, []),
    ("chain-beats-label-scores", ABC, "A:2 B:0 C:1\nFinal: B > A > C", [["B"], ["A"], ["C"]], [1.0, 1.0], "chain",
     True, 0, []),
    ("one-label-score-is-not-an-order", ABC, "Score: 4. A: 5", [["A", "B", "C"]], [], "none", False, 0, []),
    ("empty", ABC, "", [["A", "B", "C"]], [], "none", False, 0, []),
    ("garbage", ABC, "I cannot decide; they are all bad. {{{ ]]", [["A", "B", "C"]], [], "none", False, 0, []),
    ("arithmetic-prose-ignored", ABC, "Since 3 + 4 = 7 and 7 > 5, nothing here ranks.", [["A", "B", "C"]], [],
     "none", False, 0, []),
    # Direction: a worst-first order is read reversed; what reads two ways is refused (method none), never guessed.
    ("worst-first-comma", ABC, "Worst first: B, C, A", [["A"], ["C"], ["B"]], [1.0, 1.0], "comma", True, 0, []),
    ("worst-to-best-heading", ABC, "Ranking from worst to best:\n\nB, C, A.", [["A"], ["C"], ["B"]], [1.0, 1.0],
     "comma", True, 0, []),
    ("ascending-comma", ABC, "**Ranking (ascending):** B, C, A", [["A"], ["C"], ["B"]], [1.0, 1.0], "comma", True, 0,
     []),
    ("best-to-worst-heading", ABC, "From best to worst:\nA, C, B", [["A"], ["C"], ["B"]], [1.0, 1.0], "comma", True,
     0, []),
    ("less-than-chain", ABC, "B < C < A", [["A"], ["C"], ["B"]], [1.0, 1.0], "chain", True, 0, []),
    ("less-than-strengths-reversed", ABC, "B << C < A", [["A"], ["C"], ["B"]], [1.0, 2.0], "chain", True, 0, []),
    ("less-than-with-tie", ABC, "Worst to best: B = C < A", [["A"], ["B", "C"]], [1.0], "chain", True, 0, []),
    ("less-than-in-brackets", ABC, "Final answer: [[Response B \u226a Response C < Response A]]",
     [["A"], ["C"], ["B"]], [1.0, 2.0], "chain", True, 0, []),
    ("markup-after-a-label-states-nothing", ABC, "A > C > B <eos>", [["A"], ["C"], ["B"]], [1.0, 1.0], "chain", True,
     0, ["eos"]),
    ("pairwise-both-ways", ABC, "B < A\nA > C\nC > B", [["A"], ["C"], ["B"]], [1.0, 1.0], "pairwise", True, 0, []),
    ("json-worst-to-best-key", ABC, '{"worst_to_best": ["B", "C", "A"]}', [["A"], ["C"], ["B"]], [1.0, 1.0], "json",
     True, 0, []),
    ("json-less-than-string", ABC, '{"ranking": "B < C < A"}', [["A"], ["C"], ["B"]], [1.0, 1.0], "json", True, 0,
     []),
    ("refused-greater-than-under-worst-first", ABC, "Worst first: B > C > A", [["A", "B", "C"]], [], "none", False, 0,
     []),
    ("refused-less-than-under-best-first", ABC, "Best first: B < C < A", [["A", "B", "C"]], [], "none", False, 0, []),
    ("refused-mixed-chain", ABC, "A > B < C", [["A", "B", "C"]], [], "none", False, 0, []),
    ("refused-mixed-through-unknown", ABC, "A < E > B > C", [["A", "B", "C"]], [], "none", False, 0, []),
    ("refused-worst-first-said-elsewhere", ABC, "I list them worst first, as asked.\n\nB, C, A", [["A", "B", "C"]],
     [], "none", False, 0, []),
    ("refused-both-directions", ABC, "Best first (ascending): A, C, B", [["A", "B", "C"]], [], "none", False, 0, []),
    ("refused-partial-worst-first", ABC, "Worst first: B, C", [["A", "B", "C"]], [], "none", False, 0, []),
    ("refused-json-with-worst-first-prose", ABC, '{"note": "listed worst first", "ranking": ["B", "C", "A"]}',
     [["A", "B", "C"]], [], "none", False, 0, []),
    ("refused-worst-verdict", ABC, "The worst one is [[C]]", [["A", "B", "C"]], [], "none", False, 0, []),
    ("refused-places-or-scores", ABC, "A: 1, B: 3, C: 2", [["A", "B", "C"]], [], "none", False, 0, []),
    ("prose-comparisons-give-no-order", ABC, "A is better than C, C is better than B", [["A", "B", "C"]], [], "none",
     False, 0, []),
    ("prose-worse-than-gives-no-order", ABC, "B is worse than C, and C is worse than A.", [["A", "B", "C"]], [],
     "none", False, 0, []),
]


@pytest.mark.parametrize(
    ("labels", "text", "order", "strengths", "method", "complete", "cycles_broken", "unknown"),
    [pytest.param(*case[1:], id=case[0]) for case in RANKING_CASES],
)
def test_ranking_corpus(labels: list[str], text: str, order: list[list[str]], strengths: list[float], method: str,
                        complete: bool, cycles_broken: int, unknown: list[str]) -> None:
    parsed = parse_ranking(text, labels)
    assert parsed == RankingParse(order, strengths, method, complete, cycles_broken, unknown)


def test_cycle_resolution_is_deterministic() -> None:
    lines = ["A > B", "B > C", "C > A"]
    for statements in (lines, lines[::-1], lines[1:] + lines[:1]):
        parsed = parse_ranking("\n".join(statements), ABC)
        assert (parsed.order, parsed.cycles_broken) == ([["A"], ["B"], ["C"]], 1)


@pytest.mark.parametrize(
    ("order", "labels", "ranks"),
    [
        ([["A"], ["C"], ["B"]], ["A", "B", "C"], [1.0, 3.0, 2.0]),
        ([["A"], ["B", "C"]], ["A", "B", "C"], [1.0, 2.5, 2.5]),
        ([["A", "B", "C"]], ["C", "B", "A"], [2.0, 2.0, 2.0]),
        ([["B"]], ["A", "B", "C", "D"], [3.0, 1.0, 3.0, 3.0]),  # unranked labels share a last tier
        ([["E"], ["B"], ["B", "A"]], ["A", "B"], [2.0, 1.0]),  # unknown and repeated names are ignored
        ([], ["A", "B"], [1.5, 1.5]),
    ],
)
def test_ranks_from_order(order: list[list[str]], labels: list[str], ranks: list[float]) -> None:
    assert ranks_from_order(order, labels) == ranks


def test_ranks_from_parsed_ranking() -> None:
    parsed = parse_ranking("Final answer: [[B >> A = D > C]]", ["A", "B", "C", "D"])
    assert ranks_from_order(parsed.order, ["A", "B", "C", "D"]) == [2.5, 1.0, 4.0, 2.5]


_PIECES = [*'ABCDE abc>=,[]{}":/*\n01234567.89-_', "\u226b", "yes", "format", "brevity", "Score", "Response "]
_TEXT = st.lists(st.sampled_from(_PIECES), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=80), _TEXT))
def test_never_raises_and_invariants_hold(text: str) -> None:
    for rubric in (ARITH, ONE, ONE_BINARY):
        parsed: Any = parse_scores(text, rubric)
        assert isinstance(parsed, ScoreParse)
        names = rubric.dimension_names
        parts = [*parsed.scores, *parsed.out_of_range, *parsed.missing]
        assert sorted(parts) == sorted(names)
        for dim in rubric.dimensions:
            if dim.name in parsed.scores:
                assert dim.low <= parsed.scores[dim.name] <= dim.high
    labels = ["A", "B", "C", "D"]
    ranking = parse_ranking(text, labels)
    flat = [label for tier in ranking.order for label in tier]
    assert sorted(flat) == labels
    assert all(ranking.order)
    assert len(ranking.strengths) == len(ranking.order) - 1
    assert len(ranks_from_order(ranking.order, labels)) == len(labels)

