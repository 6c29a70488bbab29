"""Judge–human agreement by step window, the calibration-set builder (``rlkit calibrate sample``), and the whole
path on a short fit: live completions → labelling files → labels → ``rlkit calibrate`` by window → the run report."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.config import resolve_path
from rlkit.core.rubric import load_rubric
from rlkit.evaluation.agreement_stats import quadratic_weighted_kappa
from rlkit.evaluation.calibration import calibrate_by_window, read_labels
from rlkit.evaluation.labelling import read_labelling, write_lines

RUBRIC = load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/arithmetic.yaml"))


def test_windows_by_hand():
    # window 0: the judge agrees with the humans; window 10: it calls everything correct, humans split 2/2
    human = [1, 0, 1, 0, 0, 1, 0, 1]
    judge = [1, 0, 1, 0, 1, 1, 1, 1]
    records = [{"completion": "x", "step": s, "labels": {"correctness": h}}
               for s, h in zip([0, 0, 1, 1, 10, 10, 12, 12], human, strict=True)]
    for r in records[4:]:
        r["window"] = 10  # window wins over step
    scores = [[math.nan, j, math.nan, math.nan] for j in judge]
    windows = calibrate_by_window(records, scores, RUBRIC)
    assert [w.window for w in windows] == [0, 1, 10]
    first = {row.name: row for row in windows[0].report.rows}["correctness"]
    assert first.kappa == 1.0 and first.n == 2
    late = {row.name: row for row in windows[2].report.rows}["correctness"]
    # confusion [[0, 2], [0, 2]]; expected disagreement 2·4/4 = 2, observed 2: κ = 1 − 2/2 = 0; ρ undefined
    assert late.kappa == 0.0 and math.isnan(late.spearman) and late.n == 4 and late.bias == 0.5


def test_no_step_no_windows():
    assert calibrate_by_window([{"completion": "x", "labels": {"format": 1}}], [[1.0, 1.0, 3.0, 3.0]], RUBRIC) == []


# --- rlkit calibrate sample ----------------------------------------------------------------------------------------


def fake_run(tmp_path: Path, steps: int = 8, per_step: int = 10) -> Path:
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("rubric:\n  path: pkg://rlkit.conf/rubric_files/arithmetic.yaml\n")
    rows = []
    for step in range(steps):
        for k in range(per_step):
            rows.append({"step": step, "prompt": f"{k}+{step}=", "completion": f"{k + step} ({k})",
                         "reward": (k * 7 % per_step) / per_step, "advantage": 0.0,
                         "format": 1.0, "correctness": float(k % 3 == 0), "brevity": float(1 + k % 5),
                         "repetition": 5.0})
    rows.append(dict(rows[0]))  # a duplicate: taken once at most
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_calibrate_sample_is_stratified_by_step_reward_and_dimension(tmp_path, capsys):
    run = fake_run(tmp_path)
    assert main(["calibrate", "sample", str(run), "n=16", "reward_bins=2"]) == 0
    out = capsys.readouterr().out
    path = run / "labelling" / "calibration_set.jsonl"
    assert f"wrote 16 of 80 distinct completions to {path}" in out
    lines = read_labelling(path)
    assert len(lines) == 16 and len({(ln["prompt"], ln["completion"]) for ln in lines}) == 16
    # 4 step windows (steps 0-1, 2-3, 4-5, 6-7) × 2 reward halves: 2 from each stratum
    assert Counter(ln["window"] for ln in lines) == {0: 4, 2: 4, 4: 4, 6: 4}
    for window in (0, 2, 4, 6):
        rewards = sorted(ln["reward"] for ln in lines if ln["window"] == window)
        assert sum(r < 0.5 for r in rewards) == 2, rewards  # the lower half of each window's rewards
    # every dimension's levels are spread: correctness (3 in 10 are correct in the run) is not left all-0
    assert Counter(ln["judge"]["correctness"] for ln in lines)[1.0] >= 4
    assert len({ln["judge"]["brevity"] for ln in lines}) == 5
    assert all(set(ln["labels"]) == {"format", "correctness", "brevity", "repetition"} for ln in lines)
    assert len(read_labels(path, RUBRIC)) == 16  # rlkit calibrate reads it
    # seeded: the same draw again; a bigger n takes every distinct completion
    before = path.read_text()
    assert main(["calibrate", "sample", str(run), "n=16", "reward_bins=2"]) == 0
    assert path.read_text() == before
    assert main(["calibrate", "sample", str(run), "n=300", f"output={tmp_path / 'all.jsonl'}"]) == 0
    assert len(read_labelling(tmp_path / "all.jsonl")) == 80


@pytest.mark.parametrize(("args", "error"), [
    (["n=0"], "calibrate sample n: must be >= 1"),
    (["size=3"], "calibrate sample size: unknown option"),
    (["rubric=/nope.yaml"], "/nope.yaml: no such rubric file"),
])
def test_calibrate_sample_bad_input_is_one_line(tmp_path, capsys, args, error):
    run = fake_run(tmp_path)
    assert main(["calibrate", "sample", str(run), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and error in err[0], err
    assert not (run / "labelling").exists()


def test_calibrate_sample_names_a_bad_samples_line(tmp_path, capsys):
    run = fake_run(tmp_path)
    with (run / "samples.jsonl").open("a") as fh:
        fh.write("{not json\n")
    assert main(["calibrate", "sample", str(run)]) == 2
    assert f"{run / 'samples.jsonl'}:82: invalid JSON" in capsys.readouterr().err
    (run / "samples.jsonl").unlink()
    assert main(["calibrate", "sample", str(run)]) == 2
    assert "no samples.jsonl: the run logged no samples" in capsys.readouterr().err


def _save_config(run: Path, data: str = "") -> None:
    (run / ".hydra" / "config.yaml").write_text("rubric:\n  path: pkg://rlkit.conf/rubric_files/arithmetic.yaml\n"
                                                "judge:\n  name: rule\n  params: {}\n" + data)


def test_calibrate_sample_finds_the_records_of_samples_logged_without_them(tmp_path, capsys):
    # samples.jsonl of an earlier rlkit: no `record`; the run's data file has each prompt's reference
    run = fake_run(tmp_path, steps=2, per_step=4)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"prompt": f"{k}+{s}=", "reference": str(k + s), "source": "mine"}) + "\n"
                            for s in range(2) for k in range(4)))
    _save_config(run, f"data:\n  path: {data}\n  task: null\n")
    assert main(["calibrate", "sample", str(run), "n=8"]) == 0
    lines = read_labelling(run / "labelling" / "calibration_set.jsonl")
    assert len(lines) == 8
    for line in lines:
        a, b = (int(x) for x in line["prompt"].rstrip("=").split("+"))
        assert line["reference"] == str(a + b) and line["source"] == "mine"
        assert line["rubric"]["name"] == "arithmetic"  # the line's own keys are never a record's


def test_calibrate_sample_refuses_when_no_line_has_what_the_judge_reads(tmp_path, capsys):
    run = fake_run(tmp_path)  # no `record` in its samples, and its data file is gone
    _save_config(run, f"data:\n  path: {tmp_path / 'gone.jsonl'}\n  task: null\n")
    assert main(["calibrate", "sample", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert f"{run / 'samples.jsonl'}: no sample carries 'reference', which the run's judge scores dimension " \
           "correctness from" in err[0] and "gone.jsonl is not there" in err[0]
    assert not (run / "labelling").exists()


# --- end to end on a short fit ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_live_labels_to_calibrate_by_window_to_the_run_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    code = main(["fit", "model=tiny_random", "logger=csv", "trainer.max_steps=2", "batch_size=2", "num_generations=4",
                 "max_completion_length=8", "data.num_prompts=16", "monitors=[label_sample]",
                 "monitors.label_sample.params.every=1", "monitors.label_sample.params.size=6",
                 f"hydra.run.dir={run}"])
    assert code == 0, capsys.readouterr().err
    files = sorted((run / "labelling").glob("*.jsonl"))
    assert [f.name for f in files] == ["step_0000000.jsonl", "step_0000001.jsonl"]
    # a human labels correctness: alternately right and wrong (what `rlkit label` writes; its own test drives it)
    expected = {}
    for f in files:
        lines = read_labelling(f)
        for k, line in enumerate(lines):
            line["labels"]["correctness"] = k % 2
        write_lines(f, lines)
        judge = [line["judge"]["correctness"] for line in lines]  # what the run's judge said during training
        expected[lines[0]["window"]] = quadratic_weighted_kappa([k % 2 for k in range(len(lines))], judge, 0, 1)
    capsys.readouterr()
    assert main(["calibrate", f"calibrate.labels={run / 'labelling'}", "logger=csv"]) == 0
    out = capsys.readouterr().out
    assert "judge vs human labels by step window" in out
    windows = json.loads((run / "calibration" / "windows.json").read_text())["windows"]
    assert [w["window"] for w in windows] == [0, 1] and [w["lines"] for w in windows] == [6, 6]
    for w in windows:
        row = {d["name"]: d for d in w["dimensions"]}["correctness"]
        # calibrate re-scores with the configured judge (rule, deterministic): the numbers of the run's own scores
        assert row["n"] == 6 and row["kappa"] == pytest.approx(expected[w["window"]])
    report = (run / "report" / "report.md").read_text()
    assert "## Judge–human agreement by step window" in report
    assert "| 1 | correctness | 6 |" in report and (run / "report" / "judge_human_agreement.png").is_file()
    assert "## Agreement by step window" in (run / "calibration" / "calibration.md").read_text()
    # the logger gets each window's numbers at its first step (a W&B run plots them against training steps)
    import csv

    (logged,) = (run / "calibration").glob("csv/version_*/metrics.csv")
    with logged.open() as fh:
        by_step = {row["step"]: row for row in csv.DictReader(fh) if row.get("calibration/window/correctness/kappa")}
    assert set(by_step) == {"0", "1"}
    assert float(by_step["1"]["calibration/window/correctness/kappa"]) == pytest.approx(expected[1])


def _careful_human(line: dict) -> int:
    """What a person reading the sum decides: the answer starts with the right number (no reference needed)."""
    import re

    a, b = (int(x) for x in line["prompt"].rstrip("=").split("+"))
    first = re.match(r"\s*(-?\d+)", line["completion"])
    return int(first is not None and int(first.group(1)) == a + b)


@pytest.mark.slow
def test_label_then_calibrate_from_a_finished_default_run(tmp_path, monkeypatch, capsys):
    """The loop of docs/labelling-page.md after a run: calibrate sample → labels saved as the page saves them →
    `rlkit calibrate` measures correctness, which the rule judge scores against each line's `reference`."""
    from rlkit.evaluation.labelling_answers import apply_label, line_key, save_answer

    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "run"
    assert main(["fit", "logger=csv", "trainer.max_steps=3", "batch_size=4", "num_generations=4",
                 "max_completion_length=8", "data.num_prompts=32", "log_samples.every=1",
                 f"hydra.run.dir={run}"]) == 0, capsys.readouterr().err
    first = json.loads((run / "samples.jsonl").read_text().splitlines()[0])
    assert first["record"]["reference"] == str(sum(int(x) for x in first["prompt"].rstrip("=").split("+")))
    assert main(["calibrate", "sample", str(run), "n=12"]) == 0
    path = run / "labelling" / "calibration_set.jsonl"
    lines = read_labelling(path)
    assert len(lines) == 12 and all(line["reference"] for line in lines)
    human = []
    for number, line in enumerate(lines, 1):
        level = _careful_human(line)
        human.append(level)
        save_answer(path, number, line_key(line), lambda fresh, level=level: apply_label(fresh, "correctness", level,
                                                                                            "ann"))
    assert read_labelling(path)[0]["labelled_by"] == {"correctness": "ann"}
    judge = [line["judge"]["correctness"] for line in lines]
    assert len(set(human)) == 2 and len(set(judge)) == 2, (human, judge)  # κ has two levels to measure
    capsys.readouterr()
    assert main(["calibrate", f"calibrate.labels={path}", "logger=none"]) == 0
    out = capsys.readouterr().out
    assert "labels left out" not in out
    row = json.loads((run / "calibration" / "calibration.json").read_text())["dimensions"]["correctness"]
    assert row["n"] == 12 and row["kappa"] == pytest.approx(quadratic_weighted_kappa(human, judge, 0, 1))
    assert row["kappa"] == 1.0  # the rule's check reads the reference as the careful human reads the sum
