"""``rlkit readiness [key=value ...]``: the ranking note's readiness checklist, each condition with the evidence rlkit
read, the verdict and the next step (:mod:`rlkit.evaluation.readiness`). Exit 0 ready, 1 calibrate more, 3 baseline
first, 2 bad input: a CI job can gate on it."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path

from rlkit.core.errors import ConfigError

USAGE = """usage: rlkit readiness [labels=FILE] [rubric=FILE] [calibration=DIR|FILE] [run=RUN_DIR]
                       [reward_model=DIR] [budget=yes] [throughput=yes] [hacked=yes] [min_labels=50]
                       [threshold=0.6] [output=FILE]

The ranking note's six conditions for a ranking reward (a GRM, judge=ranking), each answered from what rlkit sees:
  1 a plain RLHF loop already works        run=: a finished rlkit fit run whose sampled groups vary
  2 an evaluator that can be held fixed    calibration=: the judge's last rlkit calibrate (κ per dimension), and
                                           rubric=: every level anchored (rlkit rubric lint)
  3 enough inference budget                budget=yes (rlkit cannot see it)
  4 the scalar RM already reward-hacks     reward_model=: rlkit train-rm's folder, and hacked=yes
  5 lower throughput is acceptable         throughput=yes (rlkit cannot see it)
  6 people check the evaluator regularly   labels=: at least min_labels labelled completions; inter-labeller κ
Defaults: the shipped arithmetic labels and rubric; calibration/calibration.json when it exists (calibrate.output's
default). output=FILE also writes the answer as JSON.

Verdict (the note: under 3 points a scalar RM or DPO first; 4 or more, ranking pays): exit 0 ready (4+, with 2
and 6 met), 1 calibrate more, 3 baseline first; 2 bad input."""

DEFAULTS = {"labels": "pkg://rlkit.conf/calibration/arithmetic_labels.jsonl",
            "rubric": "pkg://rlkit.conf/rubric_files/arithmetic.yaml"}
KEYS = ("labels", "rubric", "calibration", "run", "reward_model", "budget", "throughput", "hacked", "min_labels",
        "threshold", "output")


def _yes(value: str, key: str) -> bool:
    if value.lower() in ("yes", "true", "1"):
        return True
    if value.lower() in ("no", "false", "0"):
        return False
    raise ConfigError(f"yes or no, got {value!r}", key)


def cmd_readiness(args: Sequence[str]) -> int:
    from rlkit.core.package_files import resolve_path
    from rlkit.core.rubric import load_rubric
    from rlkit.evaluation.readiness import DEFAULT_MIN_LABELS, DEFAULT_THRESHOLD, EXIT_CODES, readiness

    if "--help" in args or "-h" in args:
        print(USAGE)
        return 0
    given: dict[str, str] = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or key not in KEYS:
            raise ConfigError(f"unknown argument {arg!r}; takes {', '.join(f'{k}=' for k in KEYS)}", "command line")
        given[key] = value
    settings = {**DEFAULTS, **given}
    calibration = settings.get("calibration")
    if calibration is None and Path("calibration/calibration.json").is_file():
        calibration = "calibration"
    try:
        min_labels = int(settings.get("min_labels", DEFAULT_MIN_LABELS))
        threshold = float(settings.get("threshold", DEFAULT_THRESHOLD))
    except ValueError as exc:
        raise ConfigError(str(exc), "min_labels/threshold") from None
    if min_labels < 1 or not -1 <= threshold <= 1:
        raise ConfigError("min_labels must be >= 1 and threshold in [-1, 1]", "min_labels/threshold")

    def path(key: str) -> Path | None:
        value = settings.get(key) if key != "calibration" else calibration
        return None if value is None else resolve_path(value)

    answer = readiness(labels=path("labels"), rubric=load_rubric(path("rubric")), calibration=path("calibration"),
                       run=path("run"), reward_model=path("reward_model"),
                       budget=_yes(settings.get("budget", "no"), "budget"),
                       throughput=_yes(settings.get("throughput", "no"), "throughput"),
                       hacked=_yes(settings.get("hacked", "no"), "hacked"), min_labels=min_labels, threshold=threshold)
    for c in answer.conditions:
        mark = "met" if c.met else "not met"
        print(f"{c.number}. {c.name}: {mark}{' (declared)' if c.declared else ''} — {c.evidence}")
    print(f"score {answer.score}/6 (the ranking note: under 3, a scalar RM or DPO first; 4 or more, ranking pays)")
    print(f"verdict: {answer.verdict}; next: {answer.next_step()}")
    if "output" in settings:
        Path(settings["output"]).write_text(json.dumps(answer.to_json(), indent=2), encoding="utf-8")
    sys.stdout.flush()
    return EXIT_CODES[answer.verdict]
