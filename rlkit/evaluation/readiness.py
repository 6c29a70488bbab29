"""``rlkit readiness``: is a project ready for a ranking reward (a GRM or a ranking judge), by the ranking note's
checklist (§6, "判断清单"), each condition answered from what rlkit can see.

The note's six conditions, each worth one point, and the evidence read for each here:

1. *A plain RLHF loop already works* (已经跑通过传统 RLHF 流程): ``run=RUN_DIR``, a finished ``rlkit fit`` run
   (``summary.json``) whose sampled groups vary: at least ``MIN_VARYING_GROUPS`` of its ``samples.jsonl`` groups have a
   reward spread (a group whose completions all score the same teaches GRPO nothing).
2. *An evaluator that can be held fixed* (有独立或可固定的评估者模型): the judge's last ``rlkit calibrate``
   (``calibration.json``) agrees with people on every dimension (κ at or above the round's threshold), and the rubric it
   applies has every level anchored (``rlkit rubric lint``): a judge that drifts or a rubric open to reading cannot be
   held fixed.
3. *Enough inference budget* (有足够推理预算): rlkit cannot see a budget; ``budget=yes`` declares it.
4. *The scalar reward model already reward-hacks in RL* (标量 RM 在 RL 阶段已出现明显 reward hacking): a scalar
   baseline must exist (``reward_model=DIR``, ``rlkit train-rm``'s folder; its held-out accuracy is shown); that it was
   gamed is the user's finding (``hacked=yes``, e.g. from ``rlkit doctor`` on the run trained against it).
5. *Lower training throughput is acceptable* (能接受较低训练吞吐量): ``throughput=yes`` declares it.
6. *People check the evaluator regularly* (团队能定期抽人做人工对齐评估): at least ``min_labels`` labelled completions,
   and, where two labellers or more labelled the same lines, their mean inter-labeller κ at or above the threshold.

Verdict, by the note's rule (under 3 points: a scalar RM or DPO baseline first; 4 or more: ranking pays):
``ready`` (4 or more, conditions 2 and 6 met; exit 0), ``calibrate more`` (3 points, or 4 or more with the evaluator or
the labels short; exit 1), ``baseline first`` (under 3; exit 3). Bad input is exit 2.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.core.errors import DataError
from rlkit.core.rubric import Rubric, anchor_report

READY, CALIBRATE_MORE, BASELINE_FIRST = "ready", "calibrate more", "baseline first"
EXIT_CODES = {READY: 0, CALIBRATE_MORE: 1, BASELINE_FIRST: 3}
MIN_VARYING_GROUPS = 0.5  # GRPO learns from a group only when its rewards differ: half of them at least
DEFAULT_MIN_LABELS = 50  # the ranking note's spot check is 20-30 samples per look (§5.3); a few looks' worth
DEFAULT_THRESHOLD = 0.6  # rlkit calibrate's default: κ below it is flagged


@dataclass(frozen=True)
class Condition:
    """One line of the checklist: the note's condition, whether it is met, and the evidence."""

    number: int
    name: str
    met: bool
    evidence: str
    declared: bool = False  # met on the user's word (budget, throughput, hacking), not on evidence rlkit read


@dataclass
class Readiness:
    conditions: list[Condition] = field(default_factory=list)

    @property
    def score(self) -> int:
        return sum(c.met for c in self.conditions)

    @property
    def verdict(self) -> str:
        met = {c.number: c.met for c in self.conditions}
        if self.score < 3:
            return BASELINE_FIRST
        if self.score >= 4 and met.get(2) and met.get(6):
            return READY
        return CALIBRATE_MORE

    def next_step(self) -> str:
        """What the verdict recommends, in one line."""
        if self.verdict == BASELINE_FIRST:
            return ("train a scalar baseline first: a Bradley-Terry reward model (rlkit train-rm, judge=reward_model) "
                    "or DPO on the policy's own ranked groups (rlkit fit objective=group_dpo)")
        if self.verdict == READY:
            return "ready for a ranking reward: rlkit train-grm on your rankings, or judge=ranking"
        short = [c for c in self.conditions if not c.met and c.number in (2, 6)]
        if short:
            return "calibrate more: " + "; ".join(c.evidence for c in short)
        return "calibrate more: one condition short of the note's 4 (see the lines not met)"

    def to_json(self) -> dict[str, Any]:
        return {"score": self.score, "verdict": self.verdict, "next_step": self.next_step(),
                "exit_code": EXIT_CODES[self.verdict],
                "conditions": [c.__dict__ for c in self.conditions]}


