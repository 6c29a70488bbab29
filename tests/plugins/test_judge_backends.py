"""The built-in judge backends against real components: the tiny policy in-process (``hf``) and over HTTP from
:class:`rlkit.testing.openai_server.OpenAICompatibleServer` (``openai``), with the server's injected faults."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import time

import httpx
import pytest
import torch

from rlkit import ConfigError
from rlkit.core.errors import EngineError
from rlkit.judging import Completion, render_chat
from rlkit.lm.models import build_tiny_policy, load_policy
from rlkit.testing.openai_server import OpenAICompatibleServer
from rlkit_plugins.backends.hf import HFBackend
from rlkit_plugins.backends.openai import MAX_BACKOFF_S, OpenAIBackend

# The tiny policy is random and, with tied embeddings, mostly repeats the prompt's last token. This template ends
# the prompt with the last message's text, so each chat below gets a different answer and order is observable.
LAST_TEXT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"

CHATS = [
    [{"role": "user", "content": "What is 2+2?"}],
    [{"role": "system", "content": "You grade."}, {"role": "user", "content": "Rate it: ok"}],
    [{"role": "user", "content": "x"}],
    [{"role": "user", "content": "abc 7"}],
    [{"role": "user", "content": "Say (1)"}],
]
NEW_TOKENS = 6


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    # On a busy 2-core machine, 2 intra-op threads fighting other processes make the tiny model ~100x slower.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_path():
    return build_tiny_policy()


@pytest.fixture(scope="module")
def chat_model_dir(tiny_path, tmp_path_factory):
    """The tiny policy plus a chat template: a real model directory whose answers depend on the prompt."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("models") / "tiny-chat"
    shutil.copytree(tiny_path, folder)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tokenizer.chat_template = LAST_TEXT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def policy(chat_model_dir):
    """One loaded (model, tokenizer) shared by every server in this module."""
    return load_policy(chat_model_dir)


@pytest.fixture(scope="module")
def hf(chat_model_dir):
    # batch_size 2 splits the 5 chats into three batches, two of them padded.
    backend = HFBackend(HFBackend.Params(model=str(chat_model_dir), max_new_tokens=NEW_TOKENS, batch_size=2))
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def expected(hf):
    """Each chat's greedy answer, asked alone (no padding, no batch neighbours)."""
    return [hf.complete([chat])[0].text for chat in CHATS]


@pytest.fixture
def make_server(policy):
    """Servers with their own faults and statistics, all stopped after the test."""
    servers: list[OpenAICompatibleServer] = []

    def make(**faults) -> OpenAICompatibleServer:
        servers.append(OpenAICompatibleServer(policy=policy, **faults).start())
        return servers[-1]

    yield make
    for server in servers:
        server.stop()


def client(server: OpenAICompatibleServer, **params) -> OpenAIBackend:
    params = {"base_url": server.url, "max_tokens": NEW_TOKENS, "timeout": 10.0, "backoff": 0.01, **params}
    return OpenAIBackend(OpenAIBackend.Params(**params))


def texts(results: list[Completion]) -> list[str | None]:
    return [r.text for r in results]


# --- hf ---------------------------------------------------------------------------------------------------


def test_hf_answers_a_batch_in_order_and_deterministically(hf, expected):
    assert len(set(expected)) == len(CHATS), "the chats must get different answers for the order check to mean much"
    first, second = hf.complete(CHATS), hf.complete(CHATS)
    # Left padding is masked out (attention mask and position ids), so a batched answer equals the lone one.
    assert texts(first) == expected
    assert texts(second) == expected
    assert all(r.error is None and r.attempts == 1 and r.latency > 0 for r in first)
    assert all(len(t) <= NEW_TOKENS for t in expected)  # one character per token in the tiny tokenizer


def test_hf_latency_is_the_batch_time_shared_out(hf):
    results = hf.complete(CHATS[:2])  # one batch of two
    assert results[0].latency == results[1].latency > 0


