"""What ``rlkit rubric audit`` concludes and where it keeps it: the findings with bootstrap intervals, the trust score
and verdict, the JSON and Markdown card, and the store that ``rlkit fit audit.require=true`` reads.

The store is a folder per rubric version in rlkit's cache, ``$RLKIT_CACHE/audits/<name>-v<version>-<hash>/``
(``~/.cache/rlkit`` without ``$RLKIT_CACHE``): a shipped rubric's folder may not be writable, and keying by the content
hash means an edited rubric is never cleared by its predecessor's audit. Within it, one JSON file per audited
(judge config, records) pair: an audit replaces only its own rerun, so a throwaway audit of 8 records never takes the
place of one of 500; ``audit.require`` accepts, among the audits of the run's own judge config, the one of the most
records, and says which.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlkit.core.atomic import atomic_write_text
from rlkit.core.errors import ConfigError
from rlkit.core.rubric import Rubric, anchor_report
from rlkit.evaluation import audit_checks as checks
from rlkit.evaluation.audit import AuditResult, Probe
from rlkit.evaluation.audit_checks import Estimate

EXAMPLE_CHARS = 160  # a card shows a gamed completion this long at most
PAIRS_NOTE = ("The judge ranks completions within a group: each gamed completion and each ladder rung was ranked "
              "against its original in a pair of two, and Δ reward is its reward minus the original's in that pair.")
STORE_FOLDER = "audits"


@dataclass
class ProbeFinding:
    name: str
    description: str
    applied: int
    gain: Estimate  # share of records whose gamed completion scores strictly higher
    delta: Estimate  # mean reward of gamed minus original
    hackable: bool
    example: dict[str, Any] | None  # the record the trick helped most (or hurt least)
    # a content-free probe's records where the empty answer scores as high as the original: its gamed answer had to
    # beat the empty one too
    against_empty: int = 0


@dataclass
class AuditSummary:
    probes: list[ProbeFinding]
    ladder: Estimate | None
    ladder_means: list[float | None]
    ladder_floor: int  # records whose empty answer scores at least as high as the original
    stability: Estimate | None
    order: Estimate | None
    redundancy: float | None
    alignment: float | None
    components: dict[str, float | None]
    trust: Estimate
    passed: bool
    verdict: str
    ranked: bool = False  # a ranking judge, audited in pairs


def _none(x: float) -> float | None:
    return None if x is None or math.isnan(x) else round(float(x), 4)


def summarize(result: AuditResult) -> AuditSummary:
    """Every check's estimate with its interval (one resampling of the records serves them all), the trust score and
    the verdict."""
    options, n = result.options, len(result.rewards)
    indices = checks.resample_indices(n, options.bootstrap, result.seed)
    # each gamed completion's reward above what it had to beat (the original, or for a content-free probe on a record
    # at the ladder's floor the empty answer too: _bar); a gain where it is above 0
    excess = {probe.name: _margin(result, probe.name) - _bar(result, probe) for probe in result.plan.probes}
    gains = {name: checks.gains(np.zeros(len(e)), e) for name, e in excess.items()}
    findings = []
    for probe in result.plan.probes:
        gain = checks.bootstrap(gains[probe.name], indices)
        findings.append(ProbeFinding(probe.name, probe.description, gain.n, gain,
                                     checks.bootstrap(excess[probe.name], indices),
                                     gain.n > 0 and gain.value >= options.hackable_share,
                                     _example(result, probe.name, excess[probe.name]),
                                     int(np.sum(_against_empty(result, probe)
                                                & ~np.isnan(result.probe_rewards[probe.name])))))
    ladder_outcomes = None
    ladder_means: list[float | None] = []
    floor = 0
    if result.ladder_rewards is not None:
        floor = int(sum(checks.at_floor(row) for row in result.ladder_rewards))
        ladder_outcomes = np.array([checks.ladder_outcome(row) for row in result.ladder_rewards])
        ladder_means = [_none(float(np.nanmean(col))) if not np.isnan(col).all() else None
                        for col in result.ladder_rewards.T]
    redundancy = (1 - len(result.redundant) / result.dimension_pairs) if result.dimension_pairs else None
    alignment = _alignment(result)

    def components(idx: np.ndarray) -> dict[str, float | None]:
        probe_shares = [float(np.nanmean(g[idx])) for g in gains.values() if not np.isnan(g[idx]).all()]
        return {"probes": 1 - max(probe_shares) if probe_shares else None,
                "ladder": _nanmean(ladder_outcomes, idx),
                "stability": _nanmean(result.stability, idx),
                "order": _nanmean(result.order, idx),
                "alignment": alignment, "redundancy": redundancy}

    trust = checks.bootstrap_statistic(lambda idx: checks.trust_score(components(idx)), indices, n)
    summary = AuditSummary(
        probes=findings,
        ladder=checks.bootstrap(ladder_outcomes, indices) if ladder_outcomes is not None else None,
        ladder_means=ladder_means, ladder_floor=floor,
        stability=checks.bootstrap(result.stability, indices) if result.stability is not None else None,
        order=checks.bootstrap(result.order, indices) if result.order is not None else None,
        redundancy=redundancy, alignment=alignment, components=components(np.arange(n)), trust=trust,
        passed=False, verdict="", ranked=result.plan.ranked)
    summary.passed, summary.verdict = verdict(summary, options.fail_under, options.hackable_share)
    return summary


def _nanmean(values: np.ndarray | None, idx: np.ndarray) -> float | None:
    if values is None or np.isnan(values[idx]).all():
        return None
    return float(np.nanmean(values[idx]))


def _alignment(result: AuditResult) -> float | None:
    """Mean quadratic-weighted κ with the human labels over the dimensions that have one, below 0 counted as 0."""
    if result.alignment is None:
        return None
    kappas = [max(0.0, min(1.0, row.kappa)) for row in result.alignment.rows if not math.isnan(row.kappa)]
    return sum(kappas) / len(kappas) if kappas else None


def _originals(result: AuditResult, probe: str) -> np.ndarray:
    """The originals' rewards that ``probe``'s gamed completions are compared with: a ranker's, from their pairs."""
    return result.probe_originals[probe] if result.probe_originals is not None else result.rewards


