"""The ``llm`` judge on real components: the offline tiny judge through the hf backend, and the same model
served over HTTP by the OpenAI-compatible test server, including a server that answers garbage."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path

import pytest
import torch

from rlkit import Rollout
from rlkit.cli import main
from rlkit.core.registry import load_registry
from rlkit.core.rubric import load_rubric
from rlkit.testing import JudgeContract, offline_judge
from rlkit_plugins.judges.rule import RuleJudge

RULE_TEACHER = RuleJudge(RuleJudge.Params())  # what the offline judges distil

pytestmark = pytest.mark.slow
RUBRIC = Path(__file__).parents[2] / "conf" / "rubric_files" / "arithmetic.yaml"


@pytest.fixture(scope="session")
def judge_cache(tmp_path_factory) -> Path:
    """The session's cache, with the offline tiny judge built (a few minutes of CPU at most, once a session: in
    $RLKIT_TINY_JUDGE_CACHE, which tests/conftest.py shares)."""
    from rlkit.judging.tiny_judge import build_tiny_judge

    build_tiny_judge(teacher=RULE_TEACHER)
    return tmp_path_factory.mktemp("judge-cache")


@pytest.fixture
def cache_env(judge_cache, use_judge_cache):
    return use_judge_cache(judge_cache)


def _rollout() -> Rollout:
    return Rollout(records=[{"prompt": "7+5=", "reference": "12"}, {"prompt": "3+4=", "reference": "7"}],
                   completions=[["12", "the answer is twelve", "13 13 13 13"], ["7", "x", ""]])


def _judge(**params):
    """The llm judge; on the offline tiny judge unless ``backend`` says otherwise."""
    return load_registry().create("judge", "llm", {"backend": "tiny", **params})


def test_offline_judge_scores_the_rubric_and_caches(cache_env):
    rubric = load_rubric(RUBRIC)
    judge = _judge()
    judgement = judge.assess(_rollout(), rubric)
    scores = judgement.scores
    assert scores.shape == (2, 3, 4)
    assert judgement.metrics["judge/parse_failure_rate"] < 0.1
    # the tiny judge is a distilled model, not the rule judge: the easy dimensions it gets right
    first = scores[0, 0].tolist()
    assert (first[0], first[2], first[3]) == (1.0, 5.0, 5.0), "a bare number: format, brevity, repetition"
    assert scores[0, 1, 0] == 0.0, "prose first: format fails"
    assert ((scores == scores.round()) | torch.isnan(scores)).all(), "levels, not free text"
    judgement2 = judge.assess(_rollout(), rubric)
    again = judgement2.scores
    assert torch.equal(again.nan_to_num(-1), scores.nan_to_num(-1))
    assert judgement2.metrics["judge/requests"] == 0 and judgement2.metrics["judge/cache_hit_rate"] >= 0.5


def test_the_offline_judge_grades_a_sum_against_its_reference(cache_env):
    """The default model judge tells the truth on the issue's four sums: it is shown each record's reference (it
    cannot work a sum out) and calls the right answer right and a wrong one sharing its digits wrong."""
    sums = [("3+4=", "7", "12"), ("12+5=", "17", "15"), ("9+9=", "18", "81"), ("20+1=", "21", "2")]
    rollout = Rollout(records=[{"prompt": p, "reference": r} for p, r, _ in sums],
                      completions=[[right, wrong] for _, right, wrong in sums])
    rubric = load_rubric(RUBRIC)
    correctness = _judge().score(rollout, rubric)[..., rubric.dimension_names.index("correctness")]
    assert correctness.tolist() == [[1.0, 0.0]] * 4
    hidden = _judge(show_reference=False).score(rollout, rubric)[..., rubric.dimension_names.index("correctness")]
    assert not torch.equal(hidden, correctness), "without the reference it cannot tell"


def test_failure_policies_on_a_server_that_answers_garbage(cache_env):
    from rlkit.judging.tiny_judge import build_tiny_judge
    from rlkit.testing.openai_server import OpenAICompatibleServer

    rubric = load_rubric(RUBRIC)
    rollout = Rollout(records=[{"prompt": f"{i}+1=", "reference": str(i + 1)} for i in range(6)],
                      completions=[[str(i + 1), "no", "12 12 12", "7"] for i in range(6)])
    with OpenAICompatibleServer(build_tiny_judge(teacher=RULE_TEACHER), garbage_rate=0.3, seed=1) as server:
        common = {"template": "judge/rubric_scores_compact.jinja", "parse_retries": 0,
                  "backend": {"name": "openai", "params": {"base_url": server.url, "max_retries": 0, "max_tokens": 64}}}
        nan_scores = _judge(**common, failure_policy="nan").score(rollout, rubric)
        failed = torch.isnan(nan_scores).all(dim=-1)
        assert 0 < failed.float().mean() < 0.7, "about 30% of answers are garbage and stay unscored"
        server.reset_stats()
        low = _judge(**common, failure_policy="min").score(rollout, rubric)
        assert not torch.isnan(low).any()
        dropped = _judge(**common, failure_policy="drop_group").score(rollout, rubric)
        group_nan = torch.isnan(dropped).flatten(1)
        assert (group_nan.all(dim=1) | ~group_nan.any(dim=1)).all(), "a group is scored whole or not at all"


def _rows(run_dir: Path) -> list[dict[str, str]]:
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        return [r for r in csv.DictReader(fh) if r.get("reward/mean")]


def test_fit_with_the_offline_llm_judge(cache_env, tmp_path):
    run_dir = tmp_path / "run"
    assert main(["fit", *offline_judge("llm"), "logger=csv", "trainer.max_steps=3", "batch_size=4", "num_generations=4",
                 f"hydra.run.dir={run_dir}"]) == 0
    rows = _rows(run_dir)
    assert len(rows) == 3 and all(math.isfinite(float(r["loss"])) for r in rows)
    assert all(float(r["judge/parse_failure_rate"]) < 0.1 for r in rows)
    assert "judge/cache_hit_rate" in rows[0] and "judge/latency_mean" in rows[0]


def test_fit_survives_a_judge_that_answers_garbage_30_percent_of_the_time(cache_env, tmp_path):
    from rlkit.judging.tiny_judge import build_tiny_judge
    from rlkit.testing.openai_server import OpenAICompatibleServer

    run_dir = tmp_path / "run"
    with OpenAICompatibleServer(build_tiny_judge(teacher=RULE_TEACHER), garbage_rate=0.3, seed=2) as server:
        assert main(["fit", "judge=llm", "judge.params.backend.name=openai", "judge.params.parse_retries=0",
                     "judge.params.template=judge/rubric_scores_compact.jinja",
                     f"++judge.params.backend.params={{base_url: '{server.url}', max_retries: 0}}",
                     "logger=csv", "trainer.max_steps=3", "batch_size=4", "num_generations=4",
                     f"hydra.run.dir={run_dir}"]) == 0
    rows = _rows(run_dir)
    assert all(math.isfinite(float(r["loss"])) for r in rows), "no NaN reaches the loss"
    assert sum(float(r["judge/parse_failure_rate"]) for r in rows) / len(rows) > 0.1, "failures show in the logs"
    assert os.path.isdir(run_dir / "policy")


class TestModelJudgesContract(JudgeContract):
    """The judge contract on the model-based judges, with the rubric and prompts the offline judge knows."""

    @pytest.fixture(params=["llm", "hybrid", "ensemble", "cascade"])
    def judge(self, request, cache_env):
        from rlkit.config import check_config, compose_config

        registry = load_registry()
        return check_config(compose_config(registry, offline_judge(request.param)), registry).plugins["judge"]

    @pytest.fixture
    def rubric(self):
        return load_rubric(RUBRIC)

    @pytest.fixture
    def rollout(self):
        return _rollout()


def test_hybrid_sends_only_its_dimensions_to_the_llm(cache_env):
    from rlkit.config import check_config, compose_config

    registry = load_registry()
    judge = check_config(compose_config(registry, offline_judge("hybrid")), registry).plugins["judge"]
    rubric = load_rubric(RUBRIC)
    assert judge.routing(rubric) == {"rule": [0, 3], "llm": [1, 2]}
    judgement = judge.assess(_rollout(), rubric)
    assert not torch.isnan(judgement.scores[0, 0]).any()
    assert judgement.metrics["judge/requests"] == 6, "the llm member's metrics are the hybrid's"


def test_ensemble_logs_agreement_per_dimension(cache_env):
    from rlkit.config import check_config, compose_config

    registry = load_registry()
    judge = check_config(compose_config(registry, offline_judge("ensemble")), registry).plugins["judge"]
    judgement = judge.assess(_rollout(), load_rubric(RUBRIC))
    agreement = {k: v for k, v in judgement.metrics.items() if k.startswith("judge/agreement/")}
    assert set(agreement) == {f"judge/agreement/{d}" for d in ("format", "correctness", "brevity", "repetition")}
    assert all(0.0 <= v <= 1.0 for v in agreement.values())


@pytest.mark.parametrize("overrides", [offline_judge("hybrid"),
                                       [*offline_judge("ensemble"), "aggregator=lexicographic"]])
def test_fit_with_hybrid_and_ensemble_judges(cache_env, tmp_path, capsys, overrides):
    run_dir = tmp_path / "run"
    # model=tiny_random: an untrained policy's held-out answers, whose weighted sum (0.06 here) is far from the 0.5 a
    # rank within a group of one would give
    assert main(["fit", "model=tiny_random", *overrides, "logger=csv", "trainer.max_steps=4", "batch_size=4",
                 "num_generations=4", f"hydra.run.dir={run_dir}"]) == 0
    rows = _rows(run_dir)
    assert len(rows) == 4 and all(math.isfinite(float(r["loss"])) for r in rows)
    if "aggregator=lexicographic" in overrides:
        _assert_weighted_sum_yardstick(run_dir, capsys.readouterr().out)


def _assert_weighted_sum_yardstick(run_dir: Path, out: str) -> None:
    """Lexicographic ranks within a group, so a lone held-out completion would always get 0.5: held-out rewards
    are the rubric's weighted sum of the same completions' scores instead, and the table says so."""
    rubric = load_rubric(RUBRIC)
    heldout = [json.loads(line)["metrics"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()
               if "heldout/reward" in line]
    start, end = heldout[0], heldout[-1]
    total = sum(d.weight for d in rubric.dimensions)

    def weighted_sum(means: dict[str, float]) -> float:  # linear, so the mean of the sums is the sum of the means
        parts = [d.weight * (means[f"heldout/{d.name}"] - d.low) / (d.high - d.low) for d in rubric.dimensions]
        return sum(parts) / total

    assert start["heldout/reward"] == pytest.approx(weighted_sum(start), abs=1e-6)
    assert end["heldout/reward"] == pytest.approx(weighted_sum(end), abs=1e-6)
    # what a lone completion's rank would give whatever it says: the yardstick must be seen to be something else (a
    # check that the reward moved instead rested on the tiny judge's noise: a 1600-step judge scored the untrained
    # policy's answers alike before and after its 4 steps)
    assert all(abs(row["heldout/reward"] - 0.5) > 0.1 for row in (start, end)), (start, end)
    words = " ".join(out.split())  # the table's title wraps at the table's width
    assert "aggregator=lexicographic ranks within groups: held-out reward = weighted_sum" in words
    assert "final held-out mean normalised reward (weighted_sum yardstick):" in words


def test_cascade_escalates_only_undecided_groups(cache_env):
    from rlkit.config import check_config, compose_config

    registry = load_registry()
    judge = check_config(compose_config(registry, offline_judge("cascade")), registry).plugins["judge"]
    rubric = load_rubric(RUBRIC)
    rollout = Rollout(records=[{"prompt": "7+5=", "reference": "12"}, {"prompt": "3+4=", "reference": "7"}],
                      completions=[["12", "the answer is twelve"], ["x", "x"]])  # group 2: nothing to separate
    cheap = judge.stages[0].score(rollout, rubric)
    assert judge.escalate(cheap, rubric).tolist() == [False, True]
    judgement = judge.assess(rollout, rubric)
    scores = judgement.scores
    assert torch.equal(scores[0], cheap[0]), "a decided group keeps the cheap scores"
    assert judgement.metrics["judge/escalated_groups"] == 0.5
    assert judgement.metrics["judge/requests"] == 2, "only the undecided group reached the LLM"


def test_permutation_median_undoes_a_position_biased_judge():
    """A judge that gives whichever dimension it reads first that dimension's top level: one order keeps the bias,
    three orders (each dimension first at most once: base, [3,0,2,1], [1,2,3,0]) take the median back to the
    unbiased scores, and the disagreement between orders shows in judge/swap_consistency."""
    import re

    from rlkit.testing.canned_chat import CannedChatServer

    rubric = load_rubric(RUBRIC)
    unbiased = {"format": 0, "correctness": 0, "brevity": 2, "repetition": 2}
    top = {d.name: int(d.high) for d in rubric.dimensions}

    def biased(messages):
        listed = re.findall(r"^\* (\w+) \(", messages[-1]["content"], flags=re.MULTILINE)
        return json.dumps({name: top[name] if k == 0 else unbiased[name] for k, name in enumerate(listed)})

    rollout = Rollout(records=[{"prompt": "7+5=", "reference": "12"}], completions=[["the sum is 12", "12!"]])
    with CannedChatServer(biased) as server:
        backend = {"name": "openai", "params": {"base_url": server.url, "max_retries": 0}}
        once = _judge(backend=backend, permutations=1)
        once_judgement = once.assess(rollout, rubric)
        one = once_judgement.scores
        thrice = _judge(backend=backend, permutations=3)
        thrice_judgement = thrice.assess(rollout, rubric)
        three = thrice_judgement.scores
    names = rubric.dimension_names
    assert one[0, 0].tolist() == [1.0, 0.0, 2.0, 2.0], "one order: the first-listed dimension (format) is inflated"
    assert "judge/swap_consistency" not in once_judgement.metrics
    assert three[0].tolist() == [[float(unbiased[n]) for n in names]] * 2, "the median of three orders: unbiased"
    # per completion, only brevity is never listed first, so only it is the same in every order: 1 of 4
    assert thrice_judgement.metrics["judge/swap_consistency"] == pytest.approx(0.25)


def test_reference_leak_check_warns_when_the_prompt_holds_the_answer():
    from rlkit.testing.canned_chat import CannedChatServer

    rubric = load_rubric(RUBRIC)
    rollout = Rollout(records=[{"prompt": "7+5= (hint: 12)", "reference": "12"}, {"prompt": "3+4=", "reference": "7"}],
                      completions=[["12"], ["7"]])  # the completions hold the answers too: those are not leaks
    answer = json.dumps({"format": 1, "correctness": 1, "brevity": 5, "repetition": 5})
    with CannedChatServer(lambda messages: answer) as server:
        backend = {"name": "openai", "params": {"base_url": server.url, "max_retries": 0}}
        judge = _judge(backend=backend, reference_leak_check=True)
        with pytest.warns(UserWarning, match=r"verbatim in the judge's prompt for 1 of 2 records \(first: '7\+5= "):
            judgement = judge.assess(rollout, rubric)
        assert judgement.metrics["judge/reference_leaks"] == 1.0
        quiet = _judge(backend=backend)  # off by default: no check, no metric
        quiet_judgement = quiet.assess(rollout, rubric)
        assert "judge/reference_leaks" not in quiet_judgement.metrics


def test_steps_are_asked_with_the_step_template_and_the_conversation_so_far():
    """Step-scoped dimensions: the llm judge asks about one turn, after the conversation that led to it."""
    from rlkit.core.types import Episode
    from rlkit.reward.pipeline import check_judge_output
    from rlkit.reward.steps import score_steps
    from rlkit.testing.canned_chat import CannedChatServer

    rubric = load_rubric(Path(__file__).parents[2] / "conf" / "rubric_files" / "calculator_steps.yaml")
    asked: list[str] = []

    def answer(messages):
        asked.append(messages[-1]["content"])
        return json.dumps({"tool_use": 1, "correctness": 1, "well_formed_turn": 1 if "STEP 1" in asked[-1] else 0})

    turns = ('[calc(e="37*14")]', "518")
    messages = ({"role": "user", "content": "37*14"}, {"role": "assistant", "content": turns[0]},
                {"role": "tool", "name": "calc", "content": "518"}, {"role": "assistant", "content": turns[1]})
    rollout = Rollout([{"prompt": "37*14", "reference": "518"}], [["518"]],
                      episodes=[[Episode(messages, turns, {"tool_calls": 1.0, "tool_errors": 0.0}, 1)]])
    with CannedChatServer(answer) as server:
        judge = _judge(backend={"name": "openai", "params": {"base_url": server.url, "max_retries": 0}})
        steps = score_steps(lambda r: check_judge_output(judge.score(r, rubric), r, rubric, "llm"), rollout, rubric, 2)
    assert steps[0, 0, :, 2].tolist() == [1.0, 0.0]
    second = next(text for text in asked if "STEP 2" in text)
    assert "CONVERSATION SO FAR:\nuser: 37*14\nassistant: [calc(e=\"37*14\")]\ntool: 518" in second
    assert second.rstrip().endswith("518")


def test_calibrate_with_expected_scoring_reports_both_ways_from_one_pass(cache_env, tmp_path, capsys):
    """`scoring: expected` reads each answer twice, as the expectation and as the level written: calibrate prints
    both, and the written levels are what `scoring: sampled` gives (greedy answers are the same answers)."""
    from rlkit.cli import main

    assert main(["calibrate", *offline_judge("llm"), "judge.params.scoring=expected", "logger=none",
                 f"calibrate.output={tmp_path / 'expected'}"]) == 0
    out = capsys.readouterr().out
    assert "scored both ways" in out
    both = {line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:6]]
            for line in out.splitlines() if line.count("│") == 6 and line.split("│")[1].strip() in
            ("format", "correctness", "brevity", "repetition")}
    assert main(["calibrate", *offline_judge("llm"), "judge.params.scoring=sampled", "logger=none",
                 f"calibrate.output={tmp_path / 'sampled'}"]) == 0
    sampled = json.loads((tmp_path / "sampled" / "calibration.json").read_text())["dimensions"]
    for name, (_, _, kappa, rho) in both.items():
        expect = sampled[name]
        assert kappa == ("—" if expect["kappa"] is None else f"{expect['kappa']:.3f}"), name
        assert rho == ("—" if expect["spearman"] is None else f"{expect['spearman']:.3f}"), name
    assert len(both) == 4
    # the round file keeps the written reading beside the expected one, the same figures as a sampled pass
    written = json.loads((tmp_path / "expected" / "calibration.json").read_text())["written"]
    assert {name: (w["kappa"], w["spearman"]) for name, w in written.items()} == \
        {name: (v["kappa"], v["spearman"]) for name, v in sampled.items()}
