"""The ranking judge's human alignment with bootstrap intervals over groups and by step window, computed by hand;
and ``rlkit calibrate judge=grm`` (a tiny untrained GRM saved offline) held to human rankings in two windows."""

from __future__ import annotations

import json
import math
from itertools import combinations

import numpy as np
import pytest

from rlkit.cli import main
from rlkit.config import resolve_path
from rlkit.core.rubric import load_rubric
from rlkit.evaluation.audit_checks import Estimate, resample_indices
from rlkit.evaluation.labelling import group_line, write_lines
from rlkit.evaluation.labelling_answers import apply_ranking
from rlkit.evaluation.ranking_alignment import (
    judge_alignment,
    judge_alignment_by_window,
    ranking_payload,
    render_ranking_markdown,
)

RUBRIC = load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/arithmetic.yaml"))


def group(n: int, ranking: list[list[int]], **where: int) -> dict:
    return {"prompt": "p", "completions": [f"c{i}" for i in range(n)], "ranking": ranking, **where}


def test_agreement_is_pooled_over_pairs_and_its_interval_resamples_groups():
    # group A: 4 completions, the judge orders all 6 pairs as the human (agreement 1, τ 1); group B: 2 completions,
    # the judge swaps its one pair (0, τ -1). Pooled: 6 / 7 (not the mean 1/2); τ-b: the mean over groups, 0.
    # A resample of the two groups is AA (1), AB or BA (6/7) or BB (0), each of AA and BB a quarter of the time:
    # the 2.5th and 97.5th percentiles of 1000 resamples are 0 and 1
    a, b = group(4, [[0], [1], [2], [3]]), group(2, [[0], [1]])
    row = judge_alignment([a, b], [[4, 3, 2, 1], [0, 1]], "j")
    assert (row.groups, row.pairs, row.group_pairs, row.group_agreed) == (2, 7, [6, 1], [6.0, 0.0])
    assert row.agreement == pytest.approx(6 / 7) and row.tau == pytest.approx(0.0)
    assert isinstance(row.agreement_interval, Estimate), "audit_checks' bootstrap, not a copy"
    assert (row.agreement_interval.value, row.agreement_interval.low, row.agreement_interval.high) == \
        pytest.approx((6 / 7, 0.0, 1.0))
    assert (row.tau_interval.value, row.tau_interval.low, row.tau_interval.high) == pytest.approx((0.0, -1.0, 1.0))
    assert row.agreement_interval.n == 2


def test_the_interval_is_the_percentiles_of_the_pooled_agreement_over_resampled_groups():
    # three groups of three completions, the human order 0 > 1 > 2; the judge agrees on 3, 2 (one pair scored equal:
    # 1.5 + ... ) and 1 of 3 pairs
    groups = [group(3, [[0], [1], [2]]) for _ in range(3)]
    scores = [[3, 2, 1], [3, 1, 1], [1, 3, 2]]
    agreed = np.array([3.0, 2.5, 1.0])  # [3,1,1]: (0,1) (0,2) agree, (1,2) a judge tie: ½; [1,3,2]: only (1,2)
    row = judge_alignment(groups, scores, "j", resamples=500, seed=7)
    assert row.group_agreed == agreed.tolist() and row.agreement == pytest.approx(6.5 / 9)
    draws = resample_indices(3, 500, 7)
    pooled = agreed[draws].sum(axis=1) / 9
    low, high = np.percentile(pooled, [2.5, 97.5])
    assert (row.agreement_interval.low, row.agreement_interval.high) == pytest.approx((low, high))
    again = judge_alignment(groups, scores, "j", resamples=500, seed=7)
    assert again.agreement_interval == row.agreement_interval, "seeded: the same interval every time"


def test_one_group_or_an_unscored_one_leaves_no_spread():
    row = judge_alignment([group(3, [[0], [1, 2]]), group(3, [[0], [1], [2]])], [[1, 0, 0], [math.nan, 1, 2]], "j")
    assert (row.groups, row.unscored, row.pairs, row.tied_pairs) == (1, 1, 2, 1)
    assert (row.agreement_interval.low, row.agreement_interval.high) == (1.0, 1.0)
    empty = judge_alignment([group(2, [[0], [1]])], [[math.nan, 1.0]], "j")
    assert math.isnan(empty.agreement) and math.isnan(empty.agreement_interval.low)
    assert "| judge j – humans | 0 | 0 | 0 | — | — | — | — |" in render_ranking_markdown(empty, [], "f")


