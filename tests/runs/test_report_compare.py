"""``rlkit report RUN_A RUN_B``: each run's own report, plus their golden-set results side by side by rubric version."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.core.errors import DataError
from rlkit.runs.report_comparison import COMPARISON_NAME, comparison_table, golden_columns, write_comparison

V1 = {"name": "hacking", "version": "1.0", "hash": "9c3bf8aa41f8" + "0" * 52}
V2 = {"name": "hacking", "version": "2.0", "hash": "40e1acb373c6" + "0" * 52}


def _run(root: Path, name: str, rubric: dict | None, values: dict[int, dict[str, float]],
         prompts_hash: str = "fc39a17c950a" + "0" * 52) -> Path:
    """A run folder with a two-step metric history and, with a rubric, golden-set rows at the given steps."""
    run = root / name
    run.mkdir(parents=True)
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "metrics": {"reward/mean": 0.5}}) + "\n"
                                               for s in (0, 1)))
    if rubric is not None:
        kinds = {"correctness": "rubric", "clarity": "rubric", "reward": "reward", "exact_match": "reference"}
        rows = [{"checkpoint": str(run), "step": step, "rubric": rubric, "judge": "rule", "prompts": "/x/golden.jsonl",
                 "prompts_hash": prompts_hash, "dimension": dim, "kind": kinds[dim], "mean": mean, "std": 0.0, "n": 48}
                for step, means in values.items() for dim, mean in means.items()]
        (run / "eval").mkdir()
        (run / "eval" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_comparison_shows_each_runs_rubric_version_and_first_to_last_golden_means(tmp_path):
    a = _run(tmp_path, "v1", V1, {10: {"correctness": 0.98, "clarity": 1.0, "reward": 0.65, "exact_match": 0.98},
                                  150: {"correctness": 0.85, "clarity": 4.8, "reward": 0.89, "exact_match": 0.04}})
    b = _run(tmp_path, "v2", V2, {10: {"correctness": 0.98, "clarity": 3.3, "reward": 0.84, "exact_match": 0.98},
                                  150: {"correctness": 0.92, "clarity": 3.3, "reward": 0.80, "exact_match": 0.92}})
    header, rows = comparison_table([("v1", golden_columns(a)), ("v2", golden_columns(b))])
    table = {row[0]: row[1:] for row in rows}
    assert header == ["", "v1", "v2"]
    assert table["rubric"] == ["hacking v1.0 (9c3bf8aa41f8)", "hacking v2.0 (40e1acb373c6)"]
    assert table["steps evaluated"] == ["10 → 150 (2)", "10 → 150 (2)"]
    assert table["clarity (rubric)"] == ["1.000 → 4.800", "3.300 → 3.300"]
    assert table["exact_match (reference)"] == ["0.980 → 0.040", "0.980 → 0.920"]
    # rubric dimensions first, then the reward, then reference metrics
    assert [r[0] for r in rows[4:]] == ["correctness (rubric)", "clarity (rubric)", "reward (reward)",
                                        "exact_match (reference)"]
    path = write_comparison([a, b])
    assert path == tmp_path / COMPARISON_NAME
    text = path.read_text()
    assert "| rubric | hacking v1.0 (9c3bf8aa41f8) | hacking v2.0 (40e1acb373c6) |" in text
    assert "different rubric versions" in text and "different golden sets" not in text


def test_a_run_without_golden_results_gets_a_column_of_dashes_and_other_golden_sets_are_flagged(tmp_path):
    a = _run(tmp_path, "a", V1, {5: {"correctness": 0.5}}, prompts_hash="a" * 64)
    b = _run(tmp_path, "b", V1, {5: {"correctness": 0.7}}, prompts_hash="b" * 64)
    c = _run(tmp_path, "c", None, {})
    header, rows = comparison_table([(d.name, golden_columns(d)) for d in (a, b, c)])
    table = {row[0]: row[1:] for row in rows}
    assert table["rubric"][2] == "no golden-set evaluation" and table["correctness (rubric)"] == ["0.500", "0.700", "—"]
    text = write_comparison([a, b, c], tmp_path / "out" / "cmp.md").read_text()
    assert "different golden sets" in text and "different rubric versions" not in text


def test_cli_report_with_several_runs_writes_each_report_and_the_comparison(tmp_path, capsys):
    a = _run(tmp_path / "x", "run", V1, {10: {"correctness": 0.9}})
    b = _run(tmp_path / "y", "run", V2, {10: {"correctness": 0.8}})
    out = tmp_path / "cmp.md"
    assert main(["report", str(a), str(b), f"output={out}"]) == 0
    printed = capsys.readouterr().out
    assert (a / "report" / "report.md").is_file() and (b / "report" / "report.md").is_file()
    assert "| x/run | y/run |" in out.read_text() and "hacking v2.0 (40e1acb373c6)" in printed


def test_cli_report_of_one_run_is_unchanged_and_output_needs_several_runs(tmp_path, capsys):
    run = _run(tmp_path, "one", V1, {10: {"correctness": 0.9}})
    assert main(["report", str(run)]) == 0
    assert (run / "report" / "report.md").is_file() and not (tmp_path / COMPARISON_NAME).exists()
    assert "wrote" in capsys.readouterr().out
    assert main(["report", str(run), f"output={tmp_path / 'c.md'}"]) == 2
    assert main(["report"]) == 2
    assert "usage: rlkit report" in capsys.readouterr().err


def test_a_bad_results_line_or_a_missing_run_is_a_data_error(tmp_path):
    run = _run(tmp_path, "bad", None, {})
    (run / "eval").mkdir()
    (run / "eval" / "results.jsonl").write_text('{"dimension": "x"}\n')
    with pytest.raises(DataError) as err:
        golden_columns(run)
    assert err.value.where.endswith("results.jsonl:1")
    with pytest.raises(DataError):
        write_comparison([run, tmp_path / "missing"])


def test_comparison_sets_the_runs_held_out_start_and_end_side_by_side(tmp_path):
    a = _run(tmp_path, "a", None, {})
    b = _run(tmp_path, "b", None, {})
    c = _run(tmp_path, "c", None, {})
    (a / "summary.json").write_text(json.dumps({
        "dimensions": ["format", "correctness"], "start": {"reward": 0.5, "format": 1.0, "correctness": 0.25},
        "end": {"reward": 0.75, "format": 1.0, "correctness": 0.5}, "steps": 40, "wall_time_s": 61.2,
        "warnings": ["no held-out split (data.heldout_fraction=0): ..."], "interrupted": None}))
    (b / "summary.json").write_text(json.dumps({
        "dimensions": ["format", "correctness"], "start": {"reward": 0.5, "format": 1.0, "correctness": 0.25},
        "end": {"reward": 0.625, "format": 1.0, "correctness": 0.375}, "steps": 12, "wall_time_s": 20.0,
        "warnings": [], "interrupted": {"step": 12, "checkpoint": "/x/interrupted.ckpt"}}))
    text = write_comparison([a, b, c]).read_text()
    assert "## Held-out split and the run" in text
    assert "| held-out reward | 0.500 → 0.750 | 0.500 → 0.625 | — |" in text
    assert "| held-out correctness | 0.250 → 0.500 | 0.250 → 0.375 | — |" in text
    assert "| steps | 40 | 12 | — |" in text and "| wall time | 61 s | 20 s | — |" in text
    assert "| interrupted | no | after step 12 | — |" in text
    assert "no held-out split" in text and "| warnings |" in text
