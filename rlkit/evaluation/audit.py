"""``rlkit rubric audit``: can the run's rubric, judge and aggregator be gamed, and do they notice a broken answer?

Before anything is scored the audit builds every completion it will ask about (:func:`plan_audit`): each record's
original, one gamed version per applicable probe (plugins of kind ``audit_probe``), its degradation ladder, and the
originals again for re-grading and in reverse dimension order where those run. :meth:`AuditPlan.judge_calls` counts
them, so the command prints the bill before paying it. :func:`run_audit` then scores them with the run's own judge
and aggregator (``rlkit score``'s :func:`~rlkit.evaluation.scoring.score_records`) and reduces every check to one
number per record (:mod:`rlkit.evaluation.audit_checks`); the card is written by :mod:`rlkit.evaluation.audit_report`.

A judge that ranks completions within a group (``ranking``, ``grm``: its scores follow its own one-dimension rubric)
is audited in pairs: each gamed completion, and each rung of the ladder, is ranked against its original in a group of
two (the original first in every other pair, so a judge's position bias does not side with one), and a check counts
the pairs whose broken answer the judge puts above the original. What compares dimension scores (dimension-order
invariance, redundancy, alignment with per-dimension human labels) is skipped, with the reason in ``AuditPlan.skipped``.
"""

from __future__ import annotations

import inspect
import math
import zlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from rlkit.config import CheckedConfig, resolve_path
from rlkit.config.schemas import AuditConfig
from rlkit.core.errors import ConfigError, DataError, PluginError
from rlkit.core.registry import Registry
from rlkit.core.rubric import Rubric
from rlkit.evaluation import audit_checks as checks
from rlkit.evaluation.calibration import CalibrationReport, calibrate, read_labels
from rlkit.evaluation.redundancy import RedundantPair, redundant_pairs
from rlkit.evaluation.scoring import score_records
from rlkit.judging.spend import CHARS_PER_TOKEN, CallPlan, JudgeLoad, plan_judge

# fields an audited record drops: what the judge must not see (labels) or what was split into items (completions)
_NOT_JUDGED = ("labels", "completions")

# why a check that compares dimension scores does not run for a judge that ranks a group on one derived dimension
RANKER_SKIPS = {
    "order": "a judge that ranks a group gives each completion one score, its place, not one per dimension; it checks "
             "position bias itself (ranking: each group shuffled across its repetitions, judge/swap_consistency; "
             "grm: both label orders)",
    "redundancy": "a judge that ranks a group scores one dimension: there is no pair of dimensions to compare",
    "alignment": "the labels score dimensions and a judge that ranks a group scores none; `rlkit calibrate "
                 "judge=ranking` measures agreement with human rankings",
}


@dataclass(frozen=True)
class Probe:
    """A built audit probe and the words the card uses for it."""

    name: str
    description: str
    plugin: Any
    content_free: bool = False  # must beat the empty answer too where it scores as high (AuditProbeProtocol)


@dataclass
class AuditPlan:
    """Every completion the audit will score, built before the judge is asked about any of them."""

    items: list[dict[str, Any]]  # one original completion each: prompt, completion, reference, ...
    labelled: list[dict[str, Any]] | None  # the same lines with their human labels (alignment), if any
    probes: list[Probe]
    gamed: dict[str, list[str | None]]  # probe name -> per item, None where it does not apply
    ladders: list[list[str]] | None
    regrade: str | None  # why the originals are scored twice, or None
    order: str | None  # why the dimensions are reversed, or None
    # what the judge asks to score one completion, by its own count (None: it asks no model): the estimate
    # `rlkit validate` prints for a run, so an audit's and a run's bills are counted the same way
    per_completion: CallPlan | None = None
    source: str = ""
    # a judge that ranks a group (``ranking``): every gamed and degraded completion is ranked against its original in
    # a pair, and ``per_completion`` is the plan of one pair
    ranked: bool = False
    skipped: dict[str, str] = field(default_factory=dict)  # check -> why it does not run for this judge
    # each record's empty answer scored on its own: a content-free probe needs it and the ladder (whose last rung
    # it is) does not run
    empties: bool = False

    def judge_calls(self) -> dict[str, int]:
        """Completions the judge will score, by stage (a ranker's: both completions of every pair)."""
        n = len(self.items)
        probes = sum(g is not None for gamed in self.gamed.values() for g in gamed)
        ladder = sum(len(rungs) - 1 for rungs in self.ladders) if self.ladders else 0
        empty = n if self.empties else 0
        if self.ranked:
            return {"probes": 2 * probes, "ladder": 2 * ladder, "empty": 2 * empty,
                    "regrade": 2 * probes if self.regrade else 0}
        return {"originals": n, "probes": probes, "ladder": ladder, "empty": empty,
                "regrade": n if self.regrade else 0,
                "order": n if self.order else 0}

    def model_calls(self) -> CallPlan | None:
        """The model calls, tokens (and cost, with a price) of scoring every completion; None for a judge of rules."""
        if self.per_completion is None:
            return None
        n, one = sum(self.judge_calls().values()), self.per_completion
        unit = "completions"
        if self.ranked:
            n, unit = n // 2, "pairs"
        return CallPlan(one.calls * n, one.tokens_in * n, one.tokens_out * n, f"{n} {unit} × ({one.formula})",
                        None if one.cost is None else one.cost * n)


