"""The rule judge on text answers, with the phrasings SmolLM2-135M-Instruct gives to "What is the capital of X?
Answer with the city name only.": `match` compares as the SQuAD/TriviaQA graders do, in every mode."""

from __future__ import annotations

from typing import Any

import pytest

from rlkit import Rollout, RubricError, rubric_from_dict
from rlkit_plugins.judges.rule import RuleJudge
from rlkit_plugins.judges.rule_features import normalise_answer

SMOLLM2 = ["The capital of Poland is Warsaw.", "Warsaw.", "warsaw", "It is Kraków.", " WARSAW!\n", "Warsawa"]


def scores(check: dict[str, Any], texts: list[str], record: dict[str, Any]) -> list[float]:
    rubric = rubric_from_dict({"name": "t", "version": "1",
                               "dimensions": [{"name": "d", "type": "binary", "checks": [check]}]}, "t.yaml")
    return RuleJudge().score(Rollout(records=[record], completions=[texts]), rubric)[0, :, 0].tolist()


@pytest.mark.parametrize(("text", "normal"), [
    ("The capital of Poland is Warsaw.", "capital of poland is warsaw"),
    ("Warsaw.", "warsaw"), ("  warsaw \n", "warsaw"), ("It is Kraków.", "it is kraków"),
    ("“Paris”", "paris"), ("«Paris»!", "paris"), ("the Hague", "hague"), ("An apple", "apple"),
    ("New-York", "new york"), ("Buenos_Aires", "buenos aires"), ("Krako\u0301w", "kraków"),  # NFC: one ó either way
    ("Theatre", "theatre"),  # an article only as a whole word
])
def test_normalisation_is_the_graders(text, normal):
    assert normalise_answer(text) == normal


def test_exact_ignores_case_punctuation_whitespace_and_articles():
    assert scores({"type": "match"}, SMOLLM2, {"reference": "Warsaw"}) == [0, 1, 1, 0, 1, 0]
    # the case: `Paris.` scored like `Lyon`
    assert scores({"type": "match", "mode": "exact"}, ["Paris.", "Lyon", "The Paris", "paris"],
                  {"reference": "Paris"}) == [1, 0, 1, 1]
    assert scores({"type": "match", "case_sensitive": True}, ["Paris.", "paris."], {"reference": "Paris"}) == [1, 0]


def test_contains_finds_the_reference_as_whole_words():
    assert scores({"type": "match", "mode": "contains"}, SMOLLM2, {"reference": "Warsaw"}) == [1, 1, 1, 0, 1, 0]
    assert scores({"type": "match", "mode": "contains"}, ["It is Buenos Aires.", "Buenos, Aires", "Aires"],
                  {"reference": "Buenos Aires"}) == [1, 1, 0]
    assert scores({"type": "match", "mode": "contains"}, ["It is The Hague.", "Hague", "Den Haag"],
                  {"reference": "The Hague"}) == [1, 1, 0]


def test_any_of_several_references():
    texts = ["Brasília.", "The capital of Brazil is Brasilia.", "Rio de Janeiro"]
    record = {"reference": ["Brasília", "Brasilia"]}
    assert scores({"type": "match"}, texts, record) == [1, 0, 0]
    assert scores({"type": "match", "mode": "contains"}, texts, record) == [1, 1, 0]
    assert scores({"type": "match", "mode": "numeric", "tolerance": 0.01}, ["3.14", "22/7 = 3.142857", "3", "22"],
                  {"reference": [3.14159, "22"]}) == [1, 1, 0, 1]


def test_extract_in_every_mode():
    is_city = r"(?:is|It's)\s+(.+)"
    assert scores({"type": "match", "extract": is_city}, SMOLLM2, {"reference": "Warsaw"}) == [1, 0, 0, 0, 0, 0]
    assert scores({"type": "match", "mode": "contains", "extract": r"^\s*(\S+)"}, SMOLLM2,
                  {"reference": "Warsaw"}) == [0, 1, 1, 0, 1, 0]
    assert scores({"type": "match", "mode": "numeric", "extract": r"= *(\d+)"}, ["7 = 7", "7"],
                  {"reference": 7}) == [1, 0]


def test_a_reference_that_is_only_an_article_keeps_it():
    # multiple choice: "A" is the answer, not an article to ignore
    assert scores({"type": "match"}, ["A", "(a)", "B", "the"], {"reference": "A"}) == [1, 1, 0, 0]


def test_keywords_read_a_record_field():
    check = {"type": "keywords", "all": {"field": "keywords"}}
    texts = ["Warsaw is on the Vistula.", "Warsaw.", "vistula and warsaw"]
    assert scores(check, texts, {"keywords": ["warsaw", "Vistula"]}) == [1, 0, 1]
    assert scores({"type": "keywords", "none": {"field": "keywords"}}, texts, {"keywords": "vistula"}) == [0, 1, 0]
    assert all(x != x for x in scores(check, texts, {"prompt": "p"})), "a record without the field: not scored"
    judge = RuleJudge()
    rubric = rubric_from_dict({"name": "t", "version": "1", "dimensions": [
        {"name": "d", "type": "binary", "checks": [check, {"type": "match", "field": "city"}]}]}, "t.yaml")
    assert [f.field for f in judge.record_fields(rubric)] == ["keywords", "city"]
    bad = rubric_from_dict({"name": "t", "version": "1", "dimensions": [
        {"name": "d", "type": "binary", "checks": [{"type": "keywords", "any": {"field": ""}}]}]}, "t.yaml")
    with pytest.raises(RubricError, match=r"dimensions\[0\]\(d\).checks\[0\].any: must be a non-empty list"):
        judge.check_rubric(bad)
