"""``rlkit rubric tighten RUN_DIR``: a harder version of the run's rubric for each dimension the run saturated.

Which dimensions saturated is read from what every run writes, with the thresholds the doctor already uses:

* ``rewards/<dimension>/saturated_groups`` in ``metrics.jsonl`` (the host's one detector,
  :func:`rlkit.reward.diagnostics.saturated_groups`; the report's saturation timeline plots it), averaged over the
  last :data:`rlkit.runs.signals.WINDOW` steps: saturated above ``min_share`` (0.5, the doctor's
  ``zero_advantage`` threshold: more than half of the groups give no signal on it);
* and *at its ceiling*: most of the window's logged samples (``samples.jsonl``) score the highest value the run ever
  gave the dimension. A dimension flat at its floor is too hard, not too easy: it is named and left alone. The
  ceiling is the run's, not the range's top: a rubric whose checks cannot reach 5 (reward_hacking_v2's clarity
  stops at 3.29) saturates where its completions stop.

The dimension's *top samples* are the window's samples at that ceiling; the *others*, the samples of the run below
it. The rules, applied to each saturated dimension (the rule path: no model is asked):

1. **Raise a level** (:func:`tighten_length`): a ``length`` check in ``chars`` or ``words`` gets as its ``max`` (a
   ``min``-only check: its ``min``) the top samples' size that splits the most of the window's *saturated groups*
   (a step's logged completions of one prompt, all at the ceiling), some passing and some not, so those groups
   spread again; among levels splitting as many, the one passing closest to half of the top samples. Kept only if it
   is stricter than the old level and splits at least one such group: a level that only sets prompts apart (short
   sums pass, long ones fail, each group alike inside) gives no group an advantage (a saturated SmolLM2 run's
   restated sums: a pooled median of 11 characters split 2 of 38 groups, benchmarks/README.md). A run whose
   logged samples hold no two completions of one prompt in one step falls back to the pooled top samples' median.
   ``tokens`` need the policy's tokenizer and are left.
   A ``match`` check in mode ``numeric`` or ``contains`` (:func:`tighten_match`) is raised to ``exact``: the answer
   is the reference and nothing around it (reward_hacking_v2's correctness: a sum padded with words passes
   ``numeric``, not ``exact``). Kept only if ``exact`` splits the top samples (compared as the rule judge does,
   case-folded with punctuation as spaces) and fails none that another dimension already scores below its ceiling
   (padding another dimension penalises: penalised twice, a padded right answer falls below filler).
2. **The shared pattern as a negative anchor** (:func:`shared_words`): the words (letters only, case-folded) found in
   at least half of the top samples and in at least 25 points fewer of the others; up to five, most distinctive
   first. They become a negative example on the level below the top (binary: level 0; a scale: the highest anchored
   level below the top, else its middle), and, on a dimension the rule judge scores (it reads checks, never
   anchors), an ``absent: true`` regex check on them weighing one more than the dimension's other checks together,
   so an answer with the pattern always scores below one without (reward_hacking_v2.yaml's clarity fix: 4 of 7;
   a lighter check left the template ahead and the audit's ``enumerated_template`` probe flagged it). The check
   reads the largest subset of the words that at least ``MIN_PATTERN_PASS`` of the window's samples lack
   (:func:`passing_words`), and there is none where every subset fails nearly all of them: a word in nearly every
   answer (``an`` in a SmolLM2 run's definitions) fails whole groups alike, trading the ceiling for a floor
   (benchmarks/README.md: an any-of check with ``an`` in it left one of 320 training samples passing). And the
   check needs the top samples' score to rest on its words (:func:`pattern_carries`): taken out of them, the score
   falls under the run's rubric (the rule judge rescoring them; the command passes it). A template the checks count
   does; a phrase the top answers share beside what the checks read does not, and a check against it teaches the
   policy to say the phrase another way (a SmolLM2 run's "An example sentence using X is:", whose examples used the
   word: the continued runs dropped `using`, for "An example sentence:" or "with the word", and their examples used
   the word as often as before, benchmarks/README.md). Such words get neither check nor negative example.
   Where the top samples share no word, their shared *shape* (:data:`SHAPES`: a bare number, no letters, one line;
   the same share and lift) becomes the negative example, an anchor only (:func:`add_shape` says why no check), for
   a model judge to read. Not on a dimension with a ``match`` check (the answer against the record, as a correctness
   dimension's): what it scores is not a shape, and a negative example of its right answers' shape on the level
   below the top would tell a model judge that right answers are wrong. Nor where the rubric's own positive example
   above that level has the shape (reward_hacking_v2's clarity gives "7" at level 5; chat_arithmetic's `stops` "42"
   at 1): the shape is what the rubric asks for, and the saturation is the policy doing it.

3. **A split** (:mod:`rlkit.evaluation.rubric_splitting`): a dimension whose top samples still differ in something
   a rule measures, and that measures two things (its checks two properties, or its top anchor two qualities joined
   by "and"), becomes two dimensions with the total weight kept; a dimension left whole is said with why.

With a model backend (``tighten.backend``, :mod:`rlkit.evaluation.rubric_tightening_model`) the model writes every
saturated dimension's anchors (each part's, where it is split) from its top and lowest samples, in place of rule 2's
negative example; the checks stay the rules'.

A dimension no rule changes is said with why (its checks have no level to raise, its top samples share no pattern).
The proposal is the same rubric name with the version bumped (``X.Y`` → ``X+1.0``, else ``<version>+tighten.1``)
and a changelog entry naming each change and carrying the new content hash.
"""