@dataclass
class AuditResult:
    """Scores and per-record outcomes of every check; ``rlkit.evaluation.audit_report`` turns them into the card."""

    rubric: Rubric
    judge: str
    aggregator: str
    plan: AuditPlan
    rewards: np.ndarray  # [N] the originals' rewards (a ranker's: their mean over the pairs they were ranked in)
    probe_rewards: dict[str, np.ndarray]  # probe -> [N], NaN where it did not apply
    # a ranker's: probe -> [N] the original's reward in the pair it was ranked in beside that probe's gamed version
    probe_originals: dict[str, np.ndarray] | None
    # [N, rungs]; a ranker's: 0 for the original, then each rung's reward minus the original's in their pair
    ladder_rewards: np.ndarray | None
    stability: np.ndarray | None  # [N] share of dimensions scored alike twice (a ranker's: of pairs ordered alike)
    order: np.ndarray | None  # [N] share of dimensions scored alike in reverse order
    redundant: list[RedundantPair]
    dimension_pairs: int
    alignment: CalibrationReport | None
    options: AuditConfig
    seed: int
    extra: dict[str, Any] = field(default_factory=dict)
    # [N] the empty answer's reward minus the original's (a ranker's: in their pair); None when no empty answer was
    # scored (no ladder and no content-free probe)
    empty_margin: np.ndarray | None = None


# --- what is audited --------------------------------------------------------------------------------------------


def read_audit_records(path: str | Path, rubric: Rubric) -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
    """Audited items from a JSONL file (one per completion; a ``completions`` list gives several) and, when its lines
    carry human ``labels`` (``rlkit calibrate``'s format), the labelled lines. Bad lines fail naming file and line."""
    from rlkit.data.records import read_jsonl

    path = resolve_path(str(path))
    records = read_jsonl(path, need_completions=True)
    labelled = read_labels(path, rubric) if any("labels" in r for r in records) else None
    items = []
    for record in records:
        completions = record["completions"] if "completions" in record else [record["completion"]]
        base = {k: v for k, v in record.items() if k not in _NOT_JUDGED}
        items.extend({**base, "completion": c} for c in completions)
    return items, labelled


def sample_audit_records(validated: CheckedConfig, num_prompts: int) -> list[dict[str, Any]]:
    """One completion per prompt sampled by the run's policy (``model``, ``generator``, ``temperature``) on the first
    ``num_prompts`` prompts of the run's data (``data.path``, else the synthetic task)."""
    from rlkit.evaluation.golden import load_checkpoint
    from rlkit.lm.sampling import GenerationRequest

    data, run = validated.data, validated.run
    if validated.records is not None:
        prompts = list(validated.records[:num_prompts])
    else:
        assert data is not None and data.task is not None
        prompts = data.synthetic_records(num_prompts)
    policy, tokenizer, _, _ = load_checkpoint(None, validated)
    generator = validated.plugins["generator"]
    generator.setup(policy, tokenizer)
    texts: list[str] = []
    try:
        for start in range(0, len(prompts), run.batch_size):
            chunk = prompts[start:start + run.batch_size]
            seeds = [run.seed + start + i for i in range(len(chunk))]
            request = GenerationRequest(chunk, 1, run.max_completion_length, run.temperature, False, seeds)
            texts.extend(row[0] for row in generator.generate(policy, tokenizer, request).texts)
    finally:
        generator.close()
    return [{**{k: v for k, v in p.items() if k not in _NOT_JUDGED}, "completion": t}
            for p, t in zip(prompts, texts, strict=True)]


