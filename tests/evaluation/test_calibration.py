"""``rlkit calibrate``: our agreement metrics against scikit-learn / scipy, the labels file, the report, the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from rlkit.cli import main
from rlkit.core.errors import DataError
from rlkit.core.rubric import load_rubric
from rlkit.evaluation.agreement_stats import (
    average_ranks,
    confusion_matrix,
    mean_bias,
    quadratic_weighted_kappa,
    spearman,
    to_levels,
)
from rlkit.evaluation.calibration import (
    CalibrationReport,
    calibrate,
    calibration_metrics,
    judge_records,
    read_labels,
    render_markdown,
    write_report,
)

sklearn_metrics = pytest.importorskip("sklearn.metrics")
stats = pytest.importorskip("scipy.stats")

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "conf" / "calibration" / "arithmetic_labels.jsonl"
RUBRIC = REPO / "conf" / "rubric_files" / "arithmetic.yaml"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DIMS = ["format", "correctness", "brevity", "repetition"]


def _sk_kappa(h, j, low, high) -> float:
    return sklearn_metrics.cohen_kappa_score(h, j, weights="quadratic", labels=list(range(low, high + 1)))


def _sk_rounded(j, low, high) -> np.ndarray:
    # The convention under test, written independently: nearest level, halves up, clipped.
    return np.clip(np.floor(np.asarray(j, dtype=float) + 0.5), low, high).astype(int)


# --- metrics against the references ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize(("low", "high"), [(0, 1), (1, 5), (0, 10)])
def test_metrics_match_references_on_random_integer_data(seed, low, high):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 80))
    human = rng.integers(low, high + 1, size=n)
    judge = np.clip(human + rng.integers(-2, 3, size=n), low, high)  # correlated, plenty of ties
    assert quadratic_weighted_kappa(human, judge, low, high) == pytest.approx(_sk_kappa(human, judge, low, high))
    assert spearman(human, judge) == pytest.approx(stats.spearmanr(human, judge).statistic)
    np.testing.assert_array_equal(confusion_matrix(human, judge, low, high),
                                  sklearn_metrics.confusion_matrix(human, judge, labels=list(range(low, high + 1))))
    assert mean_bias(human, judge) == pytest.approx(np.mean(judge - human))


@pytest.mark.parametrize("seed", range(5))
def test_scale_scores_are_rounded_for_kappa_but_not_for_spearman(seed):
    rng = np.random.default_rng(100 + seed)
    human = rng.integers(1, 6, size=40)
    judge = np.clip(human + rng.normal(0, 1.2, size=40), 0.0, 6.0)  # real-valued, some outside 1..5
    rounded = _sk_rounded(judge, 1, 5)
    assert quadratic_weighted_kappa(human, judge, 1, 5) == pytest.approx(_sk_kappa(human, rounded, 1, 5))
    np.testing.assert_array_equal(confusion_matrix(human, judge, 1, 5),
                                  sklearn_metrics.confusion_matrix(human, rounded, labels=[1, 2, 3, 4, 5]))
    assert spearman(human, judge) == pytest.approx(stats.spearmanr(human, judge).statistic)
    assert mean_bias(human, judge) == pytest.approx(np.mean(judge - human))


def test_rounding_is_half_up_and_clipped():
    np.testing.assert_array_equal(to_levels([2.5, 3.5, 2.49, 0.2, 5.7, 1.0], 1, 5), [3, 4, 2, 1, 5, 1])
    np.testing.assert_array_equal(to_levels([0.5, 0.49, -1.0], 0, 1), [1, 0, 0])
    assert math.isnan(to_levels([math.nan], 1, 5)[0])


@pytest.mark.parametrize("seed", range(4))
def test_average_ranks_match_scipy(seed):
    x = np.random.default_rng(seed).integers(0, 4, size=25).astype(float)
    np.testing.assert_allclose(average_ranks(x), stats.rankdata(x, method="average"))


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize(("human", "judge"), [
    ([1, 1, 1, 1], [1, 2, 3, 4]),   # constant human
    ([1, 2, 3, 4], [3, 3, 3, 3]),   # constant judge
    ([2, 2, 2], [2, 2, 2]),         # both constant, same level: κ 0/0
    ([2, 2, 2], [4, 4, 4]),         # both constant, different levels: κ 0
    ([1, 5, 1, 5], [5, 1, 5, 1]),   # perfect disagreement
    ([1, 2, 3, 4, 5], [1, 2, 3, 4, 5]),
])
def test_edge_cases_match_references(human, judge):
    ours_k, ref_k = quadratic_weighted_kappa(human, judge, 1, 5), _sk_kappa(human, judge, 1, 5)
    ours_r, ref_r = spearman(human, judge), stats.spearmanr(human, judge).statistic
    assert (math.isnan(ours_k) and math.isnan(ref_k)) or ours_k == pytest.approx(ref_k)
    assert (math.isnan(ours_r) and math.isnan(ref_r)) or ours_r == pytest.approx(ref_r)


def test_constant_side_gives_nan_spearman():
    assert math.isnan(spearman([3, 3, 3, 3], [1, 2, 3, 4]))
    assert math.isnan(spearman([1, 2, 3], [0.5, 0.5, 0.5]))


def test_missing_values_drop_the_pair():
    human = [1, None, 3, 4, 5, 2, math.nan, 4]
    judge = [1.0, 2.0, math.nan, 4.2, 3.0, 2.0, 5.0, 5.0]
    keep = [0, 3, 4, 5, 7]
    h = np.array([1, 4, 5, 2, 4])
    j = np.array([judge[i] for i in keep])
    assert quadratic_weighted_kappa(human, judge, 1, 5) == pytest.approx(_sk_kappa(h, _sk_rounded(j, 1, 5), 1, 5))
    assert spearman(human, judge) == pytest.approx(stats.spearmanr(h, j).statistic)
    assert confusion_matrix(human, judge, 1, 5).sum() == 5
    assert mean_bias(human, judge) == pytest.approx(np.mean(j - h))
    # torch tensors with NaN work the same way
    assert spearman(torch.tensor([1.0, math.nan, 3.0, 2.0]), torch.tensor([1.0, 2.0, 3.0, 1.5])) == pytest.approx(1.0)


def test_no_pairs_gives_nan():
    assert math.isnan(quadratic_weighted_kappa([], [], 0, 1))
    assert math.isnan(spearman([None, 1], [1, None]))
    assert math.isnan(spearman([1], [1]))
    assert math.isnan(mean_bias([], []))
    assert confusion_matrix([], [], 1, 3).shape == (3, 3)


def test_human_level_outside_range_or_fractional_is_rejected():
    with pytest.raises(ValueError, match="not a whole level"):
        confusion_matrix([0, 6], [1, 5], 1, 5)
    with pytest.raises(ValueError, match="not a whole level"):
        quadratic_weighted_kappa([1.5, 2], [1, 2], 1, 5)
    with pytest.raises(ValueError, match="whole-number bounds"):
        to_levels([1.0], 0, 0.5)


# --- calibrate and the report ------------------------------------------------------------------


@pytest.fixture(scope="module")
def rubric():
    return load_rubric(RUBRIC)


def _record(labels: dict, completion: str = "12") -> dict:
    return {"prompt": "7+5=", "reference": "12", "completion": completion, "labels": labels}


def test_calibrate_leaves_out_and_counts_missing(rubric):
    records = [_record({"format": 1, "correctness": 1, "brevity": 5, "repetition": 5}),
               _record({"format": 0, "correctness": None, "brevity": 3}),  # repetition unlabelled
               _record({"format": 1, "correctness": 0, "brevity": 1, "repetition": 1}),
               _record({"format": 0, "correctness": 1, "brevity": 2, "repetition": 3})]
    scores = torch.tensor([[1, 1, 5, 5], [0, 1, 3, 5], [1, math.nan, 1.4, 3], [1, 1, 2.6, 3]], dtype=torch.float32)
    report = calibrate(records, scores, rubric, threshold=0.6, judge="rule")
    rows = {r.name: r for r in report.rows}
    assert [r.name for r in report.rows] == DIMS
    assert (rows["correctness"].n, rows["correctness"].missing_label, rows["correctness"].missing_score) == (2, 1, 1)
    assert (rows["repetition"].n, rows["repetition"].missing_label) == (3, 1)
    assert rows["brevity"].confusion.tolist()[1] == [0, 0, 1, 0, 0]  # human 2, judge 2.6 → 3
    assert rows["brevity"].bias == pytest.approx(((5 - 5) + (3 - 3) + (1.4 - 1) + (2.6 - 2)) / 4, abs=1e-6)
    assert rows["correctness"].flagged  # [1, 1] vs [1, 1]: constant, so κ and ρ are undefined
    assert math.isnan(rows["correctness"].spearman)
    metrics = calibration_metrics(report)
    assert metrics["calibration/brevity/n"] == 4.0
    assert metrics["calibration/correctness/flagged"] == 1.0
    assert all(isinstance(v, float) for v in metrics.values())


def test_the_judge_does_not_see_the_labels():
    records = [_record({"format": 1})]
    assert judge_records(records) == [{"prompt": "7+5=", "reference": "12", "completion": "12"}]
    assert "labels" in records[0]


def test_calibrate_checks_shapes(rubric):
    with pytest.raises(ValueError, match="records, dimensions"):
        calibrate([_record({})], torch.zeros(2, 4), rubric)


def test_write_report(tmp_path, rubric):
    records = [_record({"format": i % 2, "correctness": 1, "brevity": 1 + i % 5, "repetition": 5}) for i in range(10)]
    scores = np.array([[i % 2, 1, 1 + (i * 3) % 5, 5] for i in range(10)], dtype=float)
    report = calibrate(records, scores, rubric, judge="rule", labels_path="labels.jsonl")
    paths = write_report(report, tmp_path / "out")
    md = (tmp_path / "out" / "calibration.md").read_text()
    for dim in DIMS:
        assert f"| {dim} |" in md and f"### {dim}" in md
    assert "brevity" in md.split("**Flagged**")[1].splitlines()[0]
    # the rule judge scores by its checks: the advice is the check, never the anchors it does not read
    assert "- brevity: κ " in md and "fix its check" in md and "anchors need rewriting" not in md
    # every human said correct: undefined because one level only, which is not low agreement
    assert "- correctness: not measurable, which is not low agreement: every human label is 1 (one level only)" in md
    assert "anchors need rewriting" in render_markdown(calibrate(records, scores, rubric, judge="llm"))
    pngs = sorted(p.name for p in paths if p.suffix == ".png")
    assert pngs == sorted(f"confusion_{d}.png" for d in DIMS)
    for name in pngs:
        assert (tmp_path / "out" / name).read_bytes()[:8] == PNG_MAGIC
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([*pngs, "calibration.md"])  # no temp files
    assert "**Flagged:** none" in render_markdown(CalibrationReport(rows=[], threshold=0.6, total=0))


# --- labels file -------------------------------------------------------------------------------


def _write(tmp_path: Path, lines: list) -> Path:
    path = tmp_path / "labels.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_shipped_labels_are_valid(rubric):
    records = read_labels(SHIPPED, rubric)
    assert 30 <= len(records) <= 60
    for dim in DIMS:
        assert any(r["labels"].get(dim) is not None for r in records)


@pytest.mark.parametrize(("bad", "message"), [
    (_record({"brevity": 7}), '"labels.brevity": 7 lies outside the range [1, 5]'),
    (_record({"brevty": 3}), '"labels.brevty": unknown dimension'),
    (_record({"brevity": 2.5}), '"labels.brevity": 2.5 is not a whole level'),
    (_record({"format": True}), '"labels.format": must be a number or null'),
    ({"prompt": "1+1=", "completion": "2"}, 'missing "labels"'),
    ({"prompt": "1+1=", "completions": ["2"], "labels": {}}, 'one "completion"'),
    ('{"prompt": "1+1=", "completion": "2", "labels": {', "invalid JSON"),
])
def test_bad_label_line_names_file_and_line(tmp_path, rubric, bad, message):
    path = _write(tmp_path, [_record({"format": 1}), "", bad])
    with pytest.raises(DataError) as info:
        read_labels(path, rubric)
    assert str(info.value).startswith(f"{path}:3: ")
    assert message in str(info.value)


# --- the CLI -----------------------------------------------------------------------------------


def test_cli_calibrate_shipped_example(tmp_path, capsys):
    out = tmp_path / "cal"
    assert main(["calibrate", f"calibrate.output={out}", "logger=none"]) == 0
    stdout = capsys.readouterr().out
    for text in (*DIMS, "κ", "ρ", "bias", "flagged", "judge rule"):
        assert text in stdout, text
    md = (out / "calibration.md").read_text()
    assert all(f"| {d} |" in md for d in DIMS)
    assert all((out / f"confusion_{d}.png").read_bytes()[:8] == PNG_MAGIC for d in DIMS)
    assert sorted(p.name for p in out.iterdir()) == sorted(["calibration.md", "calibration.json",
                                                            *(f"confusion_{d}.png" for d in DIMS)])


def _wandb_records(log: Path) -> list[bytes]:
    """The complete records of a W&B transaction log: a LevelDB-style log (7-byte file header, 32 KiB
    blocks, each chunk behind a crc32/length/type header) of protobuf ``Record``s; a torn tail is left out."""
    import struct

    data, block, pos = log.read_bytes(), 32768, 7
    records, chunks = [], []
    while pos + 7 <= len(data):
        left = block - pos % block
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7]) if left >= 7 else (0, 0, 0)
        if left < 7 or (length, kind) == (0, 0):  # block trailer / padding
            pos += left
            continue
        if pos + 7 + length > len(data):
            break
        chunks.append(data[pos + 7:pos + 7 + length])
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a record is complete
            records.append(b"".join(chunks))
            chunks = []
    return records


def _offline_history(run: Path, timeout: float = 30.0) -> tuple[dict[str, Any], str]:
    """The logged values (flattened keys) and the job type of an offline W&B run, read from ``run-*.wandb``
    (wandb ships no reader for it). wandb's service process may still be writing the log when
    ``wandb.finish()`` returns, so this waits for the run's final ``exit`` record."""
    import time

    from wandb.proto import wandb_internal_pb2

    (log,) = run.glob("run-*.wandb")
    deadline = time.monotonic() + timeout
    while True:
        parsed = []
        for raw in _wandb_records(log):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(raw)
            parsed.append(record)
        if any(r.HasField("exit") for r in parsed) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    history: dict[str, Any] = {}
    job_type = ""
    for record in parsed:
        if record.HasField("history"):
            for item in record.history.item:
                history[item.key or "/".join(item.nested_key)] = json.loads(item.value_json)
        elif record.HasField("run"):
            job_type = record.run.job_type
    return history, job_type