def _margin(result: AuditResult, probe: str) -> np.ndarray:
    """``[N]``: each gamed completion's reward minus its original's (NaN where either is missing)."""
    return result.probe_rewards[probe] - _originals(result, probe)


def _against_empty(result: AuditResult, probe: Probe) -> np.ndarray:
    """``[N]`` bool: a content-free probe's records whose empty answer scores at least as high as the original (the
    ladder's floor)."""
    if not probe.content_free or result.empty_margin is None:
        return np.zeros(len(result.rewards), dtype=bool)
    return checks.empty_as_high(result.empty_margin)


def _bar(result: AuditResult, probe: Probe) -> np.ndarray:
    """``[N]``: what the gamed completion's margin over the original must exceed to count as a gain. 0, except for a
    content-free probe on a record whose empty answer scores at least as high as the original: there the original
    is no better than saying nothing, so beating it shows nothing (the ladder leaves such records out), and the
    gamed answer must beat the empty answer too. Content-free markup that beats silence is still a gain."""
    against = _against_empty(result, probe)
    if not against.any():
        return np.zeros(len(result.rewards))
    return np.where(against, np.maximum(result.empty_margin, 0.0), 0.0)


def _example(result: AuditResult, probe: str, delta: np.ndarray) -> dict[str, Any] | None:
    """The record ``delta`` (the gamed completion's reward above what it had to beat) is largest on."""
    originals = _originals(result, probe)
    if np.isnan(delta).all():
        return None
    i = int(np.nanargmax(delta))
    return {"record": i + 1, "original": _clip(result.plan.items[i]["completion"]),
            "gamed": _clip(result.plan.gamed[probe][i] or ""), "reward": _none(originals[i]),
            "gamed_reward": _none(result.probe_rewards[probe][i])}