def build_probes(registry: Registry, names: list[str] | None) -> list[Probe]:
    """The probes ``audit.probes`` names (null: every registered one), each built with its params' defaults."""
    available = registry.names("audit_probe")
    chosen = available if names is None else names
    if not chosen:
        raise ConfigError(f"name at least one probe (available: {registry.available('audit_probe')})", "audit.probes")
    probes = []
    for name in chosen:
        try:
            plugin = registry.create("audit_probe", name, {}, where="audit.probes")
        except PluginError as exc:
            raise ConfigError(exc.message, "audit.probes") from None
        description = getattr(plugin, "description", None) or _first_line(registry.get("audit_probe", name).factory)
        probes.append(Probe(name, str(description), plugin, bool(getattr(plugin, "content_free", False))))
    return probes


def _first_line(factory: Any) -> str:
    return (inspect.getdoc(factory) or "").strip().split("\n")[0]


def _model_based(judge: Any) -> bool:
    """A judge that asks a model (its answers may vary between calls, and its prompt lists the dimensions in order)."""
    return getattr(judge, "backend", None) is not None


def is_ranker(validated: CheckedConfig) -> bool:
    """Whether the run's judge ranks a group on its own derived rubric (``ranking``) rather than scoring dimensions."""
    return validated.scored_rubric is not validated.rubric


def plan_audit(validated: CheckedConfig, registry: Registry, items: list[dict[str, Any]],
               labelled: list[dict[str, Any]] | None = None, source: str = "") -> AuditPlan:
    """Every completion to score; nothing is judged yet. Probes run here, so a broken probe fails before any call."""
    ranked = is_ranker(validated)
    if not items:
        raise DataError("no completions to audit", source or "audit.records")
    options, rubric = validated.run.audit, validated.rubric
    probes = build_probes(registry, options.probes)
    gamed: dict[str, list[str | None]] = {}
    for probe in probes:
        out = []
        for i, item in enumerate(items):
            text = probe.plugin.game(dict(item), rubric)
            if text is not None and not isinstance(text, str):
                raise PluginError(f"audit probe {probe.name!r} returned {type(text).__name__} for record {i + 1}; "
                                  "game() returns the gamed completion as text, or None")
            out.append(text)
        gamed[probe.name] = out
    ladders = None
    if options.ladder:
        ladders = [checks.ladder_rungs(str(item["completion"]), _record_seed(validated.run.seed, i))
                   for i, item in enumerate(items)]
    judge = validated.plugins["judge"]
    model = _model_based(judge)
    regrade = _reason(options.regrade, model, "a model-based judge may answer differently twice", "audit.regrade")
    order = None
    skipped: dict[str, str] = {}
    if ranked:
        skipped = {"order": RANKER_SKIPS["order"], "redundancy": RANKER_SKIPS["redundancy"]}
        if labelled is not None:
            skipped["alignment"] = RANKER_SKIPS["alignment"]
            labelled = None
    elif len(rubric.dimensions) > 1:
        order = _reason(options.order, model, "a prompted judge reads the dimensions in order", "audit.order")
    load = JudgeLoad(1, 2 if ranked else 1, prompt_chars=round(np.mean([len(str(i.get("prompt", ""))) for i in items])),
                     completion_tokens=max(1, round(np.mean([len(str(i["completion"])) for i in items])
                                                    / CHARS_PER_TOKEN)))
    return AuditPlan(items, labelled, probes, gamed, ladders, regrade, order, plan_judge(judge, load, rubric), source,
                     ranked=ranked, skipped=skipped,
                     empties=ladders is None and any(p.content_free for p in probes))


def _reason(option: bool | None, model_based: bool, auto: str, key: str) -> str | None:
    if option is None:
        return auto if model_based else None
    return f"{key}=true" if option else None


def _record_seed(seed: int, index: int) -> int:
    return zlib.crc32(f"{seed}:{index}".encode())


# --- scoring -----------------------------------------------------------------------------------------------------