def test_tiny_backend_answers_with_the_tiny_policy_and_renders_without_a_template(tiny_path):
    from rlkit_plugins.backends.tiny import TinyBackend

    with pytest.raises(ConfigError, match="backend: tiny is the offline tiny judge") as refused:
        HFBackend(HFBackend.Params(max_new_tokens=3))  # hf without a model is a mistake, not the tiny judge
    assert refused.value.where == "judge.params.backend.params.model"
    backend = TinyBackend(HFBackend.Params(max_new_tokens=3))
    assert backend.needs_model
    assert backend.identity() == {"backend": "hf", "model": str(tiny_path), "max_new_tokens": 3,
                                  "temperature": 0.0, "dtype": "float32"}
    (answer,) = backend.complete([CHATS[1]])
    assert isinstance(answer.text, str) and answer.error is None
    tokenizer = load_policy(tiny_path)[1]
    assert not tokenizer.chat_template
    assert render_chat(CHATS[1], tokenizer) == "system: You grade.\nuser: Rate it: ok\nassistant:"
    backend.close()
    assert not backend.loaded


def test_hf_one_malformed_chat_fails_alone(hf, expected):
    no_content = [{"role": "user"}]
    empty = [{"role": "user", "content": ""}]  # the template renders it to nothing
    unknown = [{"role": "user", "content": "\u00e9\u00e9"}]  # outside the tokenizer's alphabet: no tokens
    results = hf.complete([CHATS[0], no_content, CHATS[2], empty, CHATS[3], unknown])
    assert texts(results)[0::2] == [expected[0], expected[2], expected[3]]
    assert results[1].text is None and "malformed chat: messages[0]" in results[1].error
    assert results[3].text is None and "empty prompt" in results[3].error
    assert results[5].text is None and "empty prompt" in results[5].error


def test_plugin_construction_is_cheap(registry, monkeypatch, tmp_path, make_server):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    backend = registry.create("judge_backend", "tiny", {}, where="judge.params.backend.params")
    assert isinstance(backend, HFBackend) and not backend.loaded
    assert not (tmp_path / "cache").exists(), "building the plugin must not build or load the tiny policy"
    server = make_server()
    remote = registry.create("judge_backend", "openai", {"base_url": server.url})
    assert remote.identity()["base_url"] == server.url
    assert server.request_count == 0, "building the plugin or asking its identity must not touch the network"


@pytest.mark.parametrize(("name", "params", "field"), [
    ("tiny", {"max_new_tokens": 0}, "max_new_tokens"),
    ("tiny", {"temperature": -1.0}, "temperature"),
    ("tiny", {"batch_size": 0}, "batch_size"),
    ("tiny", {"dtype": "float8"}, "dtype"),
    ("tiny", {"model": "/some/model"}, "model"),
    ("hf", {"model": "/no/such/model/dir"}, "model"),
    ("hf", {}, "model"),
    ("llama_cpp", {"slots": 0}, "slots"),
    ("llama_cpp", {"threads": 0}, "threads"),
    ("llama_cpp", {"model": "/no/such/judge.gguf"}, "model"),
    ("openai", {"base_url": "ftp://example.com/v1"}, "base_url"),
    ("openai", {"api_key_env": "sk-abc 123"}, "api_key_env"),
    ("openai", {"timeout": 0.0}, "timeout"),
    ("openai", {"max_retries": -1}, "max_retries"),
    ("openai", {"concurrency": 0}, "concurrency"),
])
def test_bad_params_name_the_field(registry, name, params, field):
    with pytest.raises(ConfigError) as info:
        registry.create("judge_backend", name, params)
    assert info.value.where == f"judge.params.backend.params.{field}"


def test_no_params_field_can_hold_a_key():
    assert [f for f in OpenAIBackend.Params.__dataclass_fields__ if "key" in f] == ["api_key_env"]


# --- openai against the real server ------------------------------------------------------------------------