def _clip(text: Any) -> str:
    text = str(text)
    return text if len(text) <= EXAMPLE_CHARS else text[:EXAMPLE_CHARS - 1] + "…"


def verdict(summary: AuditSummary, fail_under: float, hackable_share: float) -> tuple[bool, str]:
    """Passed, and one line saying why."""
    hackable = [p for p in summary.probes if p.hackable]
    trust = summary.trust.value
    if hackable:
        worst = max(hackable, key=lambda p: p.gain.value)
        higher = "is ranked above" if summary.ranked else "scores higher than"
        return False, (f"HACKABLE: {worst.name} ({worst.description}) {higher} the original on "
                       f"{worst.gain.value:.0%} of records [{worst.gain.low:.0%}–{worst.gain.high:.0%}]"
                       + (f", and {len(hackable) - 1} more probe(s)" if len(hackable) > 1 else "")
                       + "; fix the rubric or judge before training")
    if math.isnan(trust) or trust < fail_under:
        present = {k: v for k, v in summary.components.items() if v is not None}
        weakest = min(present, key=lambda k: present[k]) if present else "—"
        return False, (f"FAIL: trust {trust:.2f} is below {fail_under:.2f}; weakest check: {weakest} "
                       f"({present.get(weakest, math.nan):.2f})")
    return True, (f"PASS: trust {summary.trust}; no probe raised the reward on {hackable_share:.0%} or more of "
                  "records")


def audit_warnings(summary: AuditSummary) -> list[str]:
    """What limits the verdict: checks that measured nothing on this sample."""
    out = []
    if summary.ladder is not None and summary.ladder.n == 0:
        out.append("the degradation ladder measured nothing: no original scores above its empty answer; audit "
                   "completions that the rubric rates (audit.records=FILE, or a trained policy)")
    out += [f"probe {p.name} applied to no record" for p in summary.probes if p.applied == 0]
    return out


# --- JSON and the card --------------------------------------------------------------------------------------------


def audit_payload(result: AuditResult, summary: AuditSummary, judge_calls: dict[str, int]) -> dict[str, Any]:
    """Everything the audit found, JSON-ready: what ``audit.json``, the store and the card hold."""
    plan = result.plan
    anchors = anchor_report(result.rubric)
    return {
        "rubric": result.rubric.identity(),
        "judge": result.judge, "aggregator": result.aggregator,
        # a ranking judge ranks each gamed or degraded completion against its original, in a pair
        "ranked_in_pairs": plan.ranked,
        "records": len(result.rewards), "source": plan.source,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "passed": summary.passed, "verdict": summary.verdict, "warnings": audit_warnings(summary),
        "trust": summary.trust.as_dict(), "fail_under": result.options.fail_under,
        "hackable_share": result.options.hackable_share,
        "components": {k: _none(v) if v is not None else None for k, v in summary.components.items()},
        "weights": dict(checks.TRUST_WEIGHTS),
        "judge_calls": judge_calls,  # completions scored, by stage
        "model_calls": None if (model := plan.model_calls()) is None else {
            "calls": model.calls, "tokens_in": model.tokens_in, "tokens_out": model.tokens_out, "cost": model.cost,
            "formula": model.formula},
        "probes": [{"name": p.name, "description": p.description, "applied": p.applied, "gain_share": p.gain.as_dict(),
                    "mean_delta": p.delta.as_dict(), "hackable": p.hackable, "example": p.example,
                    "against_empty": p.against_empty}
                   for p in summary.probes],
        "ladder": None if summary.ladder is None else {
            "rungs": list(checks.LADDER), "mean_reward": summary.ladder_means,
            "never_beats_original": summary.ladder.as_dict(), "empty_scores_as_high": summary.ladder_floor},
        "stability": None if summary.stability is None else {"agreement": summary.stability.as_dict(),
                                                             "why": plan.regrade},
        "order": None if summary.order is None else {"agreement": summary.order.as_dict(), "why": plan.order},
        "redundancy": {"score": _none(summary.redundancy) if summary.redundancy is not None else None,
                       "pairs": [{"first": p.first, "second": p.second, "rho": round(p.rho, 4), "n": p.n}
                                 for p in result.redundant]},
        "alignment": None if result.alignment is None else {
            "score": _none(summary.alignment) if summary.alignment is not None else None,
            "dimensions": [{"name": r.name, "n": r.n, "kappa": _none(r.kappa), "rho": _none(r.spearman),
                            "bias": _none(r.bias)} for r in result.alignment.rows]},
        "skipped": dict(plan.skipped),  # check -> why it does not run for this judge
        # a finding, not a component of the trust score: the design note's anchor advice, counted
        "anchors": {"unanchored_levels": anchors.unanchored_levels,
                    "dimensions_without_negative": anchors.dimensions_without_negative,
                    "summary": anchors.summary(), "findings": anchors.messages(), "skipped": anchors.skipped},
    }


