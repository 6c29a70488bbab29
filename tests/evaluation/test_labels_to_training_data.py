"""``rlkit data from-labels``: labelling files (levels from several labellers, rankings with ties) and a ranking
judge's scored file become the GRM's listwise data and preference pairs: consensus, disagreements, duplicates, a
split that keeps prompts apart, the report, and bad input as one line with nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlkit.cli import main
from rlkit.core.rubric import rubric_from_dict
from rlkit.data.pairs import ListwiseRecord, PreferencePair, read_preference_records
from rlkit.evaluation.label_training_data import combine_levels, combine_rankings
from rlkit.evaluation.labelling import group_line, labelling_line, write_lines
from rlkit.evaluation.labelling_answers import apply_label, apply_ranking
from rlkit.evaluation.scoring import ScoreResult, write_scored_jsonl

RUBRIC = rubric_from_dict({"name": "toy", "version": "1", "dimensions": [
    {"name": "correct", "type": "binary", "anchors": {0: "Wrong sum", 1: "Right sum"}},
    {"name": "brevity", "range": [1, 5], "anchors": {1: "Rambling", 5: "A bare number"}}]})


def _labelled(prompt: str, completion: str, answers: dict[str, dict[str, int | None]]) -> dict:
    """A completion line as the page leaves it after each labeller's answers."""
    line = labelling_line(prompt=prompt, completion=completion, rubric=RUBRIC, step=10, window=10)
    for labeller, levels in answers.items():
        for dimension, level in levels.items():
            apply_label(line, dimension, level, labeller)
    return line


def _ranked(prompt: str, completions: list[str], orders: dict[str, list[list[int]] | None]) -> dict:
    line = group_line(prompt=prompt, completions=completions, rubric=RUBRIC, step=10, window=10)
    for labeller, tiers in orders.items():
        apply_ranking(line, tiers, labeller)
    return line


def _labelling_file(path: Path) -> Path:
    both = {"correct": 1, "brevity": 5}
    write_lines(path, [
        _labelled("3+4=", "7", {"ann": both, "bob": both, "cy": both}),
        _labelled("3+4=", "The answer is 7", {"ann": {"correct": 1, "brevity": 3}, "bob": {"correct": 1, "brevity": 3},
                                              "cy": {"correct": 1, "brevity": 2}}),
        # correctness 2 to 1: the majority's 0 stands (agreement 2/3)
        _labelled("3+4=", "8", {"ann": {"correct": 0, "brevity": 5}, "bob": {"correct": 0, "brevity": 5},
                                "cy": {"correct": 1, "brevity": 5}}),
        # one each way and the third skipped: no majority, the completion cannot be placed
        _labelled("3+4=", "12", {"ann": {"correct": 0, "brevity": 5}, "bob": {"correct": 1, "brevity": 5},
                                 "cy": {"correct": None, "brevity": 5}}),
        _labelled("3+4=", " 7 ", {"ann": both}),  # the first line's completion again
        # two labellers; ann ties 17 and 17!, bob does not
        _ranked("12+5=", ["17", "18", "seventeen", "17!"], {"ann": [[0, 3], [2], [1]], "bob": [[0], [3], [2], [1]]}),
        _ranked("1+1=", ["11", "2", "two"], {"ann": [[1], [0, 2]]}),  # a tie in the only ranking
        _ranked("9+9=", ["18", "99"], {"ann": [[0], [1]], "bob": [[1], [0]]}),  # opposite orders
        _ranked("20+1=", ["21", "201"], {}),  # never ranked
    ])
    return path


def _scored_file(path: Path) -> Path:
    """What `rlkit score judge=ranking ... score.output=FILE` writes: a rank per completion within its record."""
    records = [{"prompt": "6+7=", "reference": "13", "completions": ["13", "14", "thirteen"]},
               {"prompt": "8+15=", "reference": "23", "completions": ["23", "32"]}]
    rewards = torch.tensor([0.9, 0.1, 0.5, 1.0, float("nan")])  # the judge could not place "32"
    result = ScoreResult(["preference"], rewards.unsqueeze(1), rewards, records)
    write_scored_jsonl(result, path, {"name": "ranking", "version": "1", "hash": "x"})
    return path


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def inputs(tmp_path) -> list[Path]:
    return [_labelling_file(tmp_path / "labels.jsonl"), _scored_file(tmp_path / "scored.jsonl")]


