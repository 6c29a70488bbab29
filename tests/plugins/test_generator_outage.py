"""The ``openai_server`` generator's engine stops answering: waited for up to ``unavailable_timeout`` past the retries
(said once) and the batch comes back as if nothing happened when the engine is back on its port; past the wait, the
step fails with the generator's one error. A real server on loopback, stopped and started again."""

from __future__ import annotations

import socket
import threading
import time

import pytest

from rlkit.core.errors import GeneratorError
from rlkit.core.registry import Registry, create_plugin_manager
from rlkit.lm.models import build_tiny_policy, load_policy
from rlkit.lm.sampling import GenerationRequest
from rlkit.testing import example_prompts
from rlkit.testing.openai_server import OpenAICompatibleServer

_REGISTRY = Registry(create_plugin_manager())
WAIT_LINE = "the engine is not answering"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def policy():
    return load_policy(build_tiny_policy())


def _generate(server_url: str, policy, timeout: float):
    model, tokenizer = policy
    generator = _REGISTRY.create("generator", "openai_server", {
        "base_url": server_url, "retries": 0, "retry_backoff": 0.05, "sync": "none", "unavailable_timeout": timeout})
    with pytest.warns(UserWarning, match="sync=none"):
        generator.setup(model, tokenizer)
    return generator, model, tokenizer


def test_an_engine_back_on_its_port_within_the_wait_answers_the_batch(policy, capsys):
    live = OpenAICompatibleServer(port=_free_port()).start()
    url = live.url
    generator, model, tokenizer = _generate(url, policy, timeout=60.0)
    request = GenerationRequest(example_prompts()[:2], 1, 4, temperature=1.0, greedy=True)
    steady = generator.generate(model, tokenizer, request)
    live.stop()

    def restart() -> None:
        time.sleep(1.0)  # the batch below meets a silent engine first
        live.start()

    thread = threading.Thread(target=restart, daemon=True)
    thread.start()
    try:
        again = generator.generate(model, tokenizer, request)
    finally:
        thread.join()
        generator.close()
        live.stop()
    assert again.completion_ids.tolist() == steady.completion_ids.tolist()
    assert capsys.readouterr().err.count(WAIT_LINE) == 1


def test_an_engine_gone_for_good_fails_the_step_after_the_wait(policy, capsys):
    live = OpenAICompatibleServer(port=_free_port()).start()
    generator, model, tokenizer = _generate(live.url, policy, timeout=1.0)
    live.stop()
    started = time.monotonic()
    try:
        with pytest.raises(GeneratorError, match=r"/completions failed for record 0"):
            generator.generate(model, tokenizer, GenerationRequest(example_prompts()[:1], 1, 4, greedy=True))
    finally:
        generator.close()
    assert 1.0 <= time.monotonic() - started < 20
    assert capsys.readouterr().err.count(WAIT_LINE) == 1