from __future__ import annotations

import copy
import datetime
import itertools
import json
import math
import re
import statistics
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError, DataError
from rlkit.core.rubric import Dimension, Rubric, load_rubric, rubric_from_dict
from rlkit.evaluation.rubric_splitting import Split, propose_split
from rlkit.evaluation.rubric_tightening_model import MAX_SAMPLES as MODEL_SHOWN
from rlkit.evaluation.rubric_tightening_model import AnchorRequest, levels_of
from rlkit.runs.history import METRICS_FILE, read_history
from rlkit.runs.signals import WINDOW
from rlkit.runs.triage import metric_series, read_samples

SAMPLES_FILE = "samples.jsonl"
MIN_SHARE = 0.5           # the doctor's zero-advantage threshold (rlkit.runs.triage: zero_advantage_share)
AT_CEILING = 0.5          # a saturated dimension is at its ceiling when this share of the window's samples is
PATTERN_SHARE = 0.5       # a shared word is in at least this share of the top samples ...
PATTERN_LIFT = 0.25       # ... and this much more often than in the others (rlkit's choice: a clear majority)
MAX_PATTERN_WORDS = 5
MIN_PATTERN_PASS = 0.1    # a pattern check passes at least this share of the window's samples (rlkit's choice: a
                          # tiny reward-hacking v1 run's plain answers, 50% of its window, pass; a SmolLM2 definitions
                          # run's four shared words, which 3.7% of its window lack, do not)
EXAMPLE_CHARS = 120
LOW_SAMPLES = 10          # the lowest-scored samples a model backend is shown (at most; it shows fewer)
_LETTER_WORD = re.compile(r"[^\W\d_]+")


@dataclass(frozen=True)
class Saturation:
    """One dimension over the last window: its saturated share, where it sits, and the samples it rests on."""

    name: str
    share: float            # mean of rewards/<name>/saturated_groups over the window
    steps: tuple[int, int]  # the window's first and last step
    ceiling: float | None   # the highest score the run's samples got on it (None: no sample scored it)
    at_ceiling: float       # share of the window's scored samples at that ceiling
    top: list[str]          # distinct completions of the window at the ceiling
    others: list[str]       # distinct completions of the run below it
    # the window's (completion, its record) pairs at the ceiling, each once: what a match check compares
    top_pairs: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    # the top samples another dimension scores below its own ceiling: marked down already
    marked_down: frozenset[str] = frozenset()
    # what a model backend writes anchors from: (prompt, completion) at the ceiling, and the run's lowest-scored
    # (prompt, completion, score), lowest first; each completion once
    top_samples: list[tuple[str, str]] = field(default_factory=list)
    low_samples: list[tuple[str, str, float]] = field(default_factory=list)
    # the window's saturated groups at the ceiling: each group's logged completions (a step's samples of one prompt,
    # two or more, all at the ceiling); what a raised level must split to give a group an advantage again
    top_groups: list[list[str]] = field(default_factory=list)
    # every logged completion of the window, whatever its score: what a pattern check must let some of pass
    window: list[str] = field(default_factory=list)

    @property
    def at_top(self) -> bool:
        return self.ceiling is not None and self.at_ceiling >= AT_CEILING


@dataclass
class Proposal:
    """What :func:`propose` found: the saturated dimensions, the changes per dimension, the new rubric's data."""

    rubric: Rubric
    saturated: list[Saturation]
    floored: list[Saturation]
    changes: dict[str, list[str]] = field(default_factory=dict)   # dimension -> what changed, in words
    unchanged: dict[str, str] = field(default_factory=dict)       # dimension -> why no rule applied
    splits: dict[str, Split] = field(default_factory=dict)        # dimension -> its two parts
    whole: dict[str, str] = field(default_factory=dict)           # dimension -> why it is not split
    anchors_by: str | None = None                                 # the model that wrote the anchors (None: rules)
    data: dict[str, Any] | None = None                            # the new rubric, as YAML data; None: no change

    @property
    def new_rubric(self) -> Rubric | None:
        return None if self.data is None else rubric_from_dict(self.data, "<proposal>")


def run_rubric(run_dir: Path, override: str | None) -> Rubric:
    """The run's rubric: ``override``, else ``rubric.path`` of the run's saved Hydra config."""
    from omegaconf import OmegaConf

    from rlkit.config import resolve_path

    if override:
        return load_rubric(resolve_path(override))
    saved = run_dir / ".hydra" / "config.yaml"
    if not saved.is_file():
        raise ConfigError(f"no saved config {saved} to find the run's rubric; give --rubric RUBRIC.yaml",
                          "rubric tighten")
    path = OmegaConf.select(OmegaConf.load(saved), "rubric.path", default=None)
    if not path:
        raise ConfigError(f"{saved} names no rubric.path; give --rubric RUBRIC.yaml", "rubric tighten")
    return load_rubric(resolve_path(str(path)))


