"""The ``ranking`` judge: rank → reward methods, agreement between shuffled repetitions, cycles, failures,
and its place in the pipeline (a derived one-dimension rubric, confidence-scaled advantages).

The judge logic is tested here with a backend that answers in-process from the rendered prompt (so every
answer is known); the offline tiny ranking judge and the OpenAI-compatible server are in the slow tests."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import torch
from scipy.stats import kendalltau

from rlkit import ConfigError, JudgeError, Rollout
from rlkit.core.registry import load_registry
from rlkit.core.rubric import load_rubric
from rlkit.core.types import PreferencePairs, RewardBatch
from rlkit.judging import Completion
from rlkit.judging.ranking_parsing import parse_ranking
from rlkit.judging.tiny_judge import answer_level, group_labels, label_levels
from rlkit_plugins.judges.ranking import (
    kendall_tau_b,
    margin_heights,
    rank_rewards,
    ranking_rubric,
    shuffled_orders,
)
from rlkit_plugins.judges.rule import RuleJudge

RULE_TEACHER = RuleJudge(RuleJudge.Params())  # what the offline judges distil

RUBRIC = Path(__file__).parents[2] / "conf" / "rubric_files" / "arithmetic.yaml"
# a line of the compact template: the reference, then the candidate cut and padded to 6 characters; the
# lines are in label order
LINE = re.compile(r"^[^|\n]+\|(.{6})$", re.M)


class AnsweringBackend:
    """A judge backend answering each chat with ``answer(candidates)``, where ``candidates`` maps the labels
    of the rendered compact prompt to the texts they show."""

    def __init__(self, answer) -> None:
        self.answer = answer
        self.asked: list[str] = []

    def identity(self) -> dict[str, str]:
        return {"backend": "answering", "model": self.answer.__name__}

    def complete(self, prompts):
        out = []
        for chat in prompts:
            text = chat[0]["content"]
            self.asked.append(text)
            texts = [m.group(1).rstrip() for m in LINE.finditer(text.rsplit("Order:", 1)[0])]
            candidates = dict(zip(group_labels(len(texts)), texts, strict=True))
            out.append(Completion(text=self.answer(candidates)))
        return out

    def close(self) -> None:
        pass


def _judge(answer, **params):
    judge = load_registry().create("judge", "ranking", {"template": "judge/rank_group_compact.jinja", **params})
    backend = AnsweringBackend(answer)
    judge.backend.get = lambda *size: backend  # the handle would build the offline tiny judge otherwise
    return judge, backend


def _rollout(groups: list[list[str]]) -> Rollout:
    return Rollout(records=[{"prompt": f"{i}+1=", "reference": str(i + 1)} for i in range(len(groups))],
                   completions=groups)


def shortest_first(candidates: dict[str, str]) -> str:
    ranked = sorted(candidates, key=lambda label: (len(candidates[label]), label))
    return " > ".join(ranked)


def by_label(candidates: dict[str, str]) -> str:
    return " > ".join(sorted(candidates))  # pure position bias: whatever A shows is "best"


# --- pure pieces ---------------------------------------------------------------------------------------


def test_kendall_tau_b_matches_scipy_with_ties():
    rng = random.Random(0)
    for _ in range(200):
        n = rng.randint(2, 9)
        x = [float(rng.randint(1, 4)) for _ in range(n)]
        y = [float(rng.randint(1, 4)) for _ in range(n)]
        expected = kendalltau(x, y, variant="b").statistic
        if expected != expected:  # scipy: undefined when one side is constant
            assert kendall_tau_b(x, y) == (1.0 if len(set(x)) == len(set(y)) == 1 else 0.0)
        else:
            assert kendall_tau_b(x, y) == pytest.approx(expected)


def test_rank_rewards_methods():
    ranks = [[1.0, 2.0, 3.0, 4.0]]
    assert rank_rewards(ranks, "linear") == pytest.approx([1, 2 / 3, 1 / 3, 0])
    soft = rank_rewards(ranks, "softmax", temperature=0.5)
    assert soft[0] == 1 and soft == sorted(soft, reverse=True) and soft[1] == pytest.approx(torch.exp(
        torch.tensor(-2.0)).item())
    # wins: pairwise majority over repetitions, not the mean rank (Borda) that linear uses
    reps = [[1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [3.0, 1.0, 2.0]]
    assert rank_rewards(reps, "wins") == pytest.approx([1.0, 0.5, 0.0])
    assert rank_rewards(reps, "linear") == pytest.approx([1.0, 0.5, 0.0]), "the median over repetitions"
    assert rank_rewards([[1.5, 1.5, 3.0]], "linear") == pytest.approx([0.75, 0.75, 0.0]), "ties share"


def test_margin_heights_open_wider_gaps_for_clearly_better():
    labels = ["A", "B", "C"]
    plain = margin_heights(parse_ranking("A > B > C", labels), labels)
    clear = margin_heights(parse_ranking("A >> B > C", labels), labels)
    assert plain == pytest.approx([1.0, 0.5, 0.0])
    assert clear == pytest.approx([1.0, 1 / 3, 0.0])
    assert margin_heights(parse_ranking("A = B = C", labels), labels) == [0.5, 0.5, 0.5]


def test_shuffles_are_distinct_and_fixed_per_group():
    orders = shuffled_orders(8, 5, 0, "g")
    assert orders[0] == list(range(8)) and orders == shuffled_orders(8, 5, 0, "g")
    assert all(sorted(o) == list(range(8)) for o in orders) and len({tuple(o) for o in orders}) == 5
    assert orders != shuffled_orders(8, 5, 0, "another group")
    assert len({tuple(o) for o in shuffled_orders(3, 6, 0, "g")}) == 6, "every order of 3 before any repeat"
    assert len(shuffled_orders(2, 4, 0, "g")) == 4, "more repetitions than orders: repeats"


def test_group_labels_and_the_taught_answer():
    assert group_labels(3) == ["A", "B", "C"] and group_labels(28)[26:] == ["AA", "AB"]
    labels = group_labels(4)
    assert [answer_level({"format": f, "correctness": c}) for f, c in ((1, 1), (1, 0), (0, 0))] == [2, 1, 0]
    answer = label_levels(labels, [1, 2, 0, 2])
    assert answer == "A:1 B:2 C:0 D:2"
    parsed = parse_ranking(answer, labels)
    assert parsed.method == "scores" and parsed.complete and parsed.order == [["B", "D"], ["A"], ["C"]]


# --- the judge -----------------------------------------------------------------------------------------


def test_rewards_follow_the_answers_through_the_label_shuffles():
    rubric = load_rubric(RUBRIC)
    judge, backend = _judge(shortest_first, repetitions=3)
    groups = [["aaaa", "a", "aaa", "aa"], ["bb", "bbbbbb", "b", "bbbb"]]
    judgement = judge.assess(_rollout(groups), rubric)
    scores = judgement.scores
    assert scores.shape == (2, 4, 1)
    assert scores[0, :, 0].tolist() == pytest.approx([0, 1, 1 / 3, 2 / 3])
    assert scores[1, :, 0].tolist() == pytest.approx([2 / 3, 0, 1, 1 / 3])
    assert len(backend.asked) == 6 and len(set(backend.asked)) == 6, "each repetition shows another shuffle"
    m = judgement.metrics
    assert m["judge/swap_consistency"] == 1.0 and m["judge/rank_agreement"] == 1.0
    assert judgement.confidence.tolist() == [1.0, 1.0]
    assert m["judge/parse_failure_rate"] == 0.0
    judgement2 = judge.assess(_rollout(groups), rubric)
    again = judgement2.scores
    assert torch.equal(again, scores) and judgement2.metrics["judge/requests"] == 0, "answers come from the cache"


def test_a_position_biased_judge_gets_low_confidence():
    rubric = load_rubric(RUBRIC)
    groups = [["y" * (i + 1) for i in range(6)] for _ in range(4)]  # within the 8 characters shown
    judge, _ = _judge(by_label, repetitions=4)
    judgement = judge.assess(_rollout(groups), rubric)
    biased = judgement.metrics
    confidence = judgement.confidence
    assert biased["judge/swap_consistency"] < 0.5 and confidence.mean() < 0.5
    steady, _ = _judge(shortest_first, repetitions=4)
    steady_judgement = steady.assess(_rollout(groups), rubric)
    assert steady_judgement.confidence.tolist() == [1.0] * 4
    off, _ = _judge(by_label, repetitions=4, confidence=False)
    off_judgement = off.assess(_rollout(groups), rubric)
    assert off_judgement.confidence.tolist() == [1.0] * 4


def test_cycles_are_broken_deterministically():
    rubric = load_rubric(RUBRIC)
    judge, _ = _judge(lambda c: "A > B, B > C, C > A", repetitions=1)
    judgement = judge.assess(_rollout([["p", "q", "r"]]), rubric)
    scores = judgement.scores
    assert scores[0, :, 0].tolist() == pytest.approx([1.0, 0.5, 0.0])
    assert judgement.metrics["judge/cycles_broken"] == 1


@pytest.mark.parametrize("policy", ["nan", "drop_group", "min"])
def test_unreadable_answers_follow_the_failure_policy(policy):
    rubric = load_rubric(RUBRIC)
    calls = {"n": 0}

    def garbage_for_group_zero(candidates):
        calls["n"] += 1
        return "I cannot decide." if "aa" in candidates.values() else shortest_first(candidates)

    judge, _ = _judge(garbage_for_group_zero, repetitions=2, parse_retries=1, failure_policy=policy)
    with pytest.warns(UserWarning, match="rankings could not be parsed"):
        judgement = judge.assess(_rollout([["aa", "a"], ["bb", "b"]]), rubric)
        scores = judgement.scores
    if policy == "min":
        assert scores[0, :, 0].tolist() == [0.0, 0.0]
    else:
        assert torch.isnan(scores[0]).all()
    assert scores[1, :, 0].tolist() == [0.0, 1.0]
    m = judgement.metrics
    assert m["judge/parse_failure_rate"] == 0.5 and m["judge/retries"] == 2
    assert calls["n"] == 6, "4 requests, the 2 unreadable ones asked once more"


def _worst_first(candidates: dict[str, str]) -> list[str]:
    return shortest_first(candidates).split(" > ")[::-1]


@pytest.mark.parametrize("answer", [lambda c: "Worst first: " + ", ".join(_worst_first(c)),
                                    lambda c: "Ranking from worst to best:\n" + ", ".join(_worst_first(c)),
                                    lambda c: " < ".join(_worst_first(c))],
                         ids=["worst-first", "worst-to-best-heading", "less-than-chain"])
def test_a_worst_first_answer_gives_the_rewards_of_the_best_first_one(answer):
    rubric = load_rubric(RUBRIC)
    groups = [["aaaa", "a", "aaa", "aa"]]
    judge, _ = _judge(answer, repetitions=2)
    judgement = judge.assess(_rollout(groups), rubric)
    scores = judgement.scores
    assert scores[0, :, 0].tolist() == pytest.approx([0, 1, 1 / 3, 2 / 3]), "the shortest is best, not worst"
    assert judgement.metrics["judge/parse_failure_rate"] == 0.0


def test_an_answer_that_reads_two_ways_is_a_parse_failure_not_an_order():
    rubric = load_rubric(RUBRIC)
    judge, backend = _judge(lambda c: "Worst first: " + " > ".join(_worst_first(c)), repetitions=2, parse_retries=1)
    with pytest.warns(UserWarning, match="rankings could not be parsed"):
        judgement = judge.assess(_rollout([["aaaa", "a", "aaa", "aa"]]), rubric)
        scores = judgement.scores
    assert torch.isnan(scores).all()
    assert judgement.metrics["judge/parse_failure_rate"] == 1.0 and len(backend.asked) == 4, "asked again once"


def test_a_group_of_one_is_refused():
    judge, _ = _judge(shortest_first)
    with pytest.raises(JudgeError, match="at least 2"):
        judge.score(_rollout([["a"]]), load_rubric(RUBRIC))


def test_bad_params_name_the_field():
    registry = load_registry()
    for params, field in (({"repetitions": 0}, "repetitions"), ({"reward": "borda"}, "reward"),
                          ({"temperature": 0}, "temperature")):
        with pytest.raises(ConfigError, match=field):
            registry.create("judge", "ranking", params)


# --- in the pipeline -----------------------------------------------------------------------------------


def _validate(*overrides):
    from rlkit.config import check_config, compose_config

    registry = load_registry()
    return check_config(compose_config(registry, list(overrides)), registry, read_data=False)


def test_validation_derives_the_rank_rubric_and_composites_refuse_a_ranking_member():
    validated = _validate("judge=ranking", "advantage=rank")
    assert validated.scored_rubric.dimension_names == ["rank"]
    assert validated.rubric.name == "arithmetic"
    assert ranking_rubric(validated.rubric).dimensions[0].range == (0.0, 1.0)
    with pytest.raises(ConfigError, match="members\\[1\\].*scores groups on a rubric of its own"):
        _validate("judge=ensemble", "judge.params.members=[{name: rule},{name: ranking}]")
    with pytest.raises(ConfigError, match="judges.ranking"):
        _validate("judge=hybrid", "++judge.params.judges.ranking={}")


def test_held_out_completions_need_a_judge_that_scores_them_alone():
    validated = _validate("judge=ranking")
    assert validated.plugin_names["heldout_judge"] == "rule", "the default yardstick"
    assert "heldout_judge" not in _validate("judge=rule").plugins, "a per-dimension judge scores held-out itself"
    for value, message in (("ranking", "cannot score held-out completions alone"), ("nope", "unknown judge"),
                           ("null", "name a per-dimension judge")):
        with pytest.raises(ConfigError, match=message) as info:
            _validate("judge=ranking", f"heldout_judge={value}")
        assert info.value.where == "heldout_judge"


def test_confidence_scales_advantages_and_pair_weights():
    from rlkit.reward.pipeline import confidence_scaled, with_group_confidence
    from rlkit.reward.preferences import confidence_weighted

    rubric = ranking_rubric(load_rubric(RUBRIC))
    scores = torch.tensor([[[1.0], [0.0]], [[0.0], [1.0]]])
    batch = RewardBatch(rubric=rubric, raw_scores=scores, scores=scores, weights=torch.ones(1))
    assert with_group_confidence(batch, None, "j") is batch
    scaled = with_group_confidence(batch, torch.tensor([1.0, 0.25]), "j")
    adv = torch.tensor([[1.0, -1.0], [-2.0, 2.0]])
    assert confidence_scaled(adv, scaled).tolist() == [[1.0, -1.0], [-0.5, 0.5]]
    assert torch.equal(confidence_scaled(adv, batch), adv)
    pairs = PreferencePairs(torch.tensor([0, 1]), torch.tensor([0, 1]), torch.tensor([1, 0]), torch.tensor([1.0, 0.9]))
    assert confidence_weighted(pairs, scaled, soft_labels=False).weight.tolist() == pytest.approx([1.0, 0.225])
    assert confidence_weighted(pairs, scaled, soft_labels=True).weight.tolist() == pytest.approx([1.0, 0.6])
    with pytest.raises(JudgeError, match="group_confidence"):
        with_group_confidence(batch, torch.tensor([1.5, 0.0]), "j")


def test_score_needs_groups_and_calibrate_refuses_a_ranking_judge(tmp_path, capsys):
    from rlkit.cli import main
    from rlkit.core.errors import DataError
    from rlkit.evaluation.scoring import score_records

    validated = _validate("judge=ranking")
    validated.records = [{"prompt": "1+1=", "completions": ["2", "3"]}, {"prompt": "2+2=", "completion": "4"}]
    with pytest.raises(DataError, match=r"record 2: judge ranking ranks a record's completions against each other"):
        score_records(validated)  # before any model is built
    assert main(["calibrate", "judge=ranking"]) == 2
    assert "calibrate needs a judge that does" in capsys.readouterr().err


def test_the_tiny_ranking_recipe_teaches_rule_judge_levels_for_one_group_size():
    import dataclasses

    from rlkit.judging.tiny_judge import ranking_records, ranking_spec, render_ranking_compact

    spec = dataclasses.replace(ranking_spec(5), examples=40)
    records = ranking_records(spec, RULE_TEACHER)
    assert len(records) == 40 and {len(r["completions"]) for r in records} == {5}
    for r in records:
        labels = group_labels(len(r["completions"]))
        parsed = parse_ranking(r["answer"], labels) if len(labels) > 1 else None
        for completion, level in zip(r["completions"], r["levels"], strict=True):
            starts_with_sum = re.match(r"\s*(-?\d+)", completion)
            assert level == (2 if starts_with_sum and starts_with_sum.group(1) == r["reference"] else
                             1 if starts_with_sum else 0)
        if parsed is not None and len(set(r["levels"])) > 1:
            assert parsed.complete and parsed.method == "scores"
    lines = render_ranking_compact(load_rubric(RUBRIC), "3+4=", ["7", "abcdefgh", "7\nx", ""], "7").splitlines()
    assert lines[1:-1] == ["7 |7     ", "7 |abcdef", "7 |7 x   ", "7 |      "], "fixed width, in label order"


def test_the_tiny_judge_trains_inside_inference_mode(tmp_path):
    """The first judge call of a run is the held-out evaluation, which Lightning runs in inference mode."""
    import dataclasses

    from rlkit.judging.tiny_judge import RANKING_SPEC, TinyJudgeSpec, build_tiny_judge

    for spec in (TinyJudgeSpec(steps=2, examples=16), dataclasses.replace(RANKING_SPEC, steps=2, examples=8)):
        with torch.inference_mode():
            folder = build_tiny_judge(spec, cache_dir=tmp_path, teacher=RULE_TEACHER)
        assert (folder / "model.safetensors").is_file()


def test_an_incomplete_answer_is_retried_then_kept_for_the_run():
    rubric = load_rubric(RUBRIC)
    calls = {"n": 0}

    def names_two(candidates):
        calls["n"] += 1
        return "A > B"  # C is never ranked: readable, incomplete

    judge, _ = _judge(names_two, repetitions=1, parse_retries=1)
    judgement = judge.assess(_rollout([["x", "yy", "zzz"]]), rubric)
    first = judgement.scores
    assert calls["n"] == 2 and judgement.metrics["judge/incomplete_rate"] == 1.0
    assert first[0, :, 0].tolist() == pytest.approx([1.0, 0.5, 0.0]), "the unranked label shares the last tier"
    judgement2 = judge.assess(_rollout([["x", "yy", "zzz"]]), rubric)
    again = judgement2.scores
    assert calls["n"] == 2 and torch.equal(again, first), "not asked again in the same run"


def test_a_tie_lowers_the_groups_confidence_by_its_share_of_places():
    rubric = load_rubric(RUBRIC)
    groups = [["y" * (i + 1) for i in range(4)] for _ in range(2)]

    def one_tie(candidates: dict[str, str]) -> str:  # the two middle places tied: 1 of 3 adjacent places
        ranked = sorted(candidates, key=lambda label: (len(candidates[label]), label))
        return f"{ranked[0]} > {ranked[1]} = {ranked[2]} > {ranked[3]}"

    judge, _ = _judge(one_tie, repetitions=2)
    judgement = judge.assess(_rollout(groups), rubric)
    # the repetitions agree (τ-b 1), so the confidence is 1 - 0.5 × 1/3
    assert judgement.confidence.tolist() == pytest.approx([1 - 0.5 / 3] * 2)
    untied, _ = _judge(one_tie, repetitions=2, tie_penalty=0.0)
    untied_judgement = untied.assess(_rollout(groups), rubric)
    assert untied_judgement.confidence.tolist() == [1.0, 1.0]
    single, _ = _judge(one_tie, repetitions=1)  # one repetition: no agreement to read, the tie still counts
    single_judgement = single.assess(_rollout(groups), rubric)
    assert single_judgement.confidence.tolist() == pytest.approx([1 - 0.5 / 3] * 2)


def _shown(judge, record):
    return judge.backend.shown_reference(record, judge.params.show_reference)


def test_the_reference_is_kept_from_a_model_judges_prompt_unless_asked():
    registry = load_registry()
    served = {"backend": {"name": "openai", "params": {"base_url": "http://127.0.0.1:9/v1", "model": "judge"}}}
    record = {"prompt": "3+4=", "reference": "7"}
    assert _shown(registry.create("judge", "ranking", served), record) is None
    assert _shown(registry.create("judge", "ranking", {**served, "show_reference": True}), record) == "7"
    offline = registry.create("judge", "ranking", {})  # the offline tiny judge ranks by comparing with it
    assert _shown(offline, record) == "7"
    assert _shown(registry.create("judge", "ranking", {"show_reference": False}), record) is None
