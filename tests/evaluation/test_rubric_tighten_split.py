"""``rlkit rubric tighten``'s split: a saturated dimension whose checks measure two properties (length and wording)
and whose top samples differ in length is proposed as two dimensions with the total weight kept, which the audit
accepts; a dimension whose anchor joins two qualities with "and" splits by them; where no split rule applies the
command says why, one line per dimension."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.core.rubric import load_rubric, rubric_from_dict
from rlkit.evaluation.rubric_splitting import _qualities, propose_split, top_differences
from rlkit.evaluation.rubric_tightening import Saturation, propose

STYLE = """name: tidy_arithmetic
version: "1.0"
description: Sums, answered briefly and naming the sum.
dimensions:
  - name: correctness
    description: The last number in the answer equals the sum.
    type: binary
    weight: 2.0
    anchors:
      0: {text: "Wrong or missing number", negative: ["12 (for 3+4=)"]}
      1: {text: "Correct sum", positive: ["7 (for 3+4=)"]}
    checks:
      - {type: match, field: reference, mode: numeric}
  - name: style
    description: The answer is brief and says which number is the sum.
    type: scale
    range: [1, 5]
    weight: 1.5
    anchors:
      1: {text: "Rambles and never says which number is the sum", negative: ["7 7 7"]}
      5: {text: "Brief, and says which number is the sum", positive: ["The sum is 7."]}
    checks:
      - {type: length, max: 200, unit: chars}
      - {type: keywords, any: [sum, total]}
