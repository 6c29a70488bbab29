"""The ``ranking`` judge on real components: the offline tiny ranking judge through the hf backend, the same
model served over HTTP by the OpenAI-compatible test server (also answering garbage), and training with
``judge=ranking advantage=rank``."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import torch
from scipy.stats import kendalltau

from rlkit import Rollout
from rlkit.cli import main
from rlkit.core.registry import load_registry
from rlkit.core.rubric import load_rubric
from rlkit.testing import JudgeContract
from rlkit_plugins.judges.rule import RuleJudge

RULE_TEACHER = RuleJudge(RuleJudge.Params())  # what the offline judges distil

pytestmark = pytest.mark.slow
RUBRIC = Path(__file__).parents[2] / "conf" / "rubric_files" / "arithmetic.yaml"


@pytest.fixture(scope="session")
def ranking_cache(tmp_path_factory) -> Path:
    """The session's cache, with the offline tiny ranking judge for groups of 4 built (every test here ranks groups
    of 4; a few minutes of CPU, once a session: in $RLKIT_TINY_JUDGE_CACHE, which tests/conftest.py shares)."""
    from rlkit.judging.tiny_judge import build_tiny_judge, ranking_spec

    build_tiny_judge(ranking_spec(4), teacher=RULE_TEACHER)
    return tmp_path_factory.mktemp("ranking-cache")


@pytest.fixture
def cache_env(ranking_cache, use_judge_cache):
    return use_judge_cache(ranking_cache)


def _groups(n: int = 6) -> Rollout:
    """Default-task groups of four: the sum, a wrong number, prose, and noise, in rotating positions."""
    records, groups = [], []
    for i in range(n):
        a, b = 3 + i, 4 + 2 * i
        kinds = [str(a + b), str(a + b + 3), "the answer is", "qq"]
        shift = i % 4
        groups.append(kinds[shift:] + kinds[:shift])
        records.append({"prompt": f"{a}+{b}=", "reference": str(a + b)})
    return Rollout(records=records, completions=groups)


def _sum(group: list[str]) -> str:
    """The right answer among a group of :func:`_groups` (the smaller of its two numbers)."""
    return min((c for c in group if c.isdigit()), key=int)


def _rows(run_dir: Path) -> list[dict[str, str]]:
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        return [r for r in csv.DictReader(fh) if r.get("reward/mean")]


def test_the_offline_ranking_judge_answers_orders_that_parse(cache_env):
    rubric = load_rubric(RUBRIC)
    judge = load_registry().create("judge", "ranking", {})
    rollout = _groups()
    judgement = judge.assess(rollout, rubric)
    scores = judgement.scores
    assert scores.shape == (6, 4, 1)
    m = judgement.metrics
    assert m["judge/parse_failure_rate"] < 0.1 and m["judge/requests"] == 18, "6 groups x 3 repetitions"
    assert not torch.isnan(scores).any() and ((scores >= 0) & (scores <= 1)).all()
    # it orders as its teacher does: the sum first, then a wrong number, then text (levels 2, 1, 0, 0)
    taus = [kendalltau(row, [2 if c == _sum(group) else 1 if c.isdigit() else 0 for c in group]).statistic
            for group, row in zip(rollout.completions, scores[..., 0].tolist(), strict=True)]
    assert sum(taus) / len(taus) > 0.5, (taus, scores[..., 0])
    assert 0 <= m["judge/confidence_mean"] <= 1 and 0 <= m["judge/swap_consistency"] <= 1
    judgement2 = judge.assess(rollout, rubric)
    again = judgement2.scores
    assert torch.equal(again, scores) and judgement2.metrics["judge/requests"] == 0, "answers come from the cache"


def test_ranking_over_http_with_a_server_that_answers_garbage(cache_env):
    from rlkit.judging.tiny_judge import build_tiny_judge, ranking_spec
    from rlkit.testing.openai_server import OpenAICompatibleServer

    rubric = load_rubric(RUBRIC)
    with OpenAICompatibleServer(build_tiny_judge(ranking_spec(4), teacher=RULE_TEACHER)) as server:
        # the tiny judge ranks by comparing with the reference, which a served judge is shown only when asked
        params = {"template": "judge/rank_group_compact.jinja", "show_reference": True,
                  "backend": {"name": "openai", "params": {"base_url": server.url, "max_tokens": 64}}}
        clean = load_registry().create("judge", "ranking", params).score(_groups(), rubric)
    hf = load_registry().create("judge", "ranking", {}).score(_groups(), rubric)
    assert torch.equal(clean.nan_to_num(-1), hf.nan_to_num(-1)), "the same model answers the same over HTTP"
    judge_model = build_tiny_judge(ranking_spec(4), teacher=RULE_TEACHER)
    with OpenAICompatibleServer(judge_model, garbage_rate=0.5, seed=3) as server:
        params = {"template": "judge/rank_group_compact.jinja", "parse_retries": 0, "show_reference": True,
                  "repetitions": 1, "backend": {"name": "openai",
                                                "params": {"base_url": server.url, "max_retries": 0, "max_tokens": 64}}}
        judge = load_registry().create("judge", "ranking", params)
        with pytest.warns(UserWarning, match="rankings could not be parsed"):
            judgement = judge.assess(_groups(), rubric)
            scores = judgement.scores
    unscored = torch.isnan(scores).all(dim=1).squeeze(-1)
    assert 0 < unscored.float().mean() < 1 and judgement.metrics["judge/parse_failure_rate"] > 0
    assert (torch.isnan(scores).all(dim=1) | ~torch.isnan(scores).any(dim=1)).all(), "whole groups, never some"


def test_fit_with_the_ranking_judge_and_rank_advantages(cache_env, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["fit", "judge=ranking", "advantage=rank", "logger=csv", "trainer.max_steps=3", "batch_size=4",
                 "num_generations=4", f"hydra.run.dir={run_dir}"]) == 0
    rows = _rows(run_dir)
    assert len(rows) == 3 and all(math.isfinite(float(r["loss"])) for r in rows)
    assert all(float(r["judge/parse_failure_rate"]) < 0.1 for r in rows)
    for key in ("judge/confidence_mean", "judge/rank_agreement", "judge/swap_consistency", "rewards/rank/mean"):
        assert key in rows[0], key
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        heldout = [r for r in csv.DictReader(fh) if r.get("heldout/reward")]
    assert len(heldout) == 2 and all(r.get("heldout/correctness") for r in heldout), \
        "held-out completions are scored by heldout_judge on the rubric's dimensions, not ranked alone"


class TestRankingJudgeContract(JudgeContract):
    @pytest.fixture
    def judge(self, cache_env):
        return load_registry().create("judge", "ranking", {})

    @pytest.fixture
    def rubric(self):
        return load_rubric(RUBRIC)

    @pytest.fixture
    def rollout(self):
        return _groups(3)
