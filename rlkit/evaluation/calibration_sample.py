"""``rlkit calibrate sample <run dir> n=300``: a calibration set to label, drawn from a run's ``samples.jsonl``.

Stratified three ways, so that a few hundred labels say something about every part of the run:

* by **step**: the run's logged steps are cut into ``step_bins`` bins of about equal size (each bin is a step
  window of ``rlkit calibrate``'s by-window report, named by its first step);
* by **reward quantile**: within a step bin, completions are cut into ``reward_bins`` equal slices of the reward
  order (unscored rewards form a slice of their own), so high-reward completions, where a judge the policy has
  learned to please over-scores, are as present as low-reward ones;
* by **dimension**: the strata are visited round-robin, one completion at a time; the k-th completion taken from
  a stratum serves dimension ``k mod D`` and is the candidate whose level on that dimension is the rarest so far
  in the set, so every dimension's low and high levels are both present.

Identical (prompt, completion) pairs are taken once; draws are seeded (``seed``). The set is written atomically in
the labelling format (``rlkit.evaluation.labelling``), by default to ``<run dir>/labelling/calibration_set.jsonl``.

Each line carries its prompt record's other fields (``reference``, a ``match`` check's ``field:``), which the judge
of ``rlkit calibrate`` reads to score it: from the row's ``record`` (what ``rlkit fit`` logs), else found by prompt in
the run's data (the data file, or the synthetic task rebuilt from the run's saved config). A field the run's judge
reads that no line has is refused, naming it: without it ``rlkit calibrate`` would drop every label of its dimension.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError, DataError, RlkitError, no_such
from rlkit.core.rubric import Rubric, load_rubric
from rlkit.core.types import RecordField
from rlkit.data.records import json_lines, prompt_text
from rlkit.evaluation.labelling import LABELLING_DIR, labelling_line, write_lines

SAMPLES_FILE = "samples.jsonl"
SET_NAME = "calibration_set.jsonl"
RECORD_KEY = "record"  # a samples row's prompt-record fields besides the prompt (rlkit.train.callbacks.SampleLogger)


@dataclass(frozen=True)
class SampleOptions:
    n: int = 300
    seed: int = 0
    step_bins: int = 4
    reward_bins: int = 4
    output: Path | None = None
    rubric: str | None = None


@dataclass
class CalibrationSet:
    lines: list[dict[str, Any]]
    strata: dict[tuple[int, int], int] = field(default_factory=dict)  # (step window, reward slice) -> taken
    available: int = 0
    notes: list[str] = field(default_factory=list)  # record fields some lines lack


def sample_options(args: dict[str, str]) -> SampleOptions:
    """``n=``, ``seed=``, ``step_bins=``, ``reward_bins=``, ``output=``, ``rubric=`` of the command line."""
    ints = whole_number_options(args, ("n", "seed", "step_bins", "reward_bins"), ("output", "rubric"), "unknown option")
    output = Path(args["output"]).expanduser() if args.get("output") else None
    return SampleOptions(**ints, output=output, rubric=args.get("rubric"))


def whole_number_options(args: dict[str, str], numbers: tuple[str, ...], others: tuple[str, ...],
                         unknown: str) -> dict[str, int]:
    """The whole-number ``key=value`` options of ``rlkit calibrate sample`` (each >= 1 but ``seed``); a key outside
    ``numbers`` and ``others`` raises ``unknown`` with the valid ones."""
    known = set(numbers) | set(others)
    for key in args:
        if key not in known:
            raise ConfigError(f"{unknown}; valid: {', '.join(sorted(known))}", f"calibrate sample {key}")
    ints: dict[str, int] = {}
    for key in numbers:
        if key in args:
            try:
                ints[key] = int(args[key])
            except ValueError:
                raise ConfigError(f"must be a whole number, got {args[key]!r}", f"calibrate sample {key}") from None
            if key != "seed" and ints[key] < 1:
                raise ConfigError("must be >= 1", f"calibrate sample {key}")
    return ints


def read_samples(path: Path, rubric: Rubric) -> list[dict[str, Any]]:
    """The run's logged samples; a bad line is a ``DataError`` naming it."""
    if not path.is_file():
        raise DataError(f"no {SAMPLES_FILE}: the run logged no samples (run.log_samples.every=0?)", str(path))
    rows = []
    for number, row in json_lines(path):
        if not isinstance(row, dict) or not isinstance(row.get("completion"), str) or \
                not isinstance(row.get("step"), int) or "prompt" not in row:
            raise DataError('expected {"step", "prompt", "completion", "reward", <dimension>: score, ...}',
                            f"{path}:{number}")
        rows.append(row)
    if not rows:
        raise DataError("no samples in the file", str(path))
    missing = [d for d in rubric.dimension_names if d not in rows[0]]
    if missing:
        raise DataError(f"the samples have no scores for {', '.join(missing)} of rubric {rubric.name}; is this "
                        "the run's rubric? (rubric=<path> picks another)", str(path))
    return rows


