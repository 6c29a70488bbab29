"""Checkpoints a run can trust: verified on load (a truncated or corrupt file is named and a whole one beside it
offered), ``checkpoint_keep_last`` step checkpoints kept, and a disk that fills mid-run stops the run with one line
and the previous checkpoint intact. Real checkpoints of a 6-step run on the tiny random policy."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from rlkit.cli import main
from rlkit.config.checkpoints import read_checkpoint_metadata, verify_checkpoint
from rlkit.core.errors import ConfigError
from rlkit.testing import one_error_line
from rlkit.testing.disks import mount_tmpfs, unmount

pytestmark = pytest.mark.slow

TINY = ["model=tiny_random", "batch_size=2", "num_generations=2", "logger=csv"]


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)


@pytest.fixture(scope="module")
def kept(tmp_path_factory) -> Path:
    """checkpoints/ of a 6-step run that checkpoints every 2 steps and keeps the last 2 step checkpoints."""
    root = tmp_path_factory.mktemp("kept")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RLKIT_CACHE", str(root / "cache"))
        mp.setenv("WANDB_SILENT", "true")
        mp.chdir(root)
        assert main(["fit", *TINY, "trainer.max_steps=6", "checkpoint_every=2", "checkpoint_keep_last=2",
                     f"hydra.run.dir={root / 'run'}"]) == 0
    return root / "run" / "checkpoints"


def _copy(kept: Path, to: Path) -> Path:
    shutil.copytree(kept, to)
    return to


def _truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _flip_middle(path: Path) -> None:
    """Flip 8 bytes in the middle of the largest tensor's data. The file's own middle byte may sit in a local
    header's alignment padding, which no CRC covers (torch pads each record to 64 bytes), so where it lands depends
    on the checkpoint's layout, not on what the check can catch."""
    with zipfile.ZipFile(path) as archive:
        entry = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.compress_size)
    data = bytearray(path.read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[entry.header_offset + 26:entry.header_offset + 30])
    middle = entry.header_offset + 30 + name_length + extra_length + entry.compress_size // 2
    data[middle:middle + 8] = bytes(b ^ 0xFF for b in data[middle:middle + 8])
    path.write_bytes(bytes(data))


def test_keep_last_keeps_the_most_recent_step_checkpoints_beside_last(kept):
    assert sorted(p.name for p in kept.iterdir()) == ["last.ckpt", "step-000004.ckpt", "step-000006.ckpt"]
    steps = {p.name: read_checkpoint_metadata(p, verify=True)["global_step"] for p in kept.iterdir()}
    assert steps == {"last.ckpt": 6, "step-000004.ckpt": 4, "step-000006.ckpt": 6}


def test_a_truncated_last_checkpoint_is_named_and_the_newest_whole_one_offered(kept, tmp_path, capsys):
    folder = _copy(kept, tmp_path / "checkpoints")
    _truncate(folder / "last.ckpt")
    line = one_error_line(main(["fit", *TINY, f"ckpt_path={folder / 'last.ckpt'}",
                                f"hydra.run.dir={tmp_path / 'run'}"]), capsys.readouterr().err)
    assert line.startswith(f"rlkit: error: ckpt_path: {folder / 'last.ckpt'} is not a readable checkpoint")
    assert line.endswith(f"ckpt_path={folder / 'step-000006.ckpt'}")
    assert not (tmp_path / "run" / "policy").exists()


