"""Sample rows for the W&B table / samples.jsonl, built from one step's snapshot."""

from __future__ import annotations

import math

import torch

from rlkit.testing.contracts import example_rubric
from rlkit.train.callbacks import RolloutSnapshot, sample_rows


def test_sample_rows_interleave_prompts_and_keep_nan_as_missing():
    rubric = example_rubric()
    d = len(rubric.dimension_names)
    raw = torch.arange(2 * 3 * d, dtype=torch.float32).view(2, 3, d)
    raw[1, 0, 0] = math.nan
    snap = RolloutSnapshot(step=7, records=[{"prompt": "a"}, {"prompt": [{"role": "user", "content": "b"}]}],
                           completions=[["a0", "a1", "a2"], ["b0", "b1", "b2"]], raw_scores=raw,
                           rewards=torch.tensor([[0.1, 0.2, 0.3], [0.4, math.nan, 0.6]]),
                           advantages=torch.zeros(2, 3))
    columns, rows = sample_rows(snap, rubric, limit=3)
    assert columns == ["step", "prompt", "completion", "reward", "advantage", *rubric.dimension_names]
    assert [r[2] for r in rows] == ["a0", "b0", "a1"], "first completion of every prompt first"
    assert rows[1][1] != "" and "b" in rows[1][1]
    assert rows[1][5] is None, "NaN (not scored) is written as missing, never as 0"
    assert rows[0][0] == 7 and rows[0][3] == 0.1
