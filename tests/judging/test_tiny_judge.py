"""The offline tiny judge's build: distillation data from the rule judge, a trained model saved and cached."""

from __future__ import annotations

import json

import pytest

from rlkit.judging.tiny_judge import TinyJudgeSpec, build_tiny_judge, distillation_records, tiny_judge_hash
from rlkit_plugins.judges.rule import RuleJudge

RULE_TEACHER = RuleJudge(RuleJudge.Params())  # what the offline judges distil

pytestmark = pytest.mark.slow
_QUICK = TinyJudgeSpec(steps=3, examples=200, batch_size=8)


def test_distillation_records_are_rule_judge_json():
    records = distillation_records(TinyJudgeSpec(examples=300), RULE_TEACHER)
    assert len(records) > 250
    answer = json.loads(records[0]["answer"])
    assert list(answer) == ["format", "correctness", "brevity", "repetition"]
    assert {r["completion"] for r in records} >= {""}, "edge cases (empty answers) are in the mix"
    kinds = {tuple(json.loads(r["answer"]).values()) for r in records}
    assert len(kinds) > 8, "the data must cover many score combinations"


def test_build_trains_saves_and_reuses(tmp_path):
    from rlkit.lm.models import load_policy

    folder = build_tiny_judge(_QUICK, tmp_path, teacher=RULE_TEACHER)
    assert folder.name == f"tiny-judge-{tiny_judge_hash(_QUICK, RULE_TEACHER)}"
    model, tokenizer = load_policy(folder)  # the same loading path as any checkpoint
    assert model.config.num_hidden_layers == _QUICK.num_hidden_layers and tokenizer.padding_side == "left"
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_judge(_QUICK, tmp_path, teacher=RULE_TEACHER) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp, "a complete build is reused"
    assert [p.name for p in tmp_path.iterdir()] == [folder.name], "no half-built folders left behind"


def test_the_tiny_judge_cache_env_is_where_builds_are_shared(tmp_path, monkeypatch):
    """``$RLKIT_TINY_JUDGE_CACHE`` (the suite shares one) holds the builds; an explicit folder still wins."""
    from rlkit.lm.model_cache import _SAVED_FILES, TINY_JUDGE_CACHE_ENV

    shared = tmp_path / "shared" / f"tiny-judge-{tiny_judge_hash(_QUICK, RULE_TEACHER)}"
    shared.mkdir(parents=True)
    for name in _SAVED_FILES:
        (shared / name).write_text("{}")
    monkeypatch.setenv(TINY_JUDGE_CACHE_ENV, str(tmp_path / "shared"))
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "own"))
    assert build_tiny_judge(_QUICK, teacher=RULE_TEACHER) == shared, "found in the shared folder, not built"
    monkeypatch.delenv(TINY_JUDGE_CACHE_ENV)
    assert build_tiny_judge(_QUICK, teacher=RULE_TEACHER).parent == tmp_path / "own"
