"""One question, written as ``user: q`` in one line and ``q`` in another, is one prompt for every held-out split:
``rlkit train-grm``'s and ``train-rm``'s own (``grm.data.val_fraction``) and ``rlkit data from-labels``'s, which
share one key (:func:`rlkit.data.prompts.prompt_key`)."""

from __future__ import annotations

import json
from pathlib import Path

from rlkit.cli import main
from rlkit.core.rubric import rubric_from_dict
from rlkit.data.prompts import prompt_key, reward_prompt
from rlkit.evaluation.labelling import labelling_line, write_lines
from rlkit.evaluation.labelling_answers import apply_label
from rlkit.grm.training import GrmDataConfig, load_preference_data

QUESTIONS = [f"What is {i} + 1?" for i in range(12)]
RUBRIC = rubric_from_dict({"name": "toy", "version": "1", "dimensions": [
    {"name": "correct", "type": "binary", "anchors": {0: "Wrong sum", 1: "Right sum"}}]})


def _pairs_in_both_spellings(path: Path) -> Path:
    # the chat run's flattened `user: q` (the labelling page's) and the hand-written bare `q`, each question twice
    rows = [{"prompt": spelled, "chosen": str(i + 1), "rejected": f"{i + 2}{tail}"}
            for i, q in enumerate(QUESTIONS) for spelled, tail in ((f"user: {q}", ""), (q, "!"))]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_train_grm_keeps_both_spellings_of_a_question_on_one_side(tmp_path):
    data = GrmDataConfig(train=str(_pairs_in_both_spellings(tmp_path / "pairs.jsonl")), val_fraction=0.5, seed=0)
    train, held = load_preference_data(data, tmp_path, registry=None)
    trained, held_out = {reward_prompt(p.prompt) for p in train}, {reward_prompt(p.prompt) for p in held}
    assert trained and held_out
    assert trained.isdisjoint(held_out), f"on both sides: {sorted(trained & held_out)}"
    assert trained | held_out == set(QUESTIONS)
    # each question's two spellings together: two pairs per held-out question
    assert len(held) == 2 * len(held_out)


def test_from_labels_and_train_grm_split_a_question_alike_whatever_its_spelling(tmp_path, capsys):
    # from-labels reads the bare questions, train-grm the chat run's `user: q` lines: the same questions held out
    lines = []
    for i, q in enumerate(QUESTIONS):
        for text, level in ((str(i + 1), 1), (str(i + 2), 0)):
            line = labelling_line(prompt=q, completion=text, rubric=RUBRIC, step=0, window=0)
            apply_label(line, "correct", level, "ann")
            lines.append(line)
    write_lines(tmp_path / "labels.jsonl", lines)
    assert main(["data", "from-labels", str(tmp_path / "labels.jsonl"), "--out", str(tmp_path / "out"),
                 "--heldout-fraction", "0.3", "--seed", "3"]) == 0
    capsys.readouterr()
    by_labels = {json.loads(r)["prompt"] for r in (tmp_path / "out" / "heldout.jsonl").read_text().splitlines()}
    assert by_labels and by_labels != set(QUESTIONS)

    chat = tmp_path / "chat_pairs.jsonl"
    chat.write_text("".join(json.dumps({"prompt": f"user: {q}", "chosen": str(i + 1), "rejected": str(i + 2)}) + "\n"
                            for i, q in enumerate(QUESTIONS)))
    _, held = load_preference_data(GrmDataConfig(train=str(chat), val_fraction=0.3, seed=3), tmp_path, registry=None)
    assert {reward_prompt(p.prompt) for p in held} == by_labels


def test_from_labels_groups_both_spellings_of_a_question_as_one_prompt(tmp_path, capsys):
    q = QUESTIONS[0]
    lines = []
    for prompt, text, level in ((f"user: {q}", "1", 1), (q, "2", 0), (q, " 1 ", 1), (QUESTIONS[1], "2", 1),
                                (QUESTIONS[1], "3", 0)):
        line = labelling_line(prompt=prompt, completion=text, rubric=RUBRIC, step=0, window=0)
        apply_label(line, "correct", level, "ann")
        lines.append(line)
    write_lines(tmp_path / "labels.jsonl", lines)
    assert main(["data", "from-labels", str(tmp_path / "labels.jsonl"), "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    groups = [json.loads(r) for f in ("train.jsonl", "heldout.jsonl")
              for r in (tmp_path / "out" / f).read_text().splitlines()]
    by_prompt = {prompt_key(g["prompt"]): sorted(r["text"] for r in g["responses"]) for g in groups}
    # one group for q (its ` 1 ` a duplicate of `user: q`'s `1`), not a `user: q` group of one and a `q` group
    assert by_prompt == {q: ["1", "2"], QUESTIONS[1]: ["2", "3"]}
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["dropped"]["completions"] == {"duplicate (same prompt and completion)": 1}
