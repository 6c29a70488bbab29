"""Rubrics that evolve during training (``rubric.evolve``): a per-prompt buffer of criteria the judge's backend writes
from the contrast between the best and the worst completion of each prompt's group.

Modelled on open-instruct's evolving rubrics (allenai/open-instruct, ``open_instruct/rubrics/``: the prompt of
``prompts.py``'s ``INSTANCE_WISE_RUBRIC_GENERATION_PROMPT``, ``rubric_utils.py``'s per-query buffer of persistent,
active and inactive rubrics, ``metrics.py``'s ``filter_rubric_buffer`` switching zero-variance rubrics off, and
``evolving_rubric_step.py``'s cap on active rubrics, oldest out first), with three differences:

* the criteria are the per-record rubric format of ``rlkit rubric generate`` (binary, tagged essential / important /
  optional / pitfall), validated as any rubric is, and scored by ``rubric=per_record`` beside the record's own;
* saturation is rlkit's own statistic (``rlkit.reward.diagnostics.saturated_groups``), counted over
  ``retire_after`` rounds;
* it is versioned: every change to a prompt's criteria is a new version of its rubric (``<base version>+evolve.<n>``,
  a changelog entry storing the content hash) with a diff (``rlkit.core.rubric_diff``), so a run can say which rubric
  scored which step.

A malformed answer is skipped and counted (``rubric/evolve_malformed``), never a crash and never a silent change.
The record's own criteria are never retired; they are what held-out and golden-set scores keep using.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlkit.config.schemas import RubricEvolveConfig
from rlkit.core.errors import RubricError
from rlkit.core.package_files import resolve_path
from rlkit.core.rubric import CATEGORY_WEIGHTS, MAX_CRITERIA, Rubric, load_rubric, rubric_from_dict
from rlkit.core.rubric_diff import RubricDiff, diff_rubrics
from rlkit.core.templates import render_file, template_hash
from rlkit.data.records import prompt_text
from rlkit.evaluation.rubric_generation import GenerateOptions, ask_for_criteria, criterion_dimension, rubric_id
from rlkit.reward.diagnostics import saturated_groups

EVOLVED_PREFIX = "evolved_"
# [G, C] criteria answers (1 met / 0 not / NaN unscored) of one prompt's completions against a criteria rubric
ScoreCriteria = Callable[[dict[str, Any], Sequence[str], Rubric], torch.Tensor]


@dataclass
class EvolvedCriterion:
    """One criterion the backend wrote; ``name`` is unique within its prompt's rubric for the whole run."""

    name: str
    text: str
    category: str
    added_step: int
    saturated_rounds: int = 0  # evolve rounds in a row in which its answers did not vary within the group
    retired_step: int | None = None
    retired_because: str | None = None  # "saturated", or "cap" (the oldest out when max_active is reached)


@dataclass
class PromptCriteria:
    """One prompt's buffer: its own rubric (``base_ref`` as the record names it, pinned by ``base_hash``), the active
    evolved criteria (oldest first), the retired ones, and the changelog of the versions written so far."""

    rubric_id: str
    base_ref: str | dict[str, Any]
    base_hash: str
    active: list[EvolvedCriterion] = field(default_factory=list)
    retired: list[EvolvedCriterion] = field(default_factory=list)
    versions: list[dict[str, str]] = field(default_factory=list)  # changelog entries: version, date, note, hash
    next_number: int = 1

    @property
    def version(self) -> str | None:
        """The current evolved version, or None while the record's own rubric is unchanged."""
        return self.versions[-1]["version"] if self.versions else None


