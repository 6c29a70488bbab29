"""The built-in ``rule`` judge: each check type, the mapping to dimension ranges, and rubric errors."""

from __future__ import annotations

import json
import math
import random
import re
import string
import unicodedata
from typing import Any

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlkit import JudgeError, Rollout, RubricError, rubric_from_dict
from rlkit.core.registry import PluginEntry, bind_params
from rlkit_plugins.judges import rule
from rlkit_plugins.judges.rule import RuleJudge


def make_rubric(*dims: dict[str, Any]) -> Any:
    return rubric_from_dict({"name": "t", "version": "1", "dimensions": list(dims)}, "test.yaml")


def binary(checks: list[dict[str, Any]], name: str = "d", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": "binary", "checks": checks, **extra}


def judge(**params: Any) -> RuleJudge:
    return RuleJudge(RuleJudge.Params(**params))


def scores(checks: list[dict[str, Any]], texts: list[str], record: dict[str, Any] | None = None,
           **params: Any) -> list[float]:
    """Score one binary dimension for one prompt with the given completions."""
    rollout = Rollout(records=[record or {"prompt": "p"}], completions=[texts])
    return judge(**params).score(rollout, make_rubric(binary(checks)))[0, :, 0].tolist()


def is_nan(x: float) -> bool:
    return math.isnan(x)


# --- check types ------------------------------------------------------------------------------


def test_regex_present_absent_and_case():
    check = {"type": "regex", "pattern": r"\bANSWER:\s*\d+"}
    assert scores([check], ["answer: 42", "no digits here"]) == [1.0, 0.0]
    assert scores([{**check, "absent": True}], ["answer: 42", "no digits here"]) == [0.0, 1.0]
    assert scores([{**check, "case_sensitive": True}], ["answer: 42", "ANSWER: 42"]) == [0.0, 1.0]
    assert scores([check], ["answer: 42"], case_sensitive=True) == [0.0]


def test_keywords_any_all_none():
    texts = ["Paris is the capital", "LONDON and paris", "Berlin"]
    assert scores([{"type": "keywords", "any": ["paris", "rome"]}], texts) == [1.0, 1.0, 0.0]
    assert scores([{"type": "keywords", "all": ["paris", "london"]}], texts) == [0.0, 1.0, 0.0]
    assert scores([{"type": "keywords", "none": ["paris"]}], texts) == [0.0, 0.0, 1.0]
    assert scores([{"type": "keywords", "any": ["paris"], "case_sensitive": True}], texts) == [0.0, 1.0, 0.0]


def test_length_chars_and_words():
    texts = ["abc", "abcdef", "one two three four"]
    assert scores([{"type": "length", "min": 4}], texts) == [0.0, 1.0, 1.0]
    assert scores([{"type": "length", "max": 5}], texts) == [1.0, 0.0, 0.0]
    assert scores([{"type": "length", "min": 2, "max": 3, "unit": "words"}], texts) == [0.0, 0.0, 0.0]
    assert scores([{"type": "length", "min": 4, "max": 4, "unit": "words"}], texts) == [0.0, 0.0, 1.0]


def test_length_in_tokens_needs_token_counts():
    rubric = make_rubric(binary([{"type": "length", "max": 10, "unit": "tokens"}], name="short"))
    rollout = Rollout(records=[{"prompt": "p"}], completions=[["a", "b"]])
    with pytest.raises(JudgeError, match="token") as info:
        judge().score(rollout, rubric)
    assert "dimensions[0](short)" in str(info.value)
    counted = Rollout(records=[{"prompt": "p"}], completions=[["a", "b"]],
                      completion_token_counts=torch.tensor([[10, 11]]))
    assert judge().score(counted, rubric)[0, :, 0].tolist() == [1.0, 0.0]


def test_token_counts_of_wrong_shape_are_an_error():
    rubric = make_rubric(binary([{"type": "length", "max": 10, "unit": "tokens"}]))
    rollout = Rollout(records=[{"prompt": "p"}], completions=[["a", "b"]],
                      completion_token_counts=torch.tensor([[1, 2, 3]]))
    with pytest.raises(JudgeError, match=r"\[1, 2\]"):
        judge().score(rollout, rubric)


def test_repetition_ratio():
    looping = "the cat sat " * 5  # 15 words, 13 trigrams, 3 unique: ratio 10/13
    fresh = "one two three four five six"
    assert scores([{"type": "repetition"}], [looping, fresh, "too short"]) == [0.0, 1.0, 1.0]
    # 5 words "a b a b a", bigrams: ab ba ab ba -> 2 unique of 4, ratio 0.5
    assert scores([{"type": "repetition", "n": 2, "max_ratio": 0.5}], ["a b a b a"]) == [1.0]
    assert scores([{"type": "repetition", "n": 2, "max_ratio": 0.49}], ["a b a b a"]) == [0.0]


def test_json_plain_fenced_and_required_keys():
    texts = ['{"a": 1, "b": 2}', 'Here:\n```json\n{"a": 1}\n```\n', "{not json}", "[1, 2]"]
    assert scores([{"type": "json"}], texts) == [1.0, 1.0, 0.0, 1.0]
    assert scores([{"type": "json", "required_keys": ["a", "b"]}], texts) == [1.0, 0.0, 0.0, 0.0]
    two_blocks = '```json\n{"a": 1}\n```\n```json\n{"b": 2}\n```'
    assert scores([{"type": "json"}], [two_blocks]) == [0.0]


def test_match_exact():
    check = {"type": "match"}
    assert scores([check], ["  Paris \n", "Lyon"], {"prompt": "p", "reference": "paris"}) == [1.0, 0.0]
    assert scores([{**check, "case_sensitive": True}], ["paris"], {"reference": "Paris"}) == [0.0]
    assert scores([{**check, "field": "city"}], ["Rome"], {"city": "rome"}) == [1.0]


def test_match_numeric_last_number_and_extract():
    check = {"type": "match", "mode": "numeric"}
    record = {"prompt": "p", "reference": "1234"}
    texts = ["3 apples, so 1,234", "first 1234 then 99", "no number at all", "x = 1234.0000001"]
    assert scores([check], texts, record) == [1.0, 0.0, 0.0, 1.0]
    assert scores([check], ["10-20 pages"], {"reference": 20}) == [1.0]
    assert scores([check], ["it is -7"], {"reference": -7}) == [1.0]
    assert scores([{**check, "tolerance": 0.5}], ["about 3.4"], {"reference": 3}) == [1.0]
    extract = {**check, "extract": r"answer:\s*(-?[\d.]+)"}
    assert scores([extract], ["Answer: 1234 (checked 5 times)", "answer: none"], record) == [1.0, 0.0]


def test_match_without_reference_is_nan():
    for record in ({"prompt": "p"}, {"prompt": "p", "reference": None}):
        for mode in ("exact", "numeric"):
            [value] = scores([{"type": "match", "mode": mode}], ["42"], record)
            assert is_nan(value)


def test_match_numeric_with_non_numeric_reference_is_an_error():
    with pytest.raises(JudgeError, match="not a number") as info:
        scores([{"type": "match", "mode": "numeric"}], ["42"], {"reference": "forty-two"})
    assert "dimensions[0](d).checks[0]" in str(info.value)


def test_sentences_count_ends_and_line_breaks():
    texts = ["Brave means not afraid. The brave girl saved the dog!",   # 2
             "Brave means not afraid.",                                 # 1
             "Sure! Brave means not afraid. She was brave. Yes.",       # 4
             'He said "go." Then he left.',                             # 2: closing quotes after the full stop
             "Use it, e.g. a brave act. Fine",                          # 2: "e.g. a" ends nothing
             "**Meaning:** not afraid\n\n**Example:** she is brave",     # 2: a line break ends one
             "", "...", "   "]                                          # 0: no letter or digit
    assert scores([{"type": "sentences", "min": 2, "max": 2}], texts) == [1, 0, 0, 1, 1, 1, 0, 0, 0]
    assert scores([{"type": "sentences", "max": 1}], texts) == [0, 1, 0, 0, 0, 0, 1, 1, 1]
    assert scores([{"type": "sentences", "min": 3}], texts) == [0, 0, 1, 0, 0, 0, 0, 0, 0]


def test_match_contains_a_whole_word_of_the_field():
    check = {"type": "match", "mode": "contains", "field": "forms"}
    record = {"prompt": "p", "forms": ["forget", "forgot", "forgotten"]}
    texts = ["I FORGOT my keys.", "Don't forget it", "unforgettable", "forgetful", "I remember."]
    assert scores([check], texts, record) == [1.0, 1.0, 0.0, 0.0, 0.0]
    assert scores([{**check, "case_sensitive": True}], texts[:2], record) == [0.0, 1.0]
    assert scores([{"type": "match", "mode": "contains"}], ["a red car", "a redcar"], {"reference": "red car"}) == [
        1.0, 0.0]  # a text is a phrase; the field defaults to reference
    # with extract, only its group is searched: here the example, after the first sentence
    example = {**check, "extract": r"(?s)(?:[.!?]\S*\s+|\n)(\S.*)"}
    texts = ["To forget is to lose a memory. I forgot my keys.", "To forget is to lose a memory.",
             "To forget is to lose a memory. I lost my keys.", "Forget: lose a memory\nI forgot it"]
    assert scores([example], texts, record) == [1.0, 0.0, 0.0, 1.0]


def test_match_contains_without_the_field_is_nan_and_a_bad_field_an_error():
    [value] = scores([{"type": "match", "mode": "contains", "field": "forms"}], ["x"], {"prompt": "p"})
    assert is_nan(value)
    for bad in ([], [""], {"a": 1}, [True], ["ok", None]):
        with pytest.raises(JudgeError, match="'forms' of the prompt record must be a non-empty text") as info:
            scores([{"type": "match", "mode": "contains", "field": "forms"}], ["x"], {"forms": bad})
        assert "dimensions[0](d).checks[0]" in str(info.value)


# --- mapping checks to a dimension's range ------------------------------------------------------


def test_scale_maps_share_of_passing_checks_onto_range():
    checks = [
        {"type": "keywords", "any": ["alpha"]},
        {"type": "keywords", "any": ["beta"]},
        {"type": "keywords", "any": ["gamma"]},
        {"type": "keywords", "any": ["delta"]},
    ]
    rubric = make_rubric({"name": "q", "range": [1, 5], "checks": checks})
    texts = ["alpha beta", "nothing", "alpha beta gamma delta", "alpha"]
    out = judge().score(Rollout(records=[{}], completions=[texts]), rubric)
    # shares 2/4, 0/4, 4/4, 1/4 -> 1 + share * 4
    assert out[0, :, 0].tolist() == [3.0, 1.0, 5.0, 2.0]


def test_check_weights_and_inapplicable_checks_in_the_share():
    checks = [
        {"type": "keywords", "any": ["alpha"], "weight": 3},
        {"type": "keywords", "any": ["beta"]},
        {"type": "match"},  # no reference in the record: left out of the share
    ]
    rubric = make_rubric({"name": "q", "range": [0, 10], "checks": checks})
    out = judge().score(Rollout(records=[{"prompt": "p"}], completions=[["alpha", "beta"]]), rubric)
    assert out[0, :, 0].tolist() == pytest.approx([7.5, 2.5])


def test_no_applicable_check_gives_nan():
    rubric = make_rubric({"name": "q", "range": [1, 5], "checks": [{"type": "match"}]})
    out = judge().score(Rollout(records=[{}], completions=[["x"]]), rubric)
    assert torch.isnan(out).all()


def test_binary_is_all_or_nothing():
    checks = [{"type": "keywords", "any": ["alpha"]}, {"type": "keywords", "any": ["beta"]}]
    assert scores(checks, ["alpha beta", "alpha", "gamma"]) == [1.0, 0.0, 0.0]


def test_shape_dtype_and_positions():
    rubric = make_rubric(
        binary([{"type": "keywords", "any": ["yes"]}], name="has_yes"),
        {"name": "long", "range": [0, 2], "checks": [{"type": "length", "min": 5}]},
        binary([{"type": "match"}], name="exact"),
    )
    rollout = Rollout(
        records=[{"prompt": "a", "reference": "yes"}, {"prompt": "b"}],
        completions=[["yes", "no", "yes yes"], ["no", "yes!!", "nope nope"]],
    )
    out = judge().score(rollout, rubric)
    assert out.shape == (2, 3, 3)
    assert out.dtype == torch.float32
    assert out[..., 0].tolist() == [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
    assert out[..., 1].tolist() == [[0.0, 0.0, 2.0], [0.0, 2.0, 2.0]]
    assert out[0, :, 2].tolist() == [1.0, 0.0, 0.0]
    assert torch.isnan(out[1, :, 2]).all()


def test_dimension_for_another_judge_is_nan_and_not_checked():
    rubric = make_rubric(
        binary([{"type": "keywords", "any": ["x"]}]),
        {"name": "style", "range": [1, 5], "judge": "llm"},
        binary([{"type": "keywords", "any": ["x"]}], name="ruled", judge="rule"),
    )
    j = judge()
    j.check_rubric(rubric)  # no checks on the llm dimension is fine
    out = j.score(Rollout(records=[{}], completions=[["x", "y"]]), rubric)
    assert out[0, :, 0].tolist() == [1.0, 0.0]
    assert torch.isnan(out[0, :, 1]).all()
    assert out[0, :, 2].tolist() == [1.0, 0.0]


# --- check_rubric ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("check", "path", "message"),
    [
        ({"type": "sentiment"}, ".checks[1].type", "valid types: episode, json, keywords, length"),
        ({"pattern": "x"}, ".checks[1].type", "no type"),
        ({"type": "regex", "pattern": "x", "colour": 1}, ".checks[1].colour", "unknown key 'colour'"),
        ({"type": "regex"}, ".checks[1].pattern", "needs 'pattern'"),
        ({"type": "regex", "pattern": "(unclosed"}, ".checks[1].pattern", "invalid regex"),
        ({"type": "regex", "pattern": "x", "absent": "yes"}, ".checks[1].absent", "true or false"),
        ({"type": "keywords"}, ".checks[1]", "exactly one of any, all, none"),
        ({"type": "keywords", "any": ["a"], "all": ["b"]}, ".checks[1]", "exactly one of"),
        ({"type": "keywords", "any": []}, ".checks[1].any", "non-empty list"),
        ({"type": "length"}, ".checks[1]", "min, max or both"),
        ({"type": "length", "min": -1}, ".checks[1].min", ">= 0"),
        ({"type": "length", "min": 5, "max": 2}, ".checks[1].min", "greater than max"),
        ({"type": "length", "max": 5, "unit": "lines"}, ".checks[1].unit", "chars, words, tokens"),
        ({"type": "repetition", "n": 0}, ".checks[1].n", "integer >= 1"),
        ({"type": "repetition", "max_ratio": 1.5}, ".checks[1].max_ratio", "[0, 1]"),
        ({"type": "json", "required_keys": "a"}, ".checks[1].required_keys", "list"),
        ({"type": "match", "mode": "fuzzy"}, ".checks[1].mode", "exact, numeric, contains"),
        ({"type": "match", "mode": "numeric", "extract": r"\d+"}, ".checks[1].extract", "capture group"),
        ({"type": "match", "mode": "numeric", "extract": "(x"}, ".checks[1].extract", "invalid regex"),
        ({"type": "match", "tolerance": 0.1}, ".checks[1].tolerance", "mode: numeric"),
        ({"type": "match", "mode": "contains", "tolerance": 0.1}, ".checks[1].tolerance", "only to mode: numeric"),
        ({"type": "match", "extract": "x"}, ".checks[1].extract", "capture group"),
        ({"type": "keywords", "any": {"column": "k"}}, ".checks[1].any", "or {field: NAME}"),
        ({"type": "match", "mode": "contains", "extract": "x"}, ".checks[1].extract", "capture group"),
        ({"type": "sentences"}, ".checks[1]", "a sentences check needs min, max or both"),
        ({"type": "sentences", "min": 3, "max": 2}, ".checks[1].min", "greater than max"),
        ({"type": "sentences", "max": -1}, ".checks[1].max", ">= 0"),
        ({"type": "json", "weight": 0}, ".checks[1].weight", "> 0"),
    ],
)
def test_check_rubric_errors_name_file_and_path(check, path, message):
    good = {"type": "keywords", "any": ["ok"]}
    rubric = make_rubric(binary([good]), binary([good, check], name="bad"))
    with pytest.raises(RubricError) as info:
        judge().check_rubric(rubric)
    text = str(info.value)
    assert text.startswith("test.yaml: ")
    assert f"dimensions[1](bad){path}:" in text
    assert message in text


def test_check_rubric_needs_checks_for_rule_dimensions():
    for dim in ({"name": "bare", "range": [1, 5]}, {"name": "bare", "range": [1, 5], "checks": []}):
        with pytest.raises(RubricError, match="needs `checks`") as info:
            judge().check_rubric(make_rubric(dim))
        assert "test.yaml: dimensions[0](bare).checks" in str(info.value)


def test_score_validates_the_rubric_too():
    rubric = make_rubric(binary([{"type": "regex", "pattern": "["}]))
    with pytest.raises(RubricError, match=r"dimensions\[0\]\(d\)\.checks\[0\]\.pattern"):
        judge().score(Rollout(records=[{}], completions=[["x"]]), rubric)


# --- compile once, params, registration ---------------------------------------------------------


def test_patterns_are_compiled_once_per_rubric(monkeypatch):
    calls = []
    real_compile = rule.re.compile

    def counting_compile(*args: Any, **kwargs: Any) -> Any:
        calls.append(args[0])
        return real_compile(*args, **kwargs)

    monkeypatch.setattr(rule.re, "compile", counting_compile)
    rubric = make_rubric(binary([
        {"type": "regex", "pattern": "abc"},
        {"type": "match", "mode": "numeric", "extract": r"=\s*(\d+)"},
    ]))
    j = judge()
    rollout = Rollout(records=[{"reference": 1}], completions=[["abc = 1", "x"]])
    first = j.score(rollout, rubric)
    assert sorted(calls) == sorted(["abc", r"=\s*(\d+)"])
    second = j.score(rollout, rubric)
    j.check_rubric(rubric)
    assert len(calls) == 2
    assert torch.equal(first, second)
    assert first[0, :, 0].tolist() == [1.0, 0.0]


def test_params_bind_through_the_registry_schema():
    entry = PluginEntry("judge", "rule", RuleJudge, "rlkit")
    params = bind_params(entry, {"case_sensitive": True}, "judge.params")
    assert isinstance(params, RuleJudge.Params) and params.case_sensitive is True
    assert RuleJudge.Params().case_sensitive is False


def test_registers_as_rule():
    registered: dict[str, Any] = {}
    rule.rlkit_register_judges(lambda name, factory: registered.__setitem__(name, factory))
    assert registered == {"rule": RuleJudge}


# --- the batch implementation scores exactly as the plain per-text definition -------------------------


def _ref_number(text: str) -> float | None:
    try:
        value = float(text.strip().replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _ref_check(c: dict[str, Any], text: str, rec: dict[str, Any], tok: int | None, default_cs: bool) -> float:
    """One check on one text, as the rubric documents it (the rule judge before it scored batches)."""
    cs = c.get("case_sensitive", default_cs)
    fold = (lambda s: s) if cs else str.casefold
    kind = c["type"]
    if kind == "regex":
        found = re.search(c["pattern"], text, 0 if cs else re.IGNORECASE) is not None
        return float(found != c.get("absent", False))
    if kind == "keywords":
        mode = next(k for k in ("any", "all", "none") if k in c)
        words = rec.get(c[mode]["field"]) if isinstance(c[mode], dict) else c[mode]
        if words is None:
            return math.nan
        hits = [fold(w) in fold(text) for w in (words if isinstance(words, list) else [words])]
        return float(any(hits) if mode == "any" else all(hits) if mode == "all" else not any(hits))
    if kind == "length":
        unit = c.get("unit", "chars")
        size = len(text) if unit == "chars" else len(text.split()) if unit == "words" else tok
        return float(c.get("min", 0) <= size <= c.get("max", math.inf))
    if kind == "repetition":
        n, words = c.get("n", 3), text.casefold().split()
        grams = [tuple(words[i:i + n]) for i in range(len(words) - n + 1)]
        return float((1 - len(set(grams)) / len(grams) if grams else 0.0) <= c.get("max_ratio", 0.2))
    if kind == "json":
        keys, blocks = c.get("required_keys", []), re.findall(r"```json[ \t]*\n(.*?)```", text, re.DOTALL | re.I)
        for candidate in [text.strip(), *(blocks if len(blocks) == 1 else [])]:
            try:
                data = json.loads(candidate)
            except ValueError:
                continue
            return float(not keys or isinstance(data, dict) and all(k in data for k in keys))
        return 0.0
    if kind == "sentences":
        count = len([p for p in re.split(rule.rf._SENTENCE_END.pattern, text) if re.search(r"\w", p)])
        return float(c.get("min", 0) <= count <= c.get("max", math.inf))
    ref = rec.get(c.get("field", "reference"))
    if ref is None:
        return math.nan
    refs = [str(r) for r in (ref if isinstance(ref, list) else [ref])]
    found = re.search(c["extract"], text, 0 if cs else re.IGNORECASE) if "extract" in c else None
    searched = text if "extract" not in c else (found.group(1) or "") if found else None
    if searched is None:
        return 0.0
    if c.get("mode", "exact") != "numeric":
        # the graders' normalisation, written out: punctuation to spaces, case, articles (kept where a reference
        # is nothing but one), whitespace
        def norm(s: str, articles: bool) -> str:
            s = "".join(" " if unicodedata.category(ch).startswith("P") or ch in string.punctuation + "´" else ch
                        for ch in unicodedata.normalize("NFC", s))
            s = s if cs else s.casefold()
            s = s if articles else re.sub(r"\b(?:a|an|the)\b", " ", s, flags=re.IGNORECASE)
            return " ".join(s.split())
        hits = []
        for r in refs:
            articles = norm(r, False) == ""
            a, b = norm(searched, articles), norm(r, articles)
            hits.append(a == b if c.get("mode", "exact") == "exact" else f" {b} " in f" {a} ")
        return float(any(hits))
    if "extract" in c:
        value = _ref_number(searched)
    else:
        numbers = rule.rf._NUMBER.findall(text)
        value = _ref_number(numbers[-1]) if numbers else None
    return 0.0 if value is None else float(any(abs(value - _ref_number(r)) <= c.get("tolerance", 1e-6)
                                               for r in refs))


def reference_scores(rubric: Any, rollout: Rollout, case_sensitive: bool = False) -> torch.Tensor:
    """Every check on every completion, one at a time, combined by the same formula over the whole batch."""
    counts = rollout.completion_token_counts
    items = [(text, rec, None if counts is None else int(counts[b, g]))
             for b, (rec, group) in enumerate(zip(rollout.records, rollout.completions, strict=True))
             for g, text in enumerate(group)]
    columns = []
    for dim in rubric.dimensions:
        if dim.judge not in (None, "rule"):
            columns.append(torch.full((len(items),), math.nan))
            continue
        values = torch.tensor([[_ref_check(c, *item, case_sensitive) for c in dim.checks] for item in items],
                              dtype=torch.float64).reshape(len(items), len(dim.checks))
        columns.append(torch.from_numpy(rule._combine(rule._DimPlan("", dim.type == "binary", dim.low, dim.high,
                                                                      [(c.get("weight", 1.0), None)
                                                                       for c in dim.checks], False),
                                                      values.numpy())))
    return torch.stack(columns, dim=1).reshape(rollout.num_prompts, rollout.group_size, len(rubric.dimensions))


# Pieces that exercise the fast paths: runs of characters (equal up to case or only up to bit 0x20), Unicode
# case folding and whitespace, repeated words, markdown, JSON and numbers.
PIECES = ["", " ", "\t", "\n", "\r\n", "\x1c", "\x85", "\u3000", "\xa0", "a", "A", "aaaa", "AaAa", "aAAa", "....",
          "\x00\x00\x00\x00", "@@@@", "@`@`", "[{[{", "ßßßß", "ẞßẞß", "KKkk", "\u212aKkk", "ſſSs", "İİİİ", "iIİı",
          "ΣΣσς", "😀😀😀😀", "日本日本", "bbbbbbbbbbbbb", "the", "The", "THE", "cat", "a b a b", "please",
          '{"a": 1, "b": 2}', "[1, 2]", '```json\n{"a": 1}\n```', "**bold**", "# Title", "- item", "```json", "42",
          "PLEASE", "Thanks", "-7", "1,234.5", "10-20", "answer: 42", "x" * 300, "It is the cat.", "«A»", "is b",
          "SS."]
CHECKS = [
    {"type": "regex", "pattern": r"(\S)\1{3,}", "absent": True},
    {"type": "regex", "pattern": r"(\S)\1{3,}", "case_sensitive": True},
    {"type": "regex", "pattern": r"(\S)\1+"},
    {"type": "regex", "pattern": r"(\S)\1{2}", "weight": 0.1},
    {"type": "regex", "pattern": r"(\S)\1{11,}", "weight": 0.7},
    {"type": "regex", "pattern": r"^\s*-?\d+"},
    {"type": "regex", "pattern": r"(.)\1{3,}", "weight": 1 / 3},
    {"type": "keywords", "any": ["please", "thanks", "ß"]},
    {"type": "keywords", "all": ["the", "SS"], "weight": 0.3},
    {"type": "keywords", "none": ["σ", "k"], "case_sensitive": True},
    {"type": "length", "max": 12},
    {"type": "length", "min": 2, "max": 4.5, "unit": "words", "weight": 0.2},
    {"type": "length", "min": 3, "unit": "tokens", "weight": 2.5},
    {"type": "repetition", "n": 2, "max_ratio": 0.3},
    {"type": "repetition", "n": 1, "max_ratio": 0.1, "weight": 0.7},
    {"type": "repetition", "max_ratio": 0},
    {"type": "json", "required_keys": ["a"]},
    {"type": "match", "case_sensitive": True},
    {"type": "match", "weight": 0.8},
    {"type": "match", "extract": r"is (\w+)", "weight": 0.3},
    {"type": "match", "mode": "contains", "field": "forms", "extract": r"^(.{0,12})"},
    {"type": "keywords", "all": {"field": "forms"}},
    {"type": "keywords", "none": {"field": "forms"}, "case_sensitive": True, "weight": 0.4},
    {"type": "match", "mode": "numeric", "field": "num", "extract": r"^\s*(-?\d+)"},
    {"type": "match", "mode": "numeric", "field": "num", "tolerance": 0.5, "weight": 0.1},
    {"type": "match", "mode": "contains", "field": "forms", "weight": 0.6},
    {"type": "match", "mode": "contains", "extract": r"(?s)(?:[.!?]\S*\s+|\n)(\S.*)"},
    {"type": "sentences", "min": 2, "max": 3},
    {"type": "sentences", "max": 1, "weight": 0.4},
]


def random_text(rng: random.Random) -> str:
    parts = [rng.choice(PIECES) if rng.random() < 0.6 else "".join(rng.choices("abcAB Kkß1 .-\n", k=rng.randint(1, 6)))
             for _ in range(rng.choice([0, 1, 2, 5, 20, 60]))]
    return rng.choice(["", " ", "\n"]).join(parts)


def random_case(rng: random.Random, prompts: int, group: int) -> tuple[Any, Rollout]:
    dims = []
    for i in range(rng.randint(1, 4)):
        dim = {"name": f"d{i}", "checks": rng.sample(CHECKS, rng.randint(1, 6))}
        kind = {"type": "binary"} if rng.random() < 0.5 else {"range": rng.choice([[1, 5], [-3, 7.5]])}
        dims.append({**dim, **kind})
    records = [{"reference": rng.choice(["42", "the", None, "A", ["The cat", "b"], "ẞ."]),
                "num": rng.choice(["42", 7, 3.5, None]),
                "forms": rng.choice([["the", "a b"], ["ß", "K"], "cat", None])} for _ in range(prompts)]
    texts = [[random_text(rng) for _ in range(group)] for _ in range(prompts)]
    for row in texts:
        row[-1] = row[0] if rng.random() < 0.3 else row[-1]  # duplicates are scored once
    return make_rubric(*dims), Rollout(records=records, completions=texts,
                                       completion_token_counts=torch.randint(0, 8, (prompts, group)))


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), case_sensitive=st.booleans())
def test_batch_scores_equal_the_per_text_definition(seed, case_sensitive):
    rubric, rollout = random_case(random.Random(seed), prompts=3, group=4)
    out = judge(case_sensitive=case_sensitive).score(rollout, rubric)
    torch.testing.assert_close(out, reference_scores(rubric, rollout, case_sensitive), rtol=0, atol=0, equal_nan=True)