# --- the evidence -------------------------------------------------------------------------------------------------

def _jsonl(path: Path) -> list[dict[str, Any]]:
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except ValueError as exc:
                raise DataError(f"not JSON ({exc.args[0].split(':')[0]})", f"{path}:{number}") from None
    return rows


def run_condition(run: Path | None) -> Condition:
    name = "a plain RLHF loop already works"
    if run is None:
        return Condition(1, name, False, "no run given (run=RUN_DIR: a finished rlkit fit run)")
    if not run.is_dir():
        raise DataError("no such run folder", f"run ({run})")
    if not (run / "summary.json").is_file():
        return Condition(1, name, False, f"{run} has no summary.json: the run did not finish")
    samples = run / "samples.jsonl"
    groups: dict[tuple, list[float]] = defaultdict(list)
    if samples.is_file():
        for row in _jsonl(samples):
            reward = row.get("reward")
            if isinstance(reward, (int, float)) and math.isfinite(reward):
                key = (row.get("step"), json.dumps(row.get("prompt")), json.dumps(row.get("record", {}).get("id")))
                groups[key].append(float(reward))
    sized = [g for g in groups.values() if len(g) > 1]
    if not sized:
        return Condition(1, name, False, f"{run} finished but samples.jsonl has no group of two or more scored "
                                         "completions to measure")
    varying = sum(max(g) - min(g) > 1e-9 for g in sized) / len(sized)
    met = varying >= MIN_VARYING_GROUPS
    return Condition(1, name, met, f"{len(sized)} sampled groups, {varying:.0%} with a reward spread "
                                   f"({'at least' if met else 'under'} {MIN_VARYING_GROUPS:.0%})")


