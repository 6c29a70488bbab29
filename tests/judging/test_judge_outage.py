"""A model judge that stops answering mid-run: waited for up to ``unavailable_timeout`` (said once), the run going on
exactly as if nothing happened when it comes back on the same port; stopped with one line naming the endpoint and the
checkpoint to resume from when it does not. Real loopback servers, killed and restarted; no step is ever trained on
scores the judge did not give."""

from __future__ import annotations

import json
import threading
import time
import zlib
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.core.errors import EngineError
from rlkit.judging.http import endpoint_outage
from rlkit.runs.history import read_history
from rlkit.testing.canned_chat import CannedChatServer
from rlkit_plugins.backends.openai import OpenAIBackend


def verdict(messages: list[dict[str, str]]) -> str:
    """Scores for the arithmetic rubric drawn from a hash of what the judge was shown: deterministic, and different
    from completion to completion, so two runs' rewards agree only if every completion got its own answer."""
    h = zlib.crc32(json.dumps(messages, sort_keys=True).encode())
    return json.dumps({"format": h & 1, "correctness": (h >> 1) & 1, "brevity": 1 + (h >> 2) % 5,
                       "repetition": 1 + (h >> 5) % 5})


def restart_once_silent(server: CannedChatServer, after_calls: int, seen: dict) -> threading.Thread:
    """Stop ``server`` once it has answered ``after_calls`` chats (``seen["stopped"]`` set), then start another on its
    port (``seen["server"]``) as soon as a request has found it silent (``seen["outage"]``): an engine that crashed
    and that its supervisor restarted."""
    port = int(server.url.rsplit(":", 1)[1].split("/")[0])
    chat_url = f"{server.url}/chat/completions"
    seen["stopped"] = threading.Event()

    def run() -> None:
        deadline = time.monotonic() + 120
        while server.served["calls"] < after_calls and time.monotonic() < deadline:
            time.sleep(0.005)
        server.stop()
        seen["stopped"].set()
        while endpoint_outage(chat_url) is None and time.monotonic() < deadline:
            time.sleep(0.005)
        seen["outage"] = endpoint_outage(chat_url) is not None
        seen["server"] = CannedChatServer(verdict, port=port).start()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_judge_server_restarted_on_its_port_is_waited_for_and_said_once(capsys):
    server = CannedChatServer(verdict).start()
    url = server.url
    chats = [[{"role": "user", "content": f"judge completion {i}"}] for i in range(12)]
    # max_retries 0: the first refused attempt already waits on the outage, so the warning is certain, not a race
    backend = OpenAIBackend(OpenAIBackend.Params(base_url=url, max_retries=0, backoff=0.02, concurrency=4,
                                                 unavailable_timeout=60))
    assert [c.text for c in backend.complete(chats[:2])] == [verdict(c) for c in chats[:2]]
    seen: dict = {}
    killer = restart_once_silent(server, 2, seen)
    assert seen["stopped"].wait(30)  # stopped before the next call: every request of it meets the dead port first
    try:
        answers = backend.complete(chats)
    finally:
        killer.join()
        seen["server"].stop()
    assert seen["outage"]
    assert [a.text for a in answers] == [verdict(c) for c in chats]  # every request answered, none given up
    warned = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rlkit: warning:")]
    assert len(warned) == 1, warned  # concurrent requests, one outage: one line
    assert f"{url}/chat/completions is not answering" in warned[0]
    assert "judge.params.backend.params.unavailable_timeout" in warned[0]
    assert endpoint_outage(f"{url}/chat/completions") is None  # answered again: the outage is over