def test_cli_calibrate_logs_the_report_to_wandb_offline(tmp_path, capsys, monkeypatch):
    import rlkit.evaluation.calibration

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    reports = []
    write = rlkit.evaluation.calibration.write_report
    monkeypatch.setattr(rlkit.evaluation.calibration, "write_report",
                        lambda r, out, *windows: reports.append(r) or write(r, out, *windows))
    out = tmp_path / "cal"
    assert main(["calibrate", f"calibrate.output={out}"]) == 0  # logger: wandb is the default
    assert "logged the numbers to wandb" in capsys.readouterr().out
    (report,) = reports
    (run,) = out.glob("wandb/offline-run-*")
    history, job_type = _offline_history(run)
    assert job_type == "calibrate"
    for row in report.rows:
        assert history[f"calibration/{row.name}/kappa"] == row.kappa  # JSON floats round-trip exactly
        assert history[f"calibration/{row.name}/spearman"] == row.spearman
        assert history[f"calibration/{row.name}/confusion/_type"] == "image-file"  # nested keys come flattened
        (png,) = run.glob(f"files/media/images/calibration/{row.name}/confusion_*.png")
        assert png.read_bytes()[:8] == PNG_MAGIC
    assert history["calibration/flagged"] == len(report.flagged)
    (table,) = run.glob("files/media/table/calibration/dimensions_*.table.json")
    content = json.loads(table.read_text())
    assert content["columns"] == ["dimension", "kappa", "spearman", "bias", "n", "flagged"]
    assert [r[0] for r in content["data"]] == DIMS
    assert [r[1] for r in content["data"]] == [row.kappa for row in report.rows]
    assert [r[5] for r in content["data"]] == [row.flagged for row in report.rows]


