"""benchmarks/notes_claims.py's kept records: a finished run's figures written as one line and read back equal, a
cell whose overrides changed since is trained again (not read stale), and a damaged line is named by file and line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import notes_claims as nc  # noqa: E402


def a_result(seed: int) -> nc.Result:
    return nc.Result(seed=seed, start={"correctness": 0.25}, end={"correctness": 0.75}, wall=312.5, step_s=6.0,
                     zero_adv=0.4, clip=None, attribution=0.61, noise=None, curve=[(0, 0.25), (40, 0.75)])


def test_a_kept_run_reads_back_equal_and_is_keyed_by_cell_steps_and_seed(tmp_path):
    path = tmp_path / "runs.jsonl"
    nc.keep_record(path, "g2", 40, a_result(1))
    nc.keep_record(path, "g2", 1, a_result(2))
    records = nc.read_records(path)
    assert set(records) == {("g2", 40, 1), ("g2", 1, 2)}
    assert records[("g2", 40, 1)] == a_result(1)
    assert records[("g2", 40, 1)].change() == 0.5


def test_a_record_made_with_other_overrides_is_not_read(tmp_path):
    path = tmp_path / "runs.jsonl"
    nc.keep_record(path, "g8", 40, a_result(1))
    row = json.loads(path.read_text())
    row["overrides"] = ["num_generations=6"]
    path.write_text(json.dumps(row) + "\n")
    assert nc.read_records(path) == {}
    assert nc.read_records(tmp_path / "absent.jsonl") == {}


def test_a_damaged_line_is_named(tmp_path):
    path = tmp_path / "runs.jsonl"
    nc.keep_record(path, "w1", 40, a_result(1))
    path.write_text(path.read_text() + "\n{\"cell\": \"w3\"}\n")
    with pytest.raises(SystemExit, match=r"runs\.jsonl:3: not a notes_claims record"):
        nc.read_records(path)


def test_a_record_written_from_another_checkout_is_read_here(tmp_path):
    """The 7-dimension cell names its rubric by this folder's absolute path; a record written from a snapshot
    elsewhere (as the long runs are) matches it, and a record written here names the file from benchmarks/."""
    path = tmp_path / "runs.jsonl"
    nc.keep_record(path, "rubric7", 40, a_result(1))
    row = json.loads(path.read_text())
    assert row["overrides"] == ["rubric.path=benchmarks/notes_claims_7dim.yaml"]
    row["overrides"] = ["rubric.path=/work/nc-snap/benchmarks/notes_claims_7dim.yaml"]
    path.write_text(json.dumps(row) + "\n")
    assert set(nc.read_records(path)) == {("rubric7", 40, 1)}
    row["overrides"] = ["rubric.path=/work/nc-snap/benchmarks/another_7dim.yaml"]
    path.write_text(json.dumps(row) + "\n")
    assert nc.read_records(path) == {}


def _fake_runs(monkeypatch, tmp_path, barrier=None):
    """Training replaced by a folder with summary.json and its figures by a_result: what run_cells does around it."""
    trained: list[tuple[str, int]] = []

    def train_run(cell, seed, steps, every, out):
        if barrier is not None:
            barrier.wait(timeout=20)  # raises unless another run is under way at the same time
        path = nc.run_dir(out, cell, steps, seed)
        path.mkdir(parents=True)
        (path / "summary.json").write_text("{}")
        trained.append((cell, seed))
        return path

    monkeypatch.setattr(nc, "read_run", lambda path, seed, **_: a_result(seed))
    return trained, train_run


def test_missing_runs_train_lowest_seed_first_and_each_is_kept_as_it_finishes(monkeypatch, tmp_path):
    records = tmp_path / "runs.jsonl"
    nc.keep_record(records, "g2", 40, a_result(1))
    trained, train_run = _fake_runs(monkeypatch, tmp_path)
    results = nc.run_cells(["g2", "g8"], [1, 2], 40, 10, tmp_path / "out", records, train_run=train_run)
    assert trained == [("g8", 1), ("g2", 2), ("g8", 2)], "every claim gets its next seed before any gets a third"
    assert set(results) == {("g2", 1), ("g8", 1), ("g2", 2), ("g8", 2)}
    assert set(nc.read_records(records)) == {("g2", 40, 1), ("g8", 40, 1), ("g2", 40, 2), ("g8", 40, 2)}
    again, train_run = _fake_runs(monkeypatch, tmp_path)
    nc.run_cells(["g2", "g8"], [1, 2], 40, 10, tmp_path / "out", records, train_run=train_run)
    assert again == [], "a kept run is read, not trained again"


def test_jobs_train_runs_at_the_same_time(monkeypatch, tmp_path):
    import threading

    trained, train_run = _fake_runs(monkeypatch, tmp_path, barrier=threading.Barrier(2))
    results = nc.run_cells(["g2", "g8"], [1], 40, 10, tmp_path / "out", tmp_path / "runs.jsonl", jobs=2,
                           train_run=train_run)
    assert sorted(trained) == [("g2", 1), ("g8", 1)] and len(results) == 2
    assert len(nc.read_records(tmp_path / "runs.jsonl")) == 2


def test_a_failed_run_stops_the_rest_and_keeps_the_finished_ones(monkeypatch, tmp_path):
    trained, train_run = _fake_runs(monkeypatch, tmp_path)

    def failing(cell, seed, steps, every, out):
        if cell == "g8":
            raise SystemExit("rlkit fit ... failed (exit 1)")
        return train_run(cell, seed, steps, every, out)

    with pytest.raises(SystemExit, match="failed"):
        nc.run_cells(["g2", "g8", "w1"], [1, 2], 40, 10, tmp_path / "out", tmp_path / "runs.jsonl", train_run=failing)
    assert trained == [("g2", 1)], "nothing was trained after the failure"
    assert set(nc.read_records(tmp_path / "runs.jsonl")) == {("g2", 40, 1)}


def test_a_stopped_run_is_not_read_as_finished(tmp_path):
    """A run stopped by a signal writes summary.json too (with its `interrupted` step): it is set aside, not read."""
    run = tmp_path / "g2-s40" / "seed1"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"steps": 12, "interrupted": {"step": 12, "signal": "SIGINT"}}))
    assert not nc.finished(run)
    (run / "summary.json").write_text(json.dumps({"steps": 40}))
    assert nc.finished(run)
    # fit writes the key on every run, null when nothing stopped it (rlkit/train/fit.py)
    (run / "summary.json").write_text(json.dumps({"steps": 40, "interrupted": None}))
    assert nc.finished(run)