def test_openai_returns_what_hf_returns(make_server, expected):
    server = make_server()
    results = client(server).complete(CHATS)
    # Same weights, same template, greedy: the server answers each request alone, hf in padded batches, and
    # the test above shows padding does not change these answers, so they agree exactly.
    assert texts(results) == expected
    assert all(r.attempts == 1 and r.error is None for r in results)
    assert server.request_count == len(CHATS)


def test_server_speaks_the_openai_shape(make_server, policy):
    server = make_server()
    models = httpx.get(f"{server.url}/models").json()
    assert [m["id"] for m in models["data"]] == ["default"]
    body = httpx.post(f"{server.url}/chat/completions", json={
        "model": "default", "messages": CHATS[0], "max_tokens": 4, "temperature": 0}).json()
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert isinstance(body["choices"][0]["message"]["content"], str)
    assert body["choices"][0]["finish_reason"] in ("stop", "length")
    usage = body["usage"]
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert usage["prompt_tokens"] == len(CHATS[0][0]["content"])  # one token per character
    sampled = [httpx.post(f"{server.url}/chat/completions", json={
        "messages": CHATS[0], "max_tokens": 8, "temperature": 1.5, "seed": 7}).json()["choices"][0]["message"]
        ["content"] for _ in range(2)]
    assert sampled[0] == sampled[1], "a seed makes sampling repeatable"


def test_api_key_comes_from_the_environment_at_call_time(make_server, monkeypatch, expected):
    server = make_server(api_key="sk-test-secret")
    backend = client(server, api_key_env="RLKIT_TEST_JUDGE_KEY")
    monkeypatch.setenv("RLKIT_TEST_JUDGE_KEY", "sk-test-secret")  # after construction: read per call
    assert texts(backend.complete(CHATS[:2])) == expected[:2]
    assert server.authorizations == ["Bearer sk-test-secret"] * 2
    assert "sk-test-secret" not in json.dumps(backend.identity())
    assert "sk-test-secret" not in repr(backend.params)

    monkeypatch.delenv("RLKIT_TEST_JUDGE_KEY")
    server.reset_stats()
    (denied,) = backend.complete(CHATS[:1])
    assert denied.text is None and "HTTP 401" in denied.error
    assert denied.attempts == 1, "a 401 cannot get better by retrying"
    assert server.authorizations == [None]


def test_retries_until_the_server_recovers(make_server, expected):
    server = make_server(fail_first=2)
    (result,) = client(server, max_retries=3, backoff=0.02).complete(CHATS[:1])
    assert result.text == expected[0] and result.error is None
    assert result.attempts == 3
    assert result.latency >= 0.02 + 0.04  # both backoff waits count
    assert server.faults_served("fail") == 2 and server.request_count == 3


def test_gives_up_after_max_retries_without_raising(make_server):
    server = make_server(fail_rate=1.0)
    results = client(server, max_retries=2).complete(CHATS[:2])
    for r in results:
        assert r.text is None and r.attempts == 3
        assert "HTTP 50" in r.error and "after 3 attempts" in r.error
    assert server.request_count == 6


def test_a_slow_server_times_out(make_server):
    # a server that does not answer within the timeout has stopped answering: with no wait allowed for it, the
    # judge stops at once rather than score without it
    server = make_server(delay=2.0)
    began = time.perf_counter()
    with pytest.raises(EngineError, match=r"timed out after 0.2 s \(after 1 attempt\)") as raised:
        client(server, timeout=0.2, max_retries=0, unavailable_timeout=0).complete(CHATS[:1])
    assert raised.value.where == "judge.params.backend.params.base_url"
    assert time.perf_counter() - began < 1.5, "the client must not wait for the slow answer"


