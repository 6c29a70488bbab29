"""benchmarks/grm_from_labels.py re-runs rows one at a time: a row's model is reused only when its training finished,
and a run's results go over the earlier ones row by row, never replacing a row it did not run."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import grm_from_labels as gfl  # noqa: E402


def test_a_model_is_reused_only_once_its_training_wrote_its_metadata(tmp_path):
    run = tmp_path / "runs" / "smollm2_listwise"
    (run / "grm").mkdir(parents=True)
    (run / "grm" / "model.safetensors").write_text("")  # an interrupted training: weights, no grm.json yet
    assert gfl.trained_model("smollm2_listwise", run) is None
    (run / "grm" / "grm.json").write_text("{}")
    assert gfl.trained_model("smollm2_listwise", run) == run / "grm"
    bt = tmp_path / "runs" / "smollm2_bt" / "reward_model"
    bt.mkdir(parents=True)
    (bt / "reward_model.json").write_text("{}")
    assert gfl.trained_model("smollm2_bt", bt.parent) == bt


def test_a_run_replaces_only_the_rows_it_ran(tmp_path):
    path = tmp_path / "results.json"
    first = [gfl.Row("tiny", ["rlkit train-grm ..."], 181.0, 45.0, (0.74, 0.59, 0.92), (0.34, -0.03, 0.68)),
             gfl.Row("smollm2_listwise", ["rlkit train-grm ...", "rlkit score ..."], 475.0, 139.0,
                     (0.58, 0.39, 0.74), (0.16, -0.23, 0.52))]
    gfl.write_results(path, {}, first)
    again = gfl.Row("smollm2_listwise", ["rlkit train-grm ...", "rlkit score ..."], math.nan, 52.0,
                    (0.43, 0.23, 0.56), (-0.12, -0.45, 0.23), note="training reused")
    merged = gfl.write_results(path, gfl.read_results(path), [again])
    assert list(merged) == ["tiny", "smollm2_listwise"], "in the table's order"
    on_disk = json.loads(path.read_text())["rows"]
    assert on_disk["tiny"]["accuracy"] == [0.74, 0.59, 0.92] and on_disk["tiny"]["train_s"] == 181.0
    assert on_disk["smollm2_listwise"]["accuracy"] == [0.43, 0.23, 0.56]
    assert math.isnan(on_disk["smollm2_listwise"]["train_s"]) and on_disk["smollm2_listwise"]["score_s"] == 52.0
    shown = gfl.table([gfl.as_row(name, entry) for name, entry in merged.items()],
                      {"heldout": {"prompts": 11, "completions": 45, "pairs": 53},
                       "train": {"prompts": 30, "completions": 104, "pairs": 90}})
    assert "| 0.74 [0.59, 0.92] | 0.34 [-0.03, 0.68] | 181 | 45 |" in shown
    assert "| 0.43 [0.23, 0.56] | -0.12 [-0.45, 0.23] | — | 52 | training reused; from the run of " in shown
    assert not path.with_name("results.json.tmp").exists()