def interval_text(d: dict[str, Any] | None, percent: bool = False) -> str:
    """``0.93 [0.90–0.96]`` from an estimate's JSON (``value``, ``low``, ``high``); ``—`` when there is none."""
    if not d or d.get("value") is None:
        return "—"
    f = (lambda x: f"{x:.0%}") if percent else (lambda x: f"{x:.2f}")
    return f"{f(d['value'])} [{f(d['low'])}–{f(d['high'])}]"


def _md(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ⏎ ")


def render_card(payload: dict[str, Any]) -> str:
    """The Markdown card: verdict, trust, one table per check, 95% bootstrap intervals over records in brackets."""
    rubric = payload["rubric"]
    calls = payload["judge_calls"]
    ranked, skipped = payload.get("ranked_in_pairs", False), payload.get("skipped", {})
    lines = [f"# Rubric audit: {rubric['name']} v{rubric['version']} ({rubric['hash'][:12]})", "",
             f"**{payload['verdict']}**", "",
             *[f"> Warning: {w}\n" for w in payload["warnings"]],
             f"Trust score **{interval_text(payload['trust'])}** (pass mark {payload['fail_under']:.2f}); judge "
             f"`{payload['judge']}`, aggregator `{payload['aggregator']}`, {payload['records']} records"
             + (f" from `{payload['source']}`" if payload["source"] else "")
             + f", {sum(calls.values())} completions scored ({', '.join(f'{k} {v}' for k, v in calls.items() if v)}; "
             + ("no model calls" if payload.get("model_calls") is None else
                f"{payload['model_calls']['calls']:,} model calls, ≈{payload['model_calls']['tokens_in']:,} tokens in")
             + "). Intervals: 95% bootstrap over records.", "",
             *([PAIRS_NOTE, ""] if ranked else []),
             "| check | score | weight |", "|---|---|---|"]
    for key, value in payload["components"].items():
        shown = ("skipped" if key in skipped else "—") if value is None else f"{value:.2f}"
        lines.append(f"| {key} | {shown} | {payload['weights'][key]:g} |")
    higher = "ranked above the original" if ranked else "scores higher"
    lines += ["", "## Probes", "",
              f"A probe is hackable when its gamed completion {'is ' + higher if ranked else higher} on "
              f"{payload['hackable_share']:.0%} or more of the records it applies to.", "",
              f"| probe | what it does | applied | {higher} | mean Δ reward | hackable |",
              "|---|---|---|---|---|---|"]
    for p in payload["probes"]:
        against = p.get("against_empty", 0)
        applied = (f"{p['applied']} ({against} against the empty answer, which scores as high as the original)"
                   if against else str(p["applied"]))
        lines.append(f"| {p['name']} | {_md(p['description'])} | {applied} | "
                     f"{interval_text(p['gain_share'], True)} | {interval_text(p['mean_delta'])} | "
                     f"{'**yes**' if p['hackable'] else 'no'} |")
    examples = [p for p in payload["probes"] if p["example"]]
    if examples:
        lines += ["", "Where each trick did best:", "", "| probe | record | original (reward) | gamed (reward) |",
                  "|---|---|---|---|"]
        for p in examples:
            e = p["example"]
            lines.append(f"| {p['name']} | {e['record']} | {_md(e['original'])} ({_num(e['reward'])}) | "
                         f"{_md(e['gamed'])} ({_num(e['gamed_reward'])}) |")
    ladder = payload["ladder"]
    if ladder:
        lines += ["", "## Degradation ladder", "",
                  "Each rung degrades the one before"
                  + (" and is ranked against the original in a pair" if ranked else "")
                  + ". Records where no degraded answer scores above the original and "
                  f"the empty answer scores below it: {interval_text(ladder['never_beats_original'], True)}"
                  + (f"; on {ladder['empty_scores_as_high']} records the empty answer scores at least as high as the "
                     "original (left out: nothing to descend)" if ladder["empty_scores_as_high"] else "") + ".", "",
                  "| rung | " + " | ".join(ladder["rungs"]) + " |", "|---" * (len(ladder["rungs"]) + 1) + "|",
                  ("| mean Δ reward vs the original | " if ranked else "| mean reward | ")
                  + " | ".join(_num(v) for v in ladder["mean_reward"]) + " |"]
    lines += ["", "## Judge consistency", ""]
    unit = "pair orders" if ranked else "dimension scores"
    for key, label in (("stability", "Re-grade agreement"), ("order", "Dimension-order invariance")):
        block = payload[key]
        if key in skipped:
            lines.append(f"- {label}: skipped ({skipped[key]})")
            continue
        lines.append(f"- {label}: " + (f"{interval_text(block['agreement'], True)} of {unit} unchanged "
                                       f"({block['why']})" if block else "not run (a deterministic, unprompted judge; "
                                       f"audit.{'regrade' if key == 'stability' else 'order'}=true runs it)"))
    pairs = payload["redundancy"]["pairs"]
    lines.append("- Redundant dimensions: " + (
        f"skipped ({skipped['redundancy']})" if "redundancy" in skipped else
        ", ".join(f"{p['first']} ~ {p['second']} (ρ {p['rho']:.2f}, n {p['n']})" for p in pairs) or "none"))
    if "alignment" in skipped:
        lines.append(f"- Agreement with human labels: skipped ({skipped['alignment']})")
    alignment = payload["alignment"]
    if alignment:
        lines += ["", "## Agreement with human labels", "", "| dimension | n | κ | ρ | bias |", "|---|---|---|---|---|"]
        lines += [f"| {d['name']} | {d['n']} | {_num(d['kappa'])} | {_num(d['rho'])} | {_num(d['bias'])} |"
                  for d in alignment["dimensions"]]
    anchors = payload.get("anchors")
    if anchors:
        lines += ["", "## Rubric anchors", "",
                  f"{anchors['summary']} (a finding, not part of the trust score; `rlkit rubric lint` lists them)."]
        if anchors["findings"]:
            lines += [""] + [f"- {_md(line)}" for line in anchors["findings"]]
    return "\n".join(lines) + "\n"


def _num(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def write_outputs(payload: dict[str, Any], out_dir: str | Path) -> tuple[Path, Path]:
    """``audit.json`` and ``audit.md`` in ``out_dir`` (atomic writes)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "audit.json", out / "audit.md"
    atomic_write_text(json_path, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(md_path, render_card(payload))
    return json_path, md_path


# --- the store rlkit fit reads --------------------------------------------------------------------------------------


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text) or "_"


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str, ensure_ascii=False).encode()).hexdigest()


def audited_key(items: list[dict[str, Any]], judge_config: dict[str, Any]) -> dict[str, Any]:
    """What an audit audited, beside the rubric: the records (their number and a hash of their content) and the
    judge config (and its hash), so a stored audit vouches only for the judge it scored with."""
    return {"records": len(items), "records_hash": _digest(items), "judge_config": judge_config,
            "judge_hash": _digest(judge_config)}


def judge_config(cfg: Any) -> dict[str, Any]:
    """The composed config's ``judge`` block, resolved: what an audit's judge is keyed by."""
    from omegaconf import OmegaConf

    return OmegaConf.to_container(cfg.judge, resolve=True)  # type: ignore[return-value]


def store_folder(identity: dict[str, str], root: Path | None = None, folder: str = STORE_FOLDER) -> Path:
    """Where the audits (or, with ``folder``, another kind of stored verdict) of one rubric version (name, version,
    content hash) are stored."""
    from rlkit.lm.models import default_cache_dir

    base = (root or default_cache_dir()) / folder
    return base / f"{_slug(identity['name'])}-v{_slug(identity['version'])}-{identity['hash'][:12]}"


def store_path(identity: dict[str, str], audited: dict[str, Any], root: Path | None = None) -> Path:
    """The file of one audit: its rubric version's folder, named by the judge config's and records' hashes."""
    name = f"judge-{audited['judge_hash'][:12]}-records-{audited['records_hash'][:12]}.json"
    return store_folder(identity, root) / name


def store_audit(payload: dict[str, Any]) -> Path:
    """Store ``payload`` (with its ``audited`` key); it replaces only an earlier audit of the same judge config and
    records."""
    path = store_path(payload["rubric"], payload["audited"])
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    return path


def stored_audits(rubric: Rubric) -> list[tuple[Path, dict[str, Any]]]:
    """Every stored audit of exactly this rubric version and content, with its file."""
    folder = store_folder(rubric.identity())
    out = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            payload = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a damaged record vouches for nothing
        if payload.get("rubric", {}).get("hash") == rubric.content_hash and isinstance(payload.get("audited"), dict):
            out.append((path, payload))
    return out


def strongest_audit(rubric: Rubric, judge_config: dict[str, Any]) -> tuple[Path, dict[str, Any]] | None:
    """The stored audit of this rubric version with ``judge_config`` over the most records (the latest of equals)."""
    judge_hash = _digest(judge_config)
    same = [(path, p) for path, p in stored_audits(rubric) if p["audited"].get("judge_hash") == judge_hash]
    return max(same, key=lambda item: (item[1]["audited"].get("records", 0), item[1].get("created", "")),
               default=None)


def describe_audit(path: Path, payload: dict[str, Any]) -> str:
    return (f"the audit of {payload.get('created', '?')} (judge {payload.get('judge', '?')}, "
            f"{payload['audited'].get('records', '?')} records; {path})")


def require_passed_audit(rubric: Rubric, judge_config: dict[str, Any]) -> str:
    """``audit.require=true``: the stored audit it accepts, described in a line, or one error naming the rubric
    version: no audit of it with this judge config, or the strongest of those (most records) failed."""
    label = f"rubric {rubric.name} v{rubric.version} ({rubric.short_hash})"
    found = strongest_audit(rubric, judge_config)
    if found is None:
        others = sorted({p.get("judge", "?") for _, p in stored_audits(rubric)})
        if others:
            raise ConfigError(f"{label} has stored audits only of other judge configs (judge {', '.join(others)}); "
                              "an audit vouches for the judge it scored with: run `rlkit rubric audit` with this "
                              f"run's judge (looked in {store_folder(rubric.identity())})", "audit.require")
        raise ConfigError(f"{label} has no stored audit; run `rlkit rubric audit` with this rubric first "
                          f"(looked in {store_folder(rubric.identity())})", "audit.require")
    path, payload = found
    if not payload.get("passed"):
        raise ConfigError(f"{label} failed its strongest audit, {describe_audit(path, payload)}: "
                          f"{payload.get('verdict', '')}", "audit.require")
    return f"audit.require: accepted {describe_audit(path, payload)}"
