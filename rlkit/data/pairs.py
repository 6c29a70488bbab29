"""Preference data files: listwise rankings and pairwise (chosen/rejected) records, read, checked and paired.

Two line formats, told apart per line:

* listwise ``{"prompt", "responses": [{"text", "rank"}, ...], "domain"?}``: rank 1 is best, equal ranks tie;
* pairwise ``{"prompt", "chosen", "rejected", "domain"?}``: TRL's preference format, read in any of its forms
  (``chosen``/``rejected`` as text or as assistant messages, or whole conversations with an implicit prompt).

Pairs are written as TRL's ``DPOTrainer`` and ``RewardTrainer`` read them: explicit ``prompt``, and for a chat
prompt, ``chosen``/``rejected`` as one assistant message each (TRL's conversational preference format), since TRL
applies the chat template to prompt and answer together. The functions here are pure (no printing);
``rlkit data pairs`` wires them to files.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pydantic

from rlkit.core.errors import DataError
from rlkit.data.files import Reject, read_jsonl_records, sidecar_paths, write_data_files
from rlkit.data.prompts import prompt_key  # one question in any shape is one prompt, as from-labels keys it
from rlkit.data.records import _prompt_problem, from_trl
from rlkit.text.dedup import SimilarityMethod, pair_similarities
from rlkit.text.similarity import normalize_whitespace

__all__ = ["Reject", "sidecar_paths"]  # re-exported: they were defined here before the other data tools shared them

PairMode = Literal["all", "adjacent"]
DROP_REASONS = ("tie", "identical", "near_duplicate", "duplicate", "conflict")
NO_DOMAIN = "(no domain)"
MAX_LISTED_CONFLICTS = 5


class PairsOptions(pydantic.BaseModel):
    """``rlkit data pairs`` arguments: ``in=`` and ``out=`` files, pairing ``mode``, ``near_duplicate`` threshold
    and the similarity it applies to (``near_duplicate_method``)."""

    model_config = pydantic.ConfigDict(extra="forbid", populate_by_name=True)

    input: Path = pydantic.Field(alias="in")
    out: Path
    mode: PairMode = "all"
    near_duplicate: float = pydantic.Field(default=0.9, gt=0, le=1)
    near_duplicate_method: SimilarityMethod = "ngram"


@dataclass(frozen=True)
class PreferencePair:
    """One preference: ``chosen`` is better than ``rejected`` for ``prompt`` (text or chat messages)."""

    prompt: str | list[dict[str, str]]
    chosen: str
    rejected: str
    domain: str | None = None
    line: int | None = field(default=None, compare=False)  # where it came from, for messages
    reference: str | None = None  # a reference answer, when the data has one (a judge may be shown it)

    def to_json(self) -> dict[str, Any]:
        """The pairwise JSONL record in TRL's preference format (``domain`` and ``reference`` only when set)."""
        if isinstance(self.prompt, str):
            out: dict[str, Any] = {"prompt": self.prompt, "chosen": self.chosen, "rejected": self.rejected}
        else:
            out = {"prompt": self.prompt, "chosen": [{"role": "assistant", "content": self.chosen}],
                   "rejected": [{"role": "assistant", "content": self.rejected}]}
        if self.domain is not None:
            out["domain"] = self.domain
        if self.reference is not None:
            out["reference"] = self.reference
        return out


@dataclass(frozen=True)
class RankedResponse:
    text: str
    rank: int


@dataclass(frozen=True)
class ListwiseRecord:
    """A prompt with several ranked responses (rank 1 = best)."""

    prompt: str | list[dict[str, str]]
    responses: tuple[RankedResponse, ...]
    domain: str | None = None
    line: int | None = field(default=None, compare=False)
    reference: str | None = None


PreferenceRecord = ListwiseRecord | PreferencePair


