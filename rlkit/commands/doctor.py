"""``rlkit doctor RUN_DIR``: the triage of a finished or interrupted run, in the ranking note's order (reward signal,
judge health, reference leaks, policy); exits 1 when a finding is an error, so a CI job can gate on it. Where
``rlkit calibrate`` has scored labels of the run's own completions (``calibration/windows.json``), the judge's
agreement with them by step window is part of its health."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

USAGE = "usage: rlkit doctor <run dir>"


def cmd_doctor(args: Sequence[str]) -> int:
    from rlkit.core.errors import ConfigError, DataError, no_such
    from rlkit.runs.history import METRICS_FILE, SUMMARY_FILE, read_history
    from rlkit.runs.report import (
        AGREEMENT_FILE,
        ALERTS_FILE,
        SAMPLES_FILE,
        read_agreement,
        read_alerts,
        read_json_object,
    )
    from rlkit.runs.triage import read_samples, triage, triage_lines

    if len(args) != 1 or args[0].startswith("-") or "=" in args[0]:
        raise ConfigError(USAGE, "rlkit doctor")
    run_dir = Path(args[0])
    if not run_dir.is_dir():
        raise DataError(no_such(run_dir, "run directory", directory=True), str(run_dir))
    history = read_history(run_dir / METRICS_FILE)
    alerts = read_alerts(run_dir / ALERTS_FILE)
    samples = read_samples(run_dir / SAMPLES_FILE)
    summary = read_json_object(run_dir / SUMMARY_FILE)
    agreement = read_agreement(run_dir / AGREEMENT_FILE)  # `rlkit calibrate` on labels of the run's completions
    result = triage(history, alerts, samples, agreement)

    header = f"run {run_dir}: {result.steps} training steps, {len(alerts)} monitor alert(s)"
    interrupted = summary.get("interrupted")
    if isinstance(interrupted, dict):
        header += f"; interrupted at step {interrupted.get('step')}"
    elif not summary:
        header += f"; no {SUMMARY_FILE} (the run did not finish)"
    print(header)
    for warning in summary.get("warnings") or []:
        print(f"run warning ({SUMMARY_FILE}): {warning}")
    for line in triage_lines(result):
        print(line)
    return 1 if result.errors else 0
