"""A file labelled on the labelling page becomes a GRM and a Bradley-Terry reward model with one command each: the
answers are given over real HTTP to ``rlkit label serve`` by three labellers (rankings with ties, levels), then
``rlkit data from-labels``, ``rlkit train-grm`` and ``rlkit train-rm`` run on what the page saved (tiny models, one
step: the path is the point, docs/grm-and-serving.md "From labels to a reward model")."""

from __future__ import annotations

import json

import httpx
import pytest

from rlkit.cli import main
from rlkit.evaluation.labelling import group_line, labelling_line, read_labelling, write_lines

GROUPS = {"7+1=": ["8", "It is 8.", "9", "eight"], "6+2=": ["8", "eight", "80"], "9+3=": ["12", "12!", "21"],
          "4+4=": ["8", "4", "8 8 8"], "5+6=": ["11", "eleven", "56"]}
# per group and labeller: tiers of completion indices, best first (a tier of two is a tie)
ORDERS = {"ann": [[0], [1, 3], [2]], "bob": [[0], [1], [3], [2]], "cy": [[0, 1], [3], [2]]}
# two answers to one question, each labelled on every dimension by two labellers
LEVELS = {"2+2=": {"4": {"format": 1, "correctness": 1, "brevity": 5, "repetition": 5},
                   "5, I think": {"format": 1, "correctness": 0, "brevity": 3, "repetition": 5}}}
GRM_MICRO = ["grm.model.tiny.hidden_size=32", "grm.model.tiny.intermediate_size=64",
             "grm.model.tiny.num_hidden_layers=1", "grm.model.tiny.num_attention_heads=2",
             "grm.model.tiny.num_key_value_heads=1", "logger=csv", "trainer.max_steps=1", "grm.epochs=1"]
RM_MICRO = ["rm.model.tiny.hidden_size=32", "rm.model.tiny.intermediate_size=64", "rm.model.tiny.num_hidden_layers=1",
            "rm.model.tiny.num_attention_heads=2", "rm.model.tiny.num_key_value_heads=1", "logger=csv",
            "trainer.max_steps=1", "rm.epochs=1"]


def _unlabelled(path, arithmetic):
    """What `rlkit calibrate sample` or the label_sample monitor leaves the page: groups to rank, answers to label."""
    lines = [group_line(prompt=p, completions=c, rubric=arithmetic, step=10, window=10) for p, c in GROUPS.items()]
    lines += [labelling_line(prompt=p, completion=c, rubric=arithmetic, step=10, window=10)
              for p, answers in LEVELS.items() for c in answers]
    write_lines(path, lines)
    return path


def _label_on_the_page(server) -> None:
    auth = server.auth
    items = httpx.get(f"{server.url}/api/tasks", params={"labeller": "ann"}, headers=auth).json()["items"]
    for item in items:
        n = item["line"]
        if item["kind"] == "rank":
            size = len(GROUPS[item["prompt"]])
            for labeller, order in ORDERS.items():
                tiers = [[i for i in tier if i < size] for tier in order]
                tiers = [t for t in tiers if t] + [[i] for i in range(size) if not any(i in t for t in order)]
                response = httpx.post(f"{server.url}/api/rank", headers=auth,
                                      json={"labeller": labeller, "line": n, "key": item["key"], "order": tiers})
                assert response.status_code == 200, response.text
        else:
            for labeller in ("ann", "bob"):
                for dimension, level in LEVELS[item["prompt"]][item["completion"]].items():
                    response = httpx.post(f"{server.url}/api/label", headers=auth, json={
                        "labeller": labeller, "line": n, "dimension": dimension, "level": level, "key": item["key"]})
                    assert response.status_code == 200, response.text


@pytest.mark.slow  # a page server, then two tiny models trained one step each
def test_a_file_labelled_on_the_page_trains_a_grm_and_a_bt_model(tmp_path, serve_page, arithmetic, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    labelled = _unlabelled(tmp_path / "labelling" / "step_0000010.jsonl", arithmetic)
    server = serve_page(labelled)
    _label_on_the_page(server)
    assert server.stop() == 0
    saved = read_labelling(labelled)
    assert all(set(line["rankings"]) == set(ORDERS) for line in saved if "completions" in line)
    assert all(set(line["labellers"]) == {"ann", "bob"} for line in saved if "completions" not in line)

    data = tmp_path / "grm-data"
    assert main(["data", "from-labels", str(labelled), "--out", str(data), "--heldout-fraction", "0.3"]) == 0
    report = json.loads((data / "report.json").read_text())
    assert report["read"] == {"group lines": len(GROUPS), "completion lines": 2}
    assert report["train"]["pairs"] > 0 and report["heldout"]["pairs"] > 0
    # 7+1=: ann ties 1 and 3, bob does not, cy ties 0 and 1; most of them put 0 first and 2 last
    group = next(json.loads(r) for f in ("train.jsonl", "heldout.jsonl") for r in (data / f).read_text().splitlines()
                 if json.loads(r)["prompt"] == "7+1=")
    assert [r["rank"] for r in group["responses"]] == [1, 2, 4, 3]

    grm_run, rm_run = tmp_path / "grm-run", tmp_path / "rm-run"
    assert main(["train-grm", *GRM_MICRO, f"grm.data.train={data / 'train.jsonl'}",
                 f"grm.data.val={data / 'heldout.pairs.jsonl'}", f"hydra.run.dir={grm_run}"]) == 0
    assert main(["train-rm", *RM_MICRO, f"rm.data.train={data / 'train.pairs.jsonl'}",
                 f"rm.data.val={data / 'heldout.pairs.jsonl'}", f"hydra.run.dir={rm_run}"]) == 0
    held_out = report["heldout"]["pairs"]
    grm_info = json.loads((grm_run / "grm" / "grm.json").read_text())
    rm_info = json.loads((rm_run / "reward_model" / "reward_model.json").read_text())
    assert grm_info["steps"] == 1 and grm_info["val_pairs"] == held_out
    assert rm_info["steps"] == 1 and rm_info["val_pairs"] == held_out