def _int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _parse_record(record: Any, line: int) -> PreferenceRecord | str:
    """The typed record, or the reason the line is rejected."""
    if not isinstance(record, dict):
        return f"a record must be a JSON object, got {type(record).__name__}"
    if "responses" not in record:
        converted = from_trl(record)  # TRL's conversational and implicit-prompt forms
        if isinstance(converted, str):
            return converted
        record = converted
    if "prompt" not in record:
        return 'missing "prompt"'
    problem = _prompt_problem(record["prompt"])
    if problem:
        return problem
    domain = record.get("domain")
    if domain is not None and not isinstance(domain, str):
        return f'"domain" must be a string, got {type(domain).__name__}'
    reference = record.get("reference")
    if reference is not None and (isinstance(reference, bool) or not isinstance(reference, str | int | float)):
        return f'"reference" must be a string or a number, got {type(reference).__name__}'
    reference = None if reference is None else str(reference)
    if "responses" in record:
        responses = record["responses"]
        if not isinstance(responses, list):
            return f'"responses" must be a list of {{"text", "rank"}}, got {type(responses).__name__}'
        if len(responses) < 2:
            return f'"responses" needs at least 2 responses to compare, got {len(responses)}'
        parsed = []
        for i, r in enumerate(responses):
            if not isinstance(r, dict):
                return f'responses[{i}] must be an object {{"text", "rank"}}, got {type(r).__name__}'
            if not isinstance(r.get("text"), str):
                return f'responses[{i}].text must be a string' if "text" in r else f'responses[{i}]: missing "text"'
            if "rank" not in r:
                return f'responses[{i}]: missing "rank"'
            if not _int(r["rank"]) or r["rank"] < 1:
                return f"responses[{i}].rank must be a positive integer (1 = best), got {json.dumps(r['rank'])}"
            parsed.append(RankedResponse(r["text"], r["rank"]))
        return ListwiseRecord(record["prompt"], tuple(parsed), domain, line, reference)
    if "chosen" in record or "rejected" in record:
        for key in ("chosen", "rejected"):
            if key not in record:
                return f'missing "{key}"'
            if not isinstance(record[key], str):
                return f'"{key}" must be a string, got {type(record[key]).__name__}'
        return PreferencePair(record["prompt"], record["chosen"], record["rejected"], domain, line, reference)
    return 'expected "responses" (listwise) or "chosen" and "rejected" (pairwise)'


def read_preference_records(path: str | Path) -> tuple[list[PreferenceRecord], list[Reject]]:
    """Every good line as a typed record and every bad line as a ``Reject``; blank lines are skipped.

    Raises ``DataError`` only when the file is missing or unreadable; bad lines never stop the good ones.
    """
    return read_jsonl_records(path, _parse_record)


def read_pairs(path: str | Path) -> list[PreferencePair]:
    """A pairwise file as ``PreferencePair``s; any bad or listwise line raises one ``DataError`` naming it."""
    path = Path(path)
    records, rejects = read_preference_records(path)
    rejects += [Reject(r.line or 0, "a listwise record; convert the file with `rlkit data pairs` first", "")
                for r in records if isinstance(r, ListwiseRecord)]
    if rejects:
        rejects.sort(key=lambda r: r.line)
        if len(rejects) == 1:
            raise DataError(rejects[0].reason, f"{path}:{rejects[0].line}")
        shown = "; ".join(f"line {r.line}: {r.reason}" for r in rejects[:10])
        more = f"; and {len(rejects) - 10} more" if len(rejects) > 10 else ""
        raise DataError(f"{len(rejects)} bad lines: {shown}{more}", str(path))
    if not records:
        raise DataError("the file holds no records", str(path))
    return [r for r in records if isinstance(r, PreferencePair)]


@dataclass
class PairsResult:
    """What ``listwise_to_pairs`` kept, dropped (by reason) and found conflicting."""

    pairs: list[PreferencePair]
    dropped: Counter[str]
    conflicts: list[dict[str, Any]]  # one per text pair ordered both ways, with the lines of each order
    pairs_by_domain: Counter[str]


def _candidates(record: ListwiseRecord, mode: PairMode, dropped: Counter[str]) -> list[PreferencePair]:
    """Ordered pairs of one listwise record, best first; tied responses are counted as dropped ties."""
    levels = sorted({r.rank for r in record.responses})
    by_rank: dict[int, list[str]] = defaultdict(list)
    for r in record.responses:
        by_rank[r.rank].append(r.text)
    for texts in by_rank.values():
        dropped["tie"] += len(texts) * (len(texts) - 1) // 2
    # adjacent: each rank level against the next one present (gaps in the numbering do not matter)
    level_pairs = [(a, b) for i, a in enumerate(levels) for b in levels[i + 1:]] if mode == "all" else \
        list(zip(levels, levels[1:], strict=False))
    return [PreferencePair(record.prompt, better, worse, record.domain, record.line, record.reference)
            for hi, lo in level_pairs for better in by_rank[hi] for worse in by_rank[lo]]