def saved_config(run_dir: Path) -> Any | None:
    """The run's saved Hydra config (``.hydra/config.yaml``), None when there is none."""
    from omegaconf import OmegaConf

    saved = run_dir / ".hydra" / "config.yaml"
    return OmegaConf.load(saved) if saved.is_file() else None


def run_rubric(run_dir: Path, override: str | None) -> Rubric:
    """The run's rubric: ``override``, else ``rubric.path`` of the run's saved Hydra config."""
    from omegaconf import OmegaConf

    from rlkit.config import resolve_path

    if override:
        return load_rubric(resolve_path(override))
    saved = run_dir / ".hydra" / "config.yaml"
    cfg = saved_config(run_dir)
    if cfg is None:
        raise ConfigError(f"no saved config {saved} to find the run's rubric; give rubric=<rubric.yaml>",
                          "calibrate sample rubric")
    path = OmegaConf.select(cfg, "rubric.path", default=None)
    if not path:
        raise ConfigError(f"{saved} names no rubric.path; give rubric=<rubric.yaml>", "calibrate sample rubric")
    return load_rubric(resolve_path(str(path)))


def judge_fields(cfg: Any, registry: Any, rubric: Rubric) -> list[RecordField]:
    """The record fields the run's judge (``judge`` of its saved config) reads to score ``rubric``: its
    ``record_fields``, none for a judge that names none."""
    from omegaconf import OmegaConf

    node = OmegaConf.select(cfg, "judge", default=None) if cfg is not None else None
    if node is None or not OmegaConf.select(node, "name", default=None):
        return []
    try:
        params = OmegaConf.to_container(node, resolve=True).get("params") or {}
    except Exception as exc:  # an interpolation only Hydra's run could resolve; OmegaConf's first line says which
        raise ConfigError(f"cannot read the run's judge: {str(exc).splitlines()[0]}", "judge.params") from None
    judge = registry.create("judge", str(node.name), params if isinstance(params, dict) else {})
    fields = getattr(judge, "record_fields", None)
    return list(fields(rubric)) if callable(fields) else []


def _shown(prompt: Any) -> str:
    return prompt if isinstance(prompt, str) else prompt_text(prompt)


def run_data(cfg: Any) -> tuple[str, dict[str, dict[str, Any]]]:
    """The run's prompt records by prompt text, for samples logged without their record: the data file's, or the
    synthetic task's rebuilt from the saved ``data`` block; and what was read (for a message)."""
    from omegaconf import OmegaConf

    from rlkit.config import check_block, resolve_path
    from rlkit.config.schemas import DataConfig
    from rlkit.data.records import read_jsonl

    node = OmegaConf.select(cfg, "data", default=None) if cfg is not None else None
    if node is None:
        return "no saved data settings", {}
    try:
        data = check_block(DataConfig, OmegaConf.to_container(node, resolve=True), "data")
        if data.path is not None:
            path = resolve_path(data.path)
            if not Path(path).is_file():
                return f"its data file {path} is not there", {}
            records, where = read_jsonl(path), f"its data file {path}"
        elif data.task is not None:
            records, where = data.synthetic_records(), f"its synthetic task {data.task} rebuilt from the saved config"
        else:
            return "no data settings", {}
    except RlkitError as exc:  # the samples are still worth labelling; what the judge misses is refused below
        return f"its data could not be read: {exc}", {}
    return where, {_shown(r["prompt"]): {k: v for k, v in r.items() if k != "prompt"} for r in records}


def attach_records(rows: list[dict[str, Any]], cfg: Any) -> str | None:
    """Give each row logged without its ``record`` the one whose prompt it shows, from the run's data; return what
    was read for them (None when every row had its own)."""
    bare = [row for row in rows if not isinstance(row.get(RECORD_KEY), dict)]
    if not bare:
        return None
    where, by_prompt = run_data(cfg)
    for row in bare:
        found = by_prompt.get(_shown(row["prompt"]))
        if found is not None:
            row[RECORD_KEY] = found
    return where