def test_cli_calibrate_logs_scalars_to_csv(tmp_path, capsys):
    import csv

    out = tmp_path / "cal"
    assert main(["calibrate", f"calibrate.output={out}", "logger=csv"]) == 0
    (path,) = out.glob("csv/version_0/metrics.csv")
    (row,) = csv.DictReader(path.read_text().splitlines())
    md_rows = [ln.split("|") for ln in (out / "calibration.md").read_text().splitlines()
               if ln.startswith(tuple(f"| {d} |" for d in DIMS))]
    assert len(md_rows) == len(DIMS)
    for cells in md_rows:  # | dimension | type | levels | n | no label | no score | κ | ...
        assert f"{float(row[f'calibration/{cells[1].strip()}/kappa']):.3f}" == cells[7].strip()


def test_cli_flagged_dimension_in_report(tmp_path, capsys):
    # The human inverts the rule's format verdict on every line: κ and ρ are -1 for format.
    lines = [_record({"format": 0, "correctness": 1}, "12"), _record({"format": 1, "correctness": 1}, "twelve"),
             _record({"format": 0, "correctness": 0}, "13"), _record({"format": 1, "correctness": 0}, "thirteen")]
    labels = _write(tmp_path, lines)
    out = tmp_path / "cal"
    assert main(["calibrate", f"calibrate.labels={labels}", f"calibrate.output={out}", "judge=rule",
                 "logger=none"]) == 0
    flagged_line = next(ln for ln in (out / "calibration.md").read_text().splitlines() if ln.startswith("**Flagged**"))
    assert "format" in flagged_line
    assert "- format: κ -1.000, ρ -1.000 below 0.6: fix its check" in (out / "calibration.md").read_text()
    assert "flagged format: κ -1.000, ρ -1.000 below 0.6: fix its check" in capsys.readouterr().out


