"""A judge endpoint refusing connections at start-up: one ``rlkit: error:`` line naming ``base_url`` and exit code 2,
before anything is scored, never a traceback or a file of unscored completions."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from rlkit import ConfigError
from rlkit.core.registry import load_registry
from rlkit.testing.openai_server import OpenAICompatibleServer
from rlkit_plugins.backends.openai import OpenAIBackend


@pytest.fixture
def closed_port() -> int:
    """A port nothing listens on: bound to learn a free number, then closed."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def records(tmp_path: Path) -> Path:
    path = tmp_path / "records.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "reference": "2", "completion": "2"}) + "\n")
    return path


def _rlkit(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RLKIT_CACHE": str(tmp_path / "cache"), "WANDB_SILENT": "true"}
    return subprocess.run([str(Path(sys.executable).with_name("rlkit")), *overrides], capture_output=True, text=True,
                          timeout=300, cwd=tmp_path, env=env)


def _one_error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_score_with_an_openai_judge_that_refuses_connections(tmp_path, closed_port, records):
    url = f"http://127.0.0.1:{closed_port}/v1"
    out = tmp_path / "scored.jsonl"
    proc = _rlkit(tmp_path, "score", "judge=llm", "judge.params.backend.name=openai",
                  f"++judge.params.backend.params={{base_url: '{url}', max_retries: 1, backoff: 0}}",
                  f"data.path={records}", f"score.output={out}")
    line = _one_error_line(proc)
    assert line.startswith(f"rlkit: error: judge.params.backend.params.base_url: cannot connect to {url} "
                           "(connection refused) after 2 attempts"), line
    assert not out.exists(), "nothing is scored when the judge cannot be reached"


def test_score_with_a_reward_api_that_refuses_connections(tmp_path, closed_port, records):
    url = f"http://127.0.0.1:{closed_port}"
    proc = _rlkit(tmp_path, "score", "judge=reward_api", f"judge.params.base_url={url}", "judge.params.max_retries=0",
                  f"data.path={records}")
    line = _one_error_line(proc)
    assert line.startswith(f"rlkit: error: judge.params.base_url: cannot connect to {url} (connection refused)"), line


def test_the_probe_passes_a_live_server_and_names_a_refused_key(closed_port, monkeypatch):
    with OpenAICompatibleServer(api_key="s3cret") as server:
        monkeypatch.setenv("RLKIT_TEST_KEY", "s3cret")
        backend = OpenAIBackend(OpenAIBackend.Params(base_url=server.url, api_key_env="RLKIT_TEST_KEY"))
        assert server.request_count == 0, "building the backend never touches the network"
        backend.check_ready()
        assert server.request_count == 1
        monkeypatch.setenv("RLKIT_TEST_KEY", "wrong")
        with pytest.raises(ConfigError) as info:
            backend.check_ready()
    assert info.value.where == "judge.params.backend.params.api_key_env" and "HTTP 401" in info.value.message
    down = OpenAIBackend(OpenAIBackend.Params(base_url=f"http://127.0.0.1:{closed_port}/v1", max_retries=0))
    with pytest.raises(ConfigError) as info:
        down.check_ready()
    assert str(info.value) == (f"judge.params.backend.params.base_url: cannot connect to http://127.0.0.1:"
                               f"{closed_port}/v1 (connection refused); start the server or fix the URL")


def test_the_llm_judge_probes_its_backend_once_before_scoring(closed_port):
    from rlkit.testing import example_rubric

    registry = load_registry()
    params = {"backend": {"name": "openai", "params": {"base_url": f"http://127.0.0.1:{closed_port}/v1",
                                                       "max_retries": 0}}}
    judge = registry.create("judge", "llm", params, where="judge.params")  # building it asks nothing
    with pytest.raises(ConfigError, match="connection refused"):
        judge.check_rubric(example_rubric())
    hf = registry.create("judge", "llm", {}, where="judge.params")
    hf.check_rubric(example_rubric())  # an in-process backend has nothing to probe