def test_alignment_by_step_window_takes_window_else_step():
    groups = [group(3, [[0], [1], [2]], window=0, step=3), group(3, [[0], [1], [2]], window=0, step=4),
              group(3, [[0], [1], [2]], step=10), group(2, [[0], [1]])]  # the last names no step: overall only
    scores = [[3, 2, 1], [1, 2, 3], [2, 2, 1], [1, 0]]
    windows = judge_alignment_by_window(groups, scores, "j")
    assert [w.window for w in windows] == [0, 10]
    first, second = windows[0].judge, windows[1].judge
    # window 0: all 3 pairs, then none: 3 / 6; τ 1 and -1. Window 10: (0,1) a judge tie ½, (0,2) and (1,2) agree
    assert (first.groups, first.pairs, first.agreement, first.tau) == (2, 6, pytest.approx(0.5), pytest.approx(0.0))
    assert (first.agreement_interval.low, first.agreement_interval.high) == (0.0, 1.0)
    assert (second.groups, second.agreement) == (1, pytest.approx(2.5 / 3))
    assert second.tau == pytest.approx(2 / math.sqrt(6))  # 2 concordant, 1 tied in the judge: 2 / √(3·2)
    overall = judge_alignment(groups, scores, "j")
    assert (overall.groups, overall.pairs, overall.agreement) == (4, 10, pytest.approx(6.5 / 10))

    report = render_ranking_markdown(overall, [], "labels.jsonl", windows)
    assert "## Human alignment by step window" in report
    assert "| 0 | 2 | 6 | 0.500 | [0.000, 1.000] | 0.000 | [-1.000, 1.000] |" in report
    assert f"| 10 | 1 | 3 | 0.833 | [0.833, 0.833] | {2 / math.sqrt(6):.3f} |" in report
    payload = ranking_payload(overall, [], windows, "labels.jsonl")
    assert [(w["window"], w["groups"], w["agreement_interval"]["low"]) for w in payload["windows"]] == \
        [(0, 2, 0.0), (10, 1, 0.8333)]
    assert judge_alignment_by_window([group(2, [[0], [1]])], [[1, 0]], "j") == [], "no step: no windows"


# --- rlkit calibrate judge=grm ---------------------------------------------------------------------------------


@pytest.fixture
def tiny_grm(tmp_path):
    """An untrained tiny GRM in Hugging Face format, as ``rlkit train-grm`` saves one (what it prefers is arbitrary
    but fixed: the test compares the command with the model's own scores)."""
    from rlkit.grm.model import GRM_INFO
    from rlkit.lm.models import TinyPolicySpec, build_model, build_tokenizer

    folder = tmp_path / "grm"
    spec = TinyPolicySpec(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                          num_key_value_heads=1)
    tokenizer = build_tokenizer(spec)
    build_model(spec, tokenizer).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / GRM_INFO).write_text(json.dumps({"objective": "pairwise", "format": {
        "pairwise_template": "grm/pairwise_compact.jinja", "listwise_template": "grm/listwise_compact.jinja",
        "max_response_chars": 16}}))
    return folder


def _agreement(human: list[list[int]], judged: list[float]) -> tuple[float, int]:
    """Pairs in different human tiers the judge orders alike (a judge tie ½), and how many such pairs."""
    tier = {i: k for k, t in enumerate(human) for i in t}
    agreed, pairs = 0.0, 0
    for i, j in combinations(range(len(judged)), 2):
        if tier[i] == tier[j]:
            continue
        pairs += 1
        agreed += 0.5 if judged[i] == judged[j] else float((tier[i] < tier[j]) == (judged[i] > judged[j]))
    return agreed, pairs


def test_calibrate_judge_grm_holds_the_grm_to_the_rankings_by_window(tiny_grm, tmp_path, capsys, use_judge_cache):
    from rlkit.grm.model import GenerativeRewardModel, read_grm_format

    use_judge_cache(tmp_path / "cache")
    lines = [group_line(prompt="7+1=", completions=["8", "It is 8.", "9", "eight"], reference="8", rubric=RUBRIC,
                        step=10, window=10),
             group_line(prompt="2+2=", completions=["4", "5", "four"], reference="4", rubric=RUBRIC, step=20,
                        window=20),
             group_line(prompt="3+3=", completions=["6", "7"], reference="6", rubric=RUBRIC, step=21, window=20)]
    orders = [[[0], [1, 3], [2]], [[0], [2], [1]], [[0], [1]]]
    for line, order in zip(lines, orders, strict=True):
        apply_ranking(line, order, "ann")
    path = tmp_path / "ranking_set.jsonl"
    write_lines(path, lines)
    out = tmp_path / "out"
    assert main(["calibrate", "judge=grm", f"judge.params.model={tiny_grm}", f"calibrate.labels={path}",
                 f"calibrate.output={out}", "logger=csv"]) == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "ranking judge grm vs human rankings — 3 groups" in printed and "by step window" in printed

    grm = GenerativeRewardModel.load(tiny_grm, fmt=read_grm_format(tiny_grm))
    given = {}
    for line in lines:
        wins = grm.group_rewards([line], [line["completions"]])[0].tolist()
        given[line["prompt"]] = [float(w) for w in wins]
    counts = [_agreement(order, given[line["prompt"]]) for line, order in zip(lines, orders, strict=True)]
    numbers = json.loads((out / "ranking.json").read_text())
    assert numbers["judge"]["groups"] == 3 and numbers["judge"]["pairs"] == 5 + 3 + 1
    assert numbers["judge"]["agreement"] == pytest.approx(sum(a for a, _ in counts) / 9, abs=1e-6)
    assert [w["window"] for w in numbers["windows"]] == [10, 20]
    assert numbers["windows"][0]["agreement"] == pytest.approx(counts[0][0] / 5, abs=1e-6)
    assert numbers["windows"][1]["agreement"] == pytest.approx((counts[1][0] + counts[2][0]) / 4, abs=1e-6)
    assert "## Human alignment by step window" in (out / "ranking.md").read_text()
