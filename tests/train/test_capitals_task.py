"""A user's own text task, end to end on the tiny policy: "What is the capital of X? Answer with the city name
only." (conf/tasks/capitals.jsonl, conversational records; conf/rubric_files/capitals.yaml: `match` on the city and a
"city only" length check). Before text answers could be checked, every completion scored 0 on the city: no learning
signal. Here the tiny policy is first taught to answer as SmolLM2 does (`rlkit sft` on "Warsaw." and "The capital of
Poland is Warsaw."), then RL sees completions that differ within their group on both dimensions."""

from __future__ import annotations

import json

import pytest

from rlkit.cli import main
from rlkit.core.package_files import resolve_path

TASK = "pkg://rlkit.conf/tasks/capitals.jsonl"


@pytest.mark.slow
def test_the_capitals_task_gives_a_learning_signal_on_both_dimensions(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    records = [json.loads(line) for line in resolve_path(TASK).read_text(encoding="utf-8").splitlines()]
    assert len(records) == 30 and all(isinstance(r["prompt"], list) for r in records)
    demos = tmp_path / "demos.jsonl"
    with demos.open("w", encoding="utf-8") as fh:
        for r in records:
            city = r["reference"] if isinstance(r["reference"], str) else r["reference"][-1]
            country = r["prompt"][0]["content"].split("capital of ")[1].split("?")[0]
            for answer in (f"{city}.", f"The capital of {country} is {city}."):
                fh.write(json.dumps({**r, "completion": [{"role": "assistant", "content": answer}]}) + "\n")
    common = ["rubric=capitals", "logger=none", "torch_threads=1", "max_completion_length=40"]
    assert main(["sft", *common, "model=tiny_random", f"data.path={demos}", "batch_size=16", "optim.lr=3e-3",
                 "trainer.max_steps=250", f"hydra.run.dir={tmp_path / 'sft'}"]) == 0, capsys.readouterr().err
    run = tmp_path / "rl"
    assert main(["fit", *common, f"model.name_or_path={tmp_path / 'sft' / 'policy'}", f"data.path={TASK}",
                 "data.heldout_fraction=0", "batch_size=8", "num_generations=4", "trainer.max_steps=2",
                 f"hydra.run.dir={run}"]) == 0, capsys.readouterr().err
    steps = [json.loads(line)["metrics"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in steps if "rewards/correct_city/saturated_groups" in m]
    assert len(steps) == 2
    for dim in ("correct_city", "city_only"):
        # a group whose completions all score alike teaches nothing; some groups differ on each dimension
        assert min(m[f"rewards/{dim}/saturated_groups"] for m in steps) < 1.0, (dim, steps)
        assert max(m[f"rewards/{dim}/std"] for m in steps) > 0.0
        assert max(m[f"rewards/{dim}/mean"] for m in steps) > 0.0, f"{dim}: some completion passes"
