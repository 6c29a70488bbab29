"""``rlkit calibrate``: how well a judge agrees with human labels, per rubric dimension.

The agreement statistics and their conventions are in :mod:`rlkit.evaluation.agreement_stats`.

A dimension is *flagged* when κ or ρ is below the threshold, or either is undefined (NaN). The report says why it
is undefined (no pairs; one level only among the labels or the judge's scores, where κ and ρ cannot be measured, not
a low agreement) and gives advice that fits the judge: a dimension the rule judge scores is fixed in its check, which
reads no anchors; a model judge's, in its anchors.
"""

from __future__ import annotations

import io
import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from rlkit.config.schemas import CalibrateConfig
from rlkit.core.atomic import atomic_write_bytes
from rlkit.core.errors import DataError
from rlkit.core.markdown import md_cell, md_number
from rlkit.core.rubric import Dimension, Rubric
from rlkit.core.stats import json_number
from rlkit.data.records import MAX_REPORTED_LINES, read_jsonl
from rlkit.evaluation.agreement_stats import (
    confusion_matrix,
    level_bounds,
    mean_bias,
    paired,
    quadratic_weighted_kappa,
    spearman,
)

if TYPE_CHECKING:
    import numpy as np

DEFAULT_THRESHOLD = CalibrateConfig.model_fields["threshold"].default
DEFAULT_LABELS = CalibrateConfig.model_fields["labels"].default
DEFAULT_OUTPUT = CalibrateConfig.model_fields["output"].default
REPORT_NAME = "calibration.md"


# --- labels file -------------------------------------------------------------------------------


def _label_problem(key: Any, value: Any, dims: dict[str, Dimension], rubric: Rubric) -> str | None:
    if key not in dims:
        return (f'"labels.{key}": unknown dimension; rubric {rubric.name} has {", ".join(dims)}')
    if value is None:
        return None  # not labelled: left out of this dimension's agreement
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return f'"labels.{key}": must be a number or null, got {json.dumps(value)}'
    dim = dims[key]
    if not dim.low <= value <= dim.high:
        return f'"labels.{key}": {value:g} lies outside the range [{dim.low:g}, {dim.high:g}]'
    if value != int(value):
        return f'"labels.{key}": {value:g} is not a whole level ({dim.low:g}, {dim.low + 1:g}, …, {dim.high:g})'
    return None


def _record_problem(record: dict[str, Any], dims: dict[str, Dimension], rubric: Rubric) -> str | None:
    if "completions" in record or not isinstance(record.get("completion"), str):
        return 'each line needs one "completion" (text); "completions" lists are not labelled'
    labels = record.get("labels")
    if not isinstance(labels, dict):
        return 'missing "labels" ({"<dimension>": <score>, ...})' if labels is None else \
            f'"labels" must be an object {{"<dimension>": <score>, ...}}, got {type(labels).__name__}'
    for key, value in labels.items():
        problem = _label_problem(key, value, dims, rubric)
        if problem:
            return problem
    return None


def line_numbers(path: Path) -> list[int]:
    """Line numbers of the non-blank lines, i.e. of the records ``read_jsonl`` returned, in order."""
    numbers = []
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            if raw.decode("utf-8-sig" if line_no == 1 else "utf-8").strip():
                numbers.append(line_no)
    return numbers


def read_labels(path: str | Path, rubric: Rubric) -> list[dict[str, Any]]:
    """Read a human-labels JSONL file; every bad line is reported with file and line number.

    A line: ``{"prompt": ..., "completion": ..., "reference": ... (optional), "labels": {"<dim>": <score>}}``.
    A label is a whole level inside the dimension's range, or null (not labelled). JSON, prompt and
    completion problems are reported as ``read_jsonl`` reports them. A labelling file's group lines (ranking tasks,
    ``rlkit.evaluation.labelling``) are left out: ``rlkit calibrate judge=ranking`` reads those.
    """
    path = Path(path)
    records = read_jsonl(path, need_completions=True)
    dims = {d.name: d for d in rubric.dimensions}
    problems = []
    for line_no, record in zip(line_numbers(path), records, strict=True):
        if is_ranking_task(record):
            continue
        problem = _record_problem(record, dims, rubric)
        if problem:
            problems.append((line_no, problem))
    if len(problems) == 1:
        raise DataError(problems[0][1], f"{path}:{problems[0][0]}")
    if problems:
        shown = "; ".join(f"line {n}: {p}" for n, p in problems[:MAX_REPORTED_LINES])
        more = f"; and {len(problems) - MAX_REPORTED_LINES} more" if len(problems) > MAX_REPORTED_LINES else ""
        raise DataError(f"{len(problems)} bad lines: {shown}{more}", str(path))
    return [record for record in records if not is_ranking_task(record)]


