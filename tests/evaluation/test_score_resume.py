"""``rlkit score`` with an output: shards written atomically, resumed after a kill, transient judge failures
retried, ranks within a record, a progress bar."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import rlkit.core.registry
from rlkit import hookimpl
from rlkit.cli import main
from rlkit.evaluation.scoring import completion_ranks, is_transient
from rlkit_plugins.judges.rule import RuleJudge

RUBRIC = """\
name: t
version: "1"
dimensions:
  - name: has_number
    type: binary
    checks: [{type: regex, pattern: '\\d'}]
  - name: short
    type: binary
    checks: [{type: length, max: 3}]
"""

# A subprocess running the CLI with an extra, slow judge: `judge.name=slow_rule` is the rule judge plus a nap
# per batch, so the test can kill it between shards.
SLOW_CLI = """\
import sys, time
import rlkit.core.registry
from rlkit import hookimpl
from rlkit_plugins.judges.rule import RuleJudge

class SlowRule(RuleJudge):
    def score(self, rollout, rubric):
        time.sleep(float(sys.argv[1]))
        return super().score(rollout, rubric)

class Plugin:
    @hookimpl
    def rlkit_register_judges(self, register):
        register("slow_rule", SlowRule)

real = rlkit.core.registry.create_plugin_manager
rlkit.core.registry.create_plugin_manager = lambda **kw: real(**{**kw, "extra": [*kw.get("extra", ()), Plugin()]})
from rlkit.cli import main
sys.exit(main(sys.argv[2:]))
"""


class SlowRule(RuleJudge):
    """The subprocess's judge, in-process and without the nap."""


class FlakyRule(RuleJudge):
    """Raises ``FlakyRule.error`` for any batch holding a prompt in ``failing`` (``fail_times`` times, -1: always)."""

    failing: set[str] = set()
    fail_times = -1
    error: type[Exception] = ConnectionError
    calls = 0

    def score(self, rollout, rubric):
        type(self).calls += 1
        if any(r["prompt"] in self.failing for r in rollout.records) and type(self).fail_times != 0:
            type(self).fail_times -= 1
            raise type(self).error("connection reset by judge server")
        return super().score(rollout, rubric)


class _Judges:
    @hookimpl
    def rlkit_register_judges(self, register):
        register("slow_rule", SlowRule)
        register("flaky_rule", FlakyRule)


@pytest.fixture
def test_judges(monkeypatch):
    """``judge.name=slow_rule`` and ``judge.name=flaky_rule`` for in-process CLI runs."""
    real = rlkit.core.registry.create_plugin_manager
    monkeypatch.setattr(rlkit.core.registry, "create_plugin_manager",
                        lambda **kw: real(**{**kw, "extra": [*kw.get("extra", ()), _Judges()]}))
    monkeypatch.setattr(FlakyRule, "failing", set())
    monkeypatch.setattr(FlakyRule, "fail_times", -1)
    monkeypatch.setattr(FlakyRule, "error", ConnectionError)
    monkeypatch.setattr(FlakyRule, "calls", 0)


def _records(n: int) -> list[dict]:
    # varied completion counts, so shards differ in lines and ranks have ties
    out = []
    for i in range(n):
        if i % 3 == 0:
            out.append({"id": i, "prompt": f"p{i}", "completion": f"c{i}"})
        else:
            completions = [f"{i}", "none", f"long answer {i}", "x"][:i % 3 + 2]
            out.append({"id": i, "prompt": f"p{i}", "completions": completions})
    return out


@pytest.fixture
def inputs(tmp_path):
    rubric = tmp_path / "rubric.yaml"
    rubric.write_text(RUBRIC)
    data = tmp_path / "records.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _records(12)))
    return data, rubric