def _score(row: dict[str, Any], name: str) -> float | None:
    v = row.get(name)
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def _distinct(texts: Sequence[str]) -> list[str]:
    return list(dict.fromkeys(texts))


def read_saturation(run_dir: Path, rubric: Rubric, min_share: float = MIN_SHARE) -> list[Saturation]:
    """Every dimension of ``rubric`` over the run's last window; ``DataError`` for a run that logged no saturation
    metric or no samples (the command's one line)."""
    history = read_history(run_dir / METRICS_FILE)
    series = {d: metric_series(history, f"rewards/{d}/saturated_groups") for d in rubric.dimension_names}
    missing = [d for d, points in series.items() if not points]
    if missing:  # a run logs every dimension of its rubric at every step
        raise DataError(f"the run logged no saturation metric (rewards/<dimension>/saturated_groups) for "
                        f"{', '.join(missing)} of rubric {rubric.name}; is this the run's rubric? (--rubric picks "
                        "another)", str(run_dir / METRICS_FILE))
    samples = [r for r in read_samples(run_dir / SAMPLES_FILE) if isinstance(r.get("completion"), str)
               and isinstance(r.get("step"), int)]
    if not samples:
        raise DataError("no logged samples to tighten from: the run wrote none (run.log_samples.every=0?)",
                        str(run_dir / SAMPLES_FILE))
    ceilings = {d: max((v for r in samples if (v := _score(r, d)) is not None), default=None)
                for d in rubric.dimension_names}
    out = []
    for name, points in series.items():
        window = points[-WINDOW:]
        if not window:
            continue
        share = statistics.fmean(v for _, v in window)
        scored = [(r, s) for r in samples if (s := _score(r, name)) is not None]
        ceiling = max((s for _, s in scored), default=None)
        # the window's samples; a run that logged samples less often than every WINDOW steps: its last logged step
        last = max(r["step"] for r, _ in scored) if scored else 0
        start = min(window[0][0], last)
        recent = [(r, s) for r, s in scored if r["step"] >= start]
        top_rows = [r for r, s in recent if ceiling is not None and math.isclose(s, ceiling, abs_tol=1e-6)]
        top = [r["completion"] for r in top_rows]
        pairs = {(r["completion"], str(r.get("record"))): (r["completion"], r.get("record") or {}) for r in top_rows
                 if isinstance(r.get("record"), dict)}
        at_ceiling = len(top) / len(recent) if recent else 0.0
        others = [r["completion"] for r, s in scored if ceiling is not None and s < ceiling - 1e-6]
        # top samples another dimension already scores below its own ceiling (rule 1's match check leaves them)
        elsewhere = {r["completion"] for r in top_rows if any(
            (v := _score(r, d)) is not None and c is not None and v < c - 1e-6
            for d, c in ceilings.items() if d != name)}
        if share > min_share:
            groups: dict[tuple[int, str], list[tuple[str, bool]]] = {}
            for r, s in recent:
                at = ceiling is not None and math.isclose(s, ceiling, abs_tol=1e-6)
                groups.setdefault((r["step"], _group_key(r)), []).append((r["completion"], at))
            top_groups = [[c for c, _ in members] for members in groups.values()
                          if len(members) > 1 and all(at for _, at in members)]
            window = [r["completion"] for r, _ in recent]
            top_samples = {r["completion"]: (str(r.get("prompt", "")), r["completion"]) for r in top_rows}
            low: dict[str, tuple[str, str, float]] = {}
            for r, s in sorted(scored, key=lambda rs: rs[1]):
                if ceiling is not None and s < ceiling - 1e-6 and len(low) < LOW_SAMPLES:
                    low.setdefault(r["completion"], (str(r.get("prompt", "")), r["completion"], s))
            out.append(Saturation(name, share, (window[0][0], window[-1][0]), ceiling, at_ceiling,
                                  _distinct(top), _distinct(others), list(pairs.values()), frozenset(elsewhere),
                                  list(top_samples.values()), list(low.values()), top_groups, window))
    return out


def _group_key(row: dict[str, Any]) -> str:
    # a group is one prompt's completions in one step: the record's id where the data has one, else the prompt
    record = row.get("record")
    if isinstance(record, dict) and record.get("id") is not None:
        return f"id:{record['id']}"
    return "prompt:" + json.dumps(row.get("prompt"), sort_keys=True)


def _size(text: str, unit: str) -> int:
    # as the rule judge counts them (rlkit_plugins.judges.rule_features: chars, whitespace-split words)
    return len(text) if unit == "chars" else len(text.split())


