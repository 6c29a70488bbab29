"""Several labellers and rankings in ``rlkit calibrate``: κ between labellers beside the judge's, and the ranking
judge's human alignment (pairwise agreement, Kendall τ-b) read from a labelling file's ranked groups — the metrics
checked against scikit-learn and scipy, the command run for real (the ranking judge asking a loopback chat server)."""

from __future__ import annotations

import json
import math

import pytest
from scipy.stats import kendalltau
from sklearn.metrics import cohen_kappa_score

from rlkit.cli import main
from rlkit.config import resolve_path
from rlkit.core.rubric import load_rubric
from rlkit.evaluation.labeller_agreement import labeller_agreement
from rlkit.evaluation.labelling import group_line, labelling_line, write_lines
from rlkit.evaluation.labelling_answers import apply_label, apply_ranking
from rlkit.evaluation.ranking_alignment import judge_alignment, kendall_tau_b, labeller_alignments, pair_agreement
from rlkit.testing.canned_chat import CannedChatServer

RUBRIC = load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/arithmetic.yaml"))
ANN = [5, 4, 1, 2, 5, 3, 1, 4]
BOB = [5, 3, 1, 2, 4, 3, 2, 4]


def labelled_lines() -> list[dict]:
    lines = []
    for k, (a, b) in enumerate(zip(ANN, BOB, strict=True)):
        line = labelling_line(prompt=f"{k}+1=", completion=str(k + 1) + " ok" * (5 - a), reference=str(k + 1),
                              rubric=RUBRIC, step=0, window=0)
        apply_label(line, "brevity", a, "ann")
        apply_label(line, "brevity", b, "bob")
        lines.append(line)
    apply_label(lines[0], "correctness", 1, "ann")  # one line only: a pair with n = 1
    apply_label(lines[0], "correctness", 1, "bob")
    return lines


def test_kappa_between_labellers_is_cohens_quadratic_kappa():
    rows = labeller_agreement(labelled_lines(), RUBRIC, judge_scores=[[math.nan, math.nan, float(b), math.nan]
                                                                       for b in BOB])
    brevity = next(r for r in rows if r.dimension == "brevity")
    assert (brevity.first, brevity.second, brevity.n) == ("ann", "bob", 8)
    assert brevity.kappa == pytest.approx(cohen_kappa_score(ANN, BOB, weights="quadratic"))
    assert brevity.judge_second == pytest.approx(1.0) and brevity.judge_first == pytest.approx(brevity.kappa)
    assert [r.dimension for r in rows] == ["correctness", "brevity"]  # no pair where nobody labelled
    assert math.isnan(labeller_agreement(labelled_lines(), RUBRIC)[0].judge_first), "no judge scores: NaN"


@pytest.mark.parametrize(("human", "judge"), [([3, 2, 2, 1], [0.9, 0.1, 0.5, 0.0]), ([1, 2, 3], [3, 2, 1]),
                                              ([2, 2, 1, 1, 0], [1, 0, 1, 0, 0.5])])
def test_kendall_tau_b_is_scipys(human, judge):
    assert kendall_tau_b(human, judge) == pytest.approx(kendalltau(human, judge).statistic)


def test_pair_agreement_by_hand():
    # the human: 0 best, 1 and 3 tied, 2 worst; the judge swaps 0 and 1 and puts 3 last
    human, judge = [-1, -2, -3, -2], [2 / 3, 1, 1 / 3, 0]
    assert pair_agreement(human, judge) == (3.0, 5, 1)
    assert pair_agreement([2, 1], [0.5, 0.5]) == (0.5, 1, 0)  # a judge tie on an ordered pair: one half


def ranked_file(tmp_path):
    singles = labelled_lines()[:2]
    group = group_line(prompt="7+1=", completions=["8", "It is 8.", "9", "eight"], reference="8", rubric=RUBRIC,
                       step=0, window=0)
    apply_ranking(group, [[0], [1, 3], [2]], "ann")
    apply_ranking(group, [[0, 1], [3], [2]], "bob")
    unranked = group_line(prompt="2+3=", completions=["5", "6"], reference="5", rubric=RUBRIC, step=0, window=0)
    path = tmp_path / "labelling.jsonl"
    write_lines(path, [*singles, group, unranked])
    return path


def test_alignment_numbers():
    group = {"completions": ["8", "It is 8.", "9", "eight"], "ranking": [[0], [1, 3], [2]],
             "rankings": {"ann": [[0], [1, 3], [2]], "bob": [[0, 1], [3], [2]]}}
    judged = judge_alignment([group, group], [[2 / 3, 1, 1 / 3, 0], [math.nan] * 4], "ranking")
    assert (judged.groups, judged.pairs, judged.tied_pairs, judged.unscored) == (1, 5, 1, 1)
    assert judged.agreement == pytest.approx(0.6) and judged.tau == pytest.approx(1 / math.sqrt(30))
    (between,) = labeller_alignments([group])
    # same relation on 4 of 6 pairs: (0,1) ann ">" bob "="; (1,3) ann "=" bob ">"
    assert (between.first, between.second, between.pairs) == ("ann", "bob", 6)
    assert between.agreement == pytest.approx(4 / 6)
    assert between.tau == pytest.approx(kendalltau([-1, -2, -3, -2], [-1, -1, -3, -2]).statistic)


