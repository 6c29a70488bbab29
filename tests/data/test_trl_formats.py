"""TRL's dataset formats and ``datasets`` directories, read by ``rlkit fit``/``score`` as rlkit records."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.commands.common import compose_and_check
from rlkit.core.errors import DataError
from rlkit.data.files import source_fingerprint
from rlkit.data.records import from_trl, read_jsonl
from rlkit.evaluation.scoring import score_records

USER = [{"role": "user", "content": "3+4="}]
SYSTEM_USER = [{"role": "system", "content": "Be brief."}, *USER]


def _answer(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


@pytest.mark.parametrize(("trl", "rlkit"), [
    # standard prompt-only and prompt-completion: already rlkit's own
    ({"prompt": "3+4=", "completion": "7"}, {"prompt": "3+4=", "completion": "7"}),
    # conversational prompt-completion: the completion is the assistant's answer
    ({"prompt": USER, "completion": _answer("7")}, {"prompt": USER, "completion": "7"}),
    # conversational language modelling: the last assistant turn is the completion, the turns before it the prompt
    ({"messages": [*SYSTEM_USER, *_answer("7")]}, {"prompt": SYSTEM_USER, "completion": "7"}),
    ({"messages": SYSTEM_USER}, {"prompt": SYSTEM_USER}),
    # explicit-prompt preference, conversational
    ({"prompt": USER, "chosen": _answer("7"), "rejected": _answer("8")},
     {"prompt": USER, "chosen": "7", "rejected": "8"}),
    # implicit-prompt preference: the shared opening turns are the prompt
    ({"chosen": [*USER, *_answer("7")], "rejected": [*USER, *_answer("8")]},
     {"prompt": USER, "chosen": "7", "rejected": "8"}),
    # unpaired preference (KTO): the label stays a field
    ({"prompt": "3+4=", "completion": "8", "label": False}, {"prompt": "3+4=", "completion": "8", "label": False}),
])
def test_trl_formats_become_rlkit_records(trl, rlkit):
    assert from_trl(trl) == rlkit


def test_a_preference_records_chosen_and_rejected_are_the_completions_to_score():
    record = {"prompt": "3+4=", "chosen": "7", "rejected": "8", "reference": "7"}
    assert from_trl(record, need_completions=True)["completions"] == ["7", "8"]
    assert "completions" not in from_trl(record)  # training reads the prompt only
    assert from_trl({"prompt": "a", "chosen": "7", "rejected": 8}, need_completions=True) == \
        '"chosen" and "rejected" must both be text or chat messages'


def test_bad_trl_records_are_named_by_line(tmp_path):
    path = _write(tmp_path / "bad.jsonl", [{"prompt": "ok", "completion": "7"},
                                           {"messages": [{"role": "assistant", "content": "7"}]}])
    with pytest.raises(DataError) as err:
        read_jsonl(path)
    assert str(err.value) == f"{path}:2: \"messages\" has no turn before the assistant's answer to use as the prompt"
    path = _write(tmp_path / "implicit.jsonl", [{"chosen": _answer("7"), "rejected": _answer("8")}])
    with pytest.raises(DataError, match=r"implicit.jsonl:1: \"chosen\" and \"rejected\" share no opening turn"):
        read_jsonl(path)
    path = _write(tmp_path / "none.jsonl", [{"prompt": "3+4="}])
    with pytest.raises(DataError, match=r'none.jsonl:1: missing "completion" \(or "completions", or "chosen" and '):
        read_jsonl(path, need_completions=True)


def test_a_datasets_directory_is_read_row_by_row(tmp_path):
    datasets = pytest.importorskip("datasets")
    rows = [{"prompt": USER, "completion": _answer("7"), "reference": "7"},
            {"prompt": [{"role": "user", "content": "1+1="}], "completion": _answer("3"), "reference": "2"}]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "conv"))
    assert read_jsonl(tmp_path / "conv", need_completions=True) == [
        {"prompt": USER, "completion": "7", "reference": "7"},
        {"prompt": [{"role": "user", "content": "1+1="}], "completion": "3", "reference": "2"}]
    one = datasets.DatasetDict({"train": datasets.Dataset.from_list(rows)})
    one.save_to_disk(str(tmp_path / "one_split"))
    assert len(read_jsonl(tmp_path / "one_split")) == 2
    two = datasets.DatasetDict({"train": one["train"], "test": one["train"]})
    two.save_to_disk(str(tmp_path / "two_splits"))
    with pytest.raises(DataError, match=r"two_splits: the dataset has splits train, test; point at one, e\.g\. "):
        read_jsonl(tmp_path / "two_splits")
    assert len(read_jsonl(tmp_path / "two_splits" / "test")) == 2  # each split is a directory of its own
    datasets.Dataset.from_list([{"prompt": "a"}, {"prompt": ""}]).save_to_disk(str(tmp_path / "bad"))
    with pytest.raises(DataError, match=r"bad row 1: \"prompt\" is empty"):
        read_jsonl(tmp_path / "bad")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: not a dataset saved with save_to_disk"):
        read_jsonl(tmp_path / "empty")


def test_rlkit_score_reads_a_trl_preference_dataset_directory(tmp_path, capsys):
    datasets = pytest.importorskip("datasets")
    rows = [{"prompt": USER, "chosen": _answer("7"), "rejected": _answer("eight"), "reference": "7"}]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "prefs"))
    overrides = [f"data.path={tmp_path / 'prefs'}"]
    assert main(["score", *overrides]) == 0, capsys.readouterr().err
    assert "2 completions" in capsys.readouterr().out
    result = score_records(compose_and_check(overrides, need_completions=True))
    correctness = result.dimension_names.index("correctness")
    assert result.raw_scores[:, correctness].tolist() == [1.0, 0.0]  # chosen "7", rejected "eight"


def test_a_datasets_directory_has_a_fingerprint_for_resumed_scoring(tmp_path):
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_list([{"prompt": "a"}]).save_to_disk(str(tmp_path / "d"))
    first = source_fingerprint(tmp_path / "d")
    assert first["size"] > 0 and first == source_fingerprint(tmp_path / "d")
    datasets.Dataset.from_list([{"prompt": "b"}]).save_to_disk(str(tmp_path / "d"))
    assert source_fingerprint(tmp_path / "d")["sha256"] != first["sha256"]
    file = _write(tmp_path / "f.jsonl", [{"prompt": "a"}])
    import hashlib

    assert source_fingerprint(file) == {"size": file.stat().st_size,
                                        "sha256": hashlib.sha256(file.read_bytes()).hexdigest()}


def test_rlkit_fit_trains_on_a_trl_conversational_dataset(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    data = _write(tmp_path / "train.jsonl", [
        {"messages": [{"role": "user", "content": f"{a}+{b}="}, *_answer(str(a + b))], "reference": str(a + b)}
        for a in range(4) for b in range(4)])
    run_dir = tmp_path / "run"
    code = main(["fit", f"data.path={data}", "logger=csv", "trainer.max_steps=1", "batch_size=2", "num_generations=2",
                 "max_completion_length=4", "log_samples.every=1", "checkpoint_every=100000",
                 f"hydra.run.dir={run_dir}"])
    assert code == 0, capsys.readouterr().err
    with next(run_dir.glob("csv/version_0/metrics.csv")).open() as fh:
        assert [r for r in csv.DictReader(fh) if r.get("reward/mean")]
    samples = [json.loads(x) for x in (run_dir / "samples.jsonl").read_text().splitlines()]
    # the prompt is the conversation's turns before the answer, shown as chat text; the answer is not in it
    assert samples and all(re.fullmatch(r"user: \d\+\d=", s["prompt"]) for s in samples), samples[0]["prompt"]
