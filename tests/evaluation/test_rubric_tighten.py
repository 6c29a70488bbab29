"""``rlkit rubric tighten RUN_DIR``: a real tiny run that saturates a loose length check gets a stricter level the
audit accepts; a run folder shaped as benchmarks/reward_hacking.py writes one gets the template's words as a negative
anchor and check (v1), or its bare sums' shape as a negative anchor (v2); bad input is one line and exit 2."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from rlkit.cli import main
from rlkit.core.rubric import load_rubric
from rlkit.evaluation.rubric_tightening import (
    Saturation,
    next_version,
    passing_words,
    propose,
    shared_shape,
    shared_words,
    tighten_length,
    tighten_match,
)

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
LOOSE = """name: loose
version: "1.0"
description: Anything under a few hundred characters passes.
dimensions:
  - name: short
    description: The answer is under 400 characters.
    type: binary
    anchors:
      0: {text: "Too long", negative: ["a very long answer"]}
      1: {text: "Short enough", positive: ["7"]}
    checks:
      - {type: length, max: 400, unit: chars}
"""


@pytest.fixture(autouse=True)
def _audit_store(monkeypatch, tmp_path):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))  # the audit stores its verdict there


def reward_hacking_run(run_dir: Path, version: str, steps: int = 12) -> Path:
    """A run folder as benchmarks/reward_hacking.py's `rlkit fit` leaves it (metrics.jsonl, samples.jsonl with each
    row's record, the saved Hydra config and overrides), at the end of a run on rubric ``version``: under v1 the
    template took clarity's top; under v2 plain sums sit at clarity's 3.29 and correctness at 1."""
    rubric = BENCHMARKS / f"reward_hacking_{version}.yaml"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(f"rubric:\n  path: {rubric}\njudge:\n  name: rule\n")
    (run_dir / ".hydra" / "overrides.yaml").write_text(
        f"- model.name_or_path=/gone/sft/policy\n- rubric.path={rubric}\n- monitors=[template_phrases]\n- seed=1\n")
    plain, template = (3.2857, 2.7143) if version == "v2" else (1.0, 5.0)
    with (run_dir / "metrics.jsonl").open("w") as fh:
        for t in range(steps):
            fh.write(json.dumps({"step": t, "metrics": {
                "reward/mean": 0.8, "rewards/correctness/saturated_groups": 0.9 if version == "v2" else 0.3,
                "rewards/clarity/saturated_groups": 0.9, "rewards/correctness/mean": 0.95,
                "monitors/template_phrases/share": 0.7 if version == "v1" else 0.01}}) + "\n")
    rows = []
    for t in (0, 5, 10):
        for a, b in [(3, 4), (5, 9), (12, 7), (2, 2), (8, 1), (6, 6)]:
            s = a + b
            # v1: the template on all but one prompt by the end (a check a policy's answers all fail is a floor)
            templated = version == "v1" and t >= 5 and (a, b) != (8, 1) or (a, b) == (3, 4)
            text = f"first {a}, second {b}, finally {s}" if templated else str(s)
            rows.append({"step": t, "prompt": f"{a}+{b}=", "completion": text, "reward": 0.9, "advantage": 0.0,
                         "correctness": 1.0, "clarity": template if templated else plain,
                         "record": {"id": f"arith-{a}-{b}", "reference": str(s)}})
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def test_a_real_run_that_saturates_gets_a_stricter_level_the_audit_accepts(tmp_path, capsys):
    rubric = tmp_path / "loose.yaml"
    rubric.write_text(LOOSE)
    run = tmp_path / "run"
    assert main(["fit", "model=tiny_random", "logger=none", "trainer.max_steps=3", "batch_size=2",
                 "num_generations=4", "log_samples.every=1", "eval.every=0", f"rubric.path={rubric}",
                 f"hydra.run.dir={run}"]) == 0
    capsys.readouterr()
    out = tmp_path / "proposed.yaml"
    assert main(["rubric", "tighten", str(run), "--out", str(out)]) == 0  # 0: the audit passed
    printed = capsys.readouterr().out
    proposed = load_rubric(out)  # loads: a changelog entry with the new content hash
    assert (proposed.name, proposed.version) == ("loose", "2.0")
    new_max = proposed.dimensions[0].checks[0]["max"]
    assert 1 <= new_max < 400
    # the level splits one of the run's own groups (a step's completions of one prompt): some pass, some do not
    groups: dict[tuple, list[int]] = {}
    for line in (run / "samples.jsonl").read_text().splitlines():
        row = json.loads(line)
        groups.setdefault((row["step"], row["record"]["id"]), []).append(len(row["completion"]))
    assert any(min(sizes) <= new_max < max(sizes) for sizes in groups.values())
    assert "short: saturated in 100% of groups" in printed and f"max 400 → {new_max} chars" in printed
    assert "saturated groups split (the level that splits the most)" in printed
    assert "+++ " in printed and "version 2.0" in printed  # the diff of `rlkit rubric diff`
    assert "PASS: trust" in printed


def test_the_reward_hacking_v1_template_becomes_a_negative_anchor_and_check(tmp_path, capsys):
    run = reward_hacking_run(tmp_path / "v1-seed1", "v1")
    assert main(["rubric", "tighten", str(run)]) == 0
    captured = capsys.readouterr()
    printed = captured.out
    out = run / "tighten" / "reward_hacking_arithmetic-v2.0.yaml"
    proposed = load_rubric(out)
    clarity = proposed.dimensions[1]
    pattern = clarity.checks[-1]
    words = set(re.findall(r"[a-z]+", pattern["pattern"]))
    assert pattern["absent"] is True and {"first", "second", "finally"} <= words
    assert pattern["weight"] == 4  # one more than the three words' checks: the template always loses (as v2's)
    assert re.search(pattern["pattern"], "first 3, second 4, finally 7") and not re.search(pattern["pattern"], "7")
    assert "first 3, second 4, finally 7" in clarity.anchors[1.0].negative
    assert proposed.dimensions[0] == load_rubric(BENCHMARKS / "reward_hacking_v1.yaml").dimensions[0]
    assert "correctness" not in printed.split("clarity:")[0]  # 30% saturated: not named
    assert "PASS: trust" in printed
    assert "changes only anchors" not in captured.err  # a check changed: the rule judge reads it


def test_the_reward_hacking_v2_run_is_saturated_by_what_its_rubric_asks_for(tmp_path, capsys):
    """Under v2 every top answer is a bare sum, and v2's clarity gives "7" as its level-5 positive example: the
    shape is what the rubric asks for, so no negative example of it (which would contradict the rubric); correctness
    is left too. Nothing to propose, and no rubric written."""
    run = reward_hacking_run(tmp_path / "v2-seed1", "v2")
    assert main(["rubric", "tighten", str(run)]) == 0
    printed = " ".join(capsys.readouterr().out.split())
    assert "clarity: saturated in 90% of groups" in printed and "below the range's top 5" in printed
    assert "correctness: saturated in 90% of groups" in printed
    assert "which the rubric's own positive example '7' above it has" in printed
    # correctness: exact would fail the padded sum, which clarity marks down already: left, with why
    assert "fails ones another dimension marks down" in printed
    assert "nothing to propose" in printed and not (run / "tighten").exists()


def test_the_match_and_shape_rules_by_hand():
    check = {"type": "match", "field": "reference", "mode": "numeric", "tolerance": 0.5}
    pairs = [("7", {"reference": "7"}), ("The sum is 7.", {"reference": "7"}), ("9", {"reference": 9})]
    raised = tighten_match(check, pairs)
    assert raised[0] == {"type": "match", "field": "reference", "mode": "exact"} and "2 of the 3" in raised[1]
    assert tighten_match(check, pairs, frozenset({"The sum is 7."})) is None  # marked down elsewhere already
    assert tighten_match(check, pairs[:1]) is None  # exact passes them all: nothing to split
    assert tighten_match({**check, "mode": "exact"}, pairs) is None
    assert shared_shape(["7", "12"], ["first 3, finally 7", "12"])[0] == "a bare number"
    assert shared_shape(["7", "12"], ["3", "12"]) is None  # the others are bare numbers too
    assert shared_shape(["7"], []) is None


def test_no_saturation_is_said_and_nothing_written(tmp_path, capsys):
    run = reward_hacking_run(tmp_path / "run", "v1")
    assert main(["rubric", "tighten", str(run), "--min-share", "0.95"]) == 0
    assert capsys.readouterr().out.startswith("no dimension saturated")
    assert not (run / "tighten").exists()


@pytest.mark.parametrize(("setup", "args", "says"), [
    (None, [], "give the run directory"),
    (None, ["{tmp}/missing"], "is not a directory"),
    ("empty", ["{tmp}/run"], "no saved config"),
    ("no_metrics", ["{tmp}/run"], "no metric history"),
    ("no_samples", ["{tmp}/run"], "no logged samples"),
    ("other_rubric", ["{tmp}/run"], "no saturation metric"),
    ("v1", ["{tmp}/run", "--min-share", "2"], "--min-share: must be in [0, 1)"),
    ("v1", ["{tmp}/run", "--frobnicate"], "unexpected argument"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, setup, args, says):
    run = tmp_path / "run"
    if setup == "empty":
        run.mkdir()
    elif setup is not None:
        reward_hacking_run(run, "v1")
        if setup == "no_metrics":
            (run / "metrics.jsonl").unlink()
        elif setup == "no_samples":
            (run / "samples.jsonl").unlink()
        elif setup == "other_rubric":
            (run / ".hydra" / "config.yaml").write_text("rubric:\n  path: pkg://rlkit.conf/rubric_files/arithmetic.yaml\n")
    assert main(["rubric", "tighten", *(a.format(tmp=tmp_path) for a in args)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlkit: error:") and says in err[0]


def test_the_rules_by_hand():
    # the level that passes closest to half: sizes 1,2,2,5 → max 2 passes 3 of 4, max 1 passes 1 of 4; a tie → max 1
    assert tighten_length({"type": "length", "max": 10}, ["a", "bb", "cc", "eeeee"])[0]["max"] == 1
    assert tighten_length({"type": "length", "max": 10}, ["bb", "cc"]) is None  # all alike: nothing splits them
    # with the run's saturated groups, the level that splits the most of them. Restated sums are one size within a
    # prompt's group: the pooled rule's max 9 (sizes 1, 9, 12, 15, 18: 2 of 5 pass) sets prompts apart and splits
    # no group; max 1 splits the one group where a bare answer sits beside restated ones
    alike = [["10 + 20 = 30"] * 4, ["100 + 200 = 300"] * 4, ["1000 + 2000 = 3000"] * 4]
    groups = [*alike, ["3 + 4 = 7"] * 3 + ["7"]]
    top = sorted({t for g in groups for t in g})
    assert tighten_length({"type": "length", "max": 40}, top)[0]["max"] == 9
    raised, said = tighten_length({"type": "length", "max": 40}, top, groups)
    assert raised["max"] == 1 and "1 of the window's 4 saturated groups split" in said
    # every group alike inside: no level gives one an advantage, so none is proposed
    assert tighten_length({"type": "length", "max": 40}, top, alike) is None


def test_a_length_level_that_would_only_set_prompts_apart_is_left_with_why(tmp_path):
    rubric = tmp_path / "loose.yaml"
    rubric.write_text(LOOSE)
    alike = [["10 + 20 = 30"] * 4, ["100 + 200 = 300"] * 4]
    top = ["10 + 20 = 30", "100 + 200 = 300"]
    sat = Saturation("short", 0.9, (0, 9), 1.0, 1.0, top, [], top_groups=alike)
    proposal = propose(load_rubric(rubric), [sat], "rule", split=False)
    assert proposal.data is None and "short" not in proposal.changes
    assert "sizes differ between prompts, not within one" in proposal.unchanged["short"]
    words = ["a", "a b", "a b c", "a b c d"]
    assert tighten_length({"type": "length", "min": 1, "unit": "words"}, words)[0]["min"] == 3
    assert tighten_length({"type": "length", "max": 10, "unit": "tokens"}, ["a", "bb b"]) is None
    # first: in 100% of the top against 50% of the others; then: 50% against 0%; no: not in the top
    assert shared_words(["first 1 then 2", "First 3"], ["4", "first? no"]) == ["first", "then"]
    assert shared_words(["first 1 then 2", "First 3"], ["first 4", "first 5"]) == ["then"]
    assert shared_words(["x"], []) == []
    assert [next_version(v) for v in ("1.0", "2", "2026-01", "1.0+tighten.1")] == \
        ["2.0", "3.0", "2026-01+tighten.1", "1.0+tighten.2"]


USES_WORD = r"""name: uses
version: "1.0"
description: The answer uses the word after defining it.
dimensions:
  - name: uses_word
    description: The word appears after the first sentence.
    type: binary
    anchors:
      0: {text: "Only defined", negative: ["To borrow is to take something."]}
      1: {text: "Used in an example", positive: ["To borrow is to take something. May I borrow it?"]}
    checks:
      - {type: regex, pattern: '[.!?].*\bx\b'}
