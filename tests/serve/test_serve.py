"""``rlkit serve`` over real HTTP on loopback (uvicorn in a thread, or the command in a subprocess), and the
``reward_api`` judge that asks it."""

from __future__ import annotations

import copy
import csv
import json
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
import torch
import yaml

from rlkit.cli import main
from rlkit.commands.common import compose_and_check as _validated
from rlkit.core.errors import ConfigError
from rlkit.evaluation.scoring import completion_ranks, score_records
from rlkit.judging.spend import JudgeLoad
from rlkit.serve.app import RewardServer, ServeSettings, create_app, serve_settings
from rlkit.testing import JudgeContract
from rlkit.testing.contracts import example_rubric
from rlkit_plugins.judges.ranking import ranking_rubric
from rlkit_plugins.judges.reward_api import RewardApiJudge

TOKEN_ENV = "RLKIT_TEST_SERVE_TOKEN"
GROUP = {"prompt": "3+4=", "responses": ["7", "12", "The answer is 7", "7 7 7 7 7 7 7 7 7 7"],
         "fields": {"reference": "7"}}


@pytest.fixture(scope="module")
def rule():
    """The default config with judge=rule (the arithmetic rubric), validated once."""
    return _validated(["judge=rule"], read_data=False)


def _serve(validated, token: str | None = None, **settings) -> RewardServer:
    return RewardServer(create_app(validated, ServeSettings(api_key_env=TOKEN_ENV if token else None, **settings)))


@pytest.fixture(scope="module")
def server(rule):
    with _serve(rule, rate_limit=0) as s:
        yield s


def test_reward_matches_local_scoring_with_ranks_and_breakdown(server, rule):
    body = httpx.post(f"{server.url}/v1/reward", json=GROUP).json()
    assert body["judge"] == "rule" and body["rubric"] == rule.rubric.identity()
    assert [d["name"] for d in body["dimensions"]] == rule.rubric.dimension_names
    local = score_records(replace(rule, records=[{"prompt": GROUP["prompt"], "reference": "7",
                                                  "completions": GROUP["responses"]}]))
    rewards = [r["reward"] for r in body["results"]]
    assert rewards == pytest.approx(local.rewards.tolist())
    assert [list(r["scores"].values()) for r in body["results"]] == local.raw_scores.tolist()
    assert [r["rank"] for r in body["results"]] == completion_ranks(rewards) == [1, 3, 4, 2]


