"""``rlkit serve``'s batch endpoint: the request shapes TRL's and OpenRLHF's remote reward functions send."""

from __future__ import annotations

import httpx
import pytest

from rlkit.commands.common import compose_and_check
from rlkit.integrations.trl import trl_reward_funcs
from rlkit.serve.app import RewardServer, ServeSettings, create_app

PROMPTS = ["3+4="] * 3 + ["10+2="] * 3
COMPLETIONS = ["7", "8", "the answer is 7", "12", "12 12 12 12 12", "twelve"]
REFERENCE = ["7"] * 3 + ["12"] * 3


def _server(overrides: list[str], **settings) -> RewardServer:
    validated = compose_and_check(overrides, read_data=False)
    return RewardServer(create_app(validated, ServeSettings(api_key_env=None, rate_limit=0, **settings)))


@pytest.fixture(scope="module")
def lexicographic():
    with _server(["judge=rule", "aggregator=lexicographic"]) as server:
        yield server


def test_trl_shape_matches_the_trl_reward_functions_row_for_row(lexicographic):
    body = httpx.post(f"{lexicographic.url}/v1/rewards",
                      json={"prompts": PROMPTS, "completions": COMPLETIONS, "reference": REFERENCE}).json()
    local = trl_reward_funcs(overrides=["aggregator=lexicographic"], mode="both", scale="raw")
    expected = {f.__name__: f(prompts=PROMPTS, completions=COMPLETIONS, reference=REFERENCE) for f in local.funcs}
    assert body["rewards"] == pytest.approx(expected["lexicographic"]) and body["scores"] == body["rewards"]
    assert body["extra_logs"] == {d: expected[d] for d in ("format", "correctness", "brevity", "repetition")}
    assert body["rubric"]["name"] == "arithmetic"
    # groups are consecutive rows of one prompt: each group of three shares out its wins
    assert sum(body["rewards"][:3]) == pytest.approx(1.5) and sum(body["rewards"][3:]) == pytest.approx(1.5)


def test_trl_shape_with_chat_messages(lexicographic):
    user = [{"role": "user", "content": "3+4="}]
    body = httpx.post(f"{lexicographic.url}/v1/rewards", json={
        "prompts": [user, user], "reference": ["7", "7"],
        "completions": [[{"role": "assistant", "content": "7"}], [{"role": "assistant", "content": "9"}]]}).json()
    assert body["extra_logs"]["correctness"] == [1.0, 0.0] and body["rewards"][0] > body["rewards"][1]


def test_openrlhf_shape_at_its_own_path():
    """OpenRLHF posts {"query", "prompts", "labels"} and reads "rewards" (openrlhf/utils/remote_rm_utils.py)."""
    with _server(["judge=rule"]) as server:
        request = {"query": [p + c for p, c in zip(PROMPTS, COMPLETIONS, strict=True)], "prompts": PROMPTS,
                   "labels": REFERENCE}
        body = httpx.post(f"{server.url}/get_reward", json=request).json()
        same = httpx.post(f"{server.url}/v1/rewards",
                          json={"prompts": PROMPTS, "completions": COMPLETIONS, "reference": REFERENCE}).json()
        assert body == same
        assert body["extra_logs"]["correctness"] == [1.0, 0.0, 0.0, 1.0, 1.0, 0.0]
        # no labels: correctness cannot be checked, and nothing at all when every weight is on it
        unlabelled = {"query": ["3+4=7"], "prompts": ["3+4="]}
        assert httpx.post(f"{server.url}/get_reward", json=unlabelled).json()["extra_logs"]["correctness"] == [None]
    with _server(["judge=rule", "++weights.params.weights={format: 0, brevity: 0, repetition: 0}"]) as server:
        assert httpx.post(f"{server.url}/get_reward", json=unlabelled).json()["rewards"] == [None]
        numbers = httpx.post(f"{server.url}/get_reward?unscored=0", json=unlabelled).json()
        assert numbers["rewards"] == [0.0] and numbers["scores"] == [0.0]  # for clients that need a number


@pytest.mark.parametrize(("body", "needle"), [
    ({"prompts": ["a"]}, "give either completions (TRL) or query (OpenRLHF)"),
    ({"prompts": ["a"], "completions": ["x"], "query": ["ax"]}, "give either completions"),
    ({"prompts": ["a", "b"], "completions": ["x"]}, "completions has 1 values for 2 prompts"),
    ({"prompts": ["a"], "completions": ["x"], "reference": ["1", "2"]}, "reference has 2 values for 1 prompts"),
    ({"prompts": ["a"], "query": ["bx"]}, "query[0] does not start with prompts[0]"),
    ({"prompts": ["a"], "completions": ["x"], "reference": "7"}, "reference"),
    ({"prompts": ["a"], "completions": ["x"], "prompt": ["b"]}, "a column named 'prompt'"),
    ({"prompts": [], "completions": []}, "at least 1"),
])
def test_malformed_batches_are_422_with_a_message(lexicographic, body, needle):
    response = httpx.post(f"{lexicographic.url}/v1/rewards", json=body)
    assert response.status_code == 422 and needle in response.text


def test_batch_caps_and_the_schema():
    with _server(["judge=rule"], max_responses=2, max_response_chars=5) as server:
        url = f"{server.url}/v1/rewards"
        too_many = httpx.post(url, json={"prompts": ["a"] * 3, "completions": ["1"] * 3})
        assert too_many.status_code == 413 and "serve.max_responses=2" in too_many.json()["detail"]
        assert httpx.post(url, json={"prompts": ["a"], "completions": ["123456"]}).status_code == 413
        assert httpx.post(f"{url}?unscored=nan", json={"prompts": ["a"], "completions": ["1"]}).status_code == 422
        spec = httpx.get(f"{server.url}/openapi.json").json()
        assert "/v1/rewards" in spec["paths"] and "/get_reward" not in spec["paths"]
        assert {"prompts", "completions", "query", "labels"} <= set(
            spec["components"]["schemas"]["BatchRewardRequest"]["properties"])