def run_audit(validated: CheckedConfig, registry: Registry, plan: AuditPlan) -> AuditResult:
    """Score everything ``plan`` holds and reduce each check to per-record outcomes."""
    if plan.ranked:
        return _run_ranked_audit(validated, registry, plan)
    options, rubric = validated.run.audit, validated.rubric
    batch_size = validated.run.score.batch_size
    items = plan.items
    n = len(items)
    # originals, gamed and ladder rungs in one pass: the judge batches them as it would a run's completions
    texts: list[tuple[int, str]] = [(i, str(item["completion"])) for i, item in enumerate(items)]
    slots: dict[str, list[int | None]] = {}
    for name, gamed in plan.gamed.items():
        slots[name] = []
        for i, text in enumerate(gamed):
            slots[name].append(None if text is None else len(texts))
            if text is not None:
                texts.append((i, text))
    ladder_slots: list[list[int]] = []
    for i, rungs in enumerate(plan.ladders or []):
        ladder_slots.append([i] + list(range(len(texts), len(texts) + len(rungs) - 1)))
        texts.extend((i, rung) for rung in rungs[1:])
    empty_slots = list(range(len(texts), len(texts) + n)) if plan.empties else []
    texts.extend((i, "") for i in range(len(empty_slots)))
    scored = score_records(replace(validated, records=[{**items[i], "completion": t} for i, t in texts]),
                           batch_size=batch_size, retries=validated.run.score.retries,
                           retry_backoff=validated.run.score.retry_backoff)
    raw = scored.raw_scores.detach().cpu().numpy().astype(float)
    rewards = scored.rewards.detach().cpu().numpy().astype(float)
    probe_rewards = {name: np.array([math.nan if s is None else rewards[s] for s in row])
                     for name, row in slots.items()}
    ladder_rewards = np.array([[rewards[s] for s in row] for row in ladder_slots]) if plan.ladders else None
    empty = ladder_rewards[:, -1] if ladder_rewards is not None else rewards[empty_slots] if empty_slots else None
    originals = raw[:n]
    audited = replace(validated, records=items)
    stability = _regrade(audited, registry, originals) if plan.regrade else None
    order = _reordered(audited, originals) if plan.order else None
    alignment = None
    if plan.labelled is not None:
        alignment = calibrate(plan.labelled, originals, rubric, validated.run.calibrate.threshold,
                              judge=validated.plugin_names["judge"], labels_path=plan.source)
    names = rubric.dimension_names
    return AuditResult(rubric=rubric, judge=validated.plugin_names["judge"],
                       aggregator=validated.plugin_names["aggregator"], plan=plan, rewards=rewards[:n],
                       probe_rewards=probe_rewards, probe_originals=None, ladder_rewards=ladder_rewards,
                       stability=stability, order=order,
                       redundant=redundant_pairs(originals, names), dimension_pairs=len(names) * (len(names) - 1) // 2,
                       alignment=alignment, options=options, seed=validated.run.seed,
                       empty_margin=None if empty is None else empty - rewards[:n])


def _regrade(validated: CheckedConfig, registry: Registry, first: np.ndarray) -> np.ndarray:
    """The originals scored by a second judge built from the same config: no response cache is shared, so a
    stochastic judge shows here how often it changes its mind."""
    again = score_records(replace(validated, plugins={**validated.plugins, "judge": _fresh_judge(validated, registry)}),
                          batch_size=validated.run.score.batch_size)
    return checks.agreement(first, again.raw_scores.detach().cpu().numpy().astype(float))


def _fresh_judge(validated: CheckedConfig, registry: Registry) -> Any:
    """A second judge built from the run's judge config, sharing no response cache with the first."""
    params = validated.judge_config.get("params") or {}
    fresh = registry.create("judge", validated.plugin_names["judge"], params or {}, where="judge.params")
    check = getattr(fresh, "check_rubric", None)
    if callable(check):
        check(validated.rubric)
    return fresh


def reversed_rubric(rubric: Rubric) -> Rubric:
    """The rubric with its dimensions listed in reverse order (everything else as it is)."""
    return rubric.model_copy(update={"dimensions": list(reversed(rubric.dimensions))})


def _reordered(validated: CheckedConfig, first: np.ndarray) -> np.ndarray:
    """The originals scored with the dimensions in reverse order, put back in rubric order and compared."""
    flipped = reversed_rubric(validated.rubric)
    again = score_records(replace(validated, rubric=flipped, scored_rubric=flipped),
                          batch_size=validated.run.score.batch_size)
    return checks.agreement(first, again.raw_scores.detach().cpu().numpy().astype(float)[:, ::-1])


# --- a ranking judge: pairs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Pair:
    item: int  # the audited record
    other: str  # the gamed or degraded completion ranked against the record's original
    swapped: bool  # the other completion shown first


def _pair_records(items: list[dict[str, Any]], pairs: list[_Pair]) -> list[dict[str, Any]]:
    out = []
    for pair in pairs:
        base = {k: v for k, v in items[pair.item].items() if k != "completion"}
        original = str(items[pair.item]["completion"])
        out.append({**base, "completions": [pair.other, original] if pair.swapped else [original, pair.other]})
    return out


