"""Golden-set evaluation (``rlkit eval``, the periodic fit callback) and the run report (``rlkit report``)."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.core.errors import DataError
from rlkit.evaluation.golden import (
    check_no_overlap,
    exact_match,
    numeric_match,
    prompt_hash,
    read_results,
    reference_scores,
    results_markdown,
)
from rlkit.runs.history import MetricsHistory, read_history

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "conf" / "golden" / "arithmetic_golden.jsonl"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# --- golden set ------------------------------------------------------------------------------------


def test_prompt_hash_normalises_case_whitespace_and_unicode():
    assert prompt_hash("  3 +  4=\n") == prompt_hash("3 + 4=") == prompt_hash("３ + ４=")
    assert prompt_hash("3+4=") != prompt_hash("3+5=")
    assert prompt_hash([{"role": "user", "content": "Hi"}]) == prompt_hash("user:   hi")


def test_overlap_with_training_data_names_the_golden_file_and_lines(tmp_path, capsys):
    from rlkit.data.records import arithmetic_task

    training = arithmetic_task(256, 0)  # the default data: synthetic task, 256 prompts, seed 0
    golden = _write_jsonl(tmp_path / "golden.jsonl", [
        {"prompt": "50+47=", "reference": "97"}, {"prompt": " " + training[3]["prompt"].upper()},
        {"prompt": "61+70=", "reference": "131"}, {"prompt": training[10]["prompt"]}])
    with pytest.raises(DataError) as err:
        check_no_overlap(json.loads("[" + ",".join(golden.read_text().splitlines()) + "]"), golden, training,
                         "synthetic")
    assert err.value.where == f"{golden}:2" and "line 2" in str(err.value) and "line 4" in str(err.value)
    # through the CLI: one line, exit 2, before any model loads, nothing written
    code = main(["eval", f"eval.prompts={golden}", f"eval.output={tmp_path / 'out' / 'results.jsonl'}"])
    err_text = capsys.readouterr().err
    assert code == 2 and f"{golden}:2" in err_text and "2 golden prompt(s) also in the training data" in err_text
    assert not (tmp_path / "out").exists()


def test_shipped_golden_set_is_disjoint_from_every_prompt_the_default_task_can_make():
    golden = [json.loads(line) for line in GOLDEN.read_text().splitlines()]
    every_sum = [{"prompt": f"{a}+{b}="} for a in range(21) for b in range(21)]  # arithmetic_task's operands
    check_no_overlap(golden, GOLDEN, every_sum, "synthetic")
    assert len(golden) >= 20 and all("reference" in r for r in golden)


def test_reference_metrics_exact_and_numeric():
    assert exact_match("  42 ", "42") == 1.0 and exact_match("42.", "42") == 0.0
    assert numeric_match("the answer is 1,042 apples", "1042") == 1.0
    assert numeric_match("42.0", "42") == 1.0 and numeric_match("43", "42") == 0.0 and numeric_match("", "42") == 0.0
    assert math.isnan(numeric_match("42", "no number here"))
    scores = reference_scores([{"reference": "7"}, {"reference": 12}, {}], ["7", "twelve 13", "x"], "reference")
    assert scores["exact_match"][:2].tolist() == [1.0, 0.0] and math.isnan(scores["exact_match"][2])
    assert scores["numeric_match"][:2].tolist() == [1.0, 0.0] and "embedding_similarity" not in scores


def test_embedding_similarity_with_the_bundled_model():
    from rlkit.text.embeddings import embedding_available

    problem = embedding_available()
    if problem is not None:
        pytest.skip(f"embedding model not installed: {problem}")
    from rlkit.text.embeddings import Embedder, shared_embedder

    embedder = shared_embedder()
    assert isinstance(embedder, Embedder)
    vectors = embedder.encode(["The answer is 42.", "42", "a cat sat on the mat"])
    assert vectors.shape == (3, embedder.dim) and vectors.norm(dim=-1).sub(1).abs().max() < 1e-5
    scores = reference_scores([{"reference": "The answer is 42."}, {"reference": "a dog"}, {}],
                              ["The answer is 42.", "quantum chromodynamics", "x"], "reference", embedder)
    sims = scores["embedding_similarity"]
    assert sims[0] == pytest.approx(1.0, abs=1e-5) and sims[1] < 0.5 and math.isnan(sims[2])


def test_eval_writes_rows_by_checkpoint_and_rubric_version(tmp_path, capsys):
    out = tmp_path / "eval" / "results.jsonl"
    code = main(["eval", f"eval.output={out}", "eval.embedding=null"])
    assert code == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "correctness" in printed and "numeric_match" in printed
    # the same checkpoint under a new rubric version: its rows stay apart
    rubric = (REPO / "conf" / "rubric_files" / "arithmetic.yaml").read_text()
    v2 = rubric.replace('version: "1.0"\n', 'version: "2.0"\n', 1).replace(
        "changelog:\n", 'changelog:\n  - version: "2.0"\n    date: "2026-11-30"\n    note: Test bump.\n', 1)
    (tmp_path / "v2.yaml").write_text(v2)
    code = main(["eval", f"eval.output={out}", "eval.embedding=null", f"rubric.path={tmp_path / 'v2.yaml'}"])
    assert code == 0, capsys.readouterr().err
    rows = read_results(out)
    versions = {r["rubric"]["version"] for r in rows}
    assert versions == {"1.0", "2.0"} and len({r["rubric"]["hash"] for r in rows}) == 2
    dims = ["format", "correctness", "brevity", "repetition", "reward", "exact_match", "numeric_match"]
    for version in versions:
        mine = [r for r in rows if r["rubric"]["version"] == version]
        assert [r["dimension"] for r in mine] == dims
        assert len({r["checkpoint"] for r in mine}) == 1 and all(r["n"] == 24 for r in mine)
        # no eval.checkpoint: the policy a default run starts from, the warm-started one, not the random base
        assert "-warm-" in Path(mine[0]["checkpoint"]).name
        assert all(r["judge"] == "rule" and r["prompts_hash"] for r in mine)
    md = out.with_suffix(".md").read_text()
    assert "## rubric arithmetic v1.0" in md and "## rubric arithmetic v2.0" in md
    assert md.count("| correctness |") == 2


def test_results_markdown_has_a_column_per_checkpoint():
    rubric = {"name": "r", "version": "1", "hash": "ab" * 32}
    rows = [{"checkpoint": f"/runs/{c}/policy", "rubric": rubric, "dimension": d, "mean": m, "std": 0.0, "n": 3}
            for c, m in (("a", 0.25), ("b", 0.5)) for d in ("x", "reward")]
    md = results_markdown(rows)
    assert "| dimension | a/policy | b/policy |" in md and "| x | 0.250 ± 0.000 (n 3) | 0.500 ± 0.000 (n 3) |" in md


# --- history and report ----------------------------------------------------------------------------


def test_history_merges_steps_and_skips_a_truncated_last_line(tmp_path):
    history = MetricsHistory(tmp_path / "metrics.jsonl")
    history.append(0, {"a": 1.0, "b": float("nan")})
    history.append(1, {"a": 2.0})
    history.append(1, {"eval/x": 3.0})
    with (tmp_path / "metrics.jsonl").open("a") as fh:
        fh.write('{"step": 2, "metr')
    steps = read_history(tmp_path / "metrics.jsonl")
    assert [s for s, _ in steps] == [0, 1] and steps[1][1] == {"a": 2.0, "eval/x": 3.0}
    assert math.isnan(steps[0][1]["b"])


def test_report_on_a_missing_or_empty_history_is_one_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert f"{tmp_path / 'metrics.jsonl'}: no metric history" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text("")
    assert main(["report", str(tmp_path)]) == 2
    assert "empty" in capsys.readouterr().err
    assert not (tmp_path / "report" / "report.md").exists()


@pytest.mark.slow
def test_fit_with_golden_callback_writes_history_and_report(tmp_path, capsys):
    run_dir = tmp_path / "run"
    # model=tiny_random: 24 prompts would need a warm start of their own (their held-out ones are left out of it)
    code = main(["fit", "model=tiny_random", "logger=csv", "trainer.max_steps=3", "batch_size=2", "num_generations=2",
                 "eval.every=2", "eval.embedding=null", "eval.batch_size=24", "checkpoint_every=3",
                 "data.num_prompts=24",
                 f"hydra.run.dir={run_dir}"])
    assert code == 0, capsys.readouterr().err
    # the periodic golden-set evaluation: logged at step 2, and its rows in the run's eval folder
    (csv_path,) = run_dir.glob("csv/version_0/metrics.csv")
    with csv_path.open() as fh:
        logged = [r for r in csv.DictReader(fh) if r.get("eval/correctness")]
    assert [r["step"] for r in logged] == ["2"] and "eval/numeric_match" in logged[0] and logged[0]["eval/reward"]
    rows = read_results(run_dir / "eval" / "results.jsonl")
    assert {r["step"] for r in rows} == {2} and rows[0]["checkpoint"] == str(run_dir)
    # metrics.jsonl: every training step, the golden metrics and the held-out start and end
    history = dict(read_history(run_dir / "metrics.jsonl"))
    assert sorted(history) == [0, 1, 2, 3]
    assert all("rewards/correctness/mean" in history[s] for s in (0, 1, 2))
    assert "eval/correctness" in history[2] and "heldout/reward" in history[0] and "heldout/reward" in history[3]
    # the report built at the end of the run
    report_dir = run_dir / "report"
    pngs = sorted(p.name for p in report_dir.glob("*.png"))
    for name in ("rewards.png", "weights.png", "saturation.png", "zero_advantage.png", "kl.png", "length.png",
                 "golden.png"):
        assert name in pngs
    assert all((report_dir / p).read_bytes().startswith(PNG_MAGIC) for p in pngs)
    md = (report_dir / "report.md").read_text()
    assert "## Final per-dimension table" in md and "| correctness |" in md and "| reward |" in md
    assert "![rewards](rewards.png)" in md
    # on demand, with alerts a monitor raised and a probes summary
    _write_jsonl(run_dir / "alerts.jsonl", [{"monitor": "length_drift", "step": 2, "severity": "warning",
                                            "message": "completions grew 3x since step 0"}])
    (run_dir / "monitors.json").write_text(json.dumps({"probes": {
        "measurements": 2, "prompts": ["2+3=", "9+9="],
        "history": [{"step": 0, "scores": [0.1, None]}, {"step": 2, "scores": [0.4, 0.6]}]}}))
    (report_dir / "rewards.png").unlink()
    assert main(["report", str(run_dir)]) == 0
    md = (report_dir / "report.md").read_text()
    assert "| 2 | length_drift | warning | completions grew 3x since step 0 |" in md
    assert (report_dir / "rewards.png").read_bytes().startswith(PNG_MAGIC)
    assert (report_dir / "probes.png").read_bytes().startswith(PNG_MAGIC)
    # rlkit eval on the run's Lightning checkpoint and on its saved policy: one column each, same greedy policy
    out = tmp_path / "results.jsonl"
    for checkpoint in (run_dir / "checkpoints" / "last.ckpt", run_dir / "policy"):
        assert main(["eval", f"eval.checkpoint={checkpoint}", f"eval.output={out}", "eval.embedding=null"]) == 0
    rows = read_results(out)
    by_checkpoint = {(r["checkpoint"], r["step"]): r for r in rows if r["dimension"] == "reward"}
    assert set(by_checkpoint) == {(str(run_dir / "checkpoints" / "last.ckpt"), 3), (str(run_dir / "policy"), None)}
    assert len({r["mean"] for r in by_checkpoint.values()}) == 1
    assert "| dimension | checkpoints/last.ckpt@3 | run/policy |" in out.with_suffix(".md").read_text()


def test_the_report_shows_an_ensembles_members_agreement(tmp_path):
    from rlkit.runs.report import write_report

    _write_jsonl(tmp_path / "metrics.jsonl", [
        {"step": s, "metrics": {"reward/mean": 0.5, "rewards/correctness/mean": 0.5,
                                "judge/agreement/correctness": a, "judge/agreement/brevity": 0.9}}
        for s, a in enumerate([0.41, 0.5, 0.62])])
    md = write_report(tmp_path).markdown.read_text()
    section = md.split("## Judge members' agreement", 1)[1].split("\n## ", 1)[0]
    assert "| correctness | 0.410 | 0.620 | 0.510 |" in section and "| brevity | 0.900 | 0.900 | 0.900 |" in section
    assert "## Judge members' agreement" not in write_report(_no_members(tmp_path)).markdown.read_text()


def _no_members(tmp_path):
    run = tmp_path / "rule"
    run.mkdir()
    _write_jsonl(run / "metrics.jsonl", [{"step": 0, "metrics": {"reward/mean": 0.5}}])
    return run
