"""``rlkit calibrate sample <run dir> groups=N``: groups of a run's logged completions, written as group lines that the
labelling page ranks."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.evaluation.labelling import is_group, read_labelling


def fake_run(tmp_path: Path, steps: int = 6, prompts: int = 3, per_prompt: int = 4) -> Path:
    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("rubric:\n  path: pkg://rlkit.conf/rubric_files/arithmetic.yaml\n")
    rows = [{"step": step, "prompt": f"{p}+{step}=", "completion": f"{p + step + k}", "reward": k / per_prompt,
             "advantage": 0.0, "format": 1.0, "correctness": float(k == 0), "brevity": 5.0, "repetition": 5.0}
            for step in range(steps) for k in range(per_prompt) for p in range(prompts)]
    rows.append({**rows[0]})  # logged twice: one completion of its group
    rows.append({**rows[0], "step": 99, "prompt": "alone"})  # a prompt with one completion is no group
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return run


def test_groups_are_drawn_over_the_step_bins(tmp_path, capsys):
    run = fake_run(tmp_path)
    assert main(["calibrate", "sample", str(run), "groups=4", "step_bins=2", "seed=1"]) == 0
    path = run / "labelling" / "ranking_set.jsonl"
    assert (f"wrote 4 groups (4 completions each) to {path}; rank them with: rlkit label {path} (or on a page: "
            f"rlkit label serve {path})") in capsys.readouterr().out
    lines = read_labelling(path)
    assert len(lines) == 4 and all(is_group(line) and line["ranking"] is None for line in lines)
    assert sorted(line["window"] for line in lines) == [0, 0, 3, 3], "two from each step bin"
    for line in lines:
        assert len(set(line["completions"])) == 4 and line["prompt"].endswith(f"+{line['step']}=")
        assert {d["name"] for d in line["dimensions"]} == {"format", "correctness", "brevity", "repetition"}
    again = tmp_path / "again.jsonl"
    assert main(["calibrate", "sample", str(run), "groups=4", "step_bins=2", "seed=1", f"output={again}"]) == 0
    assert read_labelling(again) == lines, "seeded"


@pytest.mark.parametrize(("args", "message"), [
    (["groups=0"], "calibrate sample groups: must be >= 1"),
    (["groups=2", "n=5"], "calibrate sample n: unknown option with groups="),
    (["groups=x"], "calibrate sample groups: must be a whole number, got 'x'"),
])
def test_bad_group_options_are_one_error_line(tmp_path, capsys, args, message):
    run = fake_run(tmp_path)
    assert main(["calibrate", "sample", str(run), *args]) == 2
    assert capsys.readouterr().err.strip().startswith(f"rlkit: error: {message}")


def test_no_group_to_draw_is_one_error_line(tmp_path, capsys):
    run = fake_run(tmp_path, per_prompt=1)
    assert main(["calibrate", "sample", str(run), "groups=3"]) == 2
    assert "no prompt has two distinct completions logged at one step" in capsys.readouterr().err
