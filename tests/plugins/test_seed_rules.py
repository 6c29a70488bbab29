"""The seeds' exact rules beside rlkit's own (issue 24, section 4), each checked on hand-computed values:
soft win-rate labels, near-saturation, the per-prompt conflict switch, the GDPO name collision and the
geometric mean's renormalised exponents, floor and hard zero. Plus the ranking judge's rank gaps (section 3)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from rlkit import ConfigError, RewardBatch, Rollout, rubric_from_dict
from rlkit.core.registry import load_registry
from rlkit.core.rubric import load_rubric
from rlkit.judging import Completion
from rlkit.judging.tiny_judge import group_labels
from rlkit.reward.diagnostics import one_differs_share, saturated_groups, saturation_share
from rlkit.reward.preferences import ordering_batch
from rlkit_plugins.advantages.gdpo import GroupDecoupledAdvantage
from rlkit_plugins.aggregators.geometric import nan_geometric_mean
from rlkit_plugins.judges.ranking import rank_gap_metrics, rank_gaps, rank_rewards
from rlkit_plugins.objectives.group_dpo import GroupDpoObjective
from rlkit_plugins.preferences.winrate import WinratePreferences, group_winrate, winrate_pairs

NAN = math.nan
REGISTRY = load_registry()


def batch_of(scores, rewards=None, weights=None, names=None) -> RewardBatch:
    s = torch.tensor(scores, dtype=torch.float32)
    names = names or [f"d{k}" for k in range(s.shape[-1])]
    rubric = rubric_from_dict({"name": "t", "version": "1", "dimensions": [
        {"name": n, "range": [0, 1], "priority": k + 1} for k, n in enumerate(names)]})
    w = torch.ones(s.shape[-1]) if weights is None else torch.tensor(weights, dtype=torch.float32)
    r = None if rewards is None else torch.tensor(rewards, dtype=torch.float32)
    return RewardBatch(rubric=rubric, raw_scores=s, scores=s, weights=w, rewards=r)


def triples(pairs) -> list[tuple[int, int, int]]:
    return list(zip(pairs.prompt_index.tolist(), pairs.chosen.tolist(), pairs.rejected.tolist(), strict=True))


# --- soft win-rate labels ------------------------------------------------------------------------


def test_group_winrate_labels_by_hand():
    # W = (wins + ½ ties) / (n - 1): 0.9 -> 3/3, each 0.6 -> (1 + ½)/3 = ½, 0.1 -> 0; NaN left out of n
    rewards = torch.tensor([[0.9, 0.6, NAN, 0.6, 0.1]])
    label = group_winrate(rewards)
    assert label[0, 0, 1] == pytest.approx(0.75)    # ½ + ½(1 − ½)
    assert label[0, 0, 4] == pytest.approx(1.0)     # best over worst
    assert label[0, 3, 4] == pytest.approx(0.75)
    assert label[0, 1, 3] == pytest.approx(0.5)     # the tie: no preference
    assert math.isnan(label[0, 2, 0])
    pairs = winrate_pairs(rewards, torch.zeros(1, 5, 1), torch.ones(1), label="group_winrate")
    assert triples(pairs) == [(0, 0, 1), (0, 0, 3), (0, 0, 4), (0, 1, 4), (0, 3, 4)]
    assert pairs.weight.tolist() == pytest.approx([0.75, 0.75, 1.0, 0.75, 0.75])


def test_close_completions_get_a_soft_label_not_one():
    # eight completions 0.001 apart on every dimension: the share of dimensions won is 1.0 for every pair,
    # the group win-rate label of neighbours is ½ + 1/(2·7) = 0.5714
    scores = torch.tensor([[[0.5 + 0.001 * k] * 3 for k in range(8)]])
    rewards = scores.mean(-1)
    batch = batch_of(scores.tolist(), rewards.tolist())
    share = WinratePreferences(WinratePreferences.Params()).pairs(batch)
    seed = WinratePreferences(WinratePreferences.Params(label="group_winrate")).pairs(batch)
    assert triples(share) == triples(seed) and len(seed) == 28
    assert share.weight.tolist() == [1.0] * 28
    neighbours = {(i, j): w for (_, i, j), w in zip(triples(seed), seed.weight.tolist(), strict=True)}
    assert neighbours[(7, 6)] == pytest.approx(0.5 + 1 / 14)
    assert neighbours[(7, 0)] == pytest.approx(1.0)
    assert neighbours[(4, 1)] == pytest.approx(0.5 + 0.5 * 3 / 7)
    assert min(seed.weight.tolist()) > 0.5


def test_labels_below_half_are_dropped_by_default_and_kept_on_request():
    # the reward ranks 0 first, the weight sides with 1: dimension share 1/4
    batch = batch_of([[[1.0, 0.0], [0.0, 1.0]]], [[0.9, 0.1]], weights=[1.0, 3.0])
    assert len(WinratePreferences(WinratePreferences.Params()).pairs(batch)) == 0
    kept = WinratePreferences(WinratePreferences.Params(below_half="keep")).pairs(batch)
    assert triples(kept) == [(0, 0, 1)] and kept.weight.tolist() == [0.25]
    seed = WinratePreferences(WinratePreferences.Params(label="group_winrate")).pairs(batch)
    assert seed.weight.tolist() == [1.0]
    with pytest.raises(ConfigError, match="preference.params.label"):
        WinratePreferences(WinratePreferences.Params(label="wins"))
    with pytest.raises(ConfigError, match="preference.params.below_half"):
        WinratePreferences(WinratePreferences.Params(below_half="clip"))


# --- near-saturation -------------------------------------------------------------------------------


def test_one_differs_share_and_the_majority_threshold_by_hand():
    assert one_differs_share(8) == 0.875 and one_differs_share(3) == pytest.approx(2 / 3)
    assert one_differs_share(2) == one_differs_share(1) == 1.0
    groups = torch.tensor([[1.0, 1, 1, 1, 1, 1, 1, 0],        # 7 of 8: near-saturated
                           [1.0, 1, 1, 1, 1, 1, 0, 0],        # 6 of 8: not
                           [1.0, 1, 1, 1, 1, 1, 1, 1],        # all equal: saturated either way
                           [0.5, 0.5, 0.5, NAN, NAN, NAN, NAN, 0.2]]).unsqueeze(-1)   # 3 of 4 scored: not
    assert saturated_groups(groups).squeeze(-1).tolist() == [False, False, True, False]
    assert saturated_groups(groups, 0.875).squeeze(-1).tolist() == [True, False, True, False]
    assert saturated_groups(groups, 0.75).squeeze(-1).tolist() == [True, True, True, True]
    assert saturation_share(groups, one_differs_share(8)).tolist() == [0.5]


def test_ordering_leaves_out_a_near_saturated_dimension():
    # d0 is 1 for all but completion 3; d1 orders 0 > 1 > 2 > 3. Summed, 3 would tie 2 at 0.25... with d0
    # masked in this group (7 of 8 style, here 3 of 4 at share 0.75), only d1 orders it.
    scores = [[[1.0, 0.75], [1.0, 0.5], [1.0, 0.25], [0.0, 1.0]]]
    batch = batch_of(scores, [[0.0] * 4])
    aggregator = REGISTRY.create("aggregator", "weighted_sum")
    strict = ordering_batch(batch, aggregator, mask_saturated=True)
    near = ordering_batch(batch, aggregator, mask_saturated=True, majority_share=0.75)
    assert strict.rewards.tolist() == [[0.875, 0.75, 0.625, 0.5]]   # d0 still counts: 3 is last
    assert near.rewards.tolist() == [[0.75, 0.5, 0.25, 1.0]]        # d0 left out: 3 is first


# --- the conflict switch ---------------------------------------------------------------------------


def _objective(**params) -> GroupDpoObjective:
    return REGISTRY.create("objective", "group_dpo", {"min_gap": 0.0, **params})


def _conflict_batch() -> RewardBatch:
    # weights (1, 1, 4). Group 0 (correctness, format, style): (1, 0, 0), (0, 1, 0.5), (1, 1, 1): pair (0, 1)
    # conflicts (correctness against format and style), (0, 2) and (1, 2) do not: 1/3 > 0.2. Group 1: (1, 1, 0),
    # (0, 0, 1), (0, 0, 1): correctness and format never disagree; style disagrees with both in 2 of 3 pairs.
    scores = [[[1.0, 0.0, 0.0], [0.0, 1.0, 0.5], [1.0, 1.0, 1.0]],
              [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 1.0]]]
    return batch_of(scores, names=["correctness", "format", "style"], weights=[1.0, 1.0, 4.0])


def test_per_prompt_conflict_switch_by_hand():
    batch = _conflict_batch()
    aggregator = REGISTRY.create("aggregator", "weighted_sum")
    constructor = REGISTRY.create("preference_constructor", "all_pairs")
    lexicographic = REGISTRY.create("aggregator", "lexicographic")
    summed = aggregator.aggregate(batch)
    lex = lexicographic.aggregate(batch)
    # weighted sum (1, 1, 4)/6: group 0 -> 1/6, 1/2, 1 and group 1 -> 1/3, 2/3, 2/3; lexicographic (correctness
    # first) puts completion 0 over 1 in both
    assert torch.allclose(summed, torch.tensor([[1 / 6, 0.5, 1.0], [1 / 3, 2 / 3, 2 / 3]]))
    assert lex[0, 0] > lex[0, 1] and lex[1, 0] > lex[1, 1]
    truncated = torch.zeros(6, dtype=torch.bool)

    def chosen_over(objective) -> tuple[set, dict]:
        targets, metrics = objective.pair_targets(batch, truncated, constructor=constructor, aggregator=aggregator,
                                                  step=0)
        return set(triples(targets.pairs)), metrics

    # two dimensions counted, as the note's correctness vs format: group 0 switches (1/3 > 0.2), group 1 not (0)
    pairs, metrics = chosen_over(_objective(conflict_scope="prompt", conflict_dimensions=["correctness", "format"]))
    assert (0, 0, 1) in pairs and (0, 1, 0) not in pairs     # correctness decides group 0
    assert (1, 1, 0) in pairs and (1, 2, 0) in pairs          # the weighted sum keeps ordering group 1
    assert metrics["ordering/lexicographic"] == 0.5
    # any two dimensions: group 1's style conflicts too (2 of 3 pairs), so both switch
    pairs, metrics = chosen_over(_objective(conflict_scope="prompt"))
    assert metrics["ordering/lexicographic"] == 1.0 and (1, 0, 1) in pairs
    # today's batch rule: one step of a 50-step window switches nothing
    pairs, metrics = chosen_over(_objective())
    assert metrics["ordering/lexicographic"] == 0.0 and (0, 1, 0) in pairs
    # a threshold the group does not pass: 1/3 is not above 0.4
    _, metrics = chosen_over(_objective(conflict_scope="prompt", conflict_threshold=0.4,
                                        conflict_dimensions=["correctness", "format"]))
    assert metrics["ordering/lexicographic"] == 0.0


def test_conflict_switch_defaults_and_checks():
    params = GroupDpoObjective.Params()
    assert params.auto_lexicographic is True and params.conflict_scope == "batch"
    assert params.conflict_dimensions == [] and params.saturation_majority_share == 1.0
    with pytest.raises(ValueError, match="two or more"):
        GroupDpoObjective.Params(conflict_dimensions=["format"])
    objective = _objective(conflict_dimensions=["correctness", "tone"])
    with pytest.raises(ConfigError, match="tone"):
        objective.check_rubric(_conflict_batch().rubric)


def test_objective_group_dpo_alone_turns_auto_lexicographic_on():
    from rlkit.commands.common import compose_and_check

    # without experiment=group_dpo
    objective = compose_and_check(["objective=group_dpo"]).plugins["objective"]
    assert objective.params.auto_lexicographic is True and objective.params.conflict_scope == "batch"
    per_prompt = compose_and_check(["objective=group_dpo", "objective.params.conflict_scope=prompt",
                                   "objective.params.conflict_dimensions=[correctness,format]"]).plugins["objective"]
    assert per_prompt.params.conflict_dimensions == ["correctness", "format"]
    with pytest.raises(ConfigError, match="objective.params.conflict_dimensions"):
        compose_and_check(["objective=group_dpo", "objective.params.conflict_dimensions=[correctness,tone]"])


# --- the name collision ----------------------------------------------------------------------------


def test_both_gdpos_say_which_is_which():
    import rlkit_plugins.advantages.gdpo as advantage
    import rlkit_plugins.objectives.group_dpo as objective

    assert "objective=group_dpo" in GroupDecoupledAdvantage.__doc__ and "objective=group_dpo" in advantage.__doc__
    assert "advantage=gdpo" in objective.__doc__


# --- geometric aggregation -------------------------------------------------------------------------


def test_geometric_renormalised_exponents_floor_and_hard_zero_by_hand():
    w = torch.tensor([1.0, 1.0])
    # the note's Π sᵢ^wᵢ with raw weights 1 would give 0.25·1 = 0.25; exponents 1/2 each: √0.25 = 0.5
    assert float(nan_geometric_mean(torch.tensor([0.25, 1.0]), w)) == pytest.approx(0.5)
    # weights 3 and 1 -> exponents 3/4 and 1/4: 0.5^0.75 · 0.8^0.25
    assert float(nan_geometric_mean(torch.tensor([0.5, 0.8]), torch.tensor([3.0, 1.0]))) == pytest.approx(
        0.5 ** 0.75 * 0.8 ** 0.25)
    # an unscored dimension drops out with its weight: 0.25 alone, not 0.25^1 · (missing)
    assert float(nan_geometric_mean(torch.tensor([0.25, NAN]), w)) == pytest.approx(0.25)
    # a zero is floored at 0.01: 0.01^½ · 1 = 0.1 (in Π sᵢ^wᵢ it would be 0, tying every such completion)
    assert float(nan_geometric_mean(torch.tensor([0.0, 1.0]), w)) == pytest.approx(0.1)
    assert float(nan_geometric_mean(torch.tensor([0.0, 0.25]), w)) == pytest.approx(0.05)
    # hard_zero: a scored 0 vetoes, a small positive score is still floored
    assert float(nan_geometric_mean(torch.tensor([0.0, 1.0]), w, hard_zero=True)) == 0.0
    assert float(nan_geometric_mean(torch.tensor([0.004, 1.0]), w, hard_zero=True)) == pytest.approx(0.1)


# --- rank gaps -------------------------------------------------------------------------------------


def test_rank_gaps_by_hand():
    # B > A = D > C, linear rewards: A and D share places 2 and 3 -> B 1, A = D ½, C 0
    rewards = rank_rewards([[2.5, 1.0, 4.0, 2.5]], "linear")
    assert rewards == pytest.approx([0.5, 1.0, 0.0, 0.5])
    assert rank_gaps(rewards) == pytest.approx([0.5, 0.0, 0.5])
    # a second group of 3, all distinct: 1, ½, 0 -> gaps ½, ½
    metrics = rank_gap_metrics([rewards, [0.0, 1.0, 0.5]])
    assert metrics["judge/rank_gap_mean"] == pytest.approx(0.4)                 # (½ + 0 + ½ + ½ + ½) / 5
    assert metrics["judge/rank_gap_min"] == pytest.approx(0.5)                  # closest distinct call per group
    assert metrics["judge/rank_tie_share"] == pytest.approx(1 / 5)
    # a group its judge ties completely: all gaps 0, no distinct call
    tied = rank_gap_metrics([[0.5, 0.5, 0.5]])
    assert tied == {"judge/rank_gap_mean": 0.0, "judge/rank_tie_share": 1.0}
    assert rank_gap_metrics([]) == {}


class _LengthRanker:
    """A judge backend ranking the candidates of the compact ranking prompt shortest first, equal lengths tied."""

    line = re.compile(r"^[^|\n]+\|(.{6})$", re.M)

    def identity(self) -> dict[str, str]:
        return {"backend": "length-ranker"}

    def complete(self, prompts):
        out = []
        for chat in prompts:
            text = chat[0]["content"].rsplit("Order:", 1)[0]
            texts = [m.group(1).rstrip() for m in self.line.finditer(text)]
            by_length: dict[int, list[str]] = {}
            for label, candidate in zip(group_labels(len(texts)), texts, strict=True):
                by_length.setdefault(len(candidate), []).append(label)
            out.append(Completion(text=" > ".join(" = ".join(tier) for _, tier in sorted(by_length.items()))))
        return out

    def close(self) -> None:
        pass


def test_the_ranking_judge_logs_its_rank_gaps():
    judge = REGISTRY.create("judge", "ranking", {"template": "judge/rank_group_compact.jinja", "repetitions": 2})
    backend = _LengthRanker()
    judge.backend.get = lambda *size: backend
    groups = [["aaaa", "a", "aaa", "aa"],      # 1, 0, ⅓, ⅔ -> gaps ⅓, ⅓, ⅓
              ["aa", "bb", "c", "d"]]          # c = d > a = b: ⅚, ⅚, ⅙, ⅙ -> gaps 0, ⅔, 0
    rollout = Rollout(records=[{"prompt": f"{i}+1=", "reference": str(i + 1)} for i in range(2)], completions=groups)
    rubric = load_rubric(Path(__file__).parents[2] / "conf" / "rubric_files" / "arithmetic.yaml")
    judgement = judge.assess(rollout, rubric)
    scores = judgement.scores
    assert scores[1, :, 0].tolist() == pytest.approx([1 / 6, 1 / 6, 5 / 6, 5 / 6])
    m = judgement.metrics
    assert m["judge/rank_gap_mean"] == pytest.approx((3 * 1 / 3 + 2 / 3) / 6)    # 5/18
    assert m["judge/rank_gap_min"] == pytest.approx((1 / 3 + 2 / 3) / 2)         # ½
    assert m["judge/rank_tie_share"] == pytest.approx(2 / 6)