def test_cli_says_why_labels_were_dropped(tmp_path, capsys):
    # lines without the `reference` the rule judge's correctness check reads: their correctness labels cannot count
    lines = [{k: v for k, v in _record({"format": 1, "correctness": c}, text).items() if k != "reference"}
             for c, text in [(1, "12"), (0, "13"), (1, "12")]]
    out = tmp_path / "cal"
    assert main(["calibrate", f"calibrate.labels={_write(tmp_path, lines)}", f"calibrate.output={out}",
                 "judge=rule", "logger=none"]) == 0
    printed = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "labels left out: correctness: 3 of 3 labels dropped, the judge left their lines unscored: 3 of them " \
           "have no 'reference' field, which correctness is scored from" in printed
    md = (out / "calibration.md").read_text()
    assert "**Labels left out:**" in md and "- correctness: not measurable: no line has both a human label and a " \
           "judge score (3 labels dropped: see labels left out)" in md


def test_cli_bad_labels_file(tmp_path, capsys):
    labels = _write(tmp_path, [_record({"format": 1}), _record({"repetition": 9})])
    code = main(["calibrate", f"calibrate.labels={labels}", f"calibrate.output={tmp_path / 'cal'}"])
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert code == 2
    assert len(err) == 1 and err[0].startswith(f"rlkit: error: {labels}:2: ")
    assert "labels.repetition" in err[0]
    assert not (tmp_path / "cal").exists()


def test_cli_bad_threshold(tmp_path, capsys):
    code = main(["calibrate", "calibrate.threshold=2", f"calibrate.output={tmp_path}"])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("rlkit: error: calibrate.threshold: ")