def tighten_length(check: dict[str, Any], top: Sequence[str], groups: Sequence[Sequence[str]] = ()
                   ) -> tuple[dict[str, Any], str] | None:
    """Rule 1: the check with its level moved to the top samples' size that splits the most ``groups`` (the window's
    saturated groups: some of a group's completions pass, some not), then closest to half of ``top``, and what
    changed; None where no level is stricter than the old one and splits a group. Without ``groups`` (a run that
    logged no two completions of one prompt in one step) the level that splits ``top`` closest to half."""
    unit = check.get("unit", "chars")
    if unit not in ("chars", "words") or not top or ("max" not in check and "min" not in check):
        return None
    sizes = [_size(t, unit) for t in top]
    key = "max" if "max" in check else "min"
    if key == "max":  # a level passes what is at most it; the largest size passes everything
        levels = [lv for lv in sorted(set(sizes))[:-1] if 1 <= lv < check["max"]]
        passes: Callable[[int, int], bool] = lambda size, lv: size <= lv  # noqa: E731
    else:  # a min passes what is at least it; the smallest size passes everything
        levels = [lv for lv in sorted(set(sizes))[1:] if lv > check.get("min", 0)]
        passes = lambda size, lv: size >= lv  # noqa: E731
    passing = {lv: sum(passes(s, lv) for s in sizes) for lv in levels}
    group_sizes = [[_size(t, unit) for t in g] for g in groups]
    split = {lv: sum(len({passes(s, lv) for s in g}) == 2 for g in group_sizes) for lv in levels}
    if group_sizes:
        levels = [lv for lv in levels if split[lv]]
    if not levels:
        return None
    level = min(levels, key=lambda lv: (-split[lv], abs(passing[lv] / len(sizes) - 0.5),
                                        lv if key == "max" else -lv))
    new = {**check, key: level}
    said = (f"length check {key} {check[key]:g} → {level} {unit}: {passing[level]} of the {len(sizes)} top "
            f"samples still pass")
    if group_sizes:
        return new, (f"{said}, and {split[level]} of the window's {len(group_sizes)} saturated groups split (the "
                     "level that splits the most)")
    return new, f"{said} (the level that splits them closest to half; no saturated group was logged)"


def _length_left(check: dict[str, Any], sat: Saturation) -> str:
    """Why :func:`tighten_length` left a length check as it is."""
    unit = check.get("unit", "chars")
    if unit == "tokens":
        return "its length check counts tokens, which need the policy's tokenizer"
    sizes = {_size(t, unit) for t in sat.top}
    if len(sizes) == 1:
        return f"its length check ({unit}) has no stricter level that splits the top samples (all {sizes.pop()} {unit})"
    if sat.top_groups:
        return (f"its length check ({unit}) has no stricter level that splits a saturated group: the top samples' "
                "sizes differ between prompts, not within one, so a level would set prompts apart and give no group "
                "an advantage")
    return f"its length check ({unit}) has no stricter level that splits the top samples"


def _plain(text: Any) -> str:
    # as the rule judge's `exact` compares answers (rlkit_plugins.judges.rule_features.normalise_answer, without
    # dropping articles): case-folded, punctuation as spaces, whitespace collapsed
    return " ".join(re.sub(r"[^\w\s]|_", " ", str(text).casefold()).split())


def tighten_match(check: dict[str, Any], top_pairs: Sequence[tuple[str, dict[str, Any]]],
                  marked_down: frozenset[str] = frozenset()) -> tuple[dict[str, Any], str] | None:
    """Rule 1 on a ``match`` check: ``numeric`` or ``contains`` (the answer's last number, or the reference
    anywhere in it) raised to ``exact`` (the answer is the reference, nothing around it), and what changed; None
    unless ``exact`` splits the top samples (some pass it, some do not), or where a sample it would fail is in
    ``marked_down`` (another dimension scores it below its ceiling already: a second penalty would put a padded
    right answer below filler of its own layout, what the audit's ``format_mimicry`` probe flags). An ``exact``
    check has no level above."""
    mode = check.get("mode", "exact")
    if mode == "exact" or "extract" in check or check.get("case_sensitive"):
        return None
    field_name = check.get("field", "reference")
    scored = [(text, record[field_name]) for text, record in top_pairs if isinstance(record.get(field_name),
                                                                                     str | int | float)]
    if not scored:
        return None
    passing = sum(_plain(text) == _plain(ref) for text, ref in scored)
    if not 0 < passing < len(scored) or any(text in marked_down for text, ref in scored
                                            if _plain(text) != _plain(ref)):
        return None
    new = {k: v for k, v in check.items() if k != "tolerance"}
    new["mode"] = "exact"
    return new, (f"match check mode {mode} → exact (the answer is the {field_name}, nothing around it): {passing} of "
                 f"the {len(scored)} top samples still pass")


# The shapes rule 2 looks for when the top samples share no word (rlkit's choice: the shapes a short-answer task's
# saturated answers take; the first that sets them apart wins)
SHAPES: dict[str, str] = {
    "a bare number": r"^\s*-?\d+(?:[.,]\d+)?\s*$",
    "no letters at all": r"^[^A-Za-z]*$",
    "a single line": r"^[^\n]*$",
}


def shared_shape(top: Sequence[str], others: Sequence[str]) -> tuple[str, str] | None:
    """Rule 2's pattern when no word is shared: the first of :data:`SHAPES` (name, regex) that at least
    ``PATTERN_SHARE`` of ``top`` have and ``PATTERN_LIFT`` more of them than of ``others``; None without others."""
    if not top or not others:
        return None
    for name, pattern in SHAPES.items():
        pat = re.compile(pattern)
        share = sum(bool(pat.search(t)) for t in top) / len(top)
        if share >= PATTERN_SHARE and share - sum(bool(pat.search(t)) for t in others) / len(others) >= PATTERN_LIFT:
            return name, pattern
    return None