@dataclass
class RubricVersion:
    """A change to one prompt's rubric: the versions before and after, and what differs."""

    step: int
    rubric_id: str
    old: Rubric
    new: Rubric
    data: dict[str, Any]  # the new rubric as a mapping (what the run directory and the records hold)
    diff: RubricDiff
    added: list[EvolvedCriterion]
    retired: list[EvolvedCriterion]

    def row(self) -> dict[str, Any]:
        """One line of ``rubrics/versions.jsonl``."""
        return {"step": self.step, "rubric_id": self.rubric_id, "name": self.new.name, "version": self.new.version,
                "hash": self.new.content_hash, "previous_version": self.old.version,
                "previous_hash": self.old.content_hash,
                "added": [{"name": c.name, "category": c.category, "criterion": c.text} for c in self.added],
                "retired": [{"name": c.name, "because": c.retired_because, "criterion": c.text}
                            for c in self.retired]}


@dataclass
class EvolveRound:
    """What one round did: the new versions, the answers that could not be used, and its metrics."""

    step: int
    versions: list[RubricVersion] = field(default_factory=list)
    malformed: list[dict[str, Any]] = field(default_factory=list)  # step, rubric_id, problem
    counts: dict[str, float] = field(default_factory=dict)

    def metrics(self, buffer: RubricBuffer) -> dict[str, float]:
        active = [len(p.active) for p in buffer.prompts.values()]
        return {**{f"rubric/evolve_{k}": float(v) for k, v in self.counts.items()},
                "rubric/evolve_versions": float(len(self.versions)),
                "rubric/evolve_active_mean": sum(active) / len(active) if active else 0.0,
                "rubric/evolve_prompts": float(len(buffer.prompts)),
                "rubric/evolve_malformed_total": float(buffer.malformed_total)}


def _changed(entry: PromptCriteria, now: Rubric) -> RubricError:
    """A record's own rubric that no longer is the one its evolved criteria extend: an error, not a silent change."""
    ref = entry.base_ref
    return RubricError(f"the rubric of prompt {entry.rubric_id} changed since its evolved criteria were written "
                       f"(the buffer pins {entry.base_hash[:12]}, it now hashes to {now.short_hash}); restore it or "
                       "start the run afresh", ref if isinstance(ref, str) else None)


def _normalised(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.casefold()).split())


