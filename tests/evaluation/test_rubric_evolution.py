"""``rubric.evolve``: rounds of new criteria written by the judge's backend (a loopback server answering canned criteria
JSON) from within-group contrasts, the per-prompt buffer (cap, saturated criteria retired), versions and diffs, the
buffer's state, malformed answers (skipped and counted, never a crash), and ``rlkit validate``'s checks."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from rlkit.cli import main
from rlkit.config.schemas import RubricEvolveConfig
from rlkit.core.rubric import load_rubric, rubric_from_dict
from rlkit.evaluation.rubric_evolution import RubricBuffer
from rlkit.testing import offline_judge
from rlkit.testing.canned_chat import CannedChatServer, score_each_dimension, scoring_request
from rlkit_plugins.backends.openai import OpenAIBackend

BASE = [("States the sum", "essential"), ("Gives the answer as digits", "essential"),
        ("Shows the addition", "important"), ("Names both numbers", "important"), ("Is one line", "optional"),
        ("Uses no jargon", "optional"),
        ("States a wrong sum", "pitfall")]


def write_base(tmp_path, rid: str) -> str:
    dims = [{"name": f"c{i}", "description": text, "type": "binary", "category": category}
            for i, (text, category) in enumerate(BASE)]
    path = tmp_path / f"{rid}.yaml"
    path.write_text(yaml.safe_dump({"name": rid, "version": "1", "dimensions": dims}), encoding="utf-8")
    return str(path)


def criteria_json(*items: tuple[str, str]) -> str:
    return "```json\n" + json.dumps({"criteria": [{"criterion": t, "category": c} for t, c in items]}) + "\n```"


@pytest.fixture
def records(tmp_path):
    return [{"id": f"q{i}", "prompt": f"What is {i} + {i}?", "rubric": write_base(tmp_path, f"q{i}")}
            for i in range(1, 5)]


def _backend(server) -> OpenAIBackend:
    return OpenAIBackend(OpenAIBackend.Params(base_url=server.url, model="canned", max_tokens=512, max_retries=0))


def _prompt_of(messages) -> str:
    return messages[0]["content"].split("PROMPT:\n", 1)[1].split("\n", 1)[0]


class FakeScores:
    """Criteria answers by dimension name: ``columns[name]`` is a [G] list; anything else alternates 0/1."""

    def __init__(self) -> None:
        self.columns: dict[str, list[float]] = {}
        self.calls = 0

    def __call__(self, record, completions, rubric) -> torch.Tensor:
        self.calls += 1
        g = len(completions)
        return torch.tensor([self.columns.get(name, [float(j % 2) for j in range(g)])
                             for name in rubric.dimension_names], dtype=torch.float32).T


COMPLETIONS = [["4", "four", "2+2=4", "5"]] * 4
REWARDS = torch.tensor([[0.5, 0.2, 0.9, 0.1]] * 4)


def test_a_round_writes_contrast_criteria_as_a_new_validated_version(records):
    answer = criteria_json(("Writes the sum as an equation", "important"), ("Answers with a word", "pitfall"))
    with CannedChatServer(lambda messages: answer) as server:
        buffer = RubricBuffer(RubricEvolveConfig(every=1))
        done = buffer.evolve(0, records[:1], COMPLETIONS[:1], REWARDS[:1], _backend(server), FakeScores())
        asked = server.requests[0][0]["content"]
    # the best-rewarded completion against the worst, with the criteria it already has
    assert "BETTER RESPONSE:\n2+2=4" in asked and "WORSE RESPONSE:\n5" in asked
    assert "- [essential] States the sum" in asked and "What is 1 + 1?" in asked
    (version,) = done.versions
    assert version.old.version == "1" and version.new.version == "1+evolve.1"
    assert version.diff.added == ["evolved_1", "evolved_2"] and version.diff.removed == []
    assert done.metrics(buffer)["rubric/evolve_added"] == 2.0
    assert done.metrics(buffer)["rubric/evolve_malformed"] == 0.0

    (overlaid,) = buffer.overlay(records[:1])
    assert records[0]["rubric"].endswith("q1.yaml")  # the data is untouched: the judge gets a copy
    rubric = rubric_from_dict(overlaid["rubric"], "overlay")  # validated, and its changelog stores its hash
    assert rubric.content_hash == overlaid["rubric_hash"] == version.new.content_hash
    assert rubric.is_criteria_rubric and len(rubric.dimensions) == 9
    assert rubric.dimensions[-1].category == "pitfall" and rubric.dimensions[-1].weight == 0.8
    assert rubric.changelog[-1].version == "1+evolve.1" and "step 0" in rubric.changelog[-1].note
    assert buffer.overlay(records[1:]) == records[1:]  # prompts never evolved keep their own rubric


def test_malformed_answers_are_skipped_and_counted_never_a_crash(records):
    answers = {
        "What is 1 + 1?": criteria_json(("Writes the sum as an equation", "important")),
        "What is 2 + 2?": "I cannot help with that.",
        "What is 3 + 3?": criteria_json(("Something", "bonus")),
        "What is 4 + 4?": criteria_json(*[(f"criterion {i}", "optional") for i in range(9)]),  # more than max_new
    }
    with CannedChatServer(lambda messages: answers[_prompt_of(messages)]) as server:
        buffer = RubricBuffer(RubricEvolveConfig(every=1, max_new=3))
        done = buffer.evolve(0, records, COMPLETIONS, REWARDS, _backend(server), FakeScores())
    metrics = done.metrics(buffer)
    assert metrics["rubric/evolve_malformed"] == 3.0 and metrics["rubric/evolve_malformed_total"] == 3.0
    assert [v.rubric_id for v in done.versions] == ["q1"]
    problems = {row["rubric_id"]: row["problem"] for row in done.malformed}
    assert problems["q2"].startswith("no JSON object") and "'bonus'" in problems["q3"]
    assert problems["q4"].startswith("9 criteria")
    assert buffer.overlay(records)[1:] == records[1:]  # no silent change for the prompts whose answer was unusable


def test_an_empty_answer_changes_nothing_and_a_reminder_can_rescue_a_bad_one(records):
    replies = iter(["not json at all", criteria_json(("Writes the sum as an equation", "important"))])
    with CannedChatServer(lambda messages: criteria_json()) as server:
        buffer = RubricBuffer(RubricEvolveConfig(every=1))
        done = buffer.evolve(0, records[:1], COMPLETIONS[:1], REWARDS[:1], _backend(server), FakeScores())
    assert done.versions == [] and done.counts["malformed"] == 0 and buffer.prompts == {}
    with CannedChatServer(lambda messages: next(replies)) as server:
        buffer = RubricBuffer(RubricEvolveConfig(every=1, retries=1))
        done = buffer.evolve(0, records[:1], COMPLETIONS[:1], REWARDS[:1], _backend(server), FakeScores())
        assert "cannot be used" in server.requests[1][-1]["content"]
    assert done.counts["malformed"] == 0 and len(done.versions) == 1


def test_saturated_criteria_retire_and_the_oldest_go_past_the_cap(records):
    rounds = iter([criteria_json(("A", "important"), ("B", "optional")),
                   criteria_json(("C", "important")),
                   criteria_json(("D", "important"), ("E", "important"))])
    scores = FakeScores()
    with CannedChatServer(lambda messages: next(rounds)) as server:
        buffer = RubricBuffer(RubricEvolveConfig(every=1, max_active=2, retire_after=1))
        backend = _backend(server)
        buffer.evolve(0, records[:1], COMPLETIONS[:1], REWARDS[:1], backend, scores)
        assert scores.calls == 0  # nothing evolved yet: nothing to check for saturation
        scores.columns["evolved_1"] = [1.0, 1.0, 1.0, 1.0]  # every completion meets A: no signal left
        second = buffer.evolve(1, records[:1], COMPLETIONS[:1], REWARDS[:1], backend, scores)
        (v2,) = second.versions
        assert v2.new.version == "1+evolve.2" and v2.diff.removed == ["evolved_1"] and v2.diff.added == ["evolved_3"]
        entry = buffer.prompts["q1"]
        assert [c.name for c in entry.active] == ["evolved_2", "evolved_3"]
        assert entry.retired[0].retired_because == "saturated" and entry.retired[0].retired_step == 1
        third = buffer.evolve(2, records[:1], COMPLETIONS[:1], REWARDS[:1], backend, scores)
        # D and E are new; the cap of 2 retires the oldest active first (B, then C)
        assert [c.name for c in entry.active] == ["evolved_4", "evolved_5"]
        assert [(c.name, c.retired_because) for c in entry.retired[1:]] == [("evolved_2", "cap"), ("evolved_3", "cap")]
        assert third.metrics(buffer)["rubric/evolve_retired"] == 2.0
        # retired criteria are listed so the backend does not write them again
        assert "RETIRED CRITERIA" in server.requests[-1][0]["content"]


def test_unscored_answers_do_not_count_as_saturation(records):
    rounds = iter([criteria_json(("A", "important")), criteria_json()])
    scores = FakeScores()
    with CannedChatServer(lambda messages: next(rounds)) as server:
        buffer = RubricBuffer(RubricEvolveConfig(every=1))
        buffer.evolve(0, records[:1], COMPLETIONS[:1], REWARDS[:1], _backend(server), scores)
        scores.columns["evolved_1"] = [math.nan, math.nan, math.nan, 1.0]  # the judge failed on three
        done = buffer.evolve(1, records[:1], COMPLETIONS[:1], REWARDS[:1], _backend(server), scores)
    assert done.versions == [] and [c.name for c in buffer.prompts["q1"].active] == ["evolved_1"]


def test_repeats_are_dropped_and_identical_completions_ask_nothing(records):
    answer = criteria_json(("states the SUM.", "essential"), ("Writes the sum as an equation", "important"),
                           ("Writes the sum as an equation!", "optional"))
    with CannedChatServer(lambda messages: answer) as server:
        buffer = RubricBuffer(RubricEvolveConfig(every=1))
        done = buffer.evolve(0, records[:2], [COMPLETIONS[0], ["4"] * 4], REWARDS[:2], _backend(server),
                             FakeScores())
        assert len(server.requests) == 1  # q2's completions are all the same: no contrast to ask about
    assert done.counts["duplicates"] == 2 and done.counts["no_contrast"] == 1
    assert [c.text for c in buffer.prompts["q1"].active] == ["Writes the sum as an equation"]


def test_tied_rewards_still_contrast_two_different_completions(records):
    with CannedChatServer(lambda messages: criteria_json()) as server:
        RubricBuffer(RubricEvolveConfig(every=1)).evolve(0, records[:1], COMPLETIONS[:1], torch.full((1, 4), 0.5),
                                                         _backend(server), FakeScores())
        asked = server.requests[0][0]["content"]
    assert "scores them the same" in asked and "RESPONSE A:\n4" in asked and "RESPONSE B:\n5" in asked


def test_the_buffer_state_round_trips_through_json_exactly(records):
    def answer(messages):  # by content: the two prompts of the first round are asked at once, in either order
        evolved = "] A\n" in messages[0]["content"]
        return criteria_json(("C", "optional")) if evolved else criteria_json(("A", "important"), ("B", "pitfall"))

    scores = FakeScores()
    with CannedChatServer(answer) as server:
        buffer = RubricBuffer(RubricEvolveConfig(every=1))
        buffer.evolve(0, records[:2], COMPLETIONS[:2], REWARDS[:2], _backend(server), scores)
        scores.columns["evolved_2"] = [0.0] * 4
        buffer.evolve(1, records[:1], COMPLETIONS[:1], REWARDS[:1], _backend(server), scores)
    state = json.loads(json.dumps(buffer.state_dict()))
    restored = RubricBuffer(RubricEvolveConfig(every=1))
    restored.load_state_dict(state)
    assert restored.state_dict() == buffer.state_dict()
    assert restored.overlay(records) == buffer.overlay(records)
    assert restored.prompts["q1"].version == "1+evolve.2" and restored.prompts["q1"].next_number == 4


def test_a_changed_base_rubric_is_an_error_not_a_silent_change(records, tmp_path):
    from rlkit.core.errors import RubricError

    with CannedChatServer(lambda messages: criteria_json(("A", "important"))) as server:
        buffer = RubricBuffer(RubricEvolveConfig(every=1))
        buffer.evolve(0, records[:1], COMPLETIONS[:1], REWARDS[:1], _backend(server), FakeScores())
        restored = RubricBuffer(RubricEvolveConfig(every=1))
        restored.load_state_dict(buffer.state_dict())
        path = Path(records[0]["rubric"])
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        data["dimensions"][0]["description"] = "States the sum, in words"
        path.write_text(yaml.safe_dump(data), encoding="utf-8")
        with pytest.raises(RubricError, match="changed since its evolved criteria were written"):
            restored.overlay(records[:1])
        with pytest.raises(RubricError, match="changed since its evolved criteria were written"):
            buffer.overlay(records[:1])
        with pytest.raises(RubricError, match="changed since its evolved criteria were written"):
            buffer.evolve(1, records[:1], COMPLETIONS[:1], REWARDS[:1], _backend(server), FakeScores())


def test_score_each_dimension_answers_the_llm_judges_template():
    from rlkit.core.templates import render_template

    rubric = load_rubric("conf/rubric_files/arithmetic.yaml")
    text = render_template("judge/rubric_scores.jinja", rubric=rubric, prompt="2+2?", completion="4\nfour")
    assert scoring_request([{"role": "user", "content": text}]) == (rubric.dimension_names, "4\nfour")
    answer = score_each_dimension(lambda name, response: len(name), lambda messages: "other")
    assert json.loads(answer([{"role": "user", "content": text}])) == {n: len(n) for n in rubric.dimension_names}
    assert answer([{"role": "user", "content": "hello"}]) == "other"


# --- rlkit validate ---------------------------------------------------------------------------------------------


def test_validate_refuses_evolve_without_a_judge_backend_in_one_line(capsys, records, tmp_path):
    # records naming their own rubrics: the default task's do not, which validate reports as a mistake of its own
    data = tmp_path / "records.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    per_record = ["rubric=per_record", f"data.path={data}"]
    assert main(["validate", *per_record, "judge=rule", "rubric.evolve.every=2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    # the rule judge also cannot score these records' criteria (they have no checks): validate reports that too
    assert err[0].startswith("rlkit: error: rubric.evolve.every: judge=rule has no model backend")
    assert len(err) == 2 and err[1].startswith("rlkit: error: ") and "the rule judge needs `checks`" in err[1]
    assert main(["validate", *per_record, *offline_judge("llm"), "rubric.evolve.every=2"]) == 2
    assert "rubric.evolve.every: judge=llm's backend is the offline tiny judge" in capsys.readouterr().err
    assert main(["validate", *per_record, "rubric.evolve.max_active=0"]) == 2
    assert "rubric.evolve.max_active" in capsys.readouterr().err


def test_validate_refuses_evolve_on_a_rubric_that_is_not_per_record(capsys, records, tmp_path):
    data = tmp_path / "records.jsonl"  # per_record needs records naming their own rubrics (validate loads each)
    data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    with CannedChatServer(lambda messages: "{}") as server:
        backend = ["judge=llm", "judge.params.backend.name=openai",
                   f"++judge.params.backend.params={{base_url: '{server.url}', model: canned}}"]
        assert main(["validate", *backend, "rubric.evolve.every=2"]) == 2
        assert "rubric.evolve.every: evolving criteria join each record's own rubric: use rubric=per_record" \
            in capsys.readouterr().err
        assert main(["validate", *backend, "rubric=per_record", f"data.path={data}", "rubric.evolve.every=2"]) == 0
        # the estimate counts the rounds' criteria-writing calls too: 60 steps / 2 × 8 prompts
        assert "rubric.evolve: 30 rounds × 8 prompts (one call each, best against worst completion) = 240 calls" \
            in capsys.readouterr().out