def test_garbage_fails_its_share_when_retries_are_off(make_server, expected):
    server = make_server(garbage_rate=0.3, seed=0)
    chats = CHATS * 4
    results = client(server, max_retries=0).complete(chats)
    failed = [r for r in results if r.text is None]
    assert len(failed) == server.faults_served("garbage")
    # Seeded, so the share is fixed for this request count: near 0.3, never 0 or all.
    assert 0.1 <= len(failed) / len(chats) <= 0.5
    assert all("malformed response" in r.error for r in failed)
    for r, want in zip(results, expected * 4, strict=True):
        assert r.text is None or r.text == want


def test_concurrency_limit_is_respected(make_server):
    server = make_server(delay=0.15)  # long enough that requests overlap whenever the client allows it
    results = client(server, concurrency=2).complete(CHATS[:4] + CHATS[:2])
    assert all(r.text is not None for r in results)
    assert server.max_in_flight == 2


def test_client_errors_are_not_retried(make_server):
    server = make_server()
    (result,) = client(server, model="no-such-model", max_retries=3).complete(CHATS[:1])
    assert result.text is None and "HTTP 404" in result.error and result.attempts == 1


def test_connection_errors_are_retried():
    with socket.socket() as sock:  # a port nothing listens on once this closes
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = OpenAIBackend(OpenAIBackend.Params(base_url=f"http://127.0.0.1:{port}/v1", max_retries=1,
                                                 backoff=0.01, timeout=2.0, unavailable_timeout=0))
    with pytest.raises(EngineError, match=r"connection error: .* \(after 2 attempts\)") as raised:
        backend.complete(CHATS[:1])
    assert f"http://127.0.0.1:{port}/v1 stopped answering" in raised.value.message


def test_complete_works_inside_a_running_event_loop(make_server, expected):
    server = make_server()
    backend = client(server)

    async def judge() -> list[Completion]:
        return backend.complete(CHATS[:2])

    assert texts(asyncio.run(judge())) == expected[:2]


def test_backoff_is_exponential_capped_and_honours_retry_after():
    backend = OpenAIBackend(OpenAIBackend.Params(backoff=0.5))
    assert [backend.retry_delay(k) for k in range(4)] == [0.5, 1.0, 2.0, 4.0]
    assert backend.retry_delay(20) == MAX_BACKOFF_S
    assert backend.retry_delay(0, retry_after=3.0) == 3.0
    assert backend.retry_delay(0, retry_after=1e6) == MAX_BACKOFF_S


def test_empty_request_list_needs_no_server():
    backend = OpenAIBackend(OpenAIBackend.Params(base_url="http://127.0.0.1:9/v1"))
    assert backend.complete([]) == []


def test_qwen_coder_without_its_extra_says_how_to_install_it(registry, monkeypatch, tiny_path):
    from rlkit.core.errors import ConfigError as HostConfigError
    from rlkit.lm import joined_files

    def not_installed(module, where):
        raise HostConfigError(f"no installed package {module!r}", where)

    monkeypatch.setattr(joined_files, "package_dir", not_installed)  # as in CI, which never installs 1.1 GB
    with pytest.raises(ConfigError) as caught:
        registry.create("judge_backend", "qwen_coder", {})
    assert caught.value.where == "judge.params.backend.params.model"
    assert caught.value.message == ("the Qwen judge is not installed: pip install 'rlkit[qwen-judge]' "
                                    "(1.1 GB, 22 packages)")
    registry.create("judge_backend", "qwen_coder", {"model": str(tiny_path)}).close()  # any model: hf's params


def test_qwen_coder_is_hf_with_the_qwen_judge_as_its_default_model():
    from rlkit.lm.joined_files import QWEN_CODER_JUDGE
    from rlkit_plugins.backends.qwen_coder import QwenCoderBackend

    assert QwenCoderBackend.Params().model == QWEN_CODER_JUDGE
    assert {f: getattr(QwenCoderBackend.Params(), f) for f in ("max_new_tokens", "temperature", "batch_size")} == \
        {f: getattr(HFBackend.Params(), f) for f in ("max_new_tokens", "temperature", "batch_size")}
