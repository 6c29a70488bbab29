"""``rlkit rubric generate`` against a loopback chat server answering canned rubric JSON, the answer parser on
malformed answers, and ``rubric=per_record`` scoring with the rule and llm judges (``rlkit score``)."""

from __future__ import annotations

import json
import math
import re

import pytest
import torch
import yaml

from rlkit.cli import main
from rlkit.core.errors import RubricError
from rlkit.core.rubric import load_rubric, rubric_from_dict
from rlkit.evaluation.rubric_generation import parse_criteria
from rlkit.testing import offline_judge
from rlkit.testing.canned_chat import CannedChatServer

CRITERIA = [
    {"criterion": "States that 2 + 2 = 4", "category": "essential"},
    {"criterion": "Gives the answer as a digit", "category": "Essential Criteria"},
    {"criterion": "Shows the addition", "category": "important"},
    {"criterion": "Mentions that addition is commutative", "category": "important"},
    {"criterion": "Is one sentence", "category": "optional"},
    {"criterion": "Uses no jargon", "category": "optional"},
    {"criterion": "States that 2 + 2 = 5", "category": "pitfall"},
    {"criterion": "Answers a different question", "category": "Pitfall"},
]


def canned(criteria=CRITERIA, fence=True) -> str:
    body = json.dumps({"criteria": criteria})
    return f"Here is the rubric:\n```json\n{body}\n```" if fence else body


# --- the parser ---------------------------------------------------------------------------------------------------


def test_parse_reads_a_fenced_answer_and_normalises_categories():
    got = parse_criteria(canned())
    assert [c for _, c in got] == ["essential", "essential", "important", "important", "optional", "optional",
                                   "pitfall", "pitfall"]
    assert got[0] == ("States that 2 + 2 = 4", "essential")