def add_shape(dim_data: dict[str, Any], dim: Dimension, shape: tuple[str, str], top: Sequence[str]) -> list[str]:
    """Rule 2 with a shape: a negative example of it on the level below the top, an anchor only. No check: every
    top answer has the shape, so a check against it would lower them all alike (no spread) and, on a rubric whose
    other checks penalise padding, rank the padded answers above the plain ones it rewards now."""
    name, pattern = shape
    pat = re.compile(pattern)
    example = min((t for t in top if pat.search(t)), key=len)[:EXAMPLE_CHARS]
    level = _add_negative_example(dim, dim_data, example,
                                  f"Only {name}, as the top-scored answers all are: meets the checks, shows no more")
    return [f"negative example {example!r} on level {level:g} (the top samples share a shape: {name}); an anchor "
            "for a model judge, no check (every top answer has it: a check would move them all alike)"]


def shared_words(top: Sequence[str], others: Sequence[str]) -> list[str]:
    """Rule 2's pattern: letter-only words (case-folded) in at least ``PATTERN_SHARE`` of ``top`` and
    ``PATTERN_LIFT`` more of it than of ``others``, most distinctive first; none without others to tell them from."""
    if not top or not others:
        return []

    def shares(texts: Sequence[str]) -> dict[str, float]:
        counts: dict[str, int] = {}
        for text in texts:
            for word in {w.casefold() for w in _LETTER_WORD.findall(text)}:
                counts[word] = counts.get(word, 0) + 1
        return {w: c / len(texts) for w, c in counts.items()}

    in_top, in_others = shares(top), shares(others)
    lifted = [(s - in_others.get(w, 0.0), s, w) for w, s in in_top.items()
              if s >= PATTERN_SHARE and s - in_others.get(w, 0.0) >= PATTERN_LIFT]
    return [w for *_, w in sorted(lifted, key=lambda t: (-t[0], -t[1], t[2]))[:MAX_PATTERN_WORDS]]


def _words_pattern(words: Sequence[str]) -> str:
    return r"\b(?:" + "|".join(re.escape(w) for w in words) + r")\b"


def passing_words(words: Sequence[str], window: Sequence[str],
                  keep: Callable[[list[str]], bool] | None = None) -> tuple[list[str], float] | None:
    """Rule 2's check: the largest subset of ``words`` (then the most distinctive) whose absent check (any of them
    fails a completion) still passes at least ``MIN_PATTERN_PASS`` of the window's logged completions, and that
    share; None where every subset fails nearly all of them. A check the policy's answers almost all fail gives its
    groups no advantage, only a floor: a SmolLM2 definitions run's shared words had `an` among them, 3.7% of its
    window lacked all four, and one of 320 samples passed in the run continued on them (benchmarks/README.md).
    ``keep``: a subset must also pass it (the top samples' score rests on its words, :func:`pattern_carries`)."""
    if not window:
        return None
    for k in range(len(words), 0, -1):
        for subset in itertools.combinations(words, k):
            pat = re.compile(_words_pattern(subset), re.IGNORECASE)
            share = sum(pat.search(t) is None for t in window) / len(window)
            if share >= MIN_PATTERN_PASS and (keep is None or keep(list(subset))):
                return list(subset), share
    return None


# a dimension's scores under the run's rubric for (completion, record) pairs, by the rule judge (None: not scored);
# the command passes one built from the run's registry
Rescorer = Callable[[str, Sequence[tuple[str, dict[str, Any]]]], list[float | None]]


def strip_words(text: str, words: Sequence[str]) -> str:
    """``text`` with ``words`` (whole words, any case) taken out and the spaces left behind closed up."""
    return re.sub(r"[ \t]{2,}", " ", re.sub(_words_pattern(words), "", text, flags=re.IGNORECASE)).strip()


def pattern_carries(sat: Saturation, words: Sequence[str], rescore: Rescorer) -> bool:
    """Whether the top samples' score rests on ``words``: taken out of the top samples that have them, does any
    score fall below the ceiling (under the run's rubric, as the rule judge scores it)? A template its checks count
    (reward_hacking_v1's `first`, `second`, `finally`) does; a phrase the top answers share beside what the checks
    read does not (a SmolLM2 run's "An example sentence using X is: ...", whose example still uses the word), and a
    check against it would penalise the answers the dimension rewards for a phrase they happen to share."""
    pat = re.compile(_words_pattern(words), re.IGNORECASE)
    pairs = sat.top_pairs or [(t, {}) for t in sat.top]
    having = [(strip_words(t, words), record) for t, record in pairs if pat.search(t)]
    if not having or sat.ceiling is None:
        return True  # nothing to tell it by: as before this test
    scores = [v for v in rescore(sat.name, having) if v is not None]
    # none scored (a check reads a record field the logged samples do not carry): nothing to tell it by either
    return not scores or any(v < sat.ceiling - 1e-6 for v in scores)


def _add_negative_example(dim: Any, dim_data: dict[str, Any], example: str, text: str) -> float:
    """``example`` as a negative example on the level below the top (its anchor given ``text`` where it had none);
    the level."""
    anchors = dim_data.setdefault("anchors", {})
    level = _negative_level(dim, anchors)
    anchor = anchors.get(level)
    anchor = {"text": anchor} if isinstance(anchor, str) else dict(anchor or {})
    anchor.setdefault("text", text)
    anchor["negative"] = [*anchor.get("negative", []), example]
    anchors[level] = anchor
    return level