def test_calibrate_reports_labellers_beside_the_judge(tmp_path, capsys, use_judge_cache):
    use_judge_cache(tmp_path / "cache")
    path = tmp_path / "labelling.jsonl"
    write_lines(path, [*labelled_lines(), group_line(prompt="1+1=", completions=["2", "3"], rubric=RUBRIC, step=0,
                                                     window=0)])
    assert main(["calibrate", f"calibrate.labels={path}", f"calibrate.output={tmp_path / 'out'}", "logger=csv"]) == 0
    out = capsys.readouterr().out
    assert "agreement between labellers" in out and "ann – bob" in out
    report = (tmp_path / "out" / "calibration.md").read_text()
    kappa = cohen_kappa_score(ANN, BOB, weights="quadratic")
    assert "## Agreement between labellers" in report and f"| brevity | ann – bob | 8 | {kappa:.3f} |" in report
    assert "against 8 human-labelled completions" in report, "the group line is not a completion to calibrate on"


def test_calibrate_judge_ranking_reads_the_rankings(tmp_path, capsys, use_judge_cache):
    use_judge_cache(tmp_path / "cache")
    path = ranked_file(tmp_path)
    # one repetition, labels in file order: the judge answers 1 best, then 0, 2, 3 (rewards 2/3, 1, 1/3, 0)
    with CannedChatServer(lambda messages: "B > A > C > D") as server:
        code = main(["calibrate", "judge=ranking", f"calibrate.labels={path}", f"calibrate.output={tmp_path / 'out'}",
                     "judge.params.repetitions=1", "judge.params.backend.name=openai",
                     f"++judge.params.backend.params={{base_url: '{server.url}', max_retries: 0}}", "logger=csv"])
        assert code == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert "ranking judge ranking vs human rankings — 1 groups" in out
    report = (tmp_path / "out" / "ranking.md").read_text()
    assert f"| judge ranking – humans | 1 | 5 | 1 | 0.600 | {1 / math.sqrt(30):.3f} |" in report
    assert "| ann – bob | 1 | 6 | 0.667 |" in report


def test_calibrate_judge_ranking_without_rankings_is_one_error_line(tmp_path, capsys, use_judge_cache):
    use_judge_cache(tmp_path / "cache")
    path = tmp_path / "labelling.jsonl"
    write_lines(path, labelled_lines())
    with CannedChatServer(lambda messages: "A > B") as server:
        code = main(["calibrate", "judge=ranking", f"calibrate.labels={path}", "judge.params.backend.name=openai",
                     f"++judge.params.backend.params={{base_url: '{server.url}', max_retries: 0}}"])
    assert code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"rlkit: error: {path}: no ranked group to hold a ranking judge to: rank groups first (`rlkit "
                   "label serve <file>`); for labels per dimension, calibrate needs a judge that does score them one "
                   "by one (rule, llm, hybrid, ensemble)"]


def test_calibrate_per_dimension_on_groups_only_is_one_error_line(tmp_path, capsys, use_judge_cache):
    use_judge_cache(tmp_path / "cache")
    path = tmp_path / "groups.jsonl"
    write_lines(path, [group_line(prompt="1+1=", completions=["2", "3"], rubric=RUBRIC, step=0, window=0)])
    assert main(["calibrate", f"calibrate.labels={path}"]) == 2
    assert "holds only groups to rank: calibrate a ranking judge on them (judge=ranking)" in capsys.readouterr().err


def test_a_bad_ranking_is_one_error_line_naming_file_and_line(tmp_path, capsys, use_judge_cache):
    use_judge_cache(tmp_path / "cache")
    path = tmp_path / "rankings.jsonl"  # a plain rankings file: no labelling fields needed
    path.write_text(json.dumps({"prompt": "1+1=", "completions": ["2", "3"], "ranking": [[1], [0]]}) + "\n" +
                    json.dumps({"prompt": "2+2=", "completions": ["4", "5"], "ranking": [[0]]}) + "\n",
                    encoding="utf-8")
    assert main(["calibrate", "judge=ranking", f"calibrate.labels={path}"]) == 2
    assert capsys.readouterr().err.strip() == (f'rlkit: error: {path}:2: "ranking": must hold each completion index '
                                               '0..1 exactly once, got [[0]]')