def _rank_pairs(validated: CheckedConfig, items: list[dict[str, Any]], pairs: list[_Pair]) -> np.ndarray:
    """``[len(pairs), 2]``: the original's and the other completion's rewards, each pair ranked as one group."""
    if not pairs:
        return np.zeros((0, 2))
    scored = score_records(replace(validated, records=_pair_records(items, pairs)),
                           batch_size=validated.run.score.batch_size, retries=validated.run.score.retries,
                           retry_backoff=validated.run.score.retry_backoff)
    rewards = scored.rewards.detach().cpu().numpy().astype(float).reshape(-1, 2)
    swapped = np.array([p.swapped for p in pairs])
    return np.where(swapped[:, None], rewards[:, ::-1], rewards)


def _run_ranked_audit(validated: CheckedConfig, registry: Registry, plan: AuditPlan) -> AuditResult:
    """A ranking judge's audit: each probe's gamed completion and each ladder rung ranked against the original."""
    items, n = plan.items, len(plan.items)
    pairs: list[_Pair] = []

    def paired(item: int, other: str) -> int:
        """The new pair's slot; every other pair, counted over probes and ladder alike, shows ``other`` first."""
        pairs.append(_Pair(item, other, swapped=len(pairs) % 2 == 1))
        return len(pairs) - 1

    probe_slots = {name: [None if text is None else paired(i, text) for i, text in enumerate(gamed)]
                   for name, gamed in plan.gamed.items()}
    probe_pairs = len(pairs)
    ladder_slots = [[paired(i, rung) for rung in rungs[1:]] for i, rungs in enumerate(plan.ladders or [])]
    empty_slots = [paired(i, "") for i in range(n)] if plan.empties else []
    ranked = _rank_pairs(validated, items, pairs)

    def column(slots: list[int | None], side: int) -> np.ndarray:
        return np.array([math.nan if s is None else ranked[s, side] for s in slots])

    probe_rewards = {name: column(slots, 1) for name, slots in probe_slots.items()}
    probe_originals = {name: column(slots, 0) for name, slots in probe_slots.items()}
    ladder_rewards = None
    if plan.ladders:
        ladder_rewards = np.array([[0.0, *(ranked[s, 1] - ranked[s, 0] for s in row)] for row in ladder_slots])
    # the empty answer's reward minus the original's in their pair, against 0 for the original
    empty = (ladder_rewards[:, -1] if ladder_rewards is not None else
             np.array([ranked[s, 1] - ranked[s, 0] for s in empty_slots]) if empty_slots else None)
    rewards = _per_record([p.item for p in pairs], ranked[:, 0], n)
    stability = None
    if plan.regrade:
        stability = _regrade_pairs(validated, registry, items, pairs[:probe_pairs], ranked[:probe_pairs], n)
    return AuditResult(rubric=validated.rubric, judge=validated.plugin_names["judge"],
                       aggregator=validated.plugin_names["aggregator"], plan=plan, rewards=rewards,
                       probe_rewards=probe_rewards, probe_originals=probe_originals, ladder_rewards=ladder_rewards,
                       stability=stability, order=None, redundant=[], dimension_pairs=0, alignment=None,
                       options=validated.run.audit, seed=validated.run.seed,
                       empty_margin=empty)


def _per_record(owners: list[int], values: np.ndarray, n: int) -> np.ndarray:
    """``[n]``: the mean of ``values`` over the entries each record owns (NaN left out; NaN where none is left)."""
    sums, counts = np.zeros(n), np.zeros(n)
    for owner, value in zip(owners, values, strict=True):
        if not math.isnan(value):
            sums[owner] += value
            counts[owner] += 1
    return np.where(counts > 0, sums / np.maximum(counts, 1), math.nan)


def _regrade_pairs(validated: CheckedConfig, registry: Registry, items: list[dict[str, Any]], pairs: list[_Pair],
                   first: np.ndarray, n: int) -> np.ndarray:
    """``[n]``: per record, the share of its probe pairs a second judge built from the same config orders as the first
    did (the gamed one above, below, or tied); NaN where no pair was ranked both times."""
    again = _rank_pairs(replace(validated, plugins={**validated.plugins, "judge": _fresh_judge(validated, registry)}),
                        items, pairs)
    before, after = np.sign(first[:, 1] - first[:, 0]), np.sign(again[:, 1] - again[:, 0])
    before[np.abs(first[:, 1] - first[:, 0]) <= checks.TOLERANCE] = 0.0
    after[np.abs(again[:, 1] - again[:, 0]) <= checks.TOLERANCE] = 0.0
    same = np.where(np.isnan(before) | np.isnan(after), math.nan, (before == after).astype(float))
    return _per_record([p.item for p in pairs], same, n)