def _negative_level(dim: Dimension, anchors: dict[Any, Any]) -> Any:
    """The level a negative example of the shared pattern goes on: below the top (see the module docstring)."""
    if dim.type == "binary":
        return 0
    below = [float(lv) for lv in dim.anchors if float(lv) < dim.high]
    level = max(below) if below else (dim.low + dim.high) / 2
    level = int(level) if float(level).is_integer() else level
    # the YAML's own key for it (levels are written as ints or floats)
    return next((k for k in anchors if float(k) == float(level)), level)


def add_pattern(dim_data: dict[str, Any], dim: Dimension, words: list[str], sat: Saturation, rule_checks: bool,
                rescore: Rescorer | None = None) -> tuple[list[str], str | None]:
    """Rule 2 on one dimension's YAML data: the negative example and, for a rule-judged dimension, the check; what
    changed, and why nothing did where nothing did. The check reads the largest subset of the words that lets some
    of the window's samples pass (:func:`passing_words`), and where none does there is no check, only the anchor.
    With ``rescore``, words the top samples' score does not rest on (:func:`pattern_carries`) get neither: nothing
    says they stand in for merit."""
    top, window = sat.top, sat.window
    keep = (lambda subset: pattern_carries(sat, subset, rescore)) if rule_checks and rescore is not None else None
    chosen, unfounded = None, False
    if rule_checks and window:
        chosen = passing_words(words, window, keep)
        # subsets that let samples pass, none of them one the score rests on
        unfounded = chosen is None and keep is not None and passing_words(words, window) is not None
    elif keep is not None:
        unfounded = not keep(words)
    if unfounded:
        return [], (f"its top samples share {', '.join(words)}, but keep their score with them taken out: the score "
                    "rests on something else, so neither a check nor a negative example against them")
    left = [w for w in words if chosen is not None and w not in chosen[0]]
    if chosen is not None:
        words = chosen[0]
    pattern = _words_pattern(words)
    pat = re.compile(pattern, re.IGNORECASE)
    example = min((t for t in top if pat.search(t)), key=len)[:EXAMPLE_CHARS]
    level = _add_negative_example(
        dim, dim_data, example, f"Leans on {', '.join(words)}, which the top-scored answers share, for no more merit")
    done = [f"negative example {example!r} on level {level:g} (the top samples share {', '.join(words)})"]
    if rule_checks and window and chosen is None:
        done.append(f"no check: fewer than {MIN_PATTERN_PASS:.0%} of the window's {len(window)} samples lack these "
                    "words (each, or any few of them): a check would fail nearly all the policy writes, a floor with "
                    "nothing to learn towards")
    elif rule_checks:
        # heavier than every other check together: an answer with the pattern scores below one without, whatever the
        # others say (reward_hacking_v2.yaml's clarity: 4 of 7 against the three words' 3)
        weight = sum(float(c.get("weight", 1.0)) for c in dim_data.get("checks", [])) + 1
        weight = int(weight) if weight.is_integer() else weight
        dim_data["checks"] = [*dim_data.get("checks", []),
                              {"type": "regex", "pattern": pattern, "absent": True, "weight": weight}]
        said = (f"check: regex {pattern!r} absent, weight {weight:g} (more than the other checks together), the "
                "negative example as the rule judge reads it")
        if chosen is not None:
            said += f"; {chosen[1]:.0%} of the window's {len(window)} samples pass it"
            if left:
                said += f" (without {', '.join(left)}: with them under {MIN_PATTERN_PASS:.0%} pass" + \
                    (", or the score does not rest on them)" if keep is not None else ")")
        done.append(said)
    return done, None


def _praised_example(dim: Dimension, pattern: str) -> str | None:
    """A positive example, on a level above the one a negative example would go on, that has the shape ``pattern``:
    the rubric calls the shape good there, so a negative example of it would contradict the rubric."""
    below = _negative_level(dim, {})
    pat = re.compile(pattern)
    for level, anchor in dim.anchors.items():
        if float(level) > float(below):
            example = next((e for e in anchor.positive if pat.search(e)), None)
            if example is not None:
                return example
    return None


def _answer_checked(dim: Dimension) -> bool:
    """A check of the dimension compares the answer with the record (``match``): its top samples are right answers,
    whatever their shape."""
    return any(check.get("type") == "match" for check in dim.checks or [])


def rule_scored(dim: Dimension, judge: str | None) -> bool:
    """Whether the run's judge (``judge``, its name) scores ``dim`` by its checks: the rule judge, or a hybrid
    routing it to rules; such a dimension reads checks, never anchors."""
    return bool(dim.checks) and dim.judge in (None, "rule") and judge in ("rule", "hybrid", None)


def read_by_rules(rubric: Rubric, names: Collection[str], judge: str | None) -> bool:
    """Whether the run's judge scores every one of the dimensions ``names`` of ``rubric`` by rules (the rule judge,
    or a hybrid routing them to rules): a proposal changing only their anchors changes nothing that judge reads."""
    return all(judge == "rule" or rule_scored(d, judge) for d in rubric.dimensions if d.name in names)


