"""``judge.params.show_reference``: the record's reference reaches a model judge's prompt unless hidden on request,
and the reference-leak check counts only what the template itself does not show."""

from __future__ import annotations

import json
from pathlib import Path

from rlkit.core.registry import load_registry
from rlkit.core.rubric import load_rubric
from rlkit.core.types import Rollout
from rlkit.testing.canned_chat import CannedChatServer

ARITHMETIC = Path(__file__).resolve().parents[2] / "conf" / "rubric_files" / "arithmetic.yaml"
ANSWER = json.dumps({"format": 1, "correctness": 1, "brevity": 5, "repetition": 5})


def _ask(tmp_path, monkeypatch, prompt: str, **params) -> tuple[list[str], dict[str, float]]:
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path))
    rollout = Rollout(records=[{"prompt": prompt, "reference": "4096"}], completions=[["4096"]])
    with CannedChatServer(lambda messages: ANSWER) as server:
        judge = load_registry().create("judge", "llm", {"backend": {"name": "openai", "params": {
            "base_url": server.url}}, "reference_leak_check": True, **params})
        judgement = judge.assess(rollout, load_rubric(ARITHMETIC))
    return [m[0]["content"] for m in server.requests], judgement.metrics


def test_the_reference_is_shown_unless_hidden_on_request(tmp_path, monkeypatch):
    (hidden,), _ = _ask(tmp_path / "a", monkeypatch, "64*64=", show_reference=False)
    assert "REFERENCE ANSWER" not in hidden and "4096" in hidden.split("RESPONSE:")[1]
    assert "4096" not in hidden.split("RESPONSE:")[0]
    # the default (auto): reference-guided grading whenever the record has a reference, on every backend
    (shown,), metrics = _ask(tmp_path / "b", monkeypatch, "64*64=")
    assert "REFERENCE ANSWER" in shown and "4096" in shown.split("RESPONSE:")[0]
    assert metrics["judge/reference_leaks"] == 0.0, "shown on purpose is not a leak"


def test_a_reference_inside_the_prompt_is_still_a_leak_when_the_template_shows_it_too(tmp_path, monkeypatch):
    _, metrics = _ask(tmp_path, monkeypatch, "64*64= (the answer is 4096)", show_reference=True)
    assert metrics["judge/reference_leaks"] == 1.0