def test_labels_rankings_and_a_judges_orders_become_grm_data_and_pairs(inputs, tmp_path, capsys):
    out = tmp_path / "data"
    assert main(["data", "from-labels", *map(str, inputs), "--out", str(out), "--heldout-fraction", "0.3"]) == 0
    shown = capsys.readouterr().out
    groups = {r["prompt"]: r for r in _rows(out / "train.jsonl") + _rows(out / "heldout.jsonl")}
    ranks = {p: {resp["text"]: resp["rank"] for resp in g["responses"]} for p, g in groups.items()}
    assert ranks == {
        "3+4=": {"7": 1, "The answer is 7": 2, "8": 3},  # mean of (correct, brevity) scaled to [0, 1]
        "12+5=": {"17": 1, "17!": 1, "seventeen": 3, "18": 4},  # ann ties 17 and 17!, bob not: no majority, tied
        "1+1=": {"2": 1, "11": 2, "two": 2},  # the tie stays a tie
        "6+7=": {"13": 1, "thirteen": 2, "14": 3},  # the judge's ranks
    }
    report = json.loads((out / "report.json").read_text())
    assert report["dropped"]["completions"] == {"incomplete labels: labellers disagree": 1,
                                                "duplicate (same prompt and completion)": 1,
                                                "unscored by the judge": 1}
    assert report["dropped"]["groups"] == {"labellers disagree (below min agreement)": 1, "not ranked": 1,
                                           "fewer than two completions left": 1}
    assert report["labels"]["no majority level (labellers split evenly)"] == 1
    assert "dropped completions: duplicate (same prompt and completion)" in shown
    assert "rlkit train-grm grm.data.train=" in shown

    train = {r["prompt"] for r in _rows(out / "train.jsonl")}
    held = {r["prompt"] for r in _rows(out / "heldout.jsonl")}
    assert train and held and not train & held, "no prompt on both sides"
    for split, prompts in (("train", train), ("heldout", held)):
        pairs = _rows(out / f"{split}.pairs.jsonl")
        assert {p["prompt"] for p in pairs} == prompts
        assert report[split]["pairs"] == len(pairs) and report[split]["prompts"] == len(prompts)
        assert all("weight" not in p for p in pairs), "drop mode writes no weights"
    pairs = [p for s in ("train", "heldout") for p in _rows(out / f"{s}.pairs.jsonl")]
    assert {(p["chosen"], p["rejected"]) for p in pairs if p["prompt"] == "1+1="} == {("2", "11"), ("2", "two")}
    assert sum(p["prompt"] == "12+5=" for p in pairs) == 5

    by_mean = tmp_path / "by_mean"
    assert main(["data", "from-labels", str(inputs[0]), "--out", str(by_mean), "--combine", "mean"]) == 0
    rows = _rows(by_mean / "train.jsonl") + _rows(by_mean / "heldout.jsonl")
    mean_ranks = {r["text"]: r["rank"] for row in rows if row["prompt"] == "12+5=" for r in row["responses"]}
    assert mean_ranks == {"17": 1, "17!": 2, "seventeen": 3, "18": 4}, "mean places 1 and 1.5: bob breaks the tie"

    # what train-grm and rlkit data pairs read, with no line refused
    for name in ("train.jsonl", "heldout.jsonl", "train.pairs.jsonl", "heldout.pairs.jsonl"):
        records, rejects = read_preference_records(out / name)
        assert not rejects and records
        assert all(isinstance(r, ListwiseRecord if "pairs" not in name else PreferencePair) for r in records)

    before = {p.name: p.read_bytes() for p in out.iterdir()}
    assert main(["data", "from-labels", *map(str, inputs), "--out", str(out), "--heldout-fraction", "0.3"]) == 0
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before, "the same seed, the same files"


def test_consensus_rules():
    assert combine_levels([3, 4], "majority") == (None, 0.5)
    assert combine_levels([3, 4], "mean") == (3.5, 0.5)
    level, agreement = combine_levels([3, 3, 5], "majority")
    assert level == 3 and agreement == pytest.approx(2 / 3)
    assert combine_levels([3, 3, 5], "mean")[0] == pytest.approx(11 / 3)
    # two put 0 > 1 > 2, one the reverse: every pair 2 to 1
    orders = [[1, 2, 3], [1, 2, 3], [3, 2, 1]]
    for rule in ("majority", "mean"):
        ranks, agreement = combine_rankings(orders, rule)
        assert ranks == [1, 2, 3] and agreement == pytest.approx(2 / 3)
    # a tie that most labellers give is the consensus, and agreeing with it counts
    assert combine_rankings([[1, 1, 3], [1, 1, 3], [1, 2, 3]], "majority") == ([1, 1, 3], pytest.approx(8 / 9))