class RubricBuffer:
    """Every prompt's evolved criteria, keyed by ``rubric_id`` (the record's ``id``, else a hash of its prompt)."""

    def __init__(self, options: RubricEvolveConfig) -> None:
        self.options = options
        self.prompts: dict[str, PromptCriteria] = {}
        self.malformed_total = 0
        self._bases: dict[str, Rubric] = {}  # base_hash -> the record's own rubric
        self._files: dict[Any, Rubric] = {}  # (path, mtime, size) -> the rubric read from it
        self._current: dict[tuple[str, str], tuple[Rubric, dict[str, Any]]] = {}  # (id, version) -> rubric, data

    # --- the rubric each record is scored against --------------------------------------------------------------

    def base_of(self, record: dict[str, Any]) -> Rubric | None:
        """The record's own criteria rubric; None when it names none the judge could read (the judge says why)."""
        ref = record.get("rubric")
        try:
            if isinstance(ref, str) and ref:
                path = resolve_path(ref)
                stat = path.stat() if path.is_file() else None
                # read again only when the file changed: the loop asks for every record of every step
                key = (str(path), stat.st_mtime_ns, stat.st_size) if stat is not None else None
                if key is None or key not in self._files:
                    self._files[key] = load_rubric(path)
                rubric = self._files[key]
            elif isinstance(ref, dict):
                rubric = rubric_from_dict(ref, f"record {rubric_id(record)}: rubric")
            else:
                return None
        except RubricError:
            return None
        if not rubric.is_criteria_rubric:
            return None
        pinned = record.get("rubric_hash")
        if isinstance(pinned, str) and pinned and not rubric.content_hash.startswith(pinned):
            return None  # stale: left to the judge, whose error names the file
        self._bases.setdefault(rubric.content_hash, rubric)
        return rubric

    def _base(self, entry: PromptCriteria) -> Rubric:
        if entry.base_hash not in self._bases:
            ref = entry.base_ref
            rubric = load_rubric(resolve_path(ref)) if isinstance(ref, str) else \
                rubric_from_dict(ref, f"record {entry.rubric_id}: rubric")
            if rubric.content_hash != entry.base_hash:
                raise _changed(entry, rubric)
            self._bases[entry.base_hash] = rubric
        return self._bases[entry.base_hash]

    def current(self, entry: PromptCriteria) -> tuple[Rubric, dict[str, Any] | None]:
        """The prompt's rubric now: its own, or its latest evolved version and that version's mapping."""
        base = self._base(entry)
        if entry.version is None:
            return base, None
        key = (entry.rubric_id, entry.version)
        if key not in self._current:
            data = self._data(entry, base, entry.active, entry.versions)
            self._current[key] = (rubric_from_dict(data, f"evolved rubric {entry.rubric_id}"), data)
        return self._current[key]

    def _data(self, entry: PromptCriteria, base: Rubric, active: list[EvolvedCriterion],
              versions: list[dict[str, str]]) -> dict[str, Any]:
        """The record's own criteria, then the active evolved ones, under the latest of ``versions``."""
        own = [d.model_dump(mode="json", exclude_none=True) for d in base.dimensions]
        evolved = [criterion_dimension(c.name, c.text, c.category) for c in active]
        changelog = [e.model_dump(exclude_none=True) for e in base.changelog] + [dict(v) for v in versions]
        return {"name": base.name, "version": versions[-1]["version"], "description": base.description,
                "changelog": changelog, "dimensions": own + evolved}

    def overlay(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``records`` with each evolved prompt's current rubric in place of its own (copies; the data is untouched).
        The training loop hands these to the judge; held-out and golden-set scoring never see them."""
        out = []
        for record in records:
            entry = self.prompts.get(rubric_id(record)) if "prompt" in record else None
            base = self.base_of(record) if entry is not None and entry.version is not None else None
            if base is None:
                out.append(record)
                continue
            if base.content_hash != entry.base_hash:
                raise _changed(entry, base)
            rubric, data = self.current(entry)
            out.append({**record, "rubric": data, "rubric_hash": rubric.content_hash})
        return out

    # --- one round ---------------------------------------------------------------------------------------------

    def cap(self, base: Rubric) -> int:
        """Evolved criteria a prompt may have active: ``max_active``, within a per-prompt rubric's criteria limit."""
        return max(min(self.options.max_active, MAX_CRITERIA - len(base.dimensions)), 0)

    def evolve(self, step: int, records: Sequence[dict[str, Any]], completions: Sequence[Sequence[str]],
               rewards: torch.Tensor, backend: Any, score: ScoreCriteria) -> EvolveRound:
        """Retire saturated criteria and ask ``backend`` for new ones, for each distinct prompt of the step."""
        done = EvolveRound(step, counts=dict.fromkeys(("added", "retired", "malformed", "duplicates", "no_contrast",
                                                        "skipped"), 0))
        chats: list[list[dict[str, str]]] = []
        asked: list[tuple[PromptCriteria, list[EvolvedCriterion]]] = []  # (prompt, criteria retired this round)
        seen: set[str] = set()
        for i, record in enumerate(records):
            rid = rubric_id(record)
            if rid in seen:
                continue
            seen.add(rid)
            base = self.base_of(record)
            if base is None or self.cap(base) == 0:  # no rubric of its own to extend, or no room left in it
                done.counts["skipped"] += 1
                continue
            entry = self.prompts.get(rid)
            if entry is None:
                entry = PromptCriteria(rid, record["rubric"], base.content_hash)
            elif entry.base_hash != base.content_hash:
                raise _changed(entry, base)
            retired = self._retire_saturated(entry, step, record, completions[i], score)
            chat = self._contrast_chat(entry, record, completions[i], rewards[i])
            if chat is None:
                done.counts["no_contrast"] += 1
                if retired:
                    self._commit(done, entry, [], retired)
                continue
            chats.append(chat)
            asked.append((entry, retired))
        options = GenerateOptions(output=Path("."), min_criteria=0, max_criteria=self.options.max_new,
                                  retries=self.options.retries)
        answers = ask_for_criteria(backend, chats, options, require_positive=False) if chats else []
        for (entry, retired), answer in zip(asked, answers, strict=True):
            added: list[EvolvedCriterion] = []
            if isinstance(answer, str):
                done.counts["malformed"] += 1
                self.malformed_total += 1
                done.malformed.append({"step": step, "rubric_id": entry.rubric_id, "problem": answer})
            else:
                added = self._new_criteria(entry, answer, step, done)
            self._commit(done, entry, added, retired)
        return done

    def _retire_saturated(self, entry: PromptCriteria, step: int, record: dict[str, Any],
                          completions: Sequence[str], score: ScoreCriteria) -> list[EvolvedCriterion]:
        """Count, for each active evolved criterion, the rounds its answers have not varied within the group; retire
        it after ``retire_after`` such rounds. (The judge has just asked this rubric of these completions: its cache
        answers.)"""
        if not entry.active:
            return []
        rubric, _ = self.current(entry)
        met = score(record, completions, rubric)  # [G, C]
        names = rubric.dimension_names
        columns = [names.index(c.name) for c in entry.active]
        evolved = met[:, columns].unsqueeze(0).to(torch.float64)  # [1, G, A]
        saturated = saturated_groups(evolved, self.options.saturation_share)[0]
        scored = (~torch.isnan(evolved[0])).sum(dim=0)
        retired = []
        for c, flat, n in zip(entry.active, saturated.tolist(), scored.tolist(), strict=True):
            if n < 2:
                continue  # fewer than two answers say nothing about variation (a judge that failed, say)
            c.saturated_rounds = c.saturated_rounds + 1 if flat else 0
            if c.saturated_rounds >= self.options.retire_after:
                retired.append(c)
        return retired

    def _contrast_chat(self, entry: PromptCriteria, record: dict[str, Any], completions: Sequence[str],
                       rewards: torch.Tensor) -> list[dict[str, str]] | None:
        """The request for new criteria: the best-rewarded completion against the worst (two differing texts when
        the rubric scores them alike); None when every completion reads the same."""
        values = [float(r) for r in rewards.tolist()]
        ranked = sorted((j for j, v in enumerate(values) if not math.isnan(v)), key=lambda j: -values[j])
        if not ranked:
            ranked = list(range(len(completions)))
        best = ranked[0]
        worst = next((j for j in reversed(ranked) if completions[j] != completions[best]), None)
        if worst is None:
            worst = next((j for j in range(len(completions)) if completions[j] != completions[best]), None)
        if worst is None:
            return None
        best_reward = values[best] if not math.isnan(values[best]) else 0.0
        worst_reward = values[worst] if not math.isnan(values[worst]) else 0.0
        base = self._base(entry)
        criteria = [(d.description, d.category) for d in base.dimensions] + \
                   [(c.text, c.category) for c in entry.active]
        text = render_file(self.options.template, "rubric.evolve.template", prompt=prompt_text(record["prompt"]),
                           best=completions[best], worst=completions[worst], best_reward=best_reward,
                           worst_reward=worst_reward, tied=best_reward == worst_reward, criteria=criteria,
                           retired=[c.text for c in entry.retired], max_new=self.options.max_new,
                           weights=CATEGORY_WEIGHTS)
        return [{"role": "user", "content": text}]

    def _new_criteria(self, entry: PromptCriteria, answer: list[tuple[str, str]], step: int,
                      done: EvolveRound) -> list[EvolvedCriterion]:
        """The answer's criteria that repeat none already written for the prompt (its own, active or retired)."""
        base = self._base(entry)
        known = {_normalised(d.description) for d in base.dimensions}
        known |= {_normalised(c.text) for c in [*entry.active, *entry.retired]}
        added = []
        for text, category in answer:
            if _normalised(text) in known:
                done.counts["duplicates"] += 1
                continue
            known.add(_normalised(text))
            added.append(EvolvedCriterion(f"{EVOLVED_PREFIX}{entry.next_number}", text, category, step))
            entry.next_number += 1
        return added

    def _commit(self, done: EvolveRound, entry: PromptCriteria, added: list[EvolvedCriterion],
                retired: list[EvolvedCriterion]) -> None:
        """Apply the round's change to one prompt as a new version; the oldest active criteria retire past the cap
        (the record's own criteria and the evolved ones together stay within a per-prompt rubric's limit)."""
        old, _ = self.current(entry)
        base = self._base(entry)
        active = [c for c in entry.active if c not in retired] + added
        capped = active[:max(len(active) - self.cap(base), 0)]  # oldest first: open-instruct's _cap_active_rubrics
        active = active[len(capped):]
        if not added and not retired and not capped:
            return
        number = len(entry.versions) + 1
        version = {"version": f"{base.version}+evolve.{number}", "date": datetime.date.today().isoformat(),
                   "note": f"step {done.step}: +{len(added)} criteria, -{len(retired) + len(capped)} retired (written "
                           "by the judge's backend from within-group contrasts, template "
                           f"{template_hash(self.options.template)[:12]})"}
        try:
            # the hash leaves the changelog out: the content first, then the entry that stores its hash
            unhashed = self._data(entry, base, active, [*entry.versions, version])
            version["hash"] = rubric_from_dict(unhashed, "<evolved>", verify_changelog=False).content_hash
            data = self._data(entry, base, active, [*entry.versions, version])
            new = rubric_from_dict(data, f"evolved rubric {entry.rubric_id}")
        except RubricError as exc:  # never a silent change: this prompt keeps its rubric, and the problem is counted
            done.counts["malformed"] += 1
            self.malformed_total += 1
            done.malformed.append({"step": done.step, "rubric_id": entry.rubric_id, "problem": exc.message})
            return
        for c in retired:
            c.retired_step, c.retired_because = done.step, "saturated"
        for c in capped:
            c.retired_step, c.retired_because = done.step, "cap"
        gone = [*retired, *capped]
        entry.active = active
        entry.retired.extend(gone)
        entry.versions.append(version)
        self.prompts[entry.rubric_id] = entry
        self._current[(entry.rubric_id, version["version"])] = (new, data)
        done.counts["added"] += len(added)
        done.counts["retired"] += len(gone)
        done.versions.append(RubricVersion(done.step, entry.rubric_id, old, new, data, diff_rubrics(old, new),
                                           added, gone))

    # --- checkpoints -------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """Plain JSON: what a checkpoint holds and ``rubrics/buffer.json`` shows."""
        return {"prompts": {rid: asdict(entry) for rid, entry in self.prompts.items()},
                "malformed_total": self.malformed_total}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        def criteria(items: list[dict[str, Any]]) -> list[EvolvedCriterion]:
            return [EvolvedCriterion(**item) for item in items]

        self.prompts = {}
        for rid, entry in state.get("prompts", {}).items():
            self.prompts[rid] = PromptCriteria(
                rubric_id=entry["rubric_id"], base_ref=entry["base_ref"], base_hash=entry["base_hash"],
                active=criteria(entry["active"]), retired=criteria(entry["retired"]),
                versions=[dict(v) for v in entry["versions"]], next_number=entry["next_number"])
        self.malformed_total = int(state.get("malformed_total", 0))
        self._current.clear()


def diff_json(diff: RubricDiff) -> dict[str, Any]:
    """A rubric diff as plain JSON (what ``rubrics/<id>/<old>..<new>.diff.json`` holds)."""
    return {"old_version": diff.old_version, "new_version": diff.new_version, "old_hash": diff.old_hash,
            "new_hash": diff.new_hash, "added": diff.added, "removed": diff.removed,
            "changed": [{"name": c.name, "changes": [asdict(f) for f in c.changes]} for c in diff.changed],
            "rubric_changes": [asdict(f) for f in diff.rubric_changes]}


def dumps_line(row: dict[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False, default=str)