"""
PADDING = " Adding the two numbers gives the result written here, checked twice over to be sure of it." * 3


@pytest.fixture(autouse=True)
def _audit_store(monkeypatch, tmp_path):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))  # the audit stores its verdict there


def style_run(tmp_path: Path, rubric_extra: str = "") -> Path:
    """A run folder as `rlkit fit` leaves one (metrics, samples with records, the saved config) at the end of a run on
    STYLE whose style dimension saturated at 5: its top answers name the sum, short or long; below it, rambling ones
    (which share the top answers' words: no pattern for the tighten rules to mark down)."""
    rubric = tmp_path / "tidy.yaml"
    rubric.write_text(STYLE)
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(f"rubric:\n  path: {rubric}\n{rubric_extra}judge:\n  name: rule\n")
    (run / ".hydra" / "overrides.yaml").write_text(f"- rubric.path={rubric}\n- seed=1\n")
    with (run / "metrics.jsonl").open("w") as fh:
        for t in range(12):
            fh.write(json.dumps({"step": t, "metrics": {"rewards/correctness/saturated_groups": 0.2,
                                                        "rewards/style/saturated_groups": 0.9}}) + "\n")
    rows = []
    for t in (0, 5, 10):
        for i, (a, b) in enumerate([(3, 4), (5, 9), (12, 7), (2, 2), (8, 1), (6, 6)]):
            s = a + b
            top = t >= 5 or i < 3
            text = [f"The sum is {s}.", f"Sum: {s}", f"{a} plus {b} makes a total of {s}, and {s} is the sum.",
                    f"The sum is {s}", f"Total {s}", f"{a} and {b} together: the sum is {s}."][i] if top else \
                f"The sum is {s}.{PADDING}"
            style = 5.0 if top else 3.0
            rows.append({"step": t, "prompt": f"{a}+{b}=", "completion": text, "reward": 0.9, "advantage": 0.0,
                         "correctness": 1.0, "style": style, "record": {"id": f"arith-{a}-{b}", "reference": str(s)}})
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_a_dimension_checking_two_properties_splits_in_two_the_audit_accepts(tmp_path, capsys):
    run = style_run(tmp_path)
    assert main(["rubric", "tighten", str(run)]) == 0  # 0: the audit passed
    printed = capsys.readouterr().out
    old = load_rubric(tmp_path / "tidy.yaml")
    proposed = load_rubric(run / "tighten" / "tidy_arithmetic-v2.0.yaml")  # loads: versioned, hash stored
    assert proposed.dimension_names == ["correctness", "style_size", "style_wording"]
    size, wording = proposed.dimensions[1:]
    # each part: its own range, anchors and checks; the length part with the level the rules raised
    assert size.range == wording.range == (1.0, 5.0)
    assert [c["type"] for c in size.checks] == ["length"] and size.checks[0]["max"] < 200
    assert wording.checks[0] == {"type": "keywords", "any": ["sum", "total"]}
    assert size.anchors[5.0].text.startswith("Its size: ") and wording.anchors[1.0].text.startswith("Its wording: ")
    # the weight splits by the parts' check weights; the rubric's total is unchanged
    assert math.isclose(sum(d.weight for d in proposed.dimensions), sum(d.weight for d in old.dimensions))
    shares = [sum(float(c.get("weight", 1.0)) for c in d.checks) for d in (size, wording)]
    assert math.isclose(size.weight / wording.weight, shares[0] / shares[1])
    assert "split into style_size (weight" in printed and "its checks measure two properties (size; wording)" in printed
    assert "its top samples differ in check 1 (length):" in printed
    # the diff: the parts added, the dimension removed
    assert re.search(r"style_size\s+│ added", printed) and re.search(r"style\s+│ removed", printed)
    assert "PASS: trust" in printed


def test_no_split_says_why_one_line_per_dimension(tmp_path, capsys):
    run = style_run(tmp_path, rubric_extra="  schedule:\n    stages: [[correctness], [style]]\n")
    main(["rubric", "tighten", str(run), "--no-audit"])
    printed = capsys.readouterr().out.splitlines()
    why = [line for line in printed if line.startswith("  no split: ")]
    assert why == ["  no split: the run's config names it at rubric.schedule.stages[1][0], which would name a "
                   "dimension that is gone"]
    proposed = load_rubric(run / "tighten" / "tidy_arithmetic-v2.0.yaml")
    assert proposed.dimension_names == ["correctness", "style"]  # tightened, left whole
    capsys.readouterr()
    main(["rubric", "tighten", str(run), "--no-audit", "--no-split", "--out", str(tmp_path / "whole.yaml")])
    assert "no split" not in capsys.readouterr().out
    assert load_rubric(tmp_path / "whole.yaml").dimension_names == ["correctness", "style"]


def _saturation(name: str, top: list[str], others: list[str]) -> Saturation:
    return Saturation(name, 0.9, (0, 9), 1.0, 0.9, top, others)


def test_two_qualities_joined_by_and_split_a_model_judged_dimension(tmp_path):
    path = tmp_path / "tone.yaml"
    path.write_text("""name: replies
version: "1.0"
dimensions:
  - name: tone
    description: How the reply reads.
    type: binary
    weight: 3.0
    anchors:
      0: {text: "Curt or rude", negative: ["No."]}
      1: {text: "Brief and polite", positive: ["Sure, here it is."]}
  - name: other
    type: binary
""")
    rubric = load_rubric(path)
    top = ["Sure, here it is.", "Of course! Happy to help with that, here is the whole answer laid out for you."]
    proposal = propose(rubric, [_saturation("tone", top, ["No."])], "llm")
    parts = proposal.splits["tone"].parts
    assert [p["name"] for p in parts] == ["tone_brief", "tone_polite"]
    assert [p["weight"] for p in parts] == [1.5, 1.5]  # no checks: half each, 3 in all
    assert parts[0]["anchors"][1] == {"text": "Brief", "positive": ["Sure, here it is."]}
    assert parts[1]["anchors"][1]["text"] == "polite"
    assert parts[0]["anchors"][0]["text"] == "Curt or rude"  # an anchor naming one quality: copied to both
    new = rubric_from_dict(proposal.data)
    assert new.dimension_names == ["tone_brief", "tone_polite", "other"] and new.version == "2.0"
    assert "split into tone_brief (weight 1.5) and tone_polite (weight 1.5)" in proposal.changes["tone"][-1]

    # the same dimension with top samples alike in everything a rule measures: left whole, with why
    alike = propose(rubric, [_saturation("tone", ["Sure, here.", "Sure, there."], ["No."])], "llm")
    assert "tone" not in alike.splits
    assert alike.whole["tone"].startswith("its top samples do not differ in anything a rule measures")


def test_the_split_rules_by_hand():
    assert _qualities("Brief, and says which number is the sum") == ("Brief", "says which number is the sum")
    assert _qualities("Short and kind and clear") is None  # three qualities, not two
    # an "and" inside one quality of a longer text (conf/rubric_files/capitals.yaml's correct_city) is no split
    assert _qualities("The city occurs as whole words (case, punctuation and the articles ignored)") is None
    assert _qualities("The answer covers every one of the listed steps in order and explains why each one matters "
                      "here") is None
    assert top_differences(["a", "b"], None) == []
    assert top_differences(["7"], None) == []  # one distinct sample: nothing to tell apart
    got = top_differences(["The sum is 7", "sum 7, the sum"], [{"type": "regex", "pattern": r"\bsum\b"}])
    assert got[0] == "check 1 (regex): 1 to 2 matches"
    assert any(d.startswith("shape: 1 of 2 are a bare number") for d in top_differences(["7", "seven it is"], None))
    rubric = rubric_from_dict({"name": "r", "version": "1", "dimensions": [
        {"name": "gated", "type": "binary", "gate": 1, "anchors": {1: "Short and kind"}},
        {"name": "mixed", "type": "binary", "anchors": {1: "Short and kind"},
         "checks": [{"type": "length", "max": 50}, {"type": "match", "field": "reference", "mode": "exact"}]},
        {"name": "and_checks", "type": "binary", "anchors": {1: "Correct and short"},
         "checks": [{"type": "regex", "pattern": "x"}, {"type": "keywords", "any": ["y"]}]}]})
    top = ["one", "two three four five"]
    assert propose_split(rubric.dimensions[0], {}, rubric, top, None, set()) == \
        "it has a gate, which two parts could not both keep"
    mixed = propose_split(rubric.dimensions[1], {"name": "mixed", "weight": 1.0, "anchors": {1: "Short and kind"},
                                                 "checks": rubric.dimensions[1].checks}, rubric, top, None, set())
    assert [p["name"] for p in mixed.parts] == ["mixed_size", "mixed_answer"]
    # checks that all belong to one property and match neither quality better than the other: whole, with why
    why = propose_split(rubric.dimensions[2], {"name": "and_checks", "weight": 1.0, "anchors": {1: "Correct and short"},
                                               "checks": rubric.dimensions[2].checks}, rubric, top, None, set())
    assert why.startswith("its checks measure one property and its check regex matches neither of 'Correct' and "
                          "'short'")
