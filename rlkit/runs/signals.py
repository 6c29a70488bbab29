"""The detectors :func:`rlkit.runs.triage.triage` runs: pure functions over one metric's history, ``[(step, value),
...]`` in step order, each returning a :class:`Signal` (the step where it started and the evidence) or None. Thresholds
the design notes give are cited where they are used; the others are rlkit's own choice and said to be.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Points = Sequence[tuple[int, float]]

# The ranking note §5.1 reads "the last 10 batches": the window every windowed check compares.
WINDOW = 10


@dataclass(frozen=True)
class Signal:
    """What a detector saw: the step where it started and the evidence, in words with the values."""

    step: int
    evidence: str



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