def _score(capsys, data: Path, rubric: Path, out: Path, *extra: str) -> tuple[int, str, str]:
    code = main(["score", f"data.path={data}", f"rubric.path={rubric}", f"score.output={out}", *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _completions(data: Path) -> list[tuple[int, str]]:
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    return [(r["id"], c) for r in rows for c in (r["completions"] if "completions" in r else [r["completion"]])]


def test_ranks_within_a_record():
    nan = math.nan
    assert completion_ranks([0.5, 1.0, 1.0, nan, 0.2]) == [3, 1, 1, None, 4]
    assert completion_ranks([0.3]) == [1]
    assert completion_ranks([nan, nan]) == [None, None]


def test_sharded_output_equals_one_shard_and_carries_ranks(capsys, tmp_path, inputs):
    data, rubric = inputs
    one, many = tmp_path / "one.jsonl", tmp_path / "many.jsonl"
    code, out, err = _score(capsys, data, rubric, one, "score.shard_size=1000")
    assert code == 0, err
    code, out_many, err = _score(capsys, data, rubric, many, "score.shard_size=5", "score.batch_size=3")
    assert code == 0, err
    assert one.read_text() == many.read_text()
    assert out_many.split("wrote")[0] == out.split("wrote")[0]  # the same summary table
    assert not (tmp_path / "many.jsonl.shards").exists() and not list(tmp_path.glob(".*.tmp"))
    rows = [json.loads(line) for line in many.read_text().splitlines()]
    assert [(r["id"], r["completion"]) for r in rows] == _completions(data)
    by_id = {}
    for r in rows:
        by_id.setdefault(r["id"], []).append((r["completion"], r["reward"], r["rank"]))
    # record 2: "2" (number, short), "none", "long answer 2" (number only), "x" (short only)
    assert [rank for _, _, rank in by_id[2]] == [1, 4, 2, 2]
    assert all(rank == 1 for _, _, rank in by_id[0])  # one completion


def test_killed_run_resumes_without_losing_or_repeating_a_line(capsys, tmp_path, inputs, test_judges):
    data, rubric = inputs
    out = tmp_path / "out" / "scored.jsonl"
    shards = tmp_path / "out" / "scored.jsonl.shards"
    args = ["score", f"data.path={data}", f"rubric.path={rubric}", f"score.output={out}", "judge.name=slow_rule",
            "score.shard_size=2", "score.batch_size=1"]
    script = tmp_path / "slow_cli.py"
    script.write_text(SLOW_CLI)
    proc = subprocess.Popen([sys.executable, str(script), "0.1", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 90
        while not (shards / "shard-00000.jsonl").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no shard appeared"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.communicate()
    done = sorted(p.name for p in shards.glob("shard-*.jsonl"))
    assert 1 <= len(done) < 6 and not out.exists(), done
    (shards / ".shard-00005.jsonl.abc123.tmp").write_text('{"half": ')  # as a kill mid-write leaves it

    code, stdout, err = _score(capsys, data, rubric, out, *args[4:])  # the same command, in-process
    assert code == 0, err
    assert f"{len(done)} of 6 shards from an earlier run" in " ".join(stdout.split())  # rich wraps lines
    assert not shards.exists()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["completion"]) for r in rows] == _completions(data)

    clean = tmp_path / "clean.jsonl"
    assert _score(capsys, data, rubric, clean, *args[4:])[0] == 0
    assert out.read_text() == clean.read_text()


def test_transient_failures_are_retried(capsys, tmp_path, inputs, test_judges):
    data, rubric = inputs
    FlakyRule.failing, FlakyRule.fail_times = {"p4"}, 2
    out = tmp_path / "scored.jsonl"
    code, _, err = _score(capsys, data, rubric, out, "judge.name=flaky_rule", "score.retry_backoff=0",
                          "score.retries=2")
    assert code == 0, err
    assert FlakyRule.fail_times == 0 and len(out.read_text().splitlines()) == len(_completions(data))


def test_failure_after_retries_names_the_shard_keeps_finished_ones_and_a_resume_checks_the_manifest(
        capsys, tmp_path, inputs, test_judges):
    data, rubric = inputs
    out = tmp_path / "scored.jsonl"
    shards = tmp_path / "scored.jsonl.shards"
    flaky = ("judge.name=flaky_rule", "score.shard_size=4", "score.retry_backoff=0", "score.retries=1")
    FlakyRule.failing = {"p9"}  # record 10: the third shard
    code, _, err = _score(capsys, data, rubric, out, *flaky)
    assert code == 2 and "Traceback" not in err
    assert f"shard 2 ({shards / 'shard-00002.jsonl'}): judge flaky_rule failed 2 times on input records 9-12" in err
    assert "ConnectionError" in err and "2 of 3 shards are done" in err and "run the same command again" in err
    assert sorted(p.name for p in shards.iterdir()) == ["manifest.json", "shard-00000.jsonl", "shard-00001.jsonl"]
    assert not out.exists()
    FlakyRule.failing = set()

    # a changed config or input is refused, naming the manifest and what changed
    code, _, err = _score(capsys, data, rubric, out, *flaky, "judge.params.case_sensitive=true")
    assert code == 2 and f"{shards / 'manifest.json'}: {shards} holds an unfinished run of another reward config" in err
    code, _, err = _score(capsys, data, rubric, out, *flaky[:-2], "score.shard_size=3")
    assert code == 2 and "another score.shard_size (4 then, 3 now)" in err
    original = data.read_text()
    data.write_text(original.replace('"p11"', '"p11 changed"'))
    code, _, err = _score(capsys, data, rubric, out, *flaky)
    assert code == 2 and "another input file" in err and f"delete {shards} to start over" in err
    data.write_text(original)

    calls = FlakyRule.calls
    moved = tmp_path / "moved.jsonl"  # the same content under another name is the same input
    moved.write_text(original)
    code, _, err = _score(capsys, moved, rubric, out, *flaky)
    assert code == 0, err
    assert FlakyRule.calls - calls == 1  # only the unfinished shard was asked again (one batch of 64)
    clean = tmp_path / "clean.jsonl"
    assert _score(capsys, data, rubric, clean, "judge.name=flaky_rule")[0] == 0
    assert out.read_text() == clean.read_text()


def test_a_judge_bug_is_not_retried(capsys, tmp_path, inputs, test_judges):
    data, rubric = inputs
    FlakyRule.failing, FlakyRule.error = {"p0"}, ValueError
    with pytest.raises(ValueError):
        _score(capsys, data, rubric, tmp_path / "s.jsonl", "judge.name=flaky_rule", "score.retry_backoff=0")
    assert FlakyRule.calls == 1


def test_what_counts_as_transient():
    import httpx

    from rlkit.core.errors import JudgeError

    marked = JudgeError("rate limited")
    marked.transient = True
    assert is_transient(TimeoutError()) and is_transient(ConnectionResetError()) and is_transient(marked)
    assert is_transient(httpx.ConnectTimeout("slow")) and is_transient(httpx.RemoteProtocolError("eof"))
    assert not is_transient(ValueError()) and not is_transient(JudgeError("wrong shape"))


def test_bad_score_option_names_the_key(capsys, tmp_path, inputs):
    data, rubric = inputs
    code, _, err = _score(capsys, data, rubric, tmp_path / "s.jsonl", "score.shard_size=0")
    assert code == 2 and "score.shard_size: must be >= 1, got 0" in err


def test_progress_bar_on_a_terminal_only(capsys, tmp_path, inputs, monkeypatch):
    data, rubric = inputs
    monkeypatch.setenv("FORCE_COLOR", "1")  # rich treats stderr as a terminal
    monkeypatch.delenv("NO_COLOR", raising=False)
    code, _, err = _score(capsys, data, rubric, tmp_path / "a.jsonl")
    assert code == 0 and "scoring" in err and "/s" in err
    code, _, err = _score(capsys, data, rubric, tmp_path / "b.jsonl", "score.progress=false")
    assert code == 0 and "scoring" not in err
