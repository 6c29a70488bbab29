"""``rlkit rubric tighten`` with a model backend (``tighten.backend``): against a loopback OpenAI-compatible chat
server answering scripted completions, a good answer becomes the anchors of the split dimension's parts (validated,
versioned, audited); a malformed answer is asked again as many times as the backend retries, then is one error line,
exit 2, nothing written."""

from __future__ import annotations

import json
import re

import pytest
from test_rubric_tighten_split import style_run  # the saturated run folder, same folder

from rlkit.cli import main
from rlkit.core.rubric import load_rubric
from rlkit.evaluation.rubric_tightening_model import anchor_schema, parse_anchors
from rlkit.testing.canned_chat import CannedChatServer

LEVELS = (1.0, 2.0, 3.0, 4.0, 5.0)


@pytest.fixture(autouse=True)
def _audit_store(monkeypatch, tmp_path):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))  # the audit stores its verdict there


def anchors(name: str) -> str:
    return json.dumps({"anchors": [
        {"level": 5, "text": f"{name}: states the sum in a short sentence that names it",
         "positive": ["The sum is 7."], "negative": ["Sum: 14"]},
        {"level": 3, "text": f"{name}: a bare or padded sum"},
        {"level": 1, "text": f"{name}: no sum stated"}]})


def _dimension(messages) -> str:
    return re.search(r'^DIMENSION: (\w+)', messages[0]["content"], re.MULTILINE).group(1)


def _backend(server, retries: int = 1) -> list[str]:
    return ["tighten.backend.name=openai",
            f"++tighten.backend.params={{base_url: '{server.url}', model: canned, max_tokens: 2048, "
            f"max_retries: {retries}}}"]


def test_the_model_writes_the_anchors_of_the_split_parts(tmp_path, capsys):
    run = style_run(tmp_path)
    with CannedChatServer(lambda messages: anchors(_dimension(messages))) as server:
        assert main(["rubric", "tighten", str(run), *_backend(server)]) == 0, capsys.readouterr().err
        asked = [r[0]["content"] for r in server.requests]
        schemas = list(server.schemas)
    printed = capsys.readouterr().out
    assert len(asked) == 2  # one request per part, each answered at once
    style_size = next(a for a in asked if "DIMENSION: style_size" in a)
    # written from the run's own samples: the top-scored ones and the lowest-scored ones
    assert "Sum: 14" in style_size and "(scored 3)" in style_size and "Adding the two numbers" in style_size
    assert 'being split into' in style_size and "levels 1, 2, 3, 4, 5" in style_size
    assert schemas == [anchor_schema(LEVELS)] * 2  # the answer was constrained to the schema it is checked against
    proposed = load_rubric(run / "tighten" / "tidy_arithmetic-v2.0.yaml")
    size, wording = proposed.dimensions[1:]
    assert (size.name, wording.name) == ("style_size", "style_wording")
    assert size.anchors[5.0].text == "style_size: states the sum in a short sentence that names it"
    assert size.anchors[5.0].negative == ["Sum: 14"] and sorted(size.anchors) == [1.0, 3.0, 5.0]
    assert wording.anchors[1.0].text == "style_wording: no sum stated"
    assert size.checks[0]["max"] < 200  # the checks are still the rules'
    assert "anchors of style_size written by canned (template " in printed
    assert "written by canned" in proposed.changelog[-1].note
    assert "PASS: trust" in printed


def test_a_malformed_answer_is_retried_then_is_one_error_and_nothing_written(tmp_path, capsys):
    run = style_run(tmp_path)
    with CannedChatServer(lambda messages: '{"anchors": [{"level": 9, "text": "too high"}]}') as server:
        assert main(["rubric", "tighten", str(run), *_backend(server, retries=1)]) == 2
        requests = list(server.requests)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlkit: error: tighten.backend: the model's anchors for dimension "
                                               "style_size cannot be used after 2 attempts: anchors: expected a list")
    assert err[0].endswith("nothing written")
    assert len(requests) == 4  # two parts, each asked twice: the backend's max_retries is 1
    assert "That answer cannot be used: anchors: expected a list of 2 to 5 anchors" in requests[-1][-1]["content"]
    assert not (run / "tighten").exists()


def test_a_malformed_first_answer_asked_again_is_used(tmp_path, capsys):
    run = style_run(tmp_path)

    def answer(messages):  # the first answer anchors a level the scale has not; the reminder gets a good one
        return anchors(_dimension(messages)) if len(messages) > 1 else \
            '```json\n{"anchors": [{"level": 7, "text": "x"}, {"level": 1, "text": "y"}]}\n```'

    with CannedChatServer(answer) as server:
        assert main(["rubric", "tighten", str(run), "--no-audit", *_backend(server, retries=2)]) == 0
        reminders = [r[-1]["content"] for r in server.requests if len(r) > 1]
    assert len(reminders) == 2 and "anchors[0].level: 7 is not one of the levels 1, 2, 3, 4, 5" in reminders[0]
    capsys.readouterr()
    assert load_rubric(run / "tighten" / "tidy_arithmetic-v2.0.yaml").dimensions[2].anchors[3.0].text == \
        "style_wording: a bare or padded sum"


@pytest.mark.parametrize(("args", "says"), [
    (["tighten.backend.name=nope"], "unknown judge backend 'nope'"),
    (["tighten.model=x"], "tighten.model: unknown option; valid: tighten.backend"),
    (["tighten.backend.name=openai", "++tighten.backend.params={base_url: 'http://127.0.0.1:9/v1', max_retries: 0}"],
     "tighten.backend.params.base_url: cannot connect to http://127.0.0.1:9/v1"),
    (["tighten.backend.name=hf"], "tighten.backend.params.model: hf answers with a model you name"),
    (["tighten.backend=tiny"], "tighten.backend: backend tiny names no model to write anchors with"),
])
def test_a_bad_backend_is_one_line_and_exit_2(tmp_path, capsys, args, says):
    run = style_run(tmp_path)
    assert main(["rubric", "tighten", str(run), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlkit: error:") and says in err[0], err
    assert not (run / "tighten").exists()


@pytest.mark.parametrize(("answer", "problem"), [
    ("", "empty answer"),
    ("no json here", "no JSON object"),
    ('{"anchors": [], "extra": 1}', 'expected {"anchors": [...]} and nothing else'),
    ('{"anchors": [{"level": 5, "text": "a"}, {"level": 5, "text": "b"}]}', "level 5 anchored twice"),
    ('{"anchors": [{"level": 1, "text": "a"}, {"level": 2, "text": "b"}]}', "no anchor for the top level 5"),
    ('{"anchors": [{"level": 5, "text": ""}, {"level": 1, "text": "b"}]}', "anchors[0].text: expected a non-empty"),
    ('{"anchors": [{"level": 5, "text": "a", "why": 1}, {"level": 1, "text": "b"}]}', "unexpected key 'why'"),
    ('{"anchors": [{"level": 5, "text": "a", "negative": "x"}, {"level": 1, "text": "b"}]}',
     "anchors[0].negative: expected a list"),
    ('{"anchors": [{"level": true, "text": "a"}, {"level": 1, "text": "b"}]}', "anchors[0].level: True is not"),
])
def test_parse_names_what_is_wrong(answer, problem):
    with pytest.raises(ValueError, match=re.escape(problem)):
        parse_anchors(answer, LEVELS)
    assert parse_anchors(anchors("d"), LEVELS)[5]["positive"] == ["The sum is 7."]
