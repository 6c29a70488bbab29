"""Every command, given a path that does not exist or cannot be written, says so in one line and exits 2: no
traceback, and nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.cli import COMMANDS, main


@pytest.fixture
def paths(tmp_path: Path, monkeypatch) -> dict[str, Path]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    records = tmp_path / "records.jsonl"
    records.write_text(json.dumps({"prompt": "3+4=", "reference": "7", "completions": ["7", "12"]}) + "\n")
    afile = tmp_path / "afile"  # a file where a folder is needed: unwritable for root as for anyone
    afile.write_text("x")
    return {"missing": tmp_path / "missing", "records": records, "afile": afile, "run": tmp_path / "run"}


CASES = [
    ("validate", lambda p: ["validate", f"rubric.path={p['missing']}.yaml"], "no such rubric file"),
    ("fit", lambda p: ["fit", f"data.path={p['missing']}.jsonl", f"hydra.run.dir={p['run']}"], "no such data file"),
    ("fit", lambda p: ["fit", f"ckpt_path={p['missing']}.ckpt", f"hydra.run.dir={p['run']}"], "ckpt_path: no such"),
    ("sft", lambda p: ["sft", f"data.path={p['missing']}.jsonl", f"hydra.run.dir={p['run']}"], "no such data file"),
    ("score", lambda p: ["score", f"data.path={p['missing']}.jsonl"], "no such data file"),
    ("score", lambda p: ["score", f"data.path={p['records']}", f"score.output={p['afile']}/out.jsonl"],
     "score.output: cannot create"),
    ("eval", lambda p: ["eval", f"eval.prompts={p['missing']}.jsonl"], "no such data file"),
    ("eval", lambda p: ["eval", f"eval.checkpoint={p['missing']}"], "eval.checkpoint"),
    ("eval", lambda p: ["eval", f"eval.output={p['afile']}/results.jsonl"], "eval.output: cannot create"),
    ("calibrate", lambda p: ["calibrate", f"calibrate.labels={p['missing']}.jsonl"], "no such data file"),
    ("calibrate", lambda p: ["calibrate", f"calibrate.output={p['afile']}"], "calibrate.output: "),
    ("serve", lambda p: ["serve", f"rubric.path={p['missing']}.yaml"], "no such rubric file"),
    ("report", lambda p: ["report", str(p["missing"])], "no such run directory"),
    ("doctor", lambda p: ["doctor", str(p["missing"])], "no such run directory"),
    ("rubric", lambda p: ["rubric", "hash", f"{p['missing']}.yaml"], "no such rubric file"),
    ("rubric", lambda p: ["rubric", "lint", f"{p['missing']}.yaml"], "no such rubric file"),
    ("rubric", lambda p: ["rubric", "diff", f"{p['missing']}.yaml", f"{p['missing']}.yaml"], "no such rubric file"),
    ("data", lambda p: ["data", "pairs", f"in={p['missing']}.jsonl", "out=pairs.jsonl"], "no such data file"),
    ("data", lambda p: ["data", "pairs", f"in={p['records']}", f"out={p['afile']}/pairs.jsonl"], "out: cannot create"),
    ("data", lambda p: ["data", "prepare", f"in={p['missing']}.jsonl", "out=prompts.jsonl"], "no such data file"),
    ("data", lambda p: ["data", "prepare", f"in={p['records']}", f"out={p['afile']}/p.jsonl"], "out: cannot create"),
    ("data", lambda p: ["data", "from-labels", f"{p['missing']}.jsonl"], "no such labelling or scored file"),
    ("data", lambda p: ["data", "from-labels", str(p["records"]), "--out", f"{p['afile']}/d"], "--out: cannot create"),
    ("train-grm", lambda p: ["train-grm", f"grm.data.train={p['missing']}.jsonl", f"hydra.run.dir={p['run']}"],
     "no such data file"),
    ("train-grm", lambda p: ["train-grm", f"ckpt_path={p['missing']}.ckpt", f"hydra.run.dir={p['run']}"],
     "ckpt_path: no such file"),
    ("train-rm", lambda p: ["train-rm", f"rm.data.train={p['missing']}.jsonl", f"hydra.run.dir={p['run']}"],
     "no such data file"),
    ("readiness", lambda p: ["readiness", f"labels={p['missing']}.jsonl"], "no such labels file"),
    ("readiness", lambda p: ["readiness", f"run={p['missing']}"], "no such run folder"),
    ("new", lambda p: ["new", "plugin", "short", "--kind", "judge", "--dir", f"{p['afile']}/pkg"], "--dir: cannot"),
    ("label", lambda p: ["label", f"{p['missing']}.jsonl"], "no such labelling file"),
    ("compare", lambda p: ["compare", str(p["missing"])], "no such run directory"),
    ("compare", lambda p: ["compare", "report", f"{p['missing']}.jsonl"], "no such comparison file"),
    ("calibrate", lambda p: ["calibrate", "sample", str(p["missing"])], "no such run directory"),
    ("rubric", lambda p: ["rubric", "generate", f"data.path={p['missing']}.jsonl"], "no such data file"),
    ("model", lambda p: ["model", "import", f"{p['missing']}.gguf"], "no such GGUF file"),
    ("model", lambda p: ["model", "import", f"{p['missing']}.gguf", "--out", f"{p['afile']}/m"], "--out: cannot"),
    ("export", lambda p: ["export", str(p["missing"])], "no such run or policy folder"),
]


def test_every_command_is_walked():
    assert {c for c, _, _ in CASES} == set(COMMANDS) - {"plugins", "config-reference"}  # these read no path


@pytest.mark.parametrize(("command", "argv", "expected"), CASES, ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(CASES)])
def test_a_bad_path_is_one_line_and_exit_2(capsys, paths, command, argv, expected):
    code = main(argv(paths))
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("rlkit: error: "), err
    assert "Traceback" not in err
    assert expected in lines[0], lines[0]
    assert not (paths["run"] / "policy").exists() and not (paths["run"] / "checkpoints").exists()
    assert paths["afile"].read_text() == "x"


# A path that is there but the other kind: "no such file" of a folder that exists sends a user hunting a typo.
KIND_CASES = [
    (lambda p: ["rubric", "hash", str(p["folder"])], "is a directory, expected a rubric file"),
    (lambda p: ["validate", f"rubric.path={p['folder']}"], "is a directory, expected a rubric file"),
    (lambda p: ["label", str(p["folder"])], "is a directory, expected a labelling file"),
    (lambda p: ["compare", "report", str(p["folder"])], "is a directory, expected a comparison file"),
    (lambda p: ["data", "pairs", f"in={p['folder']}", "out=pairs.jsonl"], "is a directory, expected a data file"),
    (lambda p: ["model", "import", str(p["folder"])], "is a directory, expected a GGUF file"),
    (lambda p: ["model", "path", str(p["folder"])], "is a directory, expected a file"),
    (lambda p: ["train-grm", f"grm.data.train={p['folder']}", f"hydra.run.dir={p['run']}"],
     "is a directory, expected a data file"),
    (lambda p: ["report", str(p["records"])], "is a file, expected a run directory"),
    (lambda p: ["doctor", str(p["records"])], "is a file, expected a run directory"),
    (lambda p: ["calibrate", "sample", str(p["records"])], "is a file, expected a run directory"),
    (lambda p: ["validate", f"model.name_or_path={p['records']}"], "is a file, expected a model directory"),
]


@pytest.mark.parametrize(("argv", "expected"), KIND_CASES, ids=[" ".join(a(
    {"folder": "DIR", "records": "FILE", "run": "RUN"})[:2]) for a, _ in KIND_CASES])
def test_a_folder_for_a_file_or_a_file_for_a_folder_is_named_as_such(capsys, paths, argv, expected):
    paths["folder"] = paths["records"].parent / "a_folder"
    paths["folder"].mkdir()
    code = main(argv(paths))
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("rlkit: error: "), err
    assert expected in err and "no such" not in err, err