def test_large_batch_scores_equal_the_per_text_definition():
    # 4,000 completions: the judge combines each distinct pattern of check results once, not each row.
    rng = random.Random(7)
    for _ in range(2):
        rubric, rollout = random_case(rng, prompts=250, group=16)
        torch.testing.assert_close(judge().score(rollout, rubric), reference_scores(rubric, rollout),
                                   rtol=0, atol=0, equal_nan=True)


def test_character_runs_within_each_text_only():
    check = [{"type": "regex", "pattern": r"(\S)\1{3,}"}]
    texts = ["**", "**", "*\n*", "aaa", "a", "AAaa", "@`@`", "\x00\x00\x00\x00", "ßßßß", "    ", "x\tx\tx\tx"]
    assert scores(check, texts) == [0.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    assert scores(check, ["AAaa", "AAAA"], case_sensitive=True) == [0.0, 1.0]
    mixed = ["é \u212aKkk", "é kK\u212ak", "é İiIi", "é ſsSs", "é \u3000\u3000\u3000\u3000", "é ééÉé"]
    assert scores(check, mixed) == [1.0, 1.0, float(re.search(r"(\S)\1{3,}", "İiIi", re.I) is not None),
                                    float(re.search(r"(\S)\1{3,}", "ſsSs", re.I) is not None), 0.0, 1.0]


def test_characters_equal_ignoring_case_share_the_run_scan_key():
    # What lets the numpy scan for character runs stand in for the regex: ASCII characters equal ignoring case
    # are equal up to bit 0x20, and the only non-ASCII characters equal to an ASCII one are partners of i, k, s.
    pair = re.compile(r"(\S)\1", re.IGNORECASE)
    for a in range(128):
        for b in range(128):
            if pair.fullmatch(chr(a) + chr(b)):
                assert a | 0x20 == b | 0x20 and a != 32
    any_ascii = re.compile(r"[\x00-\x7f]", re.IGNORECASE)  # matches whatever is equal to some ASCII character
    for u in range(0x80, 0x10000):  # case mappings to ASCII lie in the BMP
        if any_ascii.match(chr(u)):
            partners = {chr(a).lower() for a in range(128) if pair.fullmatch(chr(u) + chr(a))}
            assert partners <= {"i", "k", "s"}, (hex(u), partners)