def next_version(version: str) -> str:
    """``X.Y`` → ``X+1.0``; any other form gets ``+tighten.1`` (``+tighten.N+1`` after a ``+tighten.N``)."""
    major, _, minor = version.partition(".")
    if major.isdigit() and (minor == "" or minor.isdigit()):
        return f"{int(major) + 1}.0"
    base, sep, n = version.rpartition("+tighten.")
    return f"{base}+tighten.{int(n) + 1}" if sep and n.isdigit() else f"{version}+tighten.1"


# what a model backend is asked (:mod:`rlkit.evaluation.rubric_tightening_model`): each request's anchors, in order
AnchorWriter = Callable[[Sequence[AnchorRequest]], list[dict[Any, dict[str, Any]]]]


def propose(rubric: Rubric, saturation: Sequence[Saturation], judge: str | None, *, split: bool = True,
            run_config: dict[str, Any] | None = None, anchors: AnchorWriter | None = None,
            anchors_by: str | None = None, rescore: Rescorer | None = None) -> Proposal:
    """The harder rubric for the saturated dimensions at their ceiling (``judge``: the run's judge name; its
    dimensions with checks are the rule judge's). ``split``: propose splitting a dimension in two where a split rule
    applies (:mod:`rlkit.evaluation.rubric_splitting`; ``run_config``, the run's saved config, says which names it
    uses). ``anchors``: a model writes every tightened dimension's anchors (``anchors_by`` names it). ``rescore``:
    the rule judge's scores under ``rubric``, which a pattern check needs to rest on (:func:`pattern_carries`)."""
    import yaml

    if rubric.source is None or not Path(rubric.source).is_file():
        raise ConfigError("the rubric has no file to start the proposal from", "rubric tighten --rubric")
    data = yaml.safe_load(Path(rubric.source).read_text(encoding="utf-8"))
    at_top = [s for s in saturation if s.at_top]
    proposal = Proposal(rubric, at_top, [s for s in saturation if not s.at_top])
    new = copy.deepcopy(data)
    by_name = {d.name: i for i, d in enumerate(rubric.dimensions)}
    taken = set(by_name)
    for sat in at_top:
        i = by_name[sat.name]
        dim, dim_data = rubric.dimensions[i], new["dimensions"][i]
        changes: list[str] = []
        why: list[str] = []
        for j, check in enumerate(dim.checks or []):
            if check.get("type") == "match":
                raised = tighten_match(check, sat.top_pairs, sat.marked_down)
                if raised is not None:
                    dim_data["checks"][j] = raised[0]
                    changes.append(raised[1])
                elif check.get("mode", "exact") != "exact":
                    why.append("its match check's exact mode passes all or none of the top samples, or fails ones "
                               "another dimension marks down already")
            if check.get("type") == "length":
                tightened = tighten_length(check, sat.top, sat.top_groups)
                if tightened is not None:
                    dim_data["checks"][j] = tightened[0]
                    changes.append(tightened[1])
                else:
                    why.append(_length_left(check, sat))
        words = shared_words(sat.top, sat.others)
        shape = None
        if words:
            rule_checks = rule_scored(dim, judge)
            added, left_why = add_pattern(dim_data, dim, words, sat, rule_checks, rescore)
            changes.extend(added)
            if left_why:
                why.append(left_why)
        elif (shape := shared_shape(sat.top, sat.others)) is not None:
            if _answer_checked(dim):
                # e.g. SmolLM2's right sums, bare: "14" as a negative example of correctness level 0 would tell a
                # model judge that a right answer in that shape is wrong
                why.append(f"its top samples share a shape ({shape[0]}), but its match check compares the answer with "
                           "the record: a shape says nothing of that, and an anchor would call right answers wrong")
            elif (praised := _praised_example(dim, shape[1])) is not None:
                # e.g. reward_hacking_v2's clarity, whose level 5 gives "7" as its positive example: its bare sums
                # are what it asks for, and a negative example of them on level 3 would contradict it
                why.append(f"its top samples share a shape ({shape[0]}), which the rubric's own positive example "
                           f"{praised!r} above it has: the shape is what it asks for, not a way around it")
            else:
                changes.extend(add_shape(dim_data, dim, shape, sat.top))
        if split:
            parts = propose_split(dim, dim_data, rubric, sat.top, run_config, taken)
            if isinstance(parts, Split):
                proposal.splits[sat.name] = parts
                changes.append(parts.describe(sat.name, dim.weight))
            else:
                proposal.whole[sat.name] = parts
        if changes:
            proposal.changes[sat.name] = changes
        else:
            kinds = sorted({str(c.get("type")) for c in dim.checks or []} - {"length", "match"})
            if kinds:
                why.append(f"its {', '.join(kinds)} checks have no level a rule can raise")
            if not words and shape is None:
                why.append("its top samples share no word or shape the others lack" if sat.others else
                           "every logged sample is at its ceiling, so no pattern sets the top ones apart")
            proposal.unchanged[sat.name] = "; ".join(why)
    if anchors is not None and at_top:
        _model_anchors(proposal, new, by_name, anchors, anchors_by or "the model backend")
    for name, parts in proposal.splits.items():  # each split dimension's place: its two parts
        i = next(j for j, d in enumerate(new["dimensions"]) if d.get("name") == name)
        new["dimensions"][i:i + 1] = parts.parts
    if not proposal.changes:
        return proposal
    version = next_version(rubric.version)
    note = "rlkit rubric tighten: " + "; ".join(f"{name}: {', '.join(c)}" for name, c in proposal.changes.items())
    entry = {"version": version, "date": datetime.date.today().isoformat(), "note": note}
    new["version"] = version
    new["changelog"] = [*(new.get("changelog") or []), entry]
    entry["hash"] = rubric_from_dict(new, "<proposal>", verify_changelog=False).content_hash
    proposal.data = new
    return proposal


