"""A disk that fills during a run's JSONL appends or while it saves ``policy/`` (issue 52): one ``rlkit: error:``
line naming the file and the checkpoint to resume from, exit status 5, no traceback, and nothing half-written: every
JSONL line whole, no temp file or folder left, no half ``policy/``. The disk is a real tmpfs, filled to its last
byte at a chosen point of the run (root only; skipped where mounting is not permitted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.testing.disks import fill_disk, mount_tmpfs, unmount

pytestmark = pytest.mark.slow

TINY = ["model=tiny_random", "batch_size=2", "num_generations=2", "logger=csv"]


@pytest.fixture
def disk(tmp_path, monkeypatch):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "disk"
    folder.mkdir()
    why_not = mount_tmpfs(folder, 8192)
    if why_not is not None:
        pytest.skip(why_not)
    try:
        yield folder
    finally:
        unmount(folder)



def _whole(run: Path) -> None:
    assert not [p for p in run.rglob("*") if p.name.endswith((".tmp", ".old"))], "a temp file or folder left"
    for path in run.rglob("*.jsonl"):
        data = path.read_text()
        assert not data or data.endswith("\n"), f"{path.name}: a cut line"
        for line in data.splitlines():
            json.loads(line)


def _one_error(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.startswith("rlkit: error:")]
    assert len(lines) == 1 and "Traceback" not in err, err[-3000:]
    return lines[0]


def test_a_disk_that_fills_during_the_metric_appends_stops_with_one_line_and_whole_lines(disk, monkeypatch, capsys):
    from rlkit.runs.history import MetricsHistory

    append = MetricsHistory.append

    def full_at_step_3(self, step, metrics):
        if step == 3 and "reward/mean" in metrics:
            fill_disk(disk)
        return append(self, step, metrics)

    monkeypatch.setattr(MetricsHistory, "append", full_at_step_3)
    run = disk / "run"
    with pytest.raises(SystemExit) as exited:  # no checkpoint in the way: the appends meet the full disk first
        main(["fit", *TINY, "trainer.max_steps=30", "checkpoint_every=100", f"hydra.run.dir={run}"])
    line = _one_error(capsys.readouterr().err)
    assert exited.value.code == 5
    # tmpfs keeps each file's last page: an append fits there until a line crosses into a page the disk lacks
    refused = line.removeprefix("rlkit: error: ").split(":", 1)[0]
    assert refused in (str(run / "metrics.jsonl"), str(run / "samples.jsonl")), line
    assert "no space left on the device while appending to it; none of the lines was written" in line
    _whole(run)
    steps = [json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert 3 <= max(steps) < 29, "the run stopped at the refused append"


def test_a_disk_that_fills_before_the_policy_is_saved_leaves_no_half_policy(disk, monkeypatch, capsys):
    import rlkit.train.fit as fit_module

    report = fit_module.end_of_run_report

    def then_full(*args, **kwargs):
        report(*args, **kwargs)
        fill_disk(disk)

    monkeypatch.setattr(fit_module, "end_of_run_report", then_full)
    run = disk / "run"
    with pytest.raises(SystemExit) as exited:
        main(["fit", *TINY, "trainer.max_steps=2", "checkpoint_every=2", f"hydra.run.dir={run}"])
    line = _one_error(capsys.readouterr().err)
    assert exited.value.code == 5
    assert line.startswith(f"rlkit: error: {run / 'policy'}: no space left on the device while writing it")
    assert line.endswith(f"(step 2) resumes it: ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    assert not (run / "policy").exists()
    _whole(run)