def evaluator_condition(calibration: Path | None, rubric: Rubric) -> Condition:
    name = "an evaluator that can be held fixed"
    anchors = anchor_report(rubric)
    rubric_part = (f"rubric {rubric.name}: {len(rubric.dimensions)} dimensions, "
                   f"{anchors.unanchored_levels} levels without anchors")
    if calibration is None:
        return Condition(2, name, False, f"no calibration (rlkit calibrate writes calibration/calibration.json); "
                                         f"{rubric_part}")
    path = calibration / "calibration.json" if calibration.is_dir() else calibration
    if not path.is_file():
        raise DataError("no such calibration.json (rlkit calibrate writes it in calibrate.output)",
                        f"calibration ({calibration})")
    try:
        round_ = json.loads(path.read_text(encoding="utf-8"))
        threshold = float(round_.get("threshold", DEFAULT_THRESHOLD))
        kappas = {d: v.get("kappa") for d, v in round_["dimensions"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise DataError(f"not a calibration.json of rlkit calibrate ({exc})", str(path)) from None
    if round_.get("rubric", {}).get("name") not in (None, rubric.name):
        raise DataError(f"a calibration of rubric {round_['rubric']['name']!r}, not {rubric.name!r}", str(path))
    low = {d: k for d, k in kappas.items() if not isinstance(k, (int, float)) or not k >= threshold}
    judge = round_.get("judge", "?")
    if low:
        shown = ", ".join(f"{d} {k:.2f}" if isinstance(k, (int, float)) else f"{d} undefined" for d, k in low.items())
        agreement = f"judge {judge} below κ {threshold} on {shown}"
    else:
        agreement = f"judge {judge} at κ >= {threshold} on all {len(kappas)} dimensions"
    met = not low and anchors.unanchored_levels == 0 and anchors.skipped is None
    return Condition(2, name, met, f"{agreement}; {rubric_part}")


def reward_model_condition(reward_model: Path | None, hacked: bool) -> Condition:
    name = "the scalar reward model already reward-hacks in RL"
    if reward_model is None:
        return Condition(4, name, False, "no scalar baseline (reward_model=DIR: rlkit train-rm's folder)")
    info = reward_model / "reward_model.json"
    if not info.is_file():
        raise DataError("not a reward model folder (no reward_model.json: rlkit train-rm saves one)",
                        f"reward_model ({reward_model})")
    try:
        accuracy = float(json.loads(info.read_text(encoding="utf-8"))["metrics"]["accuracy"])
    except (ValueError, KeyError, TypeError) as exc:
        raise DataError(f"unreadable reward_model.json ({exc})", str(info)) from None
    seen = "hacked, as declared (hacked=yes)" if hacked else "not declared hacked (hacked=yes once a run shows it)"
    return Condition(4, name, hacked, f"reward model at {accuracy:.3f} held-out pairwise accuracy; {seen}",
                     declared=hacked)


def labels_condition(labels: Path, rubric: Rubric, min_labels: int, threshold: float) -> Condition:
    from rlkit.evaluation.labeller_agreement import labeller_agreement, labeller_names

    name = "people check the evaluator regularly"
    if not labels.is_file():
        raise DataError("no such labels file", f"labels ({labels})")
    rows = [r for r in _jsonl(labels) if "completion" in r]
    dims = {d.name for d in rubric.dimensions}
    labelled = sum(1 for r in rows if any(v is not None for d, v in (r.get("labels") or {}).items() if d in dims)
                   or any(any(v is not None for v in given.values()) for given in (r.get("labellers") or {}).values()))
    names = labeller_names(rows)
    count_ok = labelled >= min_labels
    if len(names) < 2:
        kappa_part, kappa_ok = f"{max(len(names), 1)} labeller: inter-labeller κ not measured", True
    else:
        pairs = [p for p in labeller_agreement(rows, rubric) if math.isfinite(p.kappa)]
        mean = sum(p.kappa for p in pairs) / len(pairs) if pairs else math.nan
        kappa_ok = mean >= threshold
        kappa_part = (f"{len(names)} labellers, mean inter-labeller κ {mean:.2f} "
                      f"({'at least' if kappa_ok else 'under'} {threshold})")
    return Condition(6, name, count_ok and kappa_ok,
                     f"{labelled} labelled completions ({'at least' if count_ok else 'under'} {min_labels}); "
                     f"{kappa_part}")


def declared_condition(number: int, name: str, value: bool, key: str) -> Condition:
    return Condition(number, name, value, f"declared ({key}=yes)" if value else f"rlkit cannot see it: {key}=yes "
                                                                                 "declares it", declared=value)


def readiness(*, labels: Path, rubric: Rubric, calibration: Path | None = None, run: Path | None = None,
              reward_model: Path | None = None, budget: bool = False, throughput: bool = False,
              hacked: bool = False, min_labels: int = DEFAULT_MIN_LABELS,
              threshold: float = DEFAULT_THRESHOLD) -> Readiness:
    """The six conditions in the note's order, each with its evidence."""
    return Readiness([
        run_condition(run),
        evaluator_condition(calibration, rubric),
        declared_condition(3, "enough inference budget for the evaluator", budget, "budget"),
        reward_model_condition(reward_model, hacked),
        declared_condition(5, "lower training throughput is acceptable", throughput, "throughput"),
        labels_condition(labels, rubric, min_labels, threshold),
    ])