def check_fields(lines: list[dict[str, Any]], fields: list[RecordField], samples: Path,
                 searched: str | None) -> list[str]:
    """Refuse a field the judge reads that no line carries (``rlkit calibrate`` would drop every label of its
    dimension, n = 0); return a note per field only some lines lack."""
    notes = []
    for used in fields:
        lacking = sum(line.get(used.field) is None for line in lines)
        if lacking == len(lines) and lines:
            how = (f"the samples were logged without their records (a run of an earlier rlkit) and their prompts "
                   f"are not in the run's data ({searched})" if searched else "the run's records have none")
            raise DataError(f"no sample carries {used.field!r}, which the run's judge scores dimension "
                            f"{used.dimension} from ({used.where}): {how}; labels of {used.dimension} could not be "
                            "compared with the judge", str(samples))
        if lacking:
            notes.append(f"{lacking} of {len(lines)} lines have no {used.field!r}: the judge leaves {used.dimension} "
                         "unscored on them")
    return notes


def _bins(count: int, bins: int) -> list[int]:
    """Bin of each of ``count`` ordered items, ``bins`` bins of about equal size."""
    bins = min(bins, count) or 1
    return [i * bins // count for i in range(count)]


def _value(x: Any) -> float:
    return math.nan if x is None else float(x)


def stratify(rows: list[dict[str, Any]], rubric: Rubric, options: SampleOptions) -> CalibrationSet:
    """Draw the stratified set (see the module docstring)."""
    rng = random.Random(options.seed)
    seen: set[tuple[str, str]] = set()
    unique = []
    for row in rows:
        key = (json.dumps(row["prompt"], sort_keys=True), row["completion"])
        if key not in seen:
            seen.add(key)
            unique.append(row)
    steps = sorted({row["step"] for row in unique})
    step_bin = dict(zip(steps, _bins(len(steps), options.step_bins), strict=True))
    first_step = {}
    for step in steps:
        first_step.setdefault(step_bin[step], step)
    strata: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for b in sorted(set(step_bin.values())):
        members = [r for r in unique if step_bin[r["step"]] == b]
        scored = sorted((r for r in members if not math.isnan(_value(r.get("reward")))), key=lambda r: r["reward"])
        for r, q in zip(scored, _bins(len(scored), options.reward_bins), strict=True):
            strata.setdefault((first_step[b], q), []).append(r)
        unscored = [r for r in members if math.isnan(_value(r.get("reward")))]
        if unscored:
            strata[(first_step[b], options.reward_bins)] = unscored
    for members in strata.values():
        rng.shuffle(members)  # ties in rarity go to a seeded draw
    dims = rubric.dimensions
    levels: list[Counter] = [Counter() for _ in dims]  # per dimension: how often each level is in the set

    def level(row: dict[str, Any], d: int) -> Any:
        x = _value(row.get(dims[d].name))
        return "unscored" if math.isnan(x) else math.floor(x + 0.5)

    out = CalibrationSet(lines=[], strata={key: 0 for key in strata}, available=len(unique))
    turn = dict.fromkeys(strata, 0)
    while len(out.lines) < options.n and any(strata.values()):
        for key in sorted(strata):
            members = strata[key]
            if not members or len(out.lines) >= options.n:
                continue
            d = turn[key] % len(dims)
            turn[key] += 1
            pick = min(range(len(members)), key=lambda i: levels[d][level(members[i], d)])
            row = members.pop(pick)
            for x in range(len(dims)):
                levels[x][level(row, x)] += 1
            out.strata[key] += 1
            out.lines.append(labelling_line(prompt=row["prompt"], completion=row["completion"], rubric=rubric,
                                            step=row["step"], window=key[0], reward=row.get("reward"),
                                            judge={n: row.get(n) for n in rubric.dimension_names},
                                            record=row.get(RECORD_KEY)))
    out.lines.sort(key=lambda line: (line["window"], line["step"]))
    return out


def build_calibration_set(run_dir: Path, options: SampleOptions,
                          registry: Any = None) -> tuple[Path, CalibrationSet]:
    """Read the run's samples and rubric, draw the set with each line's record fields, write it; return where and
    what. ``registry`` builds the run's judge to learn which record fields it reads (none checked without it)."""
    if not run_dir.is_dir():
        raise DataError(no_such(run_dir, "run directory", directory=True), str(run_dir))
    rubric = run_rubric(run_dir, options.rubric)
    cfg = saved_config(run_dir)
    fields = judge_fields(cfg, registry, rubric) if registry is not None else []
    samples = run_dir / SAMPLES_FILE
    rows = read_samples(samples, rubric)
    searched = attach_records(rows, cfg)
    drawn = stratify(rows, rubric, options)
    drawn.notes = check_fields(drawn.lines, fields, samples, searched)  # before writing: nothing half-done
    path = options.output or run_dir / LABELLING_DIR / SET_NAME
    write_lines(path, drawn.lines)
    return path, drawn