def listwise_to_pairs(records: list[PreferenceRecord], mode: PairMode = "all", near_duplicate: float = 0.9,
                      near_duplicate_method: SimilarityMethod = "ngram") -> PairsResult:
    """Pairs from listwise records (pairwise ones pass through), with ties, identical texts, near-duplicates,
    repeated pairs and conflicting labels dropped and counted.

    ``mode="all"``: every two responses with different ranks; ``"adjacent"``: only neighbouring rank levels.
    Identical means equal after whitespace normalisation; near-duplicate means a similarity >= ``near_duplicate``
    under ``near_duplicate_method`` (``rlkit.text.dedup``: ``"ngram"``, character 3-gram Jaccard, or ``"embedding"``,
    sentence-embedding cosine). A pair of texts ordered both ways for the same prompt (anywhere in the
    input) is a conflict: every copy of it is dropped, since the labels cannot both be right.
    """
    if mode not in ("all", "adjacent"):
        raise ValueError(f"mode must be 'all' or 'adjacent', got {mode!r}")
    dropped: Counter[str] = Counter({reason: 0 for reason in DROP_REASONS})
    kept: list[tuple[tuple[str, str, str], PreferencePair]] = []
    seen: set[tuple[str, str, str]] = set()
    lines_by_order: dict[tuple[str, str, str], list[int | None]] = defaultdict(list)
    distinct = []
    for record in records:
        candidates = [record] if isinstance(record, PreferencePair) else _candidates(record, mode, dropped)
        for pair in candidates:
            chosen, rejected = normalize_whitespace(pair.chosen), normalize_whitespace(pair.rejected)
            if chosen == rejected:
                dropped["identical"] += 1
            else:
                distinct.append((pair, chosen, rejected))
    # all at once: an embedding similarity encodes every text in one batch
    similarities = pair_similarities([p.chosen for p, _, _ in distinct], [p.rejected for p, _, _ in distinct],
                                     near_duplicate_method)
    for (pair, chosen, rejected), similarity in zip(distinct, similarities, strict=True):
        if similarity >= near_duplicate:
            dropped["near_duplicate"] += 1
            continue
        key = (prompt_key(pair.prompt), chosen, rejected)
        lines_by_order[key].append(pair.line)
        if key in seen:
            dropped["duplicate"] += 1
            continue
        seen.add(key)
        kept.append((key, pair))
    conflicts = []
    conflicting: set[tuple[str, str, str]] = set()
    for key, pair in kept:
        reverse = (key[0], key[2], key[1])
        if reverse in seen and reverse not in conflicting:
            conflicting.update((key, reverse))
            conflicts.append({"prompt": key[0], "a": pair.chosen, "b": pair.rejected,
                              "a_better_on_lines": lines_by_order[key], "b_better_on_lines": lines_by_order[reverse]})
    pairs = []
    for key, pair in kept:
        if key in conflicting:
            dropped["conflict"] += 1
        else:
            pairs.append(pair)
    by_domain = Counter(p.domain or NO_DOMAIN for p in pairs)
    return PairsResult(pairs, dropped, conflicts, by_domain)


def _length_bias(pairs: list[PreferencePair]) -> dict[str, Any]:
    longer = sum(len(p.chosen) > len(p.rejected) for p in pairs)
    shorter = sum(len(p.chosen) < len(p.rejected) for p in pairs)
    return {"chosen_longer": longer, "chosen_shorter": shorter, "same_length": len(pairs) - longer - shorter,
            "chosen_longer_share": round(longer / len(pairs), 6) if pairs else None}


def pair_report(records: list[PreferenceRecord], rejects: list[Reject], result: PairsResult,
                source: str = "") -> dict[str, Any]:
    """The JSON-ready summary: counts read, written, dropped by reason, conflicts, length bias, domains."""
    report: dict[str, Any] = {
        "input": source,
        "records_read": len(records),
        "listwise_records": sum(isinstance(r, ListwiseRecord) for r in records),
        "pairwise_records": sum(isinstance(r, PreferencePair) for r in records),
        "rejected_lines": len(rejects),
        "pairs_written": len(result.pairs),
        "dropped": dict(result.dropped),
        "conflicting_labels": len(result.conflicts),
        "conflict_examples": result.conflicts[:MAX_LISTED_CONFLICTS],
        # share of pairs whose chosen text has more characters: far from 0.5 means length predicts the label
        "length_bias": _length_bias(result.pairs),
    }
    if any(r.domain is not None for r in records):
        records_by_domain = Counter(r.domain or NO_DOMAIN for r in records)
        report["domains"] = {d: {"records": records_by_domain[d], "pairs": result.pairs_by_domain[d]}
                             for d in sorted(records_by_domain)}
    return report


def write_pair_files(out: Path, result: PairsResult | None, rejects: list[Reject],
                     report: dict[str, Any]) -> dict[str, Path]:
    """Write the pairs (unless ``result`` is None), the report and the rejects, each atomically."""
    written = write_data_files(out, None if result is None else [p.to_json() for p in result.pairs], rejects, report)
    if "records" in written:
        written["pairs"] = written.pop("records")
    return written