def test_flipped_bytes_are_caught_by_the_crc_and_an_older_whole_one_offered(kept, tmp_path, capsys):
    folder = _copy(kept, tmp_path / "checkpoints")
    _flip_middle(folder / "step-000006.ckpt")
    torch.load(folder / "step-000006.ckpt", weights_only=False)  # torch itself reads it: only the CRC tells
    _truncate(folder / "last.ckpt")
    line = one_error_line(main(["validate", *TINY, f"ckpt_path={folder / 'step-000006.ckpt'}"]),
                          capsys.readouterr().err)
    assert f"{folder / 'step-000006.ckpt'} is corrupt: its entry archive/data/" in line
    assert "fails its CRC check" in line and line.endswith(f"ckpt_path={folder / 'step-000004.ckpt'}")
    line = one_error_line(main(["eval", *TINY, f"eval.checkpoint={folder / 'step-000006.ckpt'}",
                                f"eval.output={tmp_path / 'eval.jsonl'}", "eval.embedding=null"]),
                          capsys.readouterr().err)
    assert line.startswith("rlkit: error: eval.checkpoint: ") and "fails its CRC check" in line
    assert line.endswith(f"eval.checkpoint={folder / 'step-000004.ckpt'}")


def test_with_no_whole_checkpoint_beside_it_none_is_offered(kept, tmp_path):
    lone = tmp_path / "last.ckpt"
    shutil.copy(kept / "last.ckpt", lone)
    verify_checkpoint(lone)  # whole: no error
    _flip_middle(lone)
    with pytest.raises(ConfigError, match="no whole checkpoint beside it") as err:
        verify_checkpoint(lone)
    assert err.value.where == "ckpt_path" and str(lone) in err.value.message


FSIZE_SCRIPT = """
import resource, signal, sys, torch
from rlkit.core.atomic import atomic_torch_save
from rlkit.core.errors import StorageError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit then fails with EFBIG instead of killing
resource.setrlimit(resource.RLIMIT_FSIZE, (1_000_000, resource.RLIM_INFINITY))
atomic_torch_save({"w": torch.ones(1000)}, sys.argv[1])
try:
    atomic_torch_save({"w": torch.zeros(1_000_000)}, sys.argv[1])
except StorageError as exc:
    print(exc)
"""


def test_a_write_the_disk_refuses_leaves_the_previous_file_and_no_temp_file(tmp_path):
    target = tmp_path / "checkpoints" / "last.ckpt"
    done = subprocess.run([sys.executable, "-c", FSIZE_SCRIPT, str(target)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(f"{target}: file too large")
    assert [p.name for p in target.parent.iterdir()] == ["last.ckpt"], "the temp file is removed"
    assert torch.equal(torch.load(target, weights_only=True)["w"], torch.ones(1000))


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MB tmpfs: room for one checkpoint of the tiny policy (1.3 MB) and the run's logs, not for the next one
    beside it (the atomic write's temp file)."""
    disk = tmp_path / "disk"
    disk.mkdir()
    why_not = mount_tmpfs(disk, 2048)
    if why_not is not None:
        pytest.skip(why_not)
    try:
        yield disk
    finally:
        unmount(disk)


def test_a_disk_that_fills_mid_run_stops_it_with_one_line_and_the_last_checkpoint_whole(small_disk, capsys):
    run = small_disk / "run"
    with pytest.raises(SystemExit) as exited:  # Hydra's task exits with the error's status
        main(["fit", *TINY, "trainer.max_steps=4", "checkpoint_every=2", f"hydra.run.dir={run}"])
    code, err = exited.value.code, capsys.readouterr().err
    errors = [ln for ln in err.splitlines() if ln.startswith("rlkit: error:")]
    last = run / "checkpoints" / "last.ckpt"
    assert code == 5 and len(errors) == 1 and "Traceback" not in err, err
    assert errors[0].startswith(f"rlkit: error: {last}: no space left on the device")
    assert errors[0].endswith(f"the run's last checkpoint (step 2) resumes it: ckpt_path={last}")
    assert [p.name for p in last.parent.iterdir()] == ["last.ckpt"], "the temp file is removed"
    assert not list(run.rglob("*.tmp"))
    assert read_checkpoint_metadata(last, verify=True)["global_step"] == 2
    assert any(k.startswith("policy.") for k in torch.load(last, weights_only=False)["state_dict"])
