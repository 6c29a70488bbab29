"""``judge.params.reasons``: a one-line reason per dimension, asked before each score, kept beside the scores in
``rlkit score``'s output and ``rlkit calibrate``'s disagreements."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.core.errors import ConfigError
from rlkit.core.registry import load_registry
from rlkit.core.rubric import load_rubric
from rlkit.core.types import Rollout
from rlkit.judging.parsing import parse_reasons, parse_scores
from rlkit.judging.schema import rubric_json_schema
from rlkit.testing.canned_chat import CannedChatServer

REPO = Path(__file__).resolve().parents[2]
ARITHMETIC = REPO / "conf" / "rubric_files" / "arithmetic.yaml"


def _answer(messages) -> str:
    """A judge that compares the response with 7 and says why."""
    prompt = messages[-1]["content"]
    response = prompt.split("RESPONSE:")[1].strip()
    right = response == "7"
    return json.dumps({"format_reason": "starts with a digit", "format": 1,
                       "correctness_reason": f"{response} is {'' if right else 'not '}the sum 7",
                       "correctness": int(right), "brevity_reason": "short", "brevity": 5,
                       "repetition": 5})  # no reason for repetition: absent, not an empty string


def _judge(url: str, **params):
    return load_registry().create("judge", "llm", {"backend": {"name": "openai", "params": {
        "base_url": url, "max_tokens": 300}}, "reasons": True, **params})


def test_the_schema_asks_each_reason_before_its_level():
    dims = load_rubric(ARITHMETIC).dimensions
    schema = rubric_json_schema(dims, reasons=True)
    assert list(schema["properties"]) == [f for d in dims for f in (f"{d.name}_reason", d.name)]
    assert schema["required"] == list(schema["properties"]) and schema["additionalProperties"] is False
    assert schema["properties"]["brevity_reason"] == {"type": "string", "maxLength": 200}
    assert rubric_json_schema(dims) == {**rubric_json_schema(dims), "required": [d.name for d in dims]}
    assert "brevity_reason" not in rubric_json_schema(dims)["properties"]


def test_reasons_parse_beside_the_scores_and_inside_a_dimension():
    rubric = load_rubric(ARITHMETIC)
    text = 'Sure: {"format_reason": "a  digit\\nfirst", "format": 1, "correctness": {"score": 0, "why": "not 7"}}'
    assert parse_reasons(text, rubric) == {"format": "a digit first", "correctness": "not 7"}
    assert parse_scores(text, rubric).scores == {"format": 1.0, "correctness": 0.0}, "reasons are not scores"
    assert parse_reasons('{"format": 1}', rubric) == {} and parse_reasons("no json", rubric) == {}


def test_the_judge_asks_for_reasons_and_keeps_them(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path))
    rollout = Rollout(records=[{"prompt": "3+4="}], completions=[["7", "12"]])
    with CannedChatServer(_answer) as server:
        judge = _judge(server.url)
        said = judge.assess(rollout, load_rubric(ARITHMETIC))
        silent = _judge(server.url, reasons=False).assess(rollout, load_rubric(ARITHMETIC))
    scores = said.scores
    assert scores[0, :, 1].tolist() == [1.0, 0.0]
    assert said.reasons == [[{"format": "starts with a digit", "correctness": "7 is the sum 7", "brevity": "short"},
                                {"format": "starts with a digit", "correctness": "12 is not the sum 7",
                                 "brevity": "short"}]]
    assert "correctness_reason" in server.schemas[0]["properties"], "the schema asks for them"
    assert '"correctness_reason"' in server.requests[0][-1]["content"], "so does the prompt's example"
    assert silent.reasons is None


def test_reasons_need_a_model_and_room_to_write_them(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="offline tiny judge was not trained to give reasons"):
        load_registry().create("judge", "llm", {"backend": "tiny", "reasons": True})
    judge = load_registry().create("judge", "llm", {"backend": {"name": "openai", "params": {
        "base_url": "http://127.0.0.1:9/v1"}}, "reasons": True})  # max_tokens 64 by default
    with pytest.raises(ConfigError, match=r"256 for 4\), the backend allows 64: raise judge.params.backend.params"
                                          r".max_tokens") as info:
        judge.check_rubric(load_rubric(ARITHMETIC))
    assert info.value.where == "judge.params.reasons"


def _backend(url: str) -> list[str]:
    return ["judge=llm", "judge.params.reasons=true", "judge.params.backend.name=openai",
            f"++judge.params.backend.params={{base_url: '{url}', max_tokens: 300, max_retries: 0}}", "logger=none"]


def test_score_writes_the_reasons_beside_the_scores(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    data, out = tmp_path / "sums.jsonl", tmp_path / "scored.jsonl"
    data.write_text(json.dumps({"prompt": "3+4=", "reference": "7", "completions": ["7", "12"]}) + "\n")
    with CannedChatServer(_answer) as server:
        assert main(["score", f"data.path={data}", f"score.output={out}", "score.progress=false",
                     *_backend(server.url)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["reasons"]["correctness"] for line in lines] == ["7 is the sum 7", "12 is not the sum 7"]


def test_calibrate_shows_the_judges_reason_beside_a_disagreement(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    labels = tmp_path / "labels.jsonl"
    both = {"format": 1, "correctness": 1, "brevity": 5, "repetition": 5}
    labels.write_text("".join(json.dumps({"id": f"l{i}", "prompt": "3+4=", "completion": c, "labels": both}) + "\n"
                              for i, c in enumerate(["7", "07"])))  # a human calls 07 right; the judge does not
    out = tmp_path / "cal"
    with CannedChatServer(_answer) as server:
        assert main(["calibrate", f"calibrate.labels={labels}", f"calibrate.output={out}", *_backend(server.url)]) == 0
    printed = capsys.readouterr().out
    assert "07 is not the sum 7" in printed
    md = (out / "calibration.md").read_text()
    assert 'correctness 1→0 ("07 is not the sum 7")' in md
    saved = json.loads((out / "calibration.json").read_text())
    assert saved["lines"][1]["reasons"]["correctness"] == "07 is not the sum 7"


def test_fit_keeps_the_reasons_in_its_samples(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    run = tmp_path / "run"
    with CannedChatServer(_answer) as server:
        assert main(["fit", *_backend(server.url), "trainer.max_steps=1", "batch_size=2", "num_generations=2",
                     "log_samples.every=1", f"hydra.run.dir={run}"]) == 0
    rows = [json.loads(line) for line in (run / "samples.jsonl").read_text().splitlines()]
    assert rows and all(row["reasons"].startswith("format: starts with a digit; correctness: ") for row in rows)
    assert all(f"correctness: {row['completion'].strip()} is" in row["reasons"] for row in rows)
    report = (run / "report" / "report.md").read_text()
    section = report.split("## The judge's reasons", 1)[1].split("\n## ", 1)[0]
    assert "step 0" in section and section.count("| format: starts with a digit; correctness: ") == len(rows)


def _rule_and_llm(url: str, kind: str, **params):
    llm = {"name": "llm", "params": {"backend": {"name": "openai", "params": {"base_url": url, "max_tokens": 300}},
                                     "reasons": True}}
    members = {"hybrid": {"judges": {"rule": "rule", "llm": llm}, "assign": {"correctness": "llm"}},
               "ensemble": {"members": ["rule", llm, llm]},
               "cascade": {"cheap": "rule", "expensive": llm}}[kind]
    return load_registry().create("judge", kind, {**members, **params})


def test_composite_judges_pass_on_their_members_reasons(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path))
    rubric = load_rubric(ARITHMETIC)
    # the rule judge separates the first group (7 beats 12); it scores 7 and 7 alike, so a cascade escalates that one
    rollout = Rollout(records=[{"prompt": "3+4=", "reference": "7"}, {"prompt": "3+4=", "reference": "7"}],
                      completions=[["7", "12"], ["7", "7"]])
    with CannedChatServer(_answer) as server:
        hybrid, ensemble, cascade = (_rule_and_llm(server.url, kind) for kind in ("hybrid", "ensemble", "cascade"))
        hybrid, ensemble, cascade = (judge.assess(rollout, rubric) for judge in (hybrid, ensemble, cascade))
    # hybrid: the llm member's reason for the one dimension routed to it, nothing for the rule judge's
    assert hybrid.reasons[0] == [{"correctness": "7 is the sum 7"}, {"correctness": "12 is not the sum 7"}]
    # ensemble: both llm members gave one for each dimension, so each is labelled; the rule judge gives none
    assert ensemble.reasons[0][1]["correctness"] == "llm#1: 12 is not the sum 7; llm#2: 12 is not the sum 7"
    assert "repetition" not in ensemble.reasons[0][1]
    # cascade: a group's reasons come from the stage whose scores it kept
    assert cascade.reasons == [[{}, {}], [{"format": "starts with a digit", "correctness": "7 is the sum 7",
                                             "brevity": "short"}] * 2]
