"""The shipped task rules cannot check, `experiment=smollm2_definitions`: its prompts file, its held-out split, and
what its rule-judged dimensions say of good and bad hand-written answers (the model-judged ones need a model)."""

from __future__ import annotations

import json
import math
import re

import pytest

from rlkit import Rollout
from rlkit.config import compose_config
from rlkit.core.package_files import resolve_path
from rlkit.core.rubric import load_rubric
from rlkit.data.records import read_jsonl, split_heldout
from rlkit_plugins.judges.hybrid import HybridJudge
from rlkit_plugins.judges.rule import RuleJudge

RULE_DIMENSIONS = ["brevity", "uses_word"]
MODEL_DIMENSIONS = ["correctness", "learner_friendly", "example"]


@pytest.fixture(scope="module")
def preset(registry):
    cfg = compose_config(registry, ["experiment=smollm2_definitions"])
    records = read_jsonl(resolve_path(cfg.data.path))
    return cfg, records, load_rubric(resolve_path(cfg.rubric.path))


def test_the_prompts_are_a_few_hundred_distinct_words_asked_as_chat(preset):
    cfg, records, _ = preset
    assert cfg.data.path == "pkg://rlkit.conf/tasks/learner_definitions.jsonl"
    assert len(records) >= 300
    words = [r["word"] for r in records]
    assert len(set(words)) == len(words), "one prompt per word"
    assert len({json.dumps(r["prompt"]) for r in records}) == len(records)
    assert len({r["id"] for r in records}) == len(records)
    wordings = set()
    for r in records:
        [message] = r["prompt"]  # one user turn, rendered with the model's chat template
        assert message["role"] == "user" and f'"{r["word"]}"' in message["content"]
        assert r["forms"][0] == r["word"] and all(f.strip() == f and f for f in r["forms"])
        assert r["pos"] in ("noun", "verb", "adjective")
        wordings.add(message["content"].replace(r["word"], "W").replace(r["pos"], "P"))
    assert len(wordings) >= 8, "a little variety in how the question is asked"


def test_a_one_syllable_word_ending_vowel_consonant_doubles_it_in_its_forms(preset):
    # `uses_word` passes an example only with one of the forms: a misspelled form fails every right example that
    # uses it ("wrap" once had "wraped", "wraping", so "wrapped" failed)
    _, records, _ = preset
    short = [r for r in records if re.fullmatch(r"[^aeiou]*[aeiou][^aeiouwxy]", r["word"])]
    assert {"hug", "plan", "wrap", "wet"} <= {r["word"] for r in short}
    for r in short:
        doubled = r["word"] + r["word"][-1]
        suffixed = [f for f in r["forms"] if re.search(r"(?:ed|ing|er|est)$", f) and f.startswith(r["word"])]
        assert all(f.startswith(doubled) for f in suffixed), (r["word"], r["forms"])


def test_the_held_out_split_is_large_enough_for_a_blind_comparison(preset):
    cfg, records, _ = preset
    train, held = split_heldout(records, cfg.data.heldout_fraction)
    assert len(held) >= 64 and len(train) + len(held) == len(records)
    assert {r["pos"] for r in held} == {"noun", "verb", "adjective"}


def test_hybrid_sends_the_countable_dimensions_to_rules_and_the_rest_to_the_model(preset, registry):
    cfg, _, rubric = preset
    assert cfg.judge.name == "hybrid"
    assert cfg.judge.params.judges.llm.params.backend.name == "llama_cpp"
    hybrid = HybridJudge(registry.validate_params("judge", "hybrid", {**cfg.judge.params, "judges": {
        "rule": "rule", "llm": "rule"}}, "judge.params"))
    routes = {label: [rubric.dimensions[i].name for i in indices] for label, indices in hybrid.routing(rubric).items()}
    assert routes == {"rule": RULE_DIMENSIONS, "llm": MODEL_DIMENSIONS}


def score(rubric, record, answers):
    """The rule judge's scores per dimension name for each answer (NaN for the model's dimensions)."""
    out = RuleJudge().score(Rollout(records=[record], completions=[answers]), rubric)[0]
    return [dict(zip(rubric.dimension_names, row.tolist(), strict=True)) for row in out]


def test_the_rules_tell_a_good_answer_from_the_failures_a_reader_sees(preset):
    _, records, rubric = preset
    forget = next(r for r in records if r["word"] == "forget")
    good, *bad = score(rubric, forget, [
        "To forget is to not remember something. I forgot my keys at home this morning.",
        # SmolLM2's own failures before training: no definition, only one sentence, nothing after it
        'A simple example of "forget" is "I forgot to bring my wallet."',
        "To forget means to not remember something.",
        # an example without the word; a rambling answer
        "To forget is to not remember something. I lost my keys.",
        "Sure! To forget is when your memory does not keep something, which happens to everyone now and then, "
        "young or old. For example, people often forget names at parties. It is normal. You can write things down "
        "in a small notebook so you do not forget them again.",
    ])
    assert (good["brevity"], good["uses_word"]) == (1.0, 1.0)
    assert [(b["brevity"], b["uses_word"]) for b in bad] == [(0.5, 0.0), (0.5, 0.0), (1.0, 0.0), (0.0, 1.0)]
    for scores in (good, *bad):
        assert all(math.isnan(scores[name]) for name in MODEL_DIMENSIONS), "left to the model judge"


def test_the_rule_dimensions_score_their_own_anchor_examples_at_their_level(preset):
    """An anchor's examples, positive and negative, are answers at that level: the checks must agree with them."""
    _, records, rubric = preset
    borrow = next(r for r in records if r["word"] == "borrow")
    for dim in rubric.dimensions:
        if dim.name not in RULE_DIMENSIONS:
            continue
        for level, anchor in dim.anchors.items():
            examples = [re.sub(r"\s+", " ", e) for e in [*anchor.positive, *anchor.negative]]
            assert examples, (dim.name, level)
            assert [s[dim.name] for s in score(rubric, borrow, examples)] == [level] * len(examples), (dim.name, level)