def _model_anchors(proposal: Proposal, new: dict[str, Any], by_name: dict[str, int], anchors: AnchorWriter,
                   who: str) -> None:
    """Every saturated dimension's anchors (each part's, where it is split) written by the model from its top and
    lowest samples, in place of the rules' negative examples; the rules' checks stay."""
    targets: list[tuple[str, dict[str, Any], AnchorRequest]] = []
    for sat in proposal.saturated:
        dim = proposal.rubric.dimensions[by_name[sat.name]]
        split = proposal.splits.get(sat.name)
        datas = split.parts if split is not None else [new["dimensions"][by_name[sat.name]]]
        for dim_data in datas:
            levels = levels_of(dim.type == "binary", dim.low, dim.high, [float(v) for v in dim_data.get("anchors", {})])
            targets.append((sat.name, dim_data, AnchorRequest(
                str(dim_data["name"]), str(dim_data.get("description", "")), dim.type == "binary", levels,
                copy.deepcopy(dim_data.get("anchors") or {}), tuple(sat.top_samples), tuple(sat.low_samples),
                sat.name if split is not None else None)))
    written = anchors([request for *_, request in targets])
    for (name, dim_data, request), got in zip(targets, written, strict=True):
        dim_data["anchors"] = got
        changes = [c for c in proposal.changes.get(name, []) if not c.startswith("negative example")]
        sat = next(s for s in proposal.saturated if s.name == name)
        changes.append(f"anchors of {request.name} written by {who} from {min(len(sat.top_samples), MODEL_SHOWN)} "
                       f"top and {min(len(sat.low_samples), MODEL_SHOWN)} lowest samples: levels "
                       f"{', '.join(f'{float(lv):g}' for lv in got)}")
        proposal.changes[name] = changes
        proposal.unchanged.pop(name, None)
    proposal.anchors_by = who


def proposal_yaml(proposal: Proposal, run_dir: Path) -> str:
    """The proposal as a YAML file, headed by where it came from."""
    import yaml

    assert proposal.data is not None
    head = (f"# Proposed by `rlkit rubric tighten {run_dir}` from {proposal.rubric.source} (v{proposal.rubric.version})"
            f": review the diff and the audit before training on it.\n")
    return head + yaml.safe_dump(proposal.data, sort_keys=False, allow_unicode=True, width=120)


def audit_records(run_dir: Path, limit: int = 64) -> list[dict[str, Any]]:
    """The run's own logged completions as audit records (prompt, its record's fields, completion), latest first,
    each (prompt, completion) once."""
    seen, out = set(), []
    rows = read_samples(run_dir / SAMPLES_FILE)
    for row in sorted(rows, key=lambda r: -r.get("step", 0) if isinstance(r.get("step"), int) else 0):
        prompt, completion = row.get("prompt"), row.get("completion")
        if not isinstance(completion, str) or prompt is None or (str(prompt), completion) in seen:
            continue
        seen.add((str(prompt), completion))
        record = row.get("record") if isinstance(row.get("record"), dict) else {}
        out.append({**{k: v for k, v in record.items() if k not in ("prompt", "completion")}, "prompt": prompt,
                    "completion": completion})
        if len(out) == limit:
            break
    return out


# the run's overrides that choose how it was judged: the audit of the proposal judges as the run did
JUDGING_KEYS = ("judge", "aggregator", "weights", "debias", "experiment")


def judging_overrides(run_dir: Path) -> list[str]:
    """The run's command-line overrides (``.hydra/overrides.yaml``) that choose its judge, aggregator and weights."""
    import yaml

    path = run_dir / ".hydra" / "overrides.yaml"
    if not path.is_file():
        return []
    lines = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    out = []
    for line in lines if isinstance(lines, list) else []:
        key = str(line).lstrip("+~").split("=", 1)[0]
        if key.split(".", 1)[0] in JUDGING_KEYS:
            out.append(str(line))
    return out


def run_judge(run_dir: Path) -> str | None:
    """The run's judge name from its saved config (None when it is not there)."""
    from omegaconf import OmegaConf

    saved = run_dir / ".hydra" / "config.yaml"
    if not saved.is_file():
        return None
    name = OmegaConf.select(OmegaConf.load(saved), "judge.name", default=None)
    return str(name) if name else None


def run_config(run_dir: Path) -> dict[str, Any] | None:
    """The run's saved config as plain data, unresolved (None when it is not there): what a split must not leave
    naming a dimension that is gone."""
    from omegaconf import OmegaConf

    saved = run_dir / ".hydra" / "config.yaml"
    if not saved.is_file():
        return None
    data = OmegaConf.to_container(OmegaConf.load(saved), resolve=False)
    return data if isinstance(data, dict) else None
