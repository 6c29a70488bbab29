"""Triage of a finished or interrupted run, in the order the ranking note (§5) asks for: the reward signal first,
then the judge's health, then reference leaks, and only then the policy. ``rlkit doctor`` prints it, ``rlkit
report`` carries it and the ``triage`` monitor runs it live on the history so far.

The detectors are pure functions over one metric's history, ``[(step, value), ...]`` in step order, each returning
a :class:`Signal` (the step where it started and the evidence) or None; :func:`triage` runs them over a run's
history and alerts and turns what they found into :class:`Finding` s with a severity and what to try. Thresholds
the design notes give are cited where they are used; the others are rlkit's own choice and said to be.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.data.records import json_lines

Points = Sequence[tuple[int, float]]
History = Sequence[tuple[int, Mapping[str, float]]]

# The ranking note §5.1 reads "the last 10 batches": the window every windowed check compares.
WINDOW = 10
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
class Signal:
    """What a detector saw: the step where it started and the evidence, in words with the values."""

    step: int
    evidence: str


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


# --- helpers -------------------------------------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _crossing(points: Points, start: int, level: float, rising: bool) -> int:
    """The step of the first point from index ``start`` at or beyond ``level`` (the last point's if none is)."""
    for s, v in points[start:]:
        if (v >= level) if rising else (v <= level):
            return s
    return points[-1][0]


def sustained(points: Points, above: float | None = None, below: float | None = None,
              run: int = 3) -> tuple[int, int] | None:
    """(index, step) of the first of ``run`` consecutive points above ``above`` (or below ``below``), else None.
    One point beyond a threshold is noise; a stretch of them is a state."""
    count = 0
    for i, (_, v) in enumerate(points):
        beyond = (above is not None and v > above) or (below is not None and v < below)
        count = count + 1 if beyond else 0
        if count == run:
            first = i - run + 1
            return first, points[first][0]
    return None


def _window_jump(points: Points, window: int, ratio: float, floor: float) -> tuple[int, float, float] | None:
    """The first window whose mean is ``ratio`` times the previous window's (floored at ``floor`` so a zero baseline
    is not an infinite jump): (its first index, the previous mean, its mean)."""
    values = [v for _, v in points]
    for end in range(2 * window, len(values) + 1):
        before = _mean(values[end - 2 * window:end - window])
        now = _mean(values[end - window:end])
        if now >= ratio * max(before, floor):
            return end - window, before, now
    return None


def _jump_signal(points: Points, window: int, ratio: float, floor: float, what: str) -> Signal | None:
    """:func:`_window_jump` as a finding's signal, its step where the values first cross halfway from the old level
    to the new one."""
    jump = _window_jump(points, window, ratio, floor)
    if jump is None:
        return None
    start, before, now = jump
    step = _crossing(points, start, (before + now) / 2, rising=True)
    return Signal(step, f"{what} over {window} steps {before:.3f} → {now:.3f} (×{now / max(before, floor):.1f})")


# --- the reward signal ---------------------------------------------------------------------------------------


def std_jump(points: Points, window: int = WINDOW, ratio: float = 3.0, floor: float = 0.02) -> Signal | None:
    """``reward/std``: the mean over a window of ``window`` steps at least ``ratio`` times the previous window's.

    Source: the ranking note §5.1 (over the last 10 batches, a standard deviation that suddenly grows means the
    judge's rankings are polarising; check the judge before touching the policy's settings). The ratio 3 reads the
    note's "several times" for the range; ``floor`` (rlkit's) keeps a std of 0 from making any rise a jump.
    The step is where the values first cross halfway from the old level to the new one."""
    return _jump_signal(points, window, ratio, floor, "mean")


def range_blowup(maxima: Points, minima: Points, window: int = WINDOW, factor: float = 3.0,
                 floor: float = 0.02) -> Signal | None:
    """``reward/max - reward/min``: the batch's range, averaged over a window, ``factor`` times the previous window's.

    Source: the ranking note §5.1 ("the gap between the largest and smallest reward several times its usual
    size"); ``factor`` 3 reads "several", ``floor`` is rlkit's (a range of 0 does not make any range a blow-up)."""
    low = dict(minima)
    spans = [(s, hi - low[s]) for s, hi in maxima if s in low]
    return _jump_signal(spans, window, factor, floor, "max−min")


def spike_then_plateau(points: Points, rise_steps: int = 3, rise_share: float = 0.5, min_rise: float = 0.1,
                       plateau: int = 10, flat_share: float = 0.1) -> Signal | None:
    """``reward/mean``: a rise of at least ``rise_share`` of the series' whole range (and ``min_rise``) within
    ``rise_steps`` steps, then ``plateau`` steps whose spread is under ``flat_share`` of that range, near its top.

    Source: the ranking engineering note §5.4 names the picture ("the reward shoots up, then stays where it is":
    the policy found a hole in the reward); the rubric note §6.1 tells the same story (mean reward 2.8 → 4.1 while
    a template's share went 12% → 67%). The numbers are rlkit's: a learning curve climbs over tens of steps and
    stays noisy; a hack climbs in a few and goes flat. The plateau's mean must also stand ``min_rise`` (or the
    share of the range) above the ``plateau`` steps before the rise: a healthy run's one-step dip and recovery
    (seen on a reward_hacking.py v2 run: 0.67 at one step between steps near 0.8) is not a spike. The step is where
    the rise has covered a quarter of its height."""
    values = [v for _, v in points]
    if len(values) < rise_steps + plateau:
        return None
    span = max(values) - min(values)
    need = max(rise_share * span, min_rise)
    for i in range(len(values) - plateau):
        for j in range(i + 1, min(i + rise_steps, len(values) - plateau) + 1):
            if values[j] - values[i] < need:
                continue
            flat = values[j:j + plateau]
            # a change of level, not a recovery from a one-step dip: the plateau stands above the steps before it
            before = values[max(0, i - plateau + 1):i + 1]
            if max(flat) - min(flat) <= flat_share * span * 2 and statistics.pstdev(flat) <= flat_share * span \
                    and _mean(flat) >= max(values) - 2 * flat_share * span and _mean(flat) - _mean(before) >= need:
                step = _crossing(points, i, values[i] + (values[j] - values[i]) / 4, rising=True)
                return Signal(step, f"{values[i]:.3f} at step {points[i][0]} → {values[j]:.3f} at step "
                                    f"{points[j][0]}, then flat for {plateau}+ steps (spread "
                                    f"{max(flat) - min(flat):.3f}, mean {_mean(flat):.3f})")
    return None


def zero_advantage_share(points: Points, threshold: float = 0.5, run: int = 3) -> Signal | None:
    """``advantages/frac_zero_groups``: more than ``threshold`` of the groups without a learning signal (every
    completion's advantage 0) for ``run`` steps in a row.

    Source: the rubric note §4.3 and §6.3 (a group scored alike normalises to all-zero advantages and the policy
    stops moving: the rubric no longer tells its completions apart). Threshold and run are rlkit's."""
    found = sustained(points, above=threshold, run=run)
    if found is None:
        return None
    i, step = found
    stretch = [v for _, v in points[i:i + run]]
    return Signal(step, f"{min(stretch):.0%}–{max(stretch):.0%} of groups with zero advantage for {run}+ steps "
                        f"(threshold {threshold:.0%})")


# --- the judge -----------------------------------------------------------------------------------------------


def rate_high(points: Points, threshold: float, run: int = 3, what: str = "rate") -> Signal | None:
    """A share (parse failures, unscored completions) above ``threshold`` for ``run`` steps in a row.

    Source: the ranking note §5.2 (a parse-failure rate that suddenly rises means the judge's prompt and the
    policy's style now clash: odd characters, over-long texts). The thresholds are chosen where it is called."""
    found = sustained(points, above=threshold, run=run)
    if found is None:
        return None
    i, step = found
    stretch = [v for _, v in points[i:i + run]]
    return Signal(step, f"{what} {max(stretch):.1%} at its highest over {run} steps (threshold {threshold:.0%})")


def rate_low(points: Points, threshold: float, run: int = 3, what: str = "agreement") -> Signal | None:
    """A consistency measure (swap consistency, rank agreement) below ``threshold`` for ``run`` steps in a row.

    Source: the ranking note §4.6 and §5.2 (a judge that cannot repeat its own ranking no longer gives a signal);
    the thresholds are rlkit's, chosen where it is called."""
    found = sustained(points, below=threshold, run=run)
    if found is None:
        return None
    i, step = found
    stretch = [v for _, v in points[i:i + run]]
    return Signal(step, f"{what} {min(stretch):.2f} at its lowest over {run} steps (threshold {threshold:.2f})")


def agreement_fall(points: Points, threshold: float, counts: Mapping[int, int] | None = None,
                   min_lines: int = 5) -> Signal | None:
    """Judge–human agreement per step window (``[(window's first step, κ)]``, from ``rlkit calibrate`` on labels of
    the run's own completions): a window below ``threshold`` after one at or above it. Windows with fewer than
    ``min_lines`` labelled lines (``counts``: lines per window) are passed over: a κ of three lines is noise.

    Source: the ranking note §5.3 (agreement with humans on the policy's own outputs, checked as training goes on);
    a judge the policy learned to please agrees less with the humans on its later completions while its agreement
    with itself (``judge_stability``) holds. The threshold is ``rlkit calibrate``'s (written with the windows);
    ``min_lines`` is rlkit's."""
    best: tuple[int, float] | None = None
    for step, kappa in points:
        if counts is not None and counts.get(step, 0) < min_lines:
            continue
        if kappa >= threshold:
            best = (step, kappa) if best is None or kappa > best[1] else best
        elif best is not None:
            return Signal(step, f"κ {kappa:.2f} in the window from step {step}, after {best[1]:.2f} in the one from "
                                f"step {best[0]} (threshold {threshold:.2f})")
    return None


def any_positive(points: Points) -> Signal | None:
    """``judge/reference_leaks``: any step on which the judge's prompt held the answer key.

    Source: the ranking note §5.5 (a judge shown the expected answer copies context instead of judging quality)."""
    hits = [(s, v) for s, v in points if v > 0]
    if not hits:
        return None
    return Signal(hits[0][0], f"{len(hits)} step(s) with leaks, {sum(v for _, v in hits):.0f} in all")


# --- the policy ----------------------------------------------------------------------------------------------


def kl_acceleration(points: Points, window: int = WINDOW, min_rise: float = 0.05, ratio: float = 1.5) -> Signal | None:
    """``kl``: three consecutive windows whose means rise faster and faster (``d2 > ratio · d1 >= 0``, a positive
    second difference), by at least ``min_rise`` in all, the last rise beyond twice its standard error (per-step KL
    is noisy: a 40-step default run swings 0.03–0.2 around a level), after the first window (KL starts at 0 and
    leaves it fast).

    Source: the ranking note §5.4 names the KL penalty as the first thing to read on the policy's side; the
    shape and numbers are rlkit's: a KL that levels off is the penalty working, one that accelerates is the
    policy running away from the reference. The step is where KL first leaves the first window's level."""
    values = [v for _, v in points]
    for a in range(window, len(values) - 3 * window + 1):
        windows = [values[a + k * window:a + (k + 1) * window] for k in range(3)]
        m0, m1, m2 = (_mean(w) for w in windows)
        d1, d2 = m1 - m0, m2 - m1
        if not (d1 >= 0 and d2 > ratio * d1 and m2 - m0 >= min_rise):
            continue  # the cheap tests first: the exact variances below cost most of a live triage
        noise = math.sqrt((statistics.pvariance(windows[1]) + statistics.pvariance(windows[2])) / window)
        if d2 > 2 * noise:
            level = max(windows[0]) + 0.05 * (m2 - m0)
            step = _crossing(points, a + window, level, rising=True)
            return Signal(step, f"window means {m0:.3f} → {m1:.3f} → {m2:.3f} ({window} steps each)")
    return None


def entropy_collapse(points: Points, fraction: float = 0.3, window: int = 5, run: int = 3) -> Signal | None:
    """``entropy``: below ``fraction`` of its start (the mean of the first ``window`` steps) for ``run`` steps.

    Source: the ranking note §5.4 (a policy collapsed to low entropy, its outputs all alike, is an RL tuning
    problem, not the reward's); the fraction is rlkit's."""
    if len(points) < window + run:
        return None
    start = _mean([v for _, v in points[:window]])
    found = sustained(points[window:], below=fraction * start, run=run)
    if found is None:
        return None
    i, step = found
    return Signal(step, f"{points[window + i][1]:.3f} against {start:.3f} at the start (below {fraction:.0%} of it)")


def drift(points: Points, factor: float = 2.0, window: int = 5, run: int = 5, what: str = "") -> Signal | None:
    """A metric (completion length, advantage std) more than ``factor`` times, or less than ``1/factor`` of, its
    start (the mean of the first ``window`` steps) for ``run`` steps in a row.

    Source: the ranking note §5.4 (the length distribution is among the policy's first checks); the factor is
    rlkit's."""
    if len(points) < window + run:
        return None
    start = _mean([v for _, v in points[:window]])
    if start <= 0:
        return None
    found = sustained(points[window:], above=factor * start, run=run) or \
        sustained(points[window:], below=start / factor, run=run)
    if found is None:
        return None
    i, step = found
    value = points[window + i][1]
    return Signal(step, f"{what}{value:.3f} against {start:.3f} at the start (×{value / start:.2f})")


def share_rise(points: Points, threshold: float = 0.5, max_rise: float = 0.3) -> Signal | None:
    """``monitors/template_phrases/share``: above ``threshold``, or ``max_rise`` above its first value.

    Source: the rubric note §6.1 (a template's share of outputs went 12% → 67% while the reward rose); the
    numbers are the ``template_phrases`` monitor's defaults."""
    if not points:
        return None
    start = points[0][1]
    for s, v in points:
        if v > threshold or v - start > max_rise:
            return Signal(s, f"share {v:.0%} (started at {start:.0%}; threshold {threshold:.0%}, "
                             f"rise {max_rise:.0%})")
    return None


def self_internalisation(internalised: Points, gap: Points, window: int = 3, run: int = 3, min_fall: float = 0.05,
                         min_rise: float = 0.1, stall: float = 0.25) -> tuple[str, Signal] | None:
    """``monitors/self_internalisation/internalised`` and ``/gap`` (nats per token, one point per measurement of the
    ``self_internalisation`` monitor): ``("internalised", signal)`` when ``internalised`` stays more than
    ``min_fall`` below its start (the mean of the first ``window`` measurements) for ``run`` measurements, or
    ``("gap", signal)`` when the gap stays more than ``min_rise`` above its start for ``run`` measurements while
    ``internalised`` gained less than ``stall`` times what the gap did; the earlier of the two.

    Source: the self-internalisation gap of arXiv 2605.12474 as the monitor reads it (its module docstring): a
    policy that moves toward its own outputs and away from the task's references. A gap alone grows in a healthy
    run too (the policy's own completions drift as KL grows); with the references left behind it is the warning.
    The numbers are rlkit's."""
    found: list[tuple[str, Signal]] = []
    if len(internalised) >= window + run:
        start = _mean([v for _, v in internalised[:window]])
        hit = sustained(internalised[window:], below=start - min_fall, run=run)
        if hit is not None:
            value = internalised[window + hit[0]][1]
            found.append(("internalised", Signal(hit[1], f"internalised {value:+.3f} nats/token against {start:+.3f} "
                                                         f"at the start (fell more than {min_fall:g}) for {run}+ "
                                                         "measurements")))
    if len(gap) >= window + run:
        gained = dict(internalised)
        gap_start = _mean([v for _, v in gap[:window]])
        own_start = _mean([v for _, v in internalised[:window]]) if internalised else 0.0
        count = 0
        for i, (s, v) in enumerate(gap[window:], start=window):
            rise = v - gap_start
            gain = gained.get(s, own_start) - own_start  # not logged at this step: counted as no gain
            count = count + 1 if rise > min_rise and gain < stall * rise else 0
            if count == run:
                s0, v0 = gap[i - run + 1]
                gain = gained.get(s0, own_start) - own_start
                found.append(("gap", Signal(s0, f"gap {v0:+.3f} nats/token against {gap_start:+.3f} at the start "
                                                f"while internalised moved {gain:+.3f} (under {stall:.0%} of the "
                                                f"gap's rise) for {run}+ measurements")))
                break
    return min(found, key=lambda f: f[1].step) if found else None


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
