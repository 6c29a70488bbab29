"""Triage of a finished or interrupted run, in the order the ranking note (§5) asks for: the reward signal first,
then the judge's health, then reference leaks, and only then the policy. ``rlkit doctor`` prints it, ``rlkit
report`` carries it and the ``triage`` monitor runs it live on the history so far.

The detectors (:mod:`rlkit.runs.signals`) are pure functions over one metric's history, each returning a
:class:`~rlkit.runs.signals.Signal` or None; :func:`triage` runs them over a run's history and alerts and turns
what they found into :class:`Finding` s with a severity and what to try.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.data.records import json_lines
from rlkit.runs.signals import (
    WINDOW,
    Signal,
    agreement_fall,
    any_positive,
    drift,
    entropy_collapse,
    kl_acceleration,
    range_blowup,
    rate_high,
    rate_low,
    self_internalisation,
    share_rise,
    spike_then_plateau,
    std_jump,
    zero_advantage_share,
)

History = Sequence[tuple[int, Mapping[str, float]]]

STAGES = ("reward signal", "judge health", "reference leaks", "policy")

# Which stage a monitor's alert belongs to (monitors not named here are the policy's).
ALERT_STAGES = {"reward_collapse": "reward signal", "judge_stability": "judge health", "judge_drift": "judge health",
                "probes": "judge health"}

SELF_INTERNALISATION = "monitors/self_internalisation/"
# Every metric :func:`triage` reads (and ``rewards/<dimension>/unscored``): what the live ``triage`` monitor keeps
READS = ("reward/mean", "reward/std", "reward/min", "reward/max", "advantages/frac_zero_groups", "advantages/std",
         "judge/parse_failure_rate", "judge/swap_consistency", "judge/rank_agreement", "judge/reference_leaks", "kl",
         "entropy", "completion_length", "monitors/template_phrases/share", f"{SELF_INTERNALISATION}internalised",
         f"{SELF_INTERNALISATION}gap")


@dataclass(frozen=True)
class Finding:
    """One problem of a run: its stage, the step it started, the metric and evidence, what to try."""

    stage: str
    name: str
    severity: str  # "error" (``rlkit doctor`` exits 1) or "warning"
    step: int
    metric: str
    evidence: str
    advice: str
    samples: tuple[dict[str, Any], ...] = ()


@dataclass
class Triage:
    """Every finding in triage order, and per stage the metrics checked and those the run never logged."""

    findings: list[Finding] = field(default_factory=list)
    checked: dict[str, list[str]] = field(default_factory=lambda: {s: [] for s in STAGES})
    steps: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "error"]


# --- a run ---------------------------------------------------------------------------------------------------


def triage_reads(key: str) -> bool:
    """Whether :func:`triage` reads this metric: a live triage keeps only these of each step."""
    return key in READS or (key.startswith("rewards/") and key.endswith("/unscored"))


def metric_series(history: History, key: str) -> list[tuple[int, float]]:
    """``[(step, value)]`` of one metric where it was logged and finite."""
    return [(s, m[key]) for s, m in history if key in m and not math.isnan(m[key])]


def read_samples(path: Path) -> list[dict[str, Any]]:
    """The rows of ``samples.jsonl`` (none when the run logged no samples); a bad line is a ``DataError``."""
    if not path.is_file():
        return []
    return [row for _, row in json_lines(path) if isinstance(row, dict)]


def _samples_at(samples: Sequence[dict[str, Any]], step: int, shown: int = 2,
                unscored_first: bool = False) -> tuple[dict[str, Any], ...]:
    """The most rewarded samples of the first logged step at or after ``step``: what the policy was rewarded for;
    with ``unscored_first``, those the judge could not score come first (what it failed to read)."""
    later = sorted({r["step"] for r in samples if isinstance(r.get("step"), int) and r["step"] >= step})
    if not later:
        return ()
    rows = [r for r in samples if r.get("step") == later[0]]
    missing = math.inf if unscored_first else -math.inf
    rows.sort(key=lambda r: -(r.get("reward") if isinstance(r.get("reward"), int | float) else missing))
    return tuple(rows[:shown])


ADVICE = {
    "std_jump": "check the judge before the policy's settings: are its scores polarising (read the highest and "
                "lowest rewarded completions around this step), did a dimension start or stop scoring?",
    "range_blowup": "look for a dimension or a rule check that fires on only some completions; clip or rescale "
                    "it, or fix the anchor it reads",
    "spike_then_plateau": "the reward-hacking picture: read the top-rewarded completions after this step; if they "
                          "share a pattern the rubric rewards without merit, add a negative anchor and the check "
                          "that acts on it (docs/rubrics.md), then rerun from before the spike",
    "zero_advantage": "the judge scores a group's completions alike: raise num_generations or temperature, make the "
                      "anchors finer, or filter such groups (dynamic sampling)",
    "parse_failures": "the judge's prompt and the policy's style clash: read the completions it failed on, adjust "
                      "the judge's prompt or normalise the completions first",
    "unscored": "a dimension scored on few or no completions: read the judge's warnings; its reward is the other "
                "dimensions' alone",
    "consistency": "the judge does not repeat its own verdicts: use swap checks with a majority, a stronger judge "
                   "or an ensemble (docs/judges.md)",
    "human_agreement": "the judge agrees less with the human labels on the policy's later completions: the policy "
                       "may be pleasing the judge, not the humans; read that window's disagreements (calibration/"
                       "calibration.md), rewrite the dimension's anchors or use a stronger judge, and compare with a "
                       "gold judge (monitors=[gold_judge])",
    "reference_leaks": "the judge's prompt shows the answer key: it grades by copying; remove the reference from "
                       "the prompt (docs/judges.md, reference_leak_check)",
    "kl_acceleration": "the policy is running from the reference: raise the KL coefficient, lower the learning "
                       "rate, or stop at the step before",
    "entropy_collapse": "the policy's outputs have collapsed to a few: raise the temperature or add an entropy "
                        "bonus, lower the learning rate; do not blame the reward for it",
    "length_drift": "check whether length is being rewarded (a length-biased judge, a brevity anchor); use the "
                    "judge's length-bias correction or a length-normalised estimator",
    "template_share": "the policy found a phrasing the rubric rewards: add a negative anchor for the template and "
                      "the check that acts on it (benchmarks/reward_hacking.py shows the fix)",
    "advantage_drift": "the advantages' scale is drifting: check frac_zero_groups and the estimator's scaling",
    "self_internalisation": "the policy moves toward its own outputs, away from the task's references: compare with "
                            "a gold judge (monitors=[gold_judge]), check the template share "
                            "(monitors=[template_phrases]), lower the learning rate or raise the KL coefficient",
    "alert": "read the monitor's page (docs/monitors-and-evaluation.md)",
}


def agreement_series(agreement: Mapping[str, Any]) -> dict[str, tuple[list[tuple[int, float]], dict[int, int]]]:
    """Per dimension of ``calibration/windows.json`` (``rlkit.evaluation.calibration.windows_payload``): its κ per
    window ``[(first step, κ)]`` in step order, windows without a κ left out, and its labelled lines per window."""
    out: dict[str, tuple[list[tuple[int, float]], dict[int, int]]] = {}
    windows = [w for w in agreement.get("windows") or [] if isinstance(w, dict) and isinstance(w.get("window"), int)]
    for window in sorted(windows, key=lambda w: w["window"]):
        for dim in window.get("dimensions") or []:
            if not isinstance(dim, dict) or not isinstance(dim.get("name"), str):
                continue
            points, counts = out.setdefault(dim["name"], ([], {}))
            counts[window["window"]] = dim["n"] if isinstance(dim.get("n"), int) else 0
            if isinstance(dim.get("kappa"), int | float) and not math.isnan(dim["kappa"]):
                points.append((window["window"], float(dim["kappa"])))
    return out


def triage(history: History, alerts: Sequence[Mapping[str, Any]] = (),
           samples: Sequence[dict[str, Any]] = (), agreement: Mapping[str, Any] | None = None) -> Triage:
    """Run every detector over a run's history (``[(step, metrics)]`` as ``read_history`` gives it), add the
    monitors' alerts and, with ``agreement`` (``calibration/windows.json``, written by ``rlkit calibrate`` on labels
    of the run's completions), the judge–human agreement by step window; return the findings in triage order
    (stage, then step)."""
    result = Triage(steps=len(metric_series(history, "reward/mean")) or len(history))
    found: list[Finding] = []
    if result.steps < 4 * WINDOW:
        result.notes.append(f"{result.steps} training steps: the windowed checks need {2 * WINDOW} (KL's "
                            f"acceleration, {4 * WINDOW})")

    def check(stage: str, name: str, metric: str, signal: Signal | None, severity: str = "warning",
              with_samples: bool = False) -> None:
        # a judge's failures are shown on the completions it could not score, anything else on the best rewarded
        if all(logged(k) for k in metric.split("−")):  # a metric the run never logged was not checked
            result.checked[stage].append(metric)
        if signal is not None:
            shown = _samples_at(samples, signal.step, unscored_first=stage == STAGES[1]) if with_samples else ()
            found.append(Finding(stage, name, severity, signal.step, metric, signal.evidence, ADVICE[name], shown))

    series: dict[str, list[tuple[int, float]]] = {}

    def logged(key: str) -> list[tuple[int, float]]:
        if key not in series:  # read once: the live monitor runs this every step
            series[key] = metric_series(history, key)
        return series[key]

    # 1. the reward signal
    stage = STAGES[0]
    check(stage, "std_jump", "reward/std", std_jump(logged("reward/std")))
    check(stage, "range_blowup", "reward/max−reward/min", range_blowup(logged("reward/max"), logged("reward/min")))
    check(stage, "spike_then_plateau", "reward/mean", spike_then_plateau(logged("reward/mean")), "error",
          with_samples=True)
    zero = logged("advantages/frac_zero_groups")
    # nearly every group without a signal: the run is not learning any more (error); half of them: wasteful
    total = zero_advantage_share(zero, threshold=0.9)
    check(stage, "zero_advantage", "advantages/frac_zero_groups", total or zero_advantage_share(zero),
          "error" if total else "warning")

    # 2. the judge's health (5% parse failures for three steps is rlkit's line; half of them makes the reward noise)
    stage = STAGES[1]
    failures = logged("judge/parse_failure_rate")
    broken = rate_high(failures, 0.5, what="parse failures")
    check(stage, "parse_failures", "judge/parse_failure_rate", broken or rate_high(failures, 0.05,
                                                                                      what="parse failures"),
          "error" if broken else "warning", with_samples=True)
    keys = sorted({k for _, m in history for k in m if k.startswith("rewards/") and k.endswith("/unscored")})
    for key in keys:
        points = logged(key)
        never = rate_high(points, 0.999, what="unscored")
        check(stage, "unscored", key, never or rate_high(points, 0.05, what="unscored"),
              "error" if never else "warning")
    for key, threshold in (("judge/swap_consistency", 0.7), ("judge/rank_agreement", 0.5)):
        if logged(key):
            check(stage, "consistency", key, rate_low(logged(key), threshold, what=key.rsplit("/", 1)[1]))
    if agreement:
        threshold = agreement.get("threshold")
        threshold = float(threshold) if isinstance(threshold, int | float) else 0.6  # rlkit calibrate's default
        for dim, (points, counts) in agreement_series(agreement).items():
            metric = f"calibration/window/{dim}/kappa"  # the name `rlkit calibrate` logs it under
            result.checked[stage].append(metric)
            signal = agreement_fall(points, threshold, counts)
            if signal is not None:
                found.append(Finding(stage, "human_agreement", "warning", signal.step, metric, signal.evidence,
                                     ADVICE["human_agreement"]))

    # 3. reference leaks
    if logged("judge/reference_leaks"):
        check(STAGES[2], "reference_leaks", "judge/reference_leaks", any_positive(logged("judge/reference_leaks")),
              "error")

    # 4. the policy
    stage = STAGES[3]
    check(stage, "kl_acceleration", "kl", kl_acceleration(logged("kl")))
    check(stage, "entropy_collapse", "entropy", entropy_collapse(logged("entropy")))
    check(stage, "length_drift", "completion_length", drift(logged("completion_length"), what="mean length "),
          with_samples=True)
    if logged("monitors/template_phrases/share"):
        check(stage, "template_share", "monitors/template_phrases/share",
              share_rise(logged("monitors/template_phrases/share")), with_samples=True)
    check(stage, "advantage_drift", "advantages/std", drift(logged("advantages/std"), what="advantage std "))
    internalised, gap = logged(f"{SELF_INTERNALISATION}internalised"), logged(f"{SELF_INTERNALISATION}gap")
    if internalised or gap:
        found_self = self_internalisation(internalised, gap)
        for which in ("internalised", "gap"):  # both checked, the earlier signal found
            check(stage, "self_internalisation", f"{SELF_INTERNALISATION}{which}",
                  found_self[1] if found_self is not None and found_self[0] == which else None)

    for alert in alerts:
        if alert.get("severity", "warning") != "warning":
            continue
        monitor = str(alert.get("monitor", "monitor"))
        if monitor == "triage":
            continue  # the live triage's alerts are these very checks on the same metrics
        if any(f.metric.startswith(f"monitors/{monitor}/") for f in found):
            continue  # the monitor's own metric already made this finding, with its evidence
        step = alert.get("step")
        found.append(Finding(ALERT_STAGES.get(monitor, STAGES[3]), "alert", "warning",
                             step if isinstance(step, int) else 0, f"alerts.jsonl ({monitor})",
                             str(alert.get("message", "")), ADVICE["alert"]))
    result.findings = sorted(found, key=lambda f: (STAGES.index(f.stage), f.step))
    return result


# --- text ----------------------------------------------------------------------------------------------------


def _clip(text: Any, width: int = 80) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[:width - 1] + "…"


def finding_lines(finding: Finding) -> list[str]:
    """A finding as plain lines: severity, step, metric and evidence; what to try; a sample or two."""
    lines = [f"  {finding.severity} at step {finding.step}: {finding.name.replace('_', ' ')} — {finding.metric}: "
             f"{finding.evidence}", f"    try: {finding.advice}"]
    for row in finding.samples:
        reward = row.get("reward")
        shown = f"{reward:.3f}" if isinstance(reward, int | float) else "unscored"
        lines.append(f"    sample (step {row.get('step')}, reward {shown}): {_clip(row.get('prompt'), 30)!r} → "
                     f"{_clip(row.get('completion'))!r}")
    return lines


def triage_lines(result: Triage) -> list[str]:
    """The triage as plain text, one block per stage in order, each saying what it checked when it found nothing."""
    lines = [f"note: {note}" for note in result.notes]
    for n, stage in enumerate(STAGES, start=1):
        findings = [f for f in result.findings if f.stage == stage]
        checked = result.checked[stage]
        lines.append(f"{n}. {stage}")
        for finding in findings:
            lines += finding_lines(finding)
        if not findings:
            lines.append(f"  ok: {', '.join(checked)}" if checked else "  not logged by this run")
    errors, warnings = len(result.errors), len(result.findings) - len(result.errors)
    lines.append(f"{errors} error(s), {warnings} warning(s)")
    return lines