def test_a_judge_server_gone_for_good_is_an_engine_error_after_the_wait():
    server = CannedChatServer(verdict).start()
    url = server.url
    server.stop()
    backend = OpenAIBackend(OpenAIBackend.Params(base_url=url, max_retries=0, backoff=0.05, unavailable_timeout=0.3))
    began = time.monotonic()
    with pytest.raises(EngineError, match="connection error") as raised:
        backend.complete([[{"role": "user", "content": "judge this"}]] * 3)
    assert 0.3 <= time.monotonic() - began < 5, "waits the timeout, then stops, rather than score without the judge"
    assert raised.value.where == "judge.params.backend.params.base_url"
    assert f"{url} stopped answering and has not answered for 0.3 s" in raised.value.message


# --- the whole run -------------------------------------------------------------------------------------------------

STEPS = 4


def _fit(url: str, run: Path, unavailable_timeout: float, *extra: str) -> int:
    return main(["fit", "judge=llm", "judge.params.backend.name=openai",
                 f"++judge.params.backend.params={{base_url: '{url}', max_retries: 0, backoff: 0.02, "
                 f"unavailable_timeout: {unavailable_timeout}}}", "model=tiny_random", f"trainer.max_steps={STEPS}",
                 "batch_size=2", "num_generations=2", "data.num_prompts=16", "data.heldout_fraction=0",
                 "checkpoint_every=1", "logger=none", f"hydra.run.dir={run}", *extra])


def _rewards(run: Path) -> list[tuple[int, dict[str, float]]]:
    """Each training step's reward and per-dimension score figures, by step."""
    return [(step, {k: v for k, v in m.items() if k.startswith(("reward/", "rewards/"))})
            for step, m in read_history(run / "metrics.jsonl") if "reward/mean" in m]


@pytest.mark.slow
def test_a_run_whose_judge_restarts_trains_as_if_it_never_stopped(tmp_path, capsys):
    server = CannedChatServer(verdict).start()
    url, seen = server.url, {}
    # stopped in the middle of step 2's judging (4 chats a step): some of its requests answered, the rest refused
    killer = restart_once_silent(server, 6, seen)
    try:
        assert _fit(url, tmp_path / "restarted", 60) == 0
    finally:
        killer.join()
        if "server" in seen:
            seen["server"].stop()
    assert seen["outage"]
    err = capsys.readouterr().err
    warned = [ln for ln in err.splitlines() if "is not answering" in ln]
    assert len(warned) == 1 and warned[0].startswith(f"rlkit: warning: {url}/chat/completions"), warned
    with CannedChatServer(verdict) as steady:
        assert _fit(steady.url, tmp_path / "steady", 60) == 0
    restarted, reference = _rewards(tmp_path / "restarted"), _rewards(tmp_path / "steady")
    assert [s for s, _ in restarted] == [s for s, _ in reference] and len(reference) == STEPS
    assert restarted == reference
    assert len({r["reward/mean"] for _, r in reference}) > 1, "the steps' rewards differ, so a missing or misplaced " \
        "score would show"


@pytest.mark.slow
def test_a_run_whose_judge_is_gone_for_good_stops_naming_it_and_the_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    server = CannedChatServer(verdict).start()
    url = server.url

    def kill_after_first_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while not (run / "checkpoints" / "last.ckpt").is_file() and time.monotonic() < deadline:
            time.sleep(0.01)
        server.stop()

    killer = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
    killer.start()
    with pytest.raises(SystemExit) as exited:
        _fit(url, run, 1, "trainer.max_steps=50")
    killer.join()
    assert exited.value.code == 2  # EngineError's exit status, as for a generator engine that dies (docs/judges.md)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.startswith("rlkit: error:")]
    assert len(lines) == 1, err
    assert lines[0].startswith("rlkit: error: judge.params.backend.params.base_url: ")
    assert f"the judge server at {url} stopped answering" in lines[0]
    assert f"resumes it: ckpt_path={run / 'checkpoints' / 'last.ckpt'}" in lines[0]
    assert "Traceback" not in err
    # no step was trained on the dead judge's missing scores: every logged step has a full set of rewards
    steps = [m for _, m in read_history(run / "metrics.jsonl") if "reward/mean" in m]
    assert steps and all(m["judge/parse_failure_rate"] == 0 for m in steps)
