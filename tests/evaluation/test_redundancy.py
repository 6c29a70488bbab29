"""The redundancy report (the rubric design note's MECE check) by hand, and as ``rlkit score`` prints it."""

from __future__ import annotations

import json
import math

import pytest

from rlkit.cli import main
from rlkit.evaluation.redundancy import RedundantPair, redundant_pairs

A = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
D = [2, 1, 4, 3, 6, 5, 8, 7, 10, 9]  # five adjacent swaps: Σd² = 10, ρ = 1 − 6·10 / (10·99) = 0.939394


def columns(*cols):
    return [list(row) for row in zip(*cols, strict=True)]


def test_pairs_by_hand():
    scores = columns(A, [2 * a for a in A], [-a for a in A], D, [3] * 10)
    names = ["a", "double", "reversed", "swapped", "constant"]
    got = redundant_pairs(scores, names, threshold=0.95)
    assert got == [RedundantPair("a", "double", 1.0, 10), RedundantPair("a", "reversed", -1.0, 10),
                   RedundantPair("double", "reversed", -1.0, 10)]
    looser = {(p.first, p.second): p.rho for p in redundant_pairs(scores, names, threshold=0.9)}
    assert looser[("a", "swapped")] == pytest.approx(1 - 60 / 990)
    assert looser[("reversed", "swapped")] == pytest.approx(-(1 - 60 / 990))
    assert not any("constant" in pair for pair in looser), "a constant dimension has no ρ"


def test_too_few_common_scores_are_not_called_redundant():
    nan = math.nan
    b = [1, 2, 3, 4, 5, 6, 7, nan, nan, nan]  # 7 completions scored on both: below MIN_PAIRS
    assert redundant_pairs(columns(A, b), ["a", "b"]) == []
    assert redundant_pairs(columns(A, b), ["a", "b"], min_pairs=7)[0].rho == 1.0


def test_score_prints_the_redundant_dimensions(tmp_path, capsys):
    # prose answers fail format and correctness together, bare correct sums pass both: the two move as one
    records = [{"prompt": f"{i}+1=", "reference": str(i + 1), "completion": str(i + 1) if i % 2 else f"it is {i + 1}"}
               for i in range(10)]
    data = tmp_path / "scored.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    assert main(["score", f"data.path={data}", "score.progress=false"]) == 0
    out = capsys.readouterr().out
    assert "redundant: format and correctness rank completions alike (Spearman ρ 1.000 over 10" in out
