"""A disk that refuses a write in the middle of a run's JSONL appends (samples, metrics, alerts) or of the policy's
save: one StorageError line naming the file, exit status 5 from the command, and nothing half-written: the appended
file holds every whole line before the refused ones and no part of them, a half-saved policy folder is removed and
an earlier one stays whole. The disk's refusal is real: a child process under a file-size limit (RLIMIT_FSIZE, the
kernel's EFBIG), the way ``tests/train/test_checkpoint_faults.py`` refuses a checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = """
import json, resource, signal, sys
from pathlib import Path
from rlkit.core.atomic import append_lines, atomic_directory
from rlkit.core.errors import StorageError
from rlkit.runs.history import MetricsHistory

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))
out = Path(sys.argv[1])
said = {}
try:
    append_lines(out / "samples.jsonl", [json.dumps({"row": i, "text": "x" * 300}) for i in range(3)])
    append_lines(out / "samples.jsonl", [json.dumps({"row": i, "text": "y" * 300}) for i in range(3, 30)])
except StorageError as exc:
    said["samples"] = [str(exc), exc.exit_code]
history = MetricsHistory(out / "metrics.jsonl")
try:
    for step in range(1000):
        history.append(step, {"reward/mean": 0.5, "loss": 1.25})
except StorageError as exc:
    said["metrics"] = [str(exc), step]
with atomic_directory(out / "policy") as folder:
    (folder / "config.json").write_text("{}")
try:
    with atomic_directory(out / "policy") as folder:
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(bytes(100_000))
except StorageError as exc:
    said["policy"] = [str(exc)]
print(json.dumps(said))
"""


@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("refused")
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return out, json.loads(done.stdout)


def test_a_refused_append_is_one_line_and_leaves_only_whole_earlier_lines(refused):
    out, said = refused
    message, code = said["samples"]
    assert message.startswith(f"{out / 'samples.jsonl'}: file too large") and code == 5
    assert "none of the lines was written" in message
    lines = (out / "samples.jsonl").read_text().splitlines(keepends=True)
    assert [json.loads(line)["row"] for line in lines] == [0, 1, 2], "the refused block left nothing behind"
    assert all(line.endswith("\n") for line in lines)


def test_metrics_stop_at_the_last_whole_line_the_disk_took(refused):
    out, said = refused
    message, step = said["metrics"]
    assert message.startswith(f"{out / 'metrics.jsonl'}: file too large")
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(step)) and 0 < step < 1000
    assert (out / "metrics.jsonl").read_bytes().endswith(b"\n")


def test_a_policy_the_disk_refused_leaves_the_earlier_policy_whole_and_no_temp_folder(refused):
    out, said = refused
    assert said["policy"][0].startswith(f"{out / 'policy'}: file too large")
    assert sorted(p.name for p in (out / "policy").iterdir()) == ["config.json"]
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")], "the temp folder is removed"


def test_a_policy_folder_is_replaced_whole(tmp_path):
    from rlkit.core.atomic import atomic_directory

    for n in (1, 2):
        with atomic_directory(tmp_path / "policy") as folder:
            (folder / f"file{n}").write_text(str(n))
    assert [p.name for p in tmp_path.iterdir()] == ["policy"]
    assert [p.name for p in (tmp_path / "policy").iterdir()] == ["file2"], "the old folder's files are gone"