def is_ranking_task(record: dict[str, Any]) -> bool:
    """A labelling file's group line: completions to rank, not one completion labelled per dimension."""
    return "ranking" in record and isinstance(record.get("completions"), list) and "completion" not in record


HUMAN_KEYS = ("labels", "labellers", "labelled_by", "skipped")


def judge_records(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as the judge sees them: without the human labels (nor who gave them)."""
    return [{k: v for k, v in record.items() if k not in HUMAN_KEYS} for record in records]


@dataclass(frozen=True)
class CalibrateOptions:
    labels: Path
    output: Path
    threshold: float
    disagreements: int = 10
    previous: Path | None = None


def calibrate_options(cfg: Any) -> CalibrateOptions:
    """The ``calibrate`` block of a composed config, checked against its schema; relative paths: to the cwd."""
    from omegaconf import OmegaConf

    from rlkit.config import check_block, resolve_path

    node = OmegaConf.select(cfg, "calibrate", default=None)
    block = check_block(CalibrateConfig, OmegaConf.to_container(node, resolve=True) if node is not None else {},
                        "calibrate")
    previous = Path(block.previous).expanduser() if block.previous else None
    return CalibrateOptions(resolve_path(block.labels), Path(block.output).expanduser(), block.threshold,
                            block.disagreements, previous)


# --- agreement ---------------------------------------------------------------------------------


@dataclass
class DimensionAgreement:
    """Agreement on one dimension over the ``n`` lines with both a human label and a judge score."""

    name: str
    type: str
    low: int
    high: int
    n: int
    missing_label: int  # lines without a human label for this dimension
    missing_score: int  # labelled lines the judge left unscored (NaN)
    kappa: float
    spearman: float
    bias: float
    confusion: np.ndarray  # [k, k]: rows human level low..high, columns rounded judge level
    flagged: bool
    undefined: str | None = None  # why κ or ρ is undefined: no pairs, one pair, one level only on a side
    by_rule: bool = False  # scored by the rule judge's checks, which read no anchors

    def advice(self, threshold: float) -> str:
        """Why the dimension is flagged and what fits the judge to do about it ('' when it is not flagged)."""
        if not self.flagged:
            return ""
        fix = ("fix its check (`checks:` in the rubric; the rule judge reads no anchors)" if self.by_rule
               else "its anchors need rewriting")
        if self.undefined is None:
            return f"κ {md_number(self.kappa)}, ρ {md_number(self.spearman)} below {threshold:g}: {fix}"
        if self.undefined.startswith("every human label"):
            return (f"not measurable, which is not low agreement: {self.undefined} (one level only); label lines "
                    "at its other levels")
        if self.undefined.startswith("the judge gave"):
            return f"ρ undefined: {self.undefined} (one level only), telling none of them apart: {fix}"
        if self.n == 0 and not self.missing_score:
            return "not measurable: no line is labelled on it"
        dropped = f" ({self.missing_score} labels dropped: see labels left out)" if self.missing_score else ""
        return f"not measurable: {self.undefined}{dropped}"

    @property
    def levels(self) -> list[int]:
        return list(range(self.low, self.high + 1))


@dataclass
class CalibrationReport:
    rows: list[DimensionAgreement]
    threshold: float
    total: int
    rubric: dict[str, str] = field(default_factory=dict)  # name, version, hash
    judge: str | None = None
    labels_path: str | None = None
    dropped: list[str] = field(default_factory=list)  # why labelled lines were left out (dropped_labels)

    @property
    def flagged(self) -> list[str]:
        return [row.name for row in self.rows if row.flagged]


def calibrate(labels_records: Sequence[dict[str, Any]], judge_scores: Any, rubric: Rubric,
              threshold: float = DEFAULT_THRESHOLD, *, judge: str | None = None,
              labels_path: str | None = None) -> CalibrationReport:
    """Compare human ``labels`` with the judge's raw scores ``[N, D]`` (rubric dimension order, NaN unscored)."""
    import numpy as np
    if hasattr(judge_scores, "detach"):
        judge_scores = judge_scores.detach().cpu().numpy()
    scores = np.asarray(judge_scores, dtype=float)  # [N, D]
    expected = (len(labels_records), len(rubric.dimensions))
    if scores.shape != expected:
        raise ValueError(f"judge_scores must be [records, dimensions] = {list(expected)}, got {list(scores.shape)}")
    rows = []
    for d, dim in enumerate(rubric.dimensions):
        try:
            low, high = level_bounds(dim.low, dim.high)
        except ValueError:
            raise DataError(f"calibration needs whole-number range bounds, got [{dim.low:g}, {dim.high:g}]",
                            f"rubric dimension {dim.name!r}") from None
        human = np.array([np.nan if (v := (r.get("labels") or {}).get(dim.name)) is None else float(v)
                          for r in labels_records], dtype=float)
        judged = scores[:, d]
        labelled = ~np.isnan(human)
        kappa = quadratic_weighted_kappa(human, judged, low, high)
        rho = spearman(human, judged)
        flagged = math.isnan(kappa) or math.isnan(rho) or kappa < threshold or rho < threshold
        undefined = undefined_reason(human, judged) if math.isnan(kappa) or math.isnan(rho) else None
        rows.append(DimensionAgreement(
            name=dim.name, type=dim.type, low=low, high=high,
            n=int((labelled & ~np.isnan(judged)).sum()),
            missing_label=int((~labelled).sum()),
            missing_score=int((labelled & np.isnan(judged)).sum()),
            kappa=kappa, spearman=rho, bias=mean_bias(human, judged),
            confusion=confusion_matrix(human, judged, low, high), flagged=flagged, undefined=undefined,
            by_rule=dim.judge == "rule" or (dim.judge is None and judge == "rule"),
        ))
    return CalibrationReport(rows=rows, threshold=float(threshold), total=len(labels_records),
                             rubric=rubric.identity(), judge=judge, labels_path=labels_path)


def undefined_reason(human: Any, judge: Any) -> str:
    """Why κ or ρ of these labels and scores is undefined: no pairs, one pair, or one level only on a side."""
    h, j = paired(human, judge)
    if h.size == 0:
        return "no line has both a human label and a judge score"
    if h.size == 1:
        return "one line only has both a human label and a judge score"
    if (h == h[0]).all():
        return f"every human label is {h[0]:g}"
    if (j == j[0]).all():
        return f"the judge gave every line {j[0]:g}"
    return "a constant side"


def dropped_labels(records: Sequence[dict[str, Any]], report: CalibrationReport,
                   fields: Sequence[Any] = ()) -> list[str]:
    """One line per dimension whose labels were left out because the judge did not score their lines: how many, and
    which record field (a judge's ``record_fields``, e.g. ``reference``) those lines lack."""
    lines = []
    for row in report.rows:
        if not row.missing_score:
            continue
        labelled = [r for r in records if (r.get("labels") or {}).get(row.name) is not None]
        lacking = [f"{sum(r.get(f.field) is None for r in labelled)} of them have no {f.field!r} field, which "
                   f"{row.name} is scored from ({f.where})"
                   for f in fields if f.dimension == row.name and any(r.get(f.field) is None for r in labelled)]
        why = "; ".join(lacking) if lacking else "see the judge's warnings above"
        lines.append(f"{row.name}: {row.missing_score} of {row.missing_score + row.n} labels dropped, the judge left "
                     f"their lines unscored: {why}")
    return lines


def calibration_metrics(report: CalibrationReport, prefix: str = "calibration/") -> dict[str, float]:
    """A flat dict of every number in the report, e.g. ``calibration/brevity/kappa``.

    The hook for experiment loggers (``wandb.log(calibration_metrics(report))``); NaN stays NaN.
    """
    metrics: dict[str, float] = {f"{prefix}threshold": report.threshold, f"{prefix}total": float(report.total),
                                 f"{prefix}flagged": float(len(report.flagged))}
    for row in report.rows:
        base = f"{prefix}{row.name}/"
        metrics.update({f"{base}n": float(row.n), f"{base}missing_label": float(row.missing_label),
                        f"{base}missing_score": float(row.missing_score), f"{base}kappa": row.kappa,
                        f"{base}spearman": row.spearman, f"{base}bias": row.bias,
                        f"{base}flagged": float(row.flagged)})
    return metrics


TABLE_COLUMNS = ("dimension", "kappa", "spearman", "bias", "n", "flagged")


def calibration_table(report: CalibrationReport) -> tuple[list[str], list[list[Any]]]:
    """Columns and one row per dimension (``TABLE_COLUMNS``); an undefined number is None, as JSON wants."""
    def number(x: float) -> float | None:
        return None if math.isnan(x) else x

    rows = [[row.name, number(row.kappa), number(row.spearman), number(row.bias), row.n, row.flagged]
            for row in report.rows]
    return list(TABLE_COLUMNS), rows


def log_calibration(report: CalibrationReport, logger: Any, pngs: Sequence[Path]) -> None:
    """Log the report to an experiment logger: ``calibration_metrics`` to any; to W&B also the table
    ``calibration/dimensions`` and each confusion matrix as ``calibration/<dimension>/confusion``."""
    from rlkit.runs.loggers import log_report

    images = {f"calibration/{row.name}/confusion": path for row, path in zip(report.rows, pngs, strict=True)}
    log_report(logger, calibration_metrics(report), tables={"calibration/dimensions": calibration_table(report)},
               images=images)


# --- report files ------------------------------------------------------------------------------


def _atomic_write(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """``write`` into memory, then the whole file at once (``rlkit.core.atomic``): no partial report is ever seen."""
    buffer = io.BytesIO()
    write(buffer)
    atomic_write_bytes(path, buffer.getvalue())




def _png_names(rows: Sequence[DimensionAgreement]) -> list[str]:
    names: list[str] = []
    for row in rows:
        stem = re.sub(r"[^A-Za-z0-9_.-]+", "_", row.name).strip("._") or "dimension"
        name, i = f"confusion_{stem}.png", 2
        while name in names:
            name, i = f"confusion_{stem}_{i}.png", i + 1
        names.append(name)
    return names


def _plot_confusion(row: DimensionAgreement, fh: IO[bytes]) -> None:
    # The object API with the Agg canvas: no pyplot, no global backend switch, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    k = len(row.levels)
    size = min(2.0 + 0.7 * k, 9.0)
    fig = Figure(figsize=(size + 1.0, size), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    image = ax.imshow(row.confusion, cmap="Blues", vmin=0, vmax=max(int(row.confusion.max()), 1))
    fig.colorbar(image, ax=ax, label="completions")
    ax.set_xticks(range(k), [str(v) for v in row.levels])
    ax.set_yticks(range(k), [str(v) for v in row.levels])
    ax.set_xlabel("judge (rounded to a level)")
    ax.set_ylabel("human")
    ax.set_title(f"{row.name}: κ {md_number(row.kappa, 2)}, ρ {md_number(row.spearman, 2)}, n {row.n}", fontsize=10)
    peak = row.confusion.max()
    for i in range(k):
        for j in range(k):
            value = int(row.confusion[i, j])
            ax.text(j, i, str(value), ha="center", va="center",
                    color="white" if peak and value > peak / 2 else "black")
    fig.savefig(fh, format="png", dpi=100)


def render_markdown(report: CalibrationReport, png_names: Sequence[str] | None = None) -> str:
    rubric = report.rubric
    title = f"{rubric.get('name', 'rubric')} v{rubric.get('version', '?')}"
    lines = [f"# Judge calibration: {md_cell(title)}", ""]
    source = f" from `{report.labels_path}`" if report.labels_path else ""
    lines += [f"Judge `{report.judge or '?'}` against {report.total} human-labelled completions{source}; "
              f"rubric hash `{rubric.get('hash', '?')[:12]}`.", "",
              "κ: quadratic-weighted Cohen's kappa, judge scores rounded to the nearest level (halves up). "
              "ρ: Spearman rank correlation on raw judge scores, ties at their average rank. "
              "bias: mean of judge − human (positive: the judge is lenient). "
              "— : undefined (no pairs, or a constant side).", "",
              "| dimension | type | levels | n | no label | no score | κ | ρ | bias | flagged |",
              "|---|---|---|--:|--:|--:|--:|--:|--:|---|"]
    for row in report.rows:
        lines.append(f"| {md_cell(row.name)} | {row.type} | {row.low}–{row.high} | {row.n} | {row.missing_label} | "
                     f"{row.missing_score} | {md_number(row.kappa)} | {md_number(row.spearman)} | "
                     f"{md_number(row.bias)} | "
                     f"{'**yes**' if row.flagged else 'no'} |")
    lines.append("")
    if report.dropped:
        lines += ["**Labels left out:**", "", *(f"- {md_cell(line)}" for line in report.dropped), ""]
    if report.flagged:
        lines += [f"**Flagged** (κ or ρ below {report.threshold:g}, or undefined): "
                  f"{', '.join(md_cell(n) for n in report.flagged)}", ""]
        lines += [f"- {md_cell(row.name)}: {md_cell(row.advice(report.threshold))}"
                  for row in report.rows if row.flagged]
    else:
        lines.append(f"**Flagged:** none — every dimension reaches κ and ρ ≥ {report.threshold:g}.")
    lines += ["", "## Confusion matrices", "", "Rows: the human level; columns: the judge's score rounded to a level."]
    for i, row in enumerate(report.rows):
        lines += ["", f"### {md_cell(row.name)}", "",
                  "| human \\ judge | " + " | ".join(str(v) for v in row.levels) + " |",
                  "|---|" + "--:|" * len(row.levels)]
        for level, counts in zip(row.levels, row.confusion.tolist(), strict=True):
            lines.append(f"| **{level}** | " + " | ".join(str(c) for c in counts) + " |")
        if png_names is not None:
            lines += ["", f"![{md_cell(row.name)} confusion matrix]({png_names[i]})"]
    return "\n".join(lines) + "\n"


def write_report(report: CalibrationReport, out_dir: str | Path,
                 windows: Sequence[WindowAgreement] = (), extra: str = "") -> list[Path]:
    """Write ``calibration.md`` (with the step-window section when there are windows) and one confusion-matrix PNG
    per dimension, each atomically; return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    names = _png_names(report.rows)
    written = []
    for row, name in zip(report.rows, names, strict=True):
        path = out / name
        _atomic_write(path, lambda fh, row=row: _plot_confusion(row, fh))
        written.append(path)
    md = out / REPORT_NAME
    text = render_markdown(report, names) + extra + (render_windows_markdown(windows) if windows else "")
    _atomic_write(md, lambda fh: fh.write(text.encode("utf-8")))
    return [md, *written]


# --- agreement by step window (labels of a run's own completions) --------------------------------------------------

WINDOWS_NAME = "windows.json"


@dataclass
class WindowAgreement:
    """Agreement over the labelled lines of one step window (``window``: its first step)."""

    window: int
    report: CalibrationReport


def window_of(record: dict[str, Any]) -> int | None:
    """The step window a labelled line belongs to: its ``window``, else its ``step``; None when it has neither."""
    for key in ("window", "step"):
        value = record.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def calibrate_by_window(labels_records: Sequence[dict[str, Any]], judge_scores: Any, rubric: Rubric,
                        threshold: float = DEFAULT_THRESHOLD) -> list[WindowAgreement]:
    """κ, ρ and bias per dimension within each step window, in step order; [] when no line names a step.

    The trend is the collusion signal: judge–human agreement on the policy's own outputs falling as training goes
    on, while the judge's agreement with itself (``judge_stability``) stays put."""
    import numpy as np
    scores = np.asarray(judge_scores.detach().cpu().numpy() if hasattr(judge_scores, "detach") else judge_scores,
                        dtype=float)
    groups: dict[int, list[int]] = {}
    for i, record in enumerate(labels_records):
        window = window_of(record)
        if window is not None:
            groups.setdefault(window, []).append(i)
    return [WindowAgreement(window, calibrate([labels_records[i] for i in rows], scores[rows], rubric, threshold,
                                              judge=None))
            for window, rows in sorted(groups.items())]


def windows_payload(windows: Sequence[WindowAgreement], report: CalibrationReport) -> dict[str, Any]:
    """The JSON of ``windows.json`` (NaN as null), read by the run report."""
    return {"judge": report.judge, "rubric": report.rubric, "threshold": report.threshold,
            "windows": [{"window": w.window, "lines": w.report.total, "dimensions": [
                {"name": row.name, "n": row.n, "kappa": json_number(row.kappa), "spearman": json_number(row.spearman),
                 "bias": json_number(row.bias), "flagged": row.flagged} for row in w.report.rows]} for w in windows]}


def render_windows_markdown(windows: Sequence[WindowAgreement]) -> str:
    """The section of ``calibration.md`` with one row per step window and dimension."""
    lines = ["", "## Agreement by step window", "",
             "Each window holds the completions labelled from those training steps (the `label_sample` monitor's "
             "measurement step, or a step bin of `rlkit calibrate sample`). Agreement falling from window to window "
             "while the judge is unchanged is the sign of a policy that pleases the judge, not the humans.", "",
             "| window (first step) | dimension | n | κ | ρ | bias | flagged |", "|--:|---|--:|--:|--:|--:|---|"]
    for w in windows:
        for row in w.report.rows:
            lines.append(f"| {w.window} | {md_cell(row.name)} | {row.n} | {md_number(row.kappa)} | "
                         f"{md_number(row.spearman)} | {md_number(row.bias)} | {'**yes**' if row.flagged else 'no'} |")
    return "\n".join(lines) + "\n"


def write_windows(windows: Sequence[WindowAgreement], report: CalibrationReport, out_dir: str | Path) -> Path:
    """``windows.json`` in the output folder (atomic); the run report reads it."""
    path = Path(out_dir) / WINDOWS_NAME
    text = json.dumps(windows_payload(windows, report), indent=2, ensure_ascii=False) + "\n"
    _atomic_write(path, lambda fh: fh.write(text.encode("utf-8")))
    return path


def log_windows(windows: Sequence[WindowAgreement], logger: Any) -> None:
    """Each window's numbers at its first step (``calibration/window/<dim>/kappa``, ...), so a logger plots them
    against training steps; and the table ``calibration/windows`` to W&B."""
    from rlkit.runs.loggers import is_wandb

    rows = []
    for w in windows:
        metrics = {}
        for row in w.report.rows:
            metrics.update({f"calibration/window/{row.name}/kappa": row.kappa,
                            f"calibration/window/{row.name}/spearman": row.spearman,
                            f"calibration/window/{row.name}/n": float(row.n)})
            rows.append([w.window, row.name, row.n, None if math.isnan(row.kappa) else row.kappa,
                         None if math.isnan(row.spearman) else row.spearman])
        logger.log_metrics(metrics, step=w.window)
    if is_wandb(logger):
        import wandb

        logger.log_metrics({"calibration/windows": wandb.Table(
            columns=["window", "dimension", "n", "kappa", "spearman"], data=rows)})


def labels_files(path: Path) -> list[Path]:
    """The labels file, or every ``*.jsonl`` of a folder (a run's ``labelling/``) in name order."""
    if path.is_dir():
        files = sorted(p for p in path.glob("*.jsonl") if not p.name.startswith("."))
        if not files:
            raise DataError("no *.jsonl labelling files in this folder", str(path))
        return files
    return [path]


def read_all_labels(path: Path, rubric: Rubric) -> list[dict[str, Any]]:
    """Every labelled line of a file or folder; lines of a labelling file left wholly unlabelled are dropped
    (the judge would be asked for nothing)."""
    records: list[dict[str, Any]] = []
    read = 0
    for file in labels_files(path):
        lines = read_labels(file, rubric)
        read += len(lines)
        records += [r for r in lines
                    if "dimensions" not in r or any(v is not None for v in (r.get("labels") or {}).values())]
    if not records:
        if not read:  # only groups to rank
            raise DataError("the file holds only groups to rank: calibrate a ranking judge on them (judge=ranking)",
                            str(path))
        raise DataError("no line has a label yet: label them first (`rlkit label <file>`)", str(path))
    return records


def run_dir_of(labels: Path) -> Path | None:
    """The run directory whose ``labelling/`` folder (or a file in it) ``labels`` is, else None."""
    from rlkit.runs.history import METRICS_FILE

    folder = labels if labels.is_dir() else labels.parent
    if folder.name == "labelling" and (folder.parent / METRICS_FILE).is_file():
        return folder.parent
    return None