def test_a_disagreement_is_dropped_or_down_weighted(tmp_path):
    labels = tmp_path / "ranks.jsonl"
    three = {"ann": [[0], [1], [2]], "bob": [[0], [1], [2]], "cy": [[2], [1], [0]]}
    write_lines(labels, [_ranked(f"{a}+1=", [str(a + 1), "x", "yy"], three) for a in range(4)])
    dropped, weighted = tmp_path / "dropped", tmp_path / "weighted"
    assert main(["data", "from-labels", str(labels), "--out", str(dropped), "--min-agreement", "0.8"]) == 2
    assert not dropped.exists(), "every group dropped: nothing written"
    assert main(["data", "from-labels", str(labels), "--out", str(weighted), "--min-agreement", "0.8",
                 "--disagreement", "weight", "--combine", "mean"]) == 0
    rows = _rows(weighted / "train.jsonl") + _rows(weighted / "heldout.jsonl")
    assert len(rows) == 4 and {r["weight"] for row in rows for r in row["responses"]} == {0.666667}
    pairs = _rows(weighted / "train.pairs.jsonl")
    assert pairs and {p["weight"] for p in pairs} == {0.666667}
    report = json.loads((weighted / "report.json").read_text())
    assert report["down_weighted"] == {"rankings": 4} and report["dropped"]["groups"] == {}


@pytest.mark.slow  # trains: the tiny GRM for one step on the command's output
def test_train_grm_trains_on_the_output(inputs, tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "data"
    assert main(["data", "from-labels", *map(str, inputs), "--out", str(out), "--heldout-fraction", "0.3"]) == 0
    run = tmp_path / "run"
    micro = ["grm.model.tiny.hidden_size=32", "grm.model.tiny.intermediate_size=64",
             "grm.model.tiny.num_hidden_layers=1", "grm.model.tiny.num_attention_heads=2",
             "grm.model.tiny.num_key_value_heads=1", "logger=csv", "trainer.max_steps=1", "grm.epochs=1"]
    assert main(["train-grm", *micro, f"grm.data.train={out / 'train.jsonl'}",
                 f"grm.data.val={out / 'heldout.pairs.jsonl'}", f"hydra.run.dir={run}"]) == 0
    info = json.loads((run / "grm" / "grm.json").read_text())
    assert info["steps"] == 1 and info["val_pairs"] == len(_rows(out / "heldout.pairs.jsonl"))


def test_bad_input_is_one_line_and_writes_nothing(inputs, tmp_path, capsys):
    labels, scored = inputs
    out = tmp_path / "out"
    bad = tmp_path / "bad_labels.jsonl"
    bad.write_text("".join(labels.read_text().splitlines(keepends=True)[:2]) + '{"prompt": "1+1=", \n')
    assert main(["data", "from-labels", str(scored), str(bad), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"rlkit: error: {bad}:3: ")

    bad_scored = tmp_path / "bad_scored.jsonl"
    lines = scored.read_text().splitlines()
    bad_scored.write_text("\n".join([lines[0], lines[1].replace('"rank": 3', '"rank": "last"'), *lines[2:]]) + "\n")
    assert main(["data", "from-labels", str(bad_scored), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f'rlkit: error: {bad_scored}:2: "rank": a whole number >= 1 (1 = best) or null (unscored), '
                   'got "last"']

    assert main(["data", "from-labels", str(labels), "--out", str(out), "--min-agreement", "2"]) == 2
    assert "--min-agreement: must be a number in [0, 1], got '2'" in capsys.readouterr().err
    assert main(["data", "from-labels", str(labels), "--out", str(out), "--rank-by", "speed"]) == 2
    assert "no labelling line has a dimension 'speed'; they have: brevity, correct" in capsys.readouterr().err
    assert main(["data", "from-labels", str(labels), "--out"]) == 2
    assert "expected one argument" in capsys.readouterr().err
    assert not out.exists(), "no output folder after bad input"

    elsewhere = tmp_path / "mine"
    elsewhere.mkdir()
    (elsewhere / "notes.txt").write_text("keep me")
    assert main(["data", "from-labels", str(labels), "--out", str(elsewhere)]) == 2
    assert "holds other files" in capsys.readouterr().err
    assert (elsewhere / "notes.txt").read_text() == "keep me"


def test_a_folder_of_labelling_files_groups_one_prompts_completions_across_files(tmp_path):
    folder = tmp_path / "labelling"
    right, wrong = {"correct": 1, "brevity": 5}, {"correct": 0, "brevity": 4}
    write_lines(folder / "step_0000010.jsonl", [_labelled("2+2=", "4", {"ann": right}),
                                                _labelled("5+5=", "10", {"ann": right})])
    write_lines(folder / "step_0000020.jsonl", [_labelled("2+2=", "5", {"ann": wrong}),
                                                _labelled("5+5=", "55", {"ann": wrong})])
    assert main(["data", "from-labels", str(folder)]) == 0
    out = tmp_path / "labelling.grm-data"  # the default: beside the folder
    rows = _rows(out / "train.jsonl") + _rows(out / "heldout.jsonl")
    assert sorted((r["prompt"], [x["text"] for x in r["responses"]]) for r in rows) == [
        ("2+2=", ["4", "5"]), ("5+5=", ["10", "55"])]
    assert len(_rows(out / "heldout.jsonl")) == 1, "two prompts: one held out at the least"