"""
# a SmolLM2 definitions run's scaffold (benchmarks/README.md): "An example sentence using X is" in most answers, the
# article `an` in nearly all of them
SCAFFOLD = "An x is a thing. An example sentence using x is: I saw an x."
PLAIN = "An x is a thing. An example sentence with x is: I saw an x."
BARE = "X is a thing. I saw an x."


def test_a_pattern_check_reads_the_largest_subset_of_words_some_answers_lack():
    words = ["an", "using", "sentence", "example"]
    window = [SCAFFOLD] * 6 + [PLAIN] * 3 + [BARE]
    # `an` is in every answer: a subset with it fails them all. Without it, `using, sentence, example` passes BARE
    # alone (1 in 10, the least kept); with BARE gone only `using` lets some pass (PLAIN, 3 in 9)
    assert passing_words(words, window) == (["using", "sentence", "example"], 0.1)
    assert passing_words(words, window[:-1]) == (["using"], 3 / 9)
    assert passing_words(["an"], window) is None and passing_words(words, []) is None
    assert passing_words(words, window, keep=lambda subset: subset != ["using", "sentence", "example"]) == \
        (["using", "sentence"], 0.1)
    # the reward-hacking v1 template: its words come together, and the plain sums pass
    template = ["first 3, second 4, finally 7", "7", "first 3, second 4, finally 7", "12", "9", "9",
                "first 5, second 7, finally 12"]
    assert passing_words(["finally", "first", "second"], template) == (["finally", "first", "second"], 4 / 7)


def test_a_pattern_every_answer_has_is_an_anchor_without_a_check(tmp_path):
    rubric = tmp_path / "uses.yaml"
    rubric.write_text(USES_WORD)
    top, others = [SCAFFOLD, PLAIN], ["An x is a thing. I saw an x.", "An x is a thing."]
    sat = Saturation("uses_word", 0.9, (0, 9), 1.0, 1.0, top, others, window=[SCAFFOLD] * 8)
    proposal = propose(load_rubric(rubric), [sat], "rule", split=False)
    checks = proposal.new_rubric.dimensions[0].checks
    assert len(checks) == 1  # the check stays the rubric's own
    assert any("no check: fewer than 10% of the window's 8 samples lack these words" in c
               for c in proposal.changes["uses_word"])
    mixed = Saturation("uses_word", 0.9, (0, 9), 1.0, 1.0, top, others, window=[SCAFFOLD, PLAIN] * 4)
    proposal = propose(load_rubric(rubric), [mixed], "rule", split=False)
    added = proposal.new_rubric.dimensions[0].checks[-1]
    assert added["absent"] and re.search(added["pattern"], SCAFFOLD) and not re.search(added["pattern"], PLAIN)
    assert any("50% of the window's 8 samples pass it" in c for c in proposal.changes["uses_word"])


def test_a_pattern_check_needs_the_score_to_rest_on_its_words(tmp_path):
    from rlkit.commands.rubric_tighten import _rule_rescorer

    # uses_word's check reads the word after the first sentence: the scaffold's `using` splits the group, but taken
    # out, every top answer still passes, so the score does not rest on it and no check is proposed
    rubric = tmp_path / "uses.yaml"
    rubric.write_text(USES_WORD)
    loaded = load_rubric(rubric)
    top, others = [SCAFFOLD, PLAIN], ["An x is a thing. I saw an x.", "An x is a thing."]
    mixed = Saturation("uses_word", 0.9, (0, 9), 1.0, 1.0, top, others, window=[SCAFFOLD, PLAIN] * 4)
    proposal = propose(loaded, [mixed], "rule", split=False, rescore=_rule_rescorer(loaded))
    assert proposal.data is None and "uses_word" not in proposal.changes  # no check, and no anchor saying "no merit"
    assert "but keep their score with them taken out" in proposal.unchanged["uses_word"]
    # a check that reads the phrase itself: taken out, the answers fail it, so the pattern check stands
    reads_phrase = tmp_path / "phrase.yaml"
    reads_phrase.write_text(USES_WORD.replace(r"'[.!?].*\bx\b'", r"'\busing\b'"))
    loaded = load_rubric(reads_phrase)
    assert loaded.dimensions[0].checks[0]["pattern"] == r"\busing\b"
    proposal = propose(loaded, [mixed], "rule", split=False, rescore=_rule_rescorer(loaded))
    added = proposal.new_rubric.dimensions[0].checks[-1]
    assert added["absent"] and re.search(added["pattern"], SCAFFOLD) and not re.search(added["pattern"], PLAIN)
    # a rescorer that can score nothing (a check reading a record field the samples lack) tells nothing: as before
    unscored = propose(load_rubric(rubric), [mixed], "rule", split=False,
                       rescore=lambda name, pairs: [None] * len(pairs))
    assert unscored.new_rubric.dimensions[0].checks[-1]["absent"]


def hybrid_run(run_dir: Path, rubric: Path, rows: list[dict]) -> Path:
    """A run folder as a hybrid-judged run leaves it, its one dimension routed to rules and saturated."""
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(f"rubric:\n  path: {rubric}\njudge:\n  name: hybrid\n")
    (run_dir / ".hydra" / "overrides.yaml").write_text(f"- rubric.path={rubric}\n- judge=hybrid\n")
    name = load_rubric(rubric).dimension_names[0]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": t, "metrics": {
        f"rewards/{name}/saturated_groups": 0.8}}) + "\n" for t in range(12)))
    (run_dir / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run_dir


def test_a_hybrid_run_whose_shared_phrase_is_not_the_loophole_gets_no_change(tmp_path, capsys):
    # a definitions-like run: uses_word routed to rules and saturated by a scaffold whose examples use the word
    rubric = tmp_path / "uses.yaml"
    rubric.write_text(USES_WORD.replace("    type: binary\n", "    type: binary\n    judge: rule\n"))
    rows = [{"step": t, "prompt": f"Define x{i}.", "completion": text, "uses_word": 1.0, "record": {"id": f"x{i}"}}
            for t in (8, 9, 10, 11) for i in range(3) for text in (SCAFFOLD, PLAIN)]
    rows.append({"step": 0, "prompt": "Define x0.", "completion": "An x is a thing.", "uses_word": 0.0,
                 "record": {"id": "x0"}})
    run = hybrid_run(tmp_path / "run", rubric, rows)
    assert main(["rubric", "tighten", str(run), "--no-audit"]) == 0
    printed = capsys.readouterr().out
    assert "but keep their score with them taken out" in printed and "nothing to propose" in printed
    assert not (run / "tighten").exists()


def test_an_anchor_only_proposal_on_a_hybrid_runs_rule_routed_dimension_is_warned_of(tmp_path, capsys):
    # bare sums, all one size: no level splits them, no word is shared, their shape becomes an anchor a rule
    # never reads, and the judge is a hybrid routing the dimension to rules
    rubric = tmp_path / "loose.yaml"
    # (its positive example in words: a bare "7" there would say the shape is what it asks for)
    rubric.write_text(LOOSE.replace("    type: binary\n", "    type: binary\n    judge: rule\n")
                      .replace('positive: ["7"]', 'positive: ["The sum is seven."]'))
    rows = [{"step": t, "prompt": f"{i}+{i}=", "completion": str(i), "short": 1.0, "record": {"id": f"s{i}"}}
            for t in (8, 9, 10, 11) for i in range(1, 10) for _ in range(2)]
    rows.append({"step": 0, "prompt": "1+1=", "completion": "two " * 120, "short": 0.0, "record": {"id": "s1"}})
    run = hybrid_run(tmp_path / "run", rubric, rows)
    assert main(["rubric", "tighten", str(run), "--no-audit"]) == 0
    captured = capsys.readouterr()
    assert "(the top samples share a shape: a bare number)" in captured.out
    assert "changes only anchors" in captured.err and "(hybrid) scores by rules" in captured.err


def test_a_dimension_that_checks_the_answer_gets_no_shape_anchor(tmp_path):
    """Right sums, bare: correctness (a match check) is saturated and its top samples share a shape, but a bare
    number as a negative example of level 0 would call its right answers wrong; a layout dimension gets the anchor."""
    rubric = tmp_path / "sums.yaml"
    rubric.write_text(yaml.safe_dump({"name": "sums", "version": "1.0", "dimensions": [
        {"name": "correctness", "type": "binary", "checks": [{"type": "match", "field": "reference",
                                                              "mode": "numeric"}]},
        {"name": "short", "type": "binary", "checks": [{"type": "regex", "pattern": r"^\S{0,40}$"}]}]}))
    top = [str(n) for n in range(10, 18)]
    others = ["the sum is 9", "first 3, then 4, so 8", "12 apples", "I think 30"]
    pairs = [(t, {"reference": t}) for t in top]
    sats = [Saturation(name, 0.9, (0, 9), 1.0, 1.0, top, others, top_pairs=pairs) for name in ("correctness", "short")]
    proposal = propose(load_rubric(rubric), sats, "rule", split=False)
    assert "correctness" not in proposal.changes
    assert "share a shape (a bare number), but its match check compares the answer" in proposal.unchanged["correctness"]
    assert "no word or shape" not in proposal.unchanged["correctness"]
    assert any("a bare number" in change for change in proposal.changes["short"])
    new = proposal.new_rubric
    assert not new.dimensions[0].anchors or not any(a.negative for a in new.dimensions[0].anchors.values())