@pytest.mark.parametrize(("answer", "problem"), [
    ("", "empty answer"),
    ("I cannot help with that.", "no JSON object"),
    ('{"criteria": [{"criterion": "x", "category": "essential"},', "invalid JSON"),
    (json.dumps({"items": []}), "expected {\"criteria\""),
    (canned(CRITERIA[:3]), "3 criteria; a rubric needs 7 to 20"),
    (canned(CRITERIA * 3), "24 criteria; a rubric needs 7 to 20"),
    (canned([*CRITERIA[:7], {"criterion": "x", "category": "bonus"}]), "criteria[7].category: 'bonus'"),
    (canned([*CRITERIA[:7], {"category": "optional"}]), "criteria[7]: no criterion text"),
    (canned([*CRITERIA[:7], "just text"]), "criteria[7]: expected an object"),
    (canned([*CRITERIA[:7], CRITERIA[0]]), "criteria[7]: repeats an earlier criterion"),
    (canned([{"criterion": f"mistake {i}", "category": "pitfall"} for i in range(7)]), "every criterion is a pitfall"),
])
def test_parse_names_what_is_wrong_with_a_malformed_answer(answer, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_criteria(answer)


def test_a_criteria_rubric_validates_its_shape():
    dims = [{"name": f"c{i}", "type": "binary", "category": "essential"} for i in range(7)]
    rubric = rubric_from_dict({"name": "r", "version": "1", "dimensions": dims})
    assert rubric.is_criteria_rubric
    # the 7-20 bound is on what a judge writes (parse_criteria); a rubric written by hand may have any number
    assert len(rubric_from_dict({"name": "r", "version": "1", "dimensions": dims[:3]}).dimensions) == 3
    with pytest.raises(RubricError, match="type must be binary"):
        rubric_from_dict({"name": "r", "version": "1", "dimensions": [
            *dims[:6], {"name": "s", "range": [1, 5], "category": "optional"}]})
    with pytest.raises(RubricError, match="either every dimension is a criterion"):
        rubric_from_dict({"name": "r", "version": "1", "dimensions": [*dims, {"name": "plain", "type": "binary"}]})


def test_the_new_fields_leave_existing_rubric_hashes_alone():
    # conf/rubric_files/arithmetic.yaml stores its hash in the changelog: loading checks it
    rubric = load_rubric("conf/rubric_files/arithmetic.yaml")
    assert rubric.content_hash.startswith("f089cdf08376")


# --- end to end: rlkit rubric generate ----------------------------------------------------------------------------


@pytest.fixture
def data(tmp_path):
    path = tmp_path / "refs.jsonl"
    path.write_text(json.dumps({"id": "q1", "prompt": "What is 2 + 2?", "reference": "2 + 2 = 4"}) + "\n"
                    + json.dumps({"prompt": "What is 3 + 3?", "reference": "6"}) + "\n", encoding="utf-8")
    return path


def _backend(server) -> list[str]:
    return ["judge=llm", "judge.params.backend.name=openai",
            f"++judge.params.backend.params={{base_url: '{server.url}', model: canned, max_tokens: 2048, "
            "max_retries: 0}"]


def test_generate_writes_validated_versioned_rubrics(tmp_path, data, capsys):
    out = tmp_path / "rubrics"
    answer = {"text": canned()}
    with CannedChatServer(lambda messages: answer["text"]) as server:
        args = ["rubric", "generate", f"data.path={data}", *_backend(server), f"generate.output={out}"]
        assert main(args) == 0, capsys.readouterr().err
        # the prompts are asked concurrently: find the first one's request, whichever arrived first
        asked = next(r[0]["content"] for r in server.requests if "What is 2 + 2?" in r[0]["content"])
        assert "What is 2 + 2?" in asked and "2 + 2 = 4" in asked and "weight 0.8" in asked
        files = sorted(p.name for p in out.glob("*.yaml"))
        assert len(files) == 2 and "q1.yaml" in files
        rubric = load_rubric(out / "q1.yaml")  # validated, and the changelog hash matches the content
        assert rubric.version == "1" and rubric.is_criteria_rubric and len(rubric.dimensions) == 8
        assert [d.weight for d in rubric.dimensions] == [1.0, 1.0, 0.7, 0.7, 0.3, 0.3, 0.8, 0.8]
        assert rubric.dimensions[6].name == "pitfall_1" and rubric.dimensions[6].category == "pitfall"
        assert rubric.changelog[-1].hash == rubric.content_hash
        records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
        assert records[0]["rubric"] == str(out / "q1.yaml") and records[0]["rubric_hash"] == rubric.content_hash
        assert records[1]["reference"] == "6"

        # the same answer again: files untouched; a changed answer: version 2 with its own changelog entry
        assert main(args) == 0
        assert load_rubric(out / "q1.yaml").version == "1"
        capsys.readouterr()
        answer["text"] = canned([*CRITERIA, {"criterion": "Says 'four'", "category": "optional"}])
        assert main(args) == 0
        bumped = load_rubric(out / "q1.yaml")
        assert bumped.version == "2" and len(bumped.changelog) == 2 and bumped.content_hash != rubric.content_hash
        assert "2 changed: version bumped" in capsys.readouterr().out


def test_a_malformed_answer_is_one_error_line_and_nothing_is_written(tmp_path, data, capsys):
    out = tmp_path / "rubrics"
    # the second prompt's answer, and its one retry's, hold no JSON (by content: the two prompts may be asked at once)
    def answer(messages):
        return "no json here" if any("3 + 3" in m["content"] for m in messages) else canned()

    with CannedChatServer(answer) as server:
        code = main(["rubric", "generate", f"data.path={data}", *_backend(server), f"generate.output={out}"])
        err = capsys.readouterr().err.strip().splitlines()
        assert code == 2 and len(err) == 1, err
        assert err[0].startswith(f"rlkit: error: {data}:2: the judge's rubric cannot be used: no JSON object"), err
        retries = [r for r in server.requests if "cannot be used" in r[-1]["content"]]  # the reminder
        assert len(server.requests) == 3 and len(retries) == 1 and "3 + 3" in retries[0][0]["content"]
    assert not out.exists()


def test_generate_needs_a_reference_and_a_model(tmp_path, capsys):
    data = tmp_path / "refs.jsonl"
    data.write_text(json.dumps({"prompt": "Hi"}) + "\n", encoding="utf-8")
    with CannedChatServer(lambda messages: canned()) as server:
        assert main(["rubric", "generate", f"data.path={data}", *_backend(server)]) == 2
    assert f"{data}:1: needs a \"reference\" answer" in capsys.readouterr().err
    assert main(["rubric", "generate", f"data.path={data}", *offline_judge("llm")]) == 2
    assert "judge.params.backend: the offline tiny judge cannot write rubrics" in capsys.readouterr().err


# --- rubric=per_record: rlkit score ---------------------------------------------------------------------------------


def _criteria_rubric(tmp_path, name="own.yaml"):
    dims = [{"name": "essential_1", "type": "binary", "category": "essential", "weight": 1.0,
             "checks": [{"type": "regex", "pattern": r"\b4\b"}]},
            {"name": "essential_2", "type": "binary", "category": "essential", "weight": 1.0,
             "checks": [{"type": "regex", "pattern": "^[0-9]"}]},
            {"name": "important_1", "type": "binary", "category": "important", "weight": 0.7,
             "checks": [{"type": "keywords", "any": ["plus", "+"]}]},
            {"name": "optional_1", "type": "binary", "category": "optional", "weight": 0.3,
             "checks": [{"type": "length", "max": 20}]},
            {"name": "optional_2", "type": "binary", "category": "optional", "weight": 0.3,
             "checks": [{"type": "keywords", "any": ["four"]}]},
            {"name": "pitfall_1", "type": "binary", "category": "pitfall", "weight": 0.8,
             "checks": [{"type": "regex", "pattern": r"\b5\b"}]},
            {"name": "pitfall_2", "type": "binary", "category": "pitfall", "weight": 0.8,
             "checks": [{"type": "keywords", "any": ["maybe"]}]}]
    path = tmp_path / name
    path.write_text(yaml.safe_dump({"name": "own", "version": "1", "dimensions": dims}), encoding="utf-8")
    return path


def _score(tmp_path, capsys, records, *judge):
    data = tmp_path / "scored_in.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    out = tmp_path / "scored.jsonl"
    code = main(["score", "rubric=per_record", f"data.path={data}", f"score.output={out}", "score.progress=false",
                 *judge])
    assert code == 0, capsys.readouterr().err
    return [json.loads(line) for line in out.read_text().splitlines()]


def test_rule_judge_scores_each_record_against_its_own_rubric(tmp_path, capsys):
    own = _criteria_rubric(tmp_path)
    rows = _score(tmp_path, capsys, [
        {"prompt": "2+2?", "rubric": str(own), "completions": ["4 (2 plus 2)", "5 maybe, or 4 plus"]}], "judge=rule")
    first, second = (row["scores"] for row in rows)
    # first: essentials 2/2, important 1/1, optional 1 of 2 (length ok, no "four"), no pitfall
    # -> (1 + 1 + 0.7 + 0.3) / (1 + 1 + 0.7 + 0.3 + 0.3) = 3.0 / 3.3
    assert first["criteria"] == pytest.approx(3.0 / 3.3, abs=1e-5)
    assert first["essential"] == 1.0 and first["optional"] == 0.5 and first["pitfalls_avoided"] == 1.0
    # second: "4" met, starts with a digit, "plus" met, 18 chars <= 20, no "four"; both pitfalls made
    # -> (1 + 1 + 0.7 + 0.3 - 0.8 - 0.8) / 3.3
    assert second["criteria"] == pytest.approx(1.4 / 3.3, abs=1e-5)
    assert second["pitfalls_avoided"] == 0.0


def test_per_record_without_a_rubric_or_with_a_stale_one_is_one_clear_error(tmp_path, capsys):
    data = tmp_path / "in.jsonl"
    data.write_text(json.dumps({"prompt": "2+2?", "completion": "4"}) + "\n", encoding="utf-8")
    assert main(["score", "rubric=per_record", "judge=rule", f"data.path={data}"]) == 2
    # checked with the records, before any scoring: the data file and the record's line are named
    assert f"{data}: record 1 (prompt '2+2?'): rubric: rubric=per_record needs each record's own rubric" \
        in capsys.readouterr().err
    own = _criteria_rubric(tmp_path)
    data.write_text(json.dumps({"prompt": "2+2?", "completion": "4", "rubric": str(own),
                                "rubric_hash": "0" * 64}) + "\n", encoding="utf-8")
    assert main(["score", "rubric=per_record", "judge=rule", f"data.path={data}"]) == 2
    assert f"{own}: the rubric changed since the record was written" in capsys.readouterr().err


def test_llm_judge_scores_per_record_through_the_loopback_server(tmp_path, capsys):
    """The generated rubric, then the same server grading each criterion: the whole path of section 2."""
    out = tmp_path / "rubrics"
    verdict = {"essential_1": 1, "essential_2": 0, "important_1": 1, "important_2": 1, "optional_1": 0,
               "optional_2": 0, "pitfall_1": 1, "pitfall_2": 0}

    def answer(messages):
        text = messages[-1]["content"]
        return json.dumps(verdict) if "RESPONSE:" in text else canned()

    data = tmp_path / "refs.jsonl"
    data.write_text(json.dumps({"id": "q1", "prompt": "What is 2 + 2?", "reference": "4"}) + "\n", encoding="utf-8")
    with CannedChatServer(answer) as server:
        assert main(["rubric", "generate", f"data.path={data}", *_backend(server), f"generate.output={out}"]) == 0
        records = [dict(json.loads(line), completion="4") for line in (out / "records.jsonl").read_text().splitlines()]
        rows = _score(tmp_path, capsys, records, *_backend(server))
        graded = [m[-1]["content"] for m in server.requests if "RESPONSE:" in m[-1]["content"]]
    assert len(graded) == 1 and "States that 2 + 2 = 5" in graded[0]  # the record's own criteria were asked
    scores = rows[0]["scores"]
    # met: essential_1 (1.0), important_1+2 (1.4); pitfall_1 made (-0.8); possible 2 + 1.4 + 0.6 = 4.0
    assert scores["criteria"] == pytest.approx((1.0 + 1.4 - 0.8) / 4.0, abs=1e-5)
    assert scores["essential"] == 0.5 and scores["important"] == 1.0 and scores["optional"] == 0.0
    assert scores["pitfalls_avoided"] == 0.5
    assert not math.isnan(rows[0]["reward"])


def test_summarise_leaves_unscored_criteria_out_and_clips():
    from rlkit_plugins.judges.per_record import summarise

    own = rubric_from_dict({"name": "r", "version": "1", "dimensions": [
        {"name": f"e{i}", "type": "binary", "category": "essential"} for i in range(6)]
        + [{"name": "p", "type": "binary", "category": "pitfall", "weight": 5.0}]})
    frame = load_rubric("conf/rubric_files/per_record.yaml")
    nan = math.nan
    met = torch.tensor([[1, 1, 1, nan, nan, nan, 0], [0, 0, 0, 0, 0, 1, 1], [nan] * 7])
    out = summarise(met, own, frame)
    assert out[0, 0] == 1.0  # 3 of the 3 scored essentials
    assert out[1, 0] == 0.0  # 1/6 - 5/6 < 0: clipped
    assert torch.isnan(out[2]).all()  # nothing scored: not a zero