def test_health_info_and_openapi_schema(server):
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}
    info = httpx.get(f"{server.url}/v1/info").json()
    assert info["judge"] == "rule" and info["chat_model"] is None
    assert info["rubric"]["hash"] == info["scored_rubric"]["hash"]
    spec = httpx.get(f"{server.url}/openapi.json").json()
    request = spec["paths"]["/v1/reward"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert request["$ref"].endswith("/RewardRequest")
    assert {"prompt", "responses", "fields"} <= set(spec["components"]["schemas"]["RewardRequest"]["properties"])
    chat = httpx.post(f"{server.url}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    assert chat.status_code == 404 and "hf backend" in chat.json()["detail"]


def test_auth_rate_limit_and_size_caps(rule, monkeypatch):
    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    with _serve(rule, token=True, rate_limit=5, max_responses=3, max_response_chars=50, max_body_bytes=400) as s:
        url, auth = f"{s.url}/v1/reward", {"Authorization": "Bearer s3cret"}
        one = {"prompt": "1+1=", "responses": ["2"]}
        assert httpx.post(url, json=one).status_code == 401
        wrong = httpx.post(url, json=one, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        assert httpx.get(f"{s.url}/health").status_code == 200  # open, and not rate limited
        assert httpx.post(url, json=one, headers=auth).status_code == 200
        too_many = httpx.post(url, json={"prompt": "1", "responses": ["1"] * 4}, headers=auth)
        assert too_many.status_code == 413 and "serve.max_responses=3" in too_many.json()["detail"]
        assert httpx.post(url, json={"prompt": "1", "responses": ["x" * 51]}, headers=auth).status_code == 413
        big = httpx.post(url, json={"prompt": "p" * 500, "responses": ["1"]}, headers=auth)
        assert big.status_code == 413 and "serve.max_body_bytes=400" in big.json()["detail"]
        chunked = httpx.post(url, content=iter([b'{"prompt": "', b"p" * 500, b'", "responses": ["1"]}']),
                             headers=auth)  # no Content-Length: counted while read
        assert chunked.status_code == 413
        limited = httpx.post(url, json=one, headers=auth)  # the 6th in a minute: refused ones count too
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1


@pytest.mark.parametrize(("body", "needle"), [
    (b"{not json", "json_invalid"),
    (json.dumps({"prompt": "1+1="}).encode(), "responses"),
    (json.dumps({"prompt": "1+1=", "responses": "2"}).encode(), "responses"),
    (json.dumps({"prompt": "1+1=", "responses": []}).encode(), "at least 1"),
    (json.dumps({"prompt": "1", "responses": ["2"], "fields": {"prompt": "x"}}).encode(), "own prompt field"),
    (json.dumps({"prompt": "1", "responses": ["2"], "fields": {"a": [1]}}).encode(), "fields"),
    (json.dumps({"prompt": "1", "responses": ["2"], "fields": {"reference": "two"}}).encode(), "not a number"),
])
def test_malformed_requests_are_422_with_a_message(server, body, needle):
    response = httpx.post(f"{server.url}/v1/reward", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    assert needle in json.dumps(response.json())


_GOOD = '{"prompt": "3+4=", "responses": ["7", "12"], "fields": {"reference": "7", "n": 1.5}}'
DEEP = "[" * 10_000 + "]" * 10_000


@pytest.mark.parametrize(("body", "loc", "needle"), [
    pytest.param(_GOOD.replace("1.5", "NaN"), ["body", "fields", "n"], "NaN is not a JSON number", id="fields-nan"),
    pytest.param(_GOOD.replace("1.5", "Infinity"), ["body", "fields", "n"], "Infinity is not a JSON number",
                 id="fields-inf"),
    pytest.param(_GOOD.replace("1.5", "-Infinity"), ["body", "fields", "n"], "-Infinity is not a JSON number",
                 id="fields-minus-inf"),
    pytest.param(_GOOD.replace("1.5", "1e999"), ["body", "fields", "n"], "overflows a 64-bit float",
                 id="fields-1e999"),
    pytest.param(_GOOD.replace('"12"', "NaN"), ["body", "responses", 1], "NaN is not a JSON number",
                 id="response-nan"),
    pytest.param(_GOOD.replace('"12"', "-1e999"), ["body", "responses", 1], "overflows", id="response-minus-1e999"),
    pytest.param(_GOOD.replace('"3+4="', "Infinity"), ["body", "prompt"], "Infinity is not a JSON number",
                 id="prompt-inf"),
    pytest.param(_GOOD.replace("{", '{"extra": -Infinity, ', 1), ["body", "extra"], "-Infinity is not a JSON number",
                 id="top-level-key-minus-inf"),
    pytest.param("NaN", ["body"], "NaN is not a JSON number", id="body-nan"),
    pytest.param("1e999", ["body"], "overflows a 64-bit float", id="body-1e999"),
    pytest.param("[Infinity]", ["body", 0], "Infinity is not a JSON number", id="body-list-inf"),
    pytest.param(DEEP, ["body", 64], "nested deeper than 64 levels", id="depth-10000"),
    pytest.param(_GOOD.replace("1.5", DEEP), None, "nested deeper than 64 levels", id="fields-depth-10000"),
    pytest.param("[" * 65 + "]" * 65, ["body", 64], "nested deeper than 64 levels", id="depth-65"),
    pytest.param(_GOOD.replace('"12"', '"\\ud800"'), ["body", "responses", 1], "lone UTF-16 surrogate",
                 id="lone-surrogate"),
    pytest.param(_GOOD.replace("1.5", "1" * 5000), ["body"], "4300 digits", id="int-5000-digits"),
    pytest.param('{"prompt": "1", "responses": ["2"', ["body", 33], "Expecting", id="truncated"),
])
@pytest.mark.parametrize("path", ["/v1/reward", "/v1/chat/completions"])
def test_non_finite_deep_or_unencodable_json_is_a_422_that_names_it(server, caplog, path, body, loc, needle):
    caplog.set_level(logging.INFO, logger="rlkit.serve")
    response = httpx.post(f"{server.url}{path}", content=body.encode(), headers={"Content-Type": "application/json"})
    assert response.status_code == 422, response.text
    [error] = response.json()["detail"]
    assert needle in json.dumps(error), error
    if loc is not None:
        assert error["loc"] == loc
    assert "Traceback" not in caplog.text and "ERROR" not in caplog.text
    assert httpx.get(f"{server.url}/health").json() == {"status": "ok"}


def test_strict_json_keeps_finite_numbers_and_the_body_cap(rule):
    with _serve(rule, rate_limit=0, max_body_bytes=1_000) as s:
        url, headers = f"{s.url}/v1/reward", {"Content-Type": "application/json"}
        ok = httpx.post(url, content=_GOOD.replace("1.5", "1.7976931348623157e308").encode(), headers=headers)
        assert ok.status_code == 200, ok.text
        nested = '{"prompt": [{"role": "user", "content": "3+4="}], "responses": ["7"]}'  # 3 levels
        assert httpx.post(url, content=nested.encode(), headers=headers).status_code == 200
        deep = httpx.post(url, content=DEEP.encode(), headers=headers)  # over the cap before it is parsed
        assert deep.status_code == 413 and "serve.max_body_bytes=1000" in deep.json()["detail"]
        assert httpx.get(f"{s.url}/health").status_code == 200


@pytest.mark.parametrize(("content", "content_type"), [(b"\xff\xfe{}", "text/plain"), (b"\xff", None),
                                                       (b'{"prompt": "1", "responses": ["2"]}', "text/plain")])
def test_bodies_fastapi_does_not_read_as_json_are_a_422(server, content, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    response = httpx.post(f"{server.url}/v1/reward", content=content, headers=headers)
    assert response.status_code == 422, response.text  # the bytes echoed back were not UTF-8: a 500 before
    assert response.json()["detail"]


def test_judging_over_the_timeout_is_504(rule):
    class Slow:
        def score(self, rollout, rubric):
            time.sleep(1.0)
            return torch.zeros(1, rollout.group_size, len(rubric.dimensions))

    with _serve(replace(rule, plugins={**rule.plugins, "judge": Slow()}), timeout_s=0.2) as s:
        response = httpx.post(f"{s.url}/v1/reward", json=GROUP)
    assert response.status_code == 504 and "serve.timeout_s=0.2" in response.json()["detail"]


def test_concurrent_clients_get_what_sequential_scoring_gives(server):
    groups = [{"prompt": f"{a}+{a}=", "responses": [str(2 * a), str(a), f"it is {2 * a}"],
               "fields": {"reference": str(2 * a)}} for a in range(16)]
    sequential = [httpx.post(f"{server.url}/v1/reward", json=g).json() for g in groups]
    answers: dict[int, dict] = {}

    def client(k: int) -> None:
        with httpx.Client() as c:
            for i in range(k, len(groups), 8):
                answers[i] = c.post(f"{server.url}/v1/reward", json=groups[i]).json()

    threads = [threading.Thread(target=client, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert [answers[i] for i in range(len(groups))] == sequential


def test_logs_carry_counts_never_texts(server, caplog):
    caplog.set_level(logging.INFO, logger="rlkit.serve")
    secret = "a-very-distinctive-response-text"
    httpx.post(f"{server.url}/v1/reward", json={"prompt": "distinctive-prompt", "responses": [secret]})
    assert "reward: 1 responses" in caplog.text
    assert secret not in caplog.text and "distinctive-prompt" not in caplog.text


def test_exposed_without_a_token_warns(rule, caplog, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    create_app(rule, ServeSettings(host="0.0.0.0", api_key_env=TOKEN_ENV))
    assert f"without auth: set {TOKEN_ENV}" in caplog.text


def test_chat_route_answers_with_the_judge_backend(rule):
    from rlkit.judging import Completion

    class Backend:
        def complete(self, chats):
            return [Completion(text=f"{len(chats[0])} message(s)")]

    class Generative:
        class backend:  # noqa: N801 - stands in for rlkit.judging.asking.JudgeBackend over a local model
            chat_model = "/models/judge"
            get = staticmethod(Backend)

    with _serve(replace(rule, plugins={**rule.plugins, "judge": Generative()})) as s:
        body = httpx.post(f"{s.url}/v1/chat/completions", json={
            "model": "x", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}).json()
    assert body["model"] == "/models/judge" and body["choices"][0]["message"]["content"] == "1 message(s)"


@pytest.mark.parametrize(("override", "where"), [("serve.port=-1", "serve.port"),
                                                 ("serve.api_key_env='1 bad'", "serve.api_key_env"),
                                                 ("serve.timeout_s=0", "serve.timeout_s"),
                                                 ("+serve.hots=0.0.0.0", "serve.hots")])
def test_bad_serve_settings_name_the_field(override, where):
    with pytest.raises(ConfigError) as info:
        serve_settings(_validated([override], read_data=False).cfg)
    assert info.value.where == where


# What JSON has no float for, or nests past any sane depth; Python's json writes and reads the first three.
POISONS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "[" * 65 + "]" * 65, DEEP]
_MARK = "rlkit-poison-\u2603"


def _poisoned(data, body) -> str:
    """``body`` as JSON text with one value, anywhere in it (the whole body too), replaced by a drawn poison."""
    from hypothesis import strategies as st

    root, key = [copy.deepcopy(body)], 0
    parent = root
    while isinstance(parent[key], dict | list) and parent[key] and data.draw(st.booleans(), label="deeper"):
        node = parent[key]
        parent, key = node, data.draw(st.sampled_from(list(node) if isinstance(node, dict) else range(len(node))))
    if isinstance(parent[key], dict) and data.draw(st.booleans(), label="new key"):
        parent, key = parent[key], "extra"  # a key the schema does not know
    parent[key] = _MARK
    return json.dumps(root[0]).replace(json.dumps(_MARK), data.draw(st.sampled_from(POISONS), label="poison"), 1)


def test_schemathesis_finds_no_server_error(rule, monkeypatch):
    """Schema-driven cases, valid and invalid, then the same bodies poisoned: never a 5xx, and the server lives.
    schemathesis draws finite floats only (its number strategies pass allow_nan=False, allow_infinity=False), so
    non-finite numbers and deep nesting are spliced into its bodies here."""
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from schemathesis import GenerationMode

    monkeypatch.setenv(TOKEN_ENV, "s3cret")
    auth = {"Authorization": "Bearer s3cret"}
    with _serve(rule, token=True, rate_limit=0, max_body_bytes=20_000) as s:
        schema = schemathesis.openapi.from_url(f"{s.url}/openapi.json")
        for result in schema.get_all_operations():
            operation = result.ok()
            has_body = operation.method.upper() == "POST"  # the GETs take nothing that could be made invalid
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)[:2 if has_body else 1]:

                @given(case=operation.as_strategy(generation_mode=mode))
                @settings(max_examples=30, deadline=None, database=None, suppress_health_check=list(HealthCheck))
                def check(case) -> None:
                    response = case.call(base_url=s.url, headers=auth, timeout=10)
                    assert response.status_code < 500, (case.method, case.path, response.status_code, response.text)

                check()
            if not has_body:
                continue

            @given(case=operation.as_strategy(), data=st.data())
            @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            def poisoned(case, data) -> None:
                body = _poisoned(data, case.body)
                response = httpx.post(f"{s.url}{case.formatted_path}", content=body.encode(), timeout=10,
                                      headers={**auth, "Content-Type": "application/json"})
                assert response.status_code in (413, 422), (case.path, body[:200], response.status_code, response.text)
                assert re.search("finite|overflows|nested deeper|max_body_bytes", response.text), response.text

            poisoned()
        assert httpx.get(f"{s.url}/health").json() == {"status": "ok"}


# --- the reward_api judge -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def contract_server(tmp_path_factory):
    """A server judging the contract suite's rubric with the rule judge."""
    rubric = example_rubric()
    path = tmp_path_factory.mktemp("rubric") / "contract.yaml"
    path.write_text(yaml.safe_dump(rubric.model_dump(mode="json", exclude={"changelog", "source", "templates"})))
    with _serve(_validated(["judge=rule", f"rubric.path={path}"], read_data=False), rate_limit=0) as s:
        yield s


class TestRewardApiJudgeContract(JudgeContract):
    @pytest.fixture
    def judge(self, contract_server):
        return RewardApiJudge(RewardApiJudge.Params(base_url=contract_server.url))


def test_reward_api_refuses_a_server_judging_another_rubric(contract_server, server, rule):
    judge = RewardApiJudge(RewardApiJudge.Params(base_url=contract_server.url))
    with pytest.raises(ConfigError) as info:
        judge.check_rubric(rule.rubric)
    assert info.value.where == "judge.params.base_url" and "correctness [0, 1]" in info.value.message
    edited = rule.rubric.model_copy(update={"description": "edited"})
    with pytest.warns(UserWarning, match="the dimensions match, their definitions differ"):
        RewardApiJudge(RewardApiJudge.Params(base_url=server.url)).check_rubric(edited)
    unreachable = RewardApiJudge(RewardApiJudge.Params(base_url="http://127.0.0.1:9", max_retries=0))
    with pytest.raises(ConfigError, match="cannot reach the reward API"):
        unreachable.check_rubric(rule.rubric)


def test_reward_api_failed_group_is_nan_and_counted(server, rule):
    from rlkit.core.types import Rollout

    judge = RewardApiJudge(RewardApiJudge.Params(base_url=server.url, max_retries=1, backoff=0))
    rollout = Rollout(records=[{"prompt": "1+1=", "reference": "2"}, {"prompt": "2+2=", "reference": "four"}],
                      completions=[["2", "3"], ["4", "5"]])
    with pytest.warns(UserWarning, match="1 of 2 groups got no scores"):
        judgement = judge.assess(rollout, rule.rubric)
        scores = judgement.scores
    assert not torch.isnan(scores[0]).any() and torch.isnan(scores[1]).all()  # a 422 is not retried
    assert judgement.metrics["judge/request_failures"] == 1 and judgement.metrics["judge/retries"] == 0
    spend = judge.spend()  # one request a group, failed or not, and no tokens: a reward server bills none
    assert (spend.calls, spend.retries, spend.tokens_in, spend.tokens_out) == (2, 0, 0, 0) and spend.latency_s > 0
    assert judge.planned_calls(JudgeLoad(prompts=8, generations=4), rule.rubric).calls == 8


def test_reward_api_follows_a_server_judge_that_derives_its_rubric(rule):
    class Ranker:
        def score(self, rollout, rubric):
            g = rollout.group_size
            return torch.linspace(0, 1, g).reshape(1, g, 1)

    derived = ranking_rubric(rule.rubric)
    ranking = replace(rule, plugins={**rule.plugins, "judge": Ranker()}, scored_rubric=derived,
                      plugin_names={**rule.plugin_names, "judge": "ranking"})
    with _serve(ranking) as s:
        judge = RewardApiJudge(RewardApiJudge.Params(base_url=s.url))
        judge.check_rubric(rule.rubric)
        assert judge.scored_rubric(rule.rubric).content_hash == derived.content_hash
        from rlkit.core.types import Rollout

        scores = judge.score(Rollout(records=[{"prompt": "1+1="}], completions=[["a", "b", "c"]]), rule.rubric)
    assert scores.tolist() == [[[0.0], [0.5], [1.0]]]


# --- end to end: the command, and fit against it ---------------------------------------------------------


def test_serve_on_a_port_in_use_is_one_error_line_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        command = [str(Path(sys.executable).with_name("rlkit")), "serve", f"serve.port={port}", "judge=rule"]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=tmp_path,
                              env={**os.environ, "RLKIT_CACHE": str(tmp_path / "cache")})
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith(f"rlkit: error: serve.port: port {port} on 127.0.0.1 is in use"), lines[0]
    assert "serving judge" not in proc.stdout


@pytest.mark.parametrize(("host", "where"), [("127.0.0.1", "serve.port"), ("203.0.113.7", "serve.host")])
def test_a_socket_that_cannot_be_bound_names_the_key(host, where):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(ConfigError) as info:  # 203.0.113.0/24 is for documentation: on no interface here
            RewardServer(object(), host, taken.getsockname()[1])
    assert info.value.where == where


def test_reward_api_waits_for_a_server_restarted_on_its_port_and_stops_once_it_is_gone(rule, capsys):
    from rlkit.core.errors import EngineError
    from rlkit.core.types import Rollout
    from rlkit.judging.http import endpoint_outage

    rollout = Rollout(records=[{"prompt": "1+1=", "reference": "2"}, {"prompt": "2+2=", "reference": "4"}],
                      completions=[["2", "3"], ["4", "5"]])
    first = _serve(rule, rate_limit=0).start()
    port, url = first.port, first.url
    waits, gives_up = (RewardApiJudge(RewardApiJudge.Params(base_url=url, max_retries=0, backoff=0.02,
                                                            unavailable_timeout=timeout)) for timeout in (60, 0.2))
    waits_judgement = waits.assess(rollout, rule.rubric)
    want = waits_judgement.scores
    gives_up.check_rubric(rule.rubric)
    first.stop()
    restarted: list[RewardServer] = []

    def restart_once_silent() -> None:  # a supervisor bringing the server back on its port
        deadline = time.monotonic() + 60
        while endpoint_outage(f"{url}/v1/reward") is None and time.monotonic() < deadline:
            time.sleep(0.005)
        restarted.append(RewardServer(create_app(rule, ServeSettings(rate_limit=0)), port=port).start())

    supervisor = threading.Thread(target=restart_once_silent, daemon=True)
    supervisor.start()
    try:
        waits_judgement2 = waits.assess(rollout, rule.rubric)
        got = waits_judgement2.scores
    finally:
        supervisor.join()
        restarted[0].stop()
    assert torch.equal(got, want) and waits_judgement2.metrics["judge/request_failures"] == 0
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rlkit: warning:")]
    assert len(warned) == 1 and f"{url}/v1/reward is not answering" in warned[0], warned
    assert "judge.params.unavailable_timeout" in warned[0]
    # now gone for good: after the wait, one error naming the URL, never a step of NaN scores
    with pytest.raises(EngineError, match=f"the reward API at {url} stopped answering") as raised:
        gives_up.score(rollout, rule.rubric)
    assert raised.value.where == "judge.params.base_url"


@pytest.mark.slow
def test_fit_trains_against_rlkit_serve_with_the_local_rule_rewards(tmp_path, monkeypatch, capsys, rule):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    proc = subprocess.Popen([str(Path(sys.executable).with_name("rlkit")), "serve", "judge=rule", "serve.port=0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(1)]
        while " at http://127.0.0.1:" not in lines[-1] and lines[-1] and len(lines) < 50:
            lines.append(proc.stdout.readline())  # warnings may come first
        line = lines[-1]
        assert " at http://127.0.0.1:" in line, "".join(lines)
        url = line.split(" at ")[1].split()[0]
        run_dir = tmp_path / "run"
        code = main(["fit", "judge=reward_api", f"judge.params.base_url={url}", "experiment=quick", "logger=csv",
                     "trainer.max_steps=2", "batch_size=2", "num_generations=4", "log_samples.every=1",
                     "data.num_prompts=16", "model=tiny_random", f"hydra.run.dir={run_dir}"])
        assert code == 0, capsys.readouterr().err
        with next(run_dir.glob("csv/version_0/metrics.csv")).open() as fh:
            rows = [r for r in csv.DictReader(fh) if r.get("reward/mean")]
        assert len(rows) == 2 and all(r["judge/request_failures"] == "0.0" for r in rows)
        samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
        assert samples
        for sample in samples:
            a, b = sample["prompt"].rstrip("=").split("+")
            local = score_records(replace(rule, records=[{"prompt": sample["prompt"], "reference": str(int(a) + int(b)),
                                                          "completion": sample["completion"]}]))
            assert sample["reward"] == pytest.approx(float(local.rewards[0]), abs=1e-6)
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C
        out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 0, out
    assert "Traceback" not in out
