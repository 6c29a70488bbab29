"""The run report (end of ``rlkit fit``, and ``rlkit report <run dir>``): PNG plots of the metric history and a
markdown summary with the final per-dimension table and every monitor alert, written to ``run_dir/report/``."""

from __future__ import annotations

import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.core.atomic import atomic_write_bytes, atomic_write_text
from rlkit.core.errors import DataError, no_such
from rlkit.core.markdown import md_cell, md_number
from rlkit.data.records import json_lines, prompt_text
from rlkit.judging.spend import spend_section, spend_table
from rlkit.runs import heldout_answers as answers
from rlkit.runs.history import METRICS_FILE, read_history
from rlkit.runs.triage import STAGES, Triage, read_samples, triage

REPORT_DIR = "report"
REPORT_NAME = "report.md"
ALERTS_FILE = "alerts.jsonl"     # written by the monitor host (rlkit.train.monitoring); may be absent
MONITORS_FILE = "monitors.json"  # likewise
# written by `rlkit calibrate` on labels of this run's own completions (rlkit.evaluation.calibration); may be absent
AGREEMENT_FILE = "calibration/windows.json"
SAMPLES_FILE = "samples.jsonl"   # written every log_samples.every steps (rlkit.train.callbacks.SampleLogger)
REASONS_SHOWN = 6                # the judge's reasons on this many completions: the least and most rewarded
ANSWER_CHARS = 160               # a held-out answer shown before/after is cut here
MAX_SUMMARY_CHARS = 400

History = list[tuple[int, dict[str, float]]]


@dataclass
class RunReport:
    """What was written: the markdown file, PNGs by logger key, and the tables (key → columns, rows)."""

    markdown: Path
    images: dict[str, Path] = field(default_factory=dict)
    tables: dict[str, tuple[list[str], list[list[Any]]]] = field(default_factory=dict)


# --- inputs ----------------------------------------------------------------------------------------


def read_alerts(path: Path) -> list[dict[str, Any]]:
    """Alerts in file order; none when the run had no monitors. A bad line is a ``DataError`` naming it."""
    if not path.is_file():
        return []
    alerts = []
    for n, alert in json_lines(path):
        if not isinstance(alert, dict) or "message" not in alert:
            raise DataError('expected {"monitor", "step", "severity", "message"}', f"{path}:{n}")
        alerts.append(alert)
    return alerts


def read_reasons(path: Path, shown: int = REASONS_SHOWN) -> tuple[int, list[dict[str, Any]]] | None:
    """The last logged step that carries the judge's reasons (``judge.params.reasons``) and up to ``shown`` of its
    samples, the least rewarded first and the most rewarded last; None when no sample has reasons."""
    if not path.is_file():
        return None
    last: tuple[int, list[dict[str, Any]]] | None = None
    for _, row in json_lines(path):
        if not isinstance(row, dict) or not row.get("reasons"):
            continue
        if last is None or row.get("step") != last[0]:
            last = (row.get("step"), [])
        last[1].append(row)
    if last is None:
        return None
    step, rows = last
    ranked = sorted(rows, key=lambda r: (r.get("reward") is None, r.get("reward") or 0.0))
    if len(ranked) > shown:
        ranked = ranked[:shown // 2] + ranked[len(ranked) - (shown - shown // 2):]
    return step, ranked


def read_json_object(path: Path) -> dict[str, Any]:
    """A run's JSON object file (``summary.json``, ``monitors.json``), or {} when the run has none; a file that is
    not a JSON object raises a ``DataError`` naming it and the line."""
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON ({exc.msg} at column {exc.colno})", f"{path}:{exc.lineno}") from None
    except UnicodeDecodeError:
        raise DataError("not UTF-8 text", str(path)) from None
    if not isinstance(data, dict):
        raise DataError("expected a JSON object", f"{path}:1")
    return data


def dimensions_of(history: History) -> list[str]:
    """Rubric dimensions in logging order, from the ``rewards/<dimension>/mean`` keys."""
    names: list[str] = []
    for _, metrics in history:
        for key in metrics:
            if key.startswith("rewards/") and key.endswith("/mean"):
                name = key[len("rewards/"):-len("/mean")]
                if name not in names:
                    names.append(name)
    return names


def series(history: History, key: str) -> tuple[list[int], list[float]]:
    """Steps and values of one metric where it was logged and finite."""
    points = [(s, m[key]) for s, m in history if key in m and not math.isnan(m[key])]
    return [p[0] for p in points], [p[1] for p in points]


def prefixed_keys(history: History, prefix: str) -> list[str]:
    keys: list[str] = []
    for _, metrics in history:
        keys += [k for k in metrics if k.startswith(prefix) and k not in keys]
    return keys


def probe_history(summaries: dict[str, Any]) -> tuple[list[str], list[dict[str, Any]]] | None:
    """(prompts, measurements) of a probes monitor's summary (``prompts`` and ``history`` of
    ``{"step", "scores": [per prompt]}``), or None when no monitor summary has that shape."""
    for summary in summaries.values():
        if not isinstance(summary, dict):
            continue
        prompts, measured = summary.get("prompts"), summary.get("history")
        if isinstance(prompts, list) and isinstance(measured, list) and measured and all(
                isinstance(m, dict) and isinstance(m.get("scores"), list) and "step" in m for m in measured):
            return [str(p) for p in prompts], measured
    return None


def read_agreement(path: Path) -> dict[str, Any] | None:
    """Judge–human agreement by step window (``rlkit calibrate`` on this run's labelling files), or None."""
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise DataError(f"invalid JSON ({exc.msg} at line {exc.lineno})", str(path)) from None
    if not isinstance(data, dict) or not isinstance(data.get("windows"), list):
        raise DataError('expected {"windows": [{"window", "dimensions": [...]}, ...]}', str(path))
    return data


def agreement_table(agreement: dict[str, Any] | None) -> tuple[list[str], list[list[Any]]]:
    columns = ["window (first step)", "dimension", "n", "kappa", "spearman", "bias"]
    rows = [[w.get("window"), d.get("name"), d.get("n"), d.get("kappa"), d.get("spearman"), d.get("bias")]
            for w in (agreement or {}).get("windows", []) for d in w.get("dimensions", [])]
    return columns, rows


def plot_agreement(agreement: dict[str, Any]) -> bytes | None:
    by_dim: dict[str, list[tuple[int, float]]] = {}
    for window in agreement["windows"]:
        for dim in window.get("dimensions", []):
            if dim.get("kappa") is not None:
                by_dim.setdefault(dim["name"], []).append((window["window"], dim["kappa"]))
    if not by_dim:
        return None
    fig, axes = _figure()
    ax = axes[0, 0]
    for name, points in by_dim.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=name)
    ax.axhline(agreement.get("threshold", 0.6), color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("quadratic-weighted κ")
    ax.set_title("judge–human agreement on the run's own completions", fontsize=10)
    ax.legend(fontsize=7)
    return _png(fig)


# --- plots -----------------------------------------------------------------------------------------


def _figure(rows: int = 1, cols: int = 1, width: float = 7.0, height: float = 3.2) -> tuple[Any, Any]:
    # The object API with the Agg canvas: no pyplot, no global backend switch, no display needed.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.subplots(rows, cols, squeeze=False)


def _png(fig: Any) -> bytes:
    from matplotlib.ticker import MaxNLocator

    for ax in fig.axes:
        if ax.get_xlabel() == "step":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    return buf.getvalue()


def plot_rewards(history: History, dims: list[str]) -> bytes | None:
    keys = [("reward/mean", "reward/std", "reward (normalised)")] + [
        (f"rewards/{d}/mean", f"rewards/{d}/std", d) for d in dims]
    keys = [k for k in keys if series(history, k[0])[0]]
    if not keys:
        return None
    cols = 2 if len(keys) > 1 else 1
    rows = -(-len(keys) // cols)
    fig, axes = _figure(rows, cols, width=10.0 if cols > 1 else 7.0, height=2.6)
    for ax in axes.flat[len(keys):]:
        ax.set_visible(False)
    for ax, (mean_key, std_key, title) in zip(axes.flat, keys, strict=False):
        steps, means = series(history, mean_key)
        ax.plot(steps, means, marker="." if len(steps) < 30 else None)
        std_steps, stds = series(history, std_key)
        if std_steps == steps:
            ax.fill_between(steps, [m - s for m, s in zip(means, stds, strict=True)],
                            [m + s for m, s in zip(means, stds, strict=True)], alpha=0.2)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
    fig.suptitle("per-dimension reward (mean ± std over the batch)")
    return _png(fig)


def _lines(history: History, keys: Sequence[tuple[str, str]], title: str, ylabel: str,
           ylim: tuple[float, float] | None = None) -> bytes | None:
    present = [(k, label) for k, label in keys if series(history, k)[0]]
    if not present:
        return None
    fig, axes = _figure()
    ax = axes[0, 0]
    for key, label in present:
        steps, values = series(history, key)
        ax.plot(steps, values, label=label, marker="." if len(steps) < 30 else None)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylabel(ylabel)
    if ylim is not None:
        ax.set_ylim(*ylim)
    if len(present) > 1:
        ax.legend(fontsize=8)
    return _png(fig)


def plot_saturation(history: History, dims: list[str]) -> bytes | None:
    keys = [f"rewards/{d}/saturated_groups" for d in dims]
    logged = [(s, m) for s, m in history if any(k in m for k in keys)]  # training steps only
    if not dims or not logged:
        return None
    rows = [[m.get(k, math.nan) for _, m in logged] for k in keys]
    fig, axes = _figure(height=0.5 * len(dims) + 1.6)
    ax = axes[0, 0]
    steps = [s for s, _ in logged]
    image = ax.imshow(rows, aspect="auto", cmap="magma", vmin=0, vmax=1, interpolation="nearest",
                      extent=(steps[0] - 0.5, steps[-1] + 0.5, len(dims) - 0.5, -0.5))
    fig.colorbar(image, ax=ax, label="share of saturated groups")
    ax.set_yticks(range(len(dims)), dims)
    ax.set_xlabel("step")
    ax.set_title("saturation timeline: groups whose completions all score the same on a dimension", fontsize=10)
    return _png(fig)


def plot_probes(probes: tuple[list[str], list[dict[str, Any]]]) -> bytes | None:
    prompts, measured = probes
    fig, axes = _figure()
    ax = axes[0, 0]
    for i, prompt in enumerate(prompts):
        points = [(m["step"], m["scores"][i]) for m in measured if i < len(m["scores"]) and m["scores"][i] is not None]
        if points:
            ax.scatter([p[0] for p in points], [p[1] for p in points], label=prompt[:30], s=18)
    ax.set_xlabel("step")
    ax.set_ylabel("group mean score [0, 1]")
    ax.set_title("probe prompts: group score over training", fontsize=10)
    ax.legend(fontsize=7)
    return _png(fig)


def plots(history: History, dims: list[str], summaries: dict[str, Any],
          agreement: dict[str, Any] | None = None) -> dict[str, Callable[[], bytes | None]]:
    """File stem → a function drawing that PNG (None when the run logged nothing for it)."""
    golden = prefixed_keys(history, "eval/")
    probes = probe_history(summaries)
    return {
        "rewards": lambda: plot_rewards(history, dims),
        "weights": lambda: _lines(history, [(f"weights/{d}", d) for d in dims], "dimension weights", "weight"),
        "saturation": lambda: plot_saturation(history, dims),
        "zero_advantage": lambda: _lines(
            history, [("advantages/frac_zero_groups", "groups with all advantages zero"),
                      ("frac_zero_std_groups", "groups with zero reward spread")],
            "zero-advantage share", "share of groups", (-0.02, 1.02)),
        "kl": lambda: _lines(history, [("kl", "KL(policy ‖ reference)")], "KL to the reference", "kl"),
        "length": lambda: _lines(history, [("completion_length", "mean completion length (tokens)")],
                                 "completion length", "tokens"),
        "golden": lambda: _lines(history, [(k, k[len("eval/"):]) for k in golden], "golden-set evaluation",
                                 "mean") if golden else None,
        "probes": lambda: plot_probes(probes) if probes else None,
        "judge_human_agreement": lambda: plot_agreement(agreement) if agreement else None,
    }


# --- markdown --------------------------------------------------------------------------------------




def _first_last(history: History, key: str) -> tuple[float, float, float]:
    """First, last and mean of a metric over the run (NaN when never logged)."""
    _, values = series(history, key)
    if not values:
        return math.nan, math.nan, math.nan
    return values[0], values[-1], sum(values) / len(values)


def dimension_table(history: History, dims: list[str]) -> tuple[list[str], list[list[Any]]]:
    """Per dimension (and the reward): first, last and run-mean batch score, last weight, last saturation,
    held-out start and end (greedy), and the last golden-set value when the run evaluated one."""
    columns = ["dimension", "first", "last", "run mean", "weight (last)", "saturated (last)", "held-out start",
               "held-out end", "golden (last)"]
    rows = []
    for name in [*dims, "reward"]:
        mean_key = "reward/mean" if name == "reward" else f"rewards/{name}/mean"
        first, last, run_mean = _first_last(history, mean_key)
        weight = _first_last(history, f"weights/{name}")[1]
        saturated = _first_last(history, f"rewards/{name}/saturated_groups")[1]
        held_start, held_end, _ = _first_last(history, f"heldout/{name}")
        golden = _first_last(history, f"eval/{name}")[1]
        rows.append([name, *(None if math.isnan(v) else round(v, 6) for v in
                             (first, last, run_mean, weight, saturated, held_start, held_end, golden))])
    return columns, rows


def alerts_table(alerts: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    columns = ["step", "monitor", "severity", "message"]
    return columns, [[a.get("step"), a.get("monitor"), a.get("severity", "warning"), a.get("message")]
                     for a in alerts]


def _cut(text: Any) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= ANSWER_CHARS else text[:ANSWER_CHARS - 1] + "…"


def before_after_table(pairs: Sequence[answers.BeforeAfter]) -> tuple[list[str], list[list[Any]]]:
    columns = ["dimension", "prompt", "before", "score before", "after", "score after"]
    return columns, [[p.dimension, prompt_text(p.prompt), p.before["completion"],
                      p.before["scores"][p.dimension], p.after["completion"], p.after["scores"][p.dimension]]
                     for p in pairs]


def before_after_section(evaluations: Sequence[answers.HeldoutEvaluation],
                         pairs: Sequence[answers.BeforeAfter]) -> list[str]:
    """What the model said to held-out prompts at the first and the last evaluation, on the dimensions that moved;
    nothing for a run that kept no answers."""
    if not evaluations:
        return []
    first, last = evaluations[0].step, evaluations[-1].step
    lines = ["", "## What the model said, before and after", ""]
    if len(evaluations) == 1:
        return lines + [f"`{answers.SAMPLES_FILE}` holds only the evaluation at step {first}."]
    lines.append(f"Greedy answers to held-out prompts at step {first} and step {last} (all {len(evaluations)} "
                 f"evaluations in `{answers.SAMPLES_FILE}`): for each dimension whose held-out mean moved, the "
                 f"prompts whose score on it moved most (up to {answers.PAIRS_PER_DIMENSION}).")
    if not pairs:
        return lines + ["", "No dimension's held-out mean moved."]
    columns, rows = before_after_table(pairs)
    lines += ["", "| " + " | ".join(columns) + " |", "|---|---|---|--:|---|--:|"]
    for dimension, prompt, before, score_before, after, score_after in rows:
        lines.append(f"| {md_cell(dimension)} | {md_cell(_cut(prompt))} | {md_cell(_cut(before))} | "
                     f"{md_number(score_before)} | {md_cell(_cut(after))} | {md_number(score_after)} |")
    return lines


def triage_table(triaged: Triage) -> tuple[list[str], list[list[Any]]]:
    columns = ["stage", "severity", "step", "signal", "metric", "evidence", "what to try"]
    return columns, [[f.stage, f.severity, f.step, f.name.replace("_", " "), f.metric, f.evidence, f.advice]
                     for f in triaged.findings]


def triage_section(triaged: Triage) -> list[str]:
    """``rlkit doctor``'s findings as a table, in its order; the stages with none say what was checked."""
    lines = ["", "## Triage", "",
             "`rlkit doctor`'s findings, in the ranking note's order: the reward signal, the judge's health, "
             "reference leaks, then the policy (docs/when-a-run-goes-wrong.md).", ""]
    lines += [f"Note: {note}." for note in triaged.notes]
    if triaged.findings:
        columns, rows = triage_table(triaged)
        lines += ["| " + " | ".join(columns) + " |", "|---|---|--:|---|---|---|---|"]
        lines += ["| " + " | ".join(md_cell(v) for v in row) + " |" for row in rows]
        lines.append("")
    quiet = [s for s in STAGES if not any(f.stage == s for f in triaged.findings)]
    for stage in quiet:
        checked = triaged.checked[stage]
        lines.append(f"- {stage}: " + (f"no finding ({', '.join(f'`{m}`' for m in checked)})" if checked
                                       else "not logged by this run"))
    return lines


def render_markdown(run_dir: Path, history: History, dims: list[str], alerts: list[dict[str, Any]],
                    summaries: dict[str, Any], pngs: dict[str, str], agreement: dict[str, Any] | None = None,
                    reasons: tuple[int, list[dict[str, Any]]] | None = None,
                    triaged: Triage | None = None, before_after: Sequence[str] = ()) -> str:
    steps = series(history, "reward/mean")[0] or [s for s, _ in history]  # training steps, not eval-only lines
    lines = [f"# Run report: `{md_cell(run_dir.name)}`", "",
             f"{len(steps)} training steps logged ({steps[0]}–{steps[-1]}), from `{METRICS_FILE}`; "
             f"{len(alerts)} alert(s) from {len(summaries)} monitor(s).", "",
             "## Final per-dimension table", "",
             "Batch scores are the training samples' mean in the dimension's own units (the reward normalised to "
             "[0, 1]); held-out scores are greedy completions on the held-out split at the start and end of the "
             "run; golden is the last golden-set evaluation (`eval.every`).", ""]
    columns, rows = dimension_table(history, dims)
    lines += ["| " + " | ".join(columns) + " |", "|---|" + "--:|" * (len(columns) - 1)]
    for row in rows:
        lines.append(f"| {md_cell(row[0])} | " + " | ".join(md_number(v) for v in row[1:]) + " |")
    lines += before_after  # the held-out answers before and after, beside the held-out columns
    members = prefixed_keys(history, "judge/agreement/")
    if members:  # an ensemble's members: how alike they scored each dimension
        lines += ["", "## Judge members' agreement", "",
                  "1 − the ensemble members' mean absolute difference per dimension, in units of its range (1: they "
                  "scored alike; low: the ensemble's score of that dimension is a compromise).", "",
                  "| dimension | first | last | mean |", "|---|--:|--:|--:|"]
        lines += [f"| {md_cell(key.rsplit('/', 1)[1])} | "
                  + " | ".join(md_number(v) for v in _first_last(history, key)) + " |" for key in members]
    lines += spend_section(history)  # judge calls, tokens and cost; nothing for a judge that makes no calls
    if triaged is not None:
        lines += triage_section(triaged)
    lines += ["", "## Alerts", ""]
    if alerts:
        columns, rows = alerts_table(alerts)
        lines += ["| " + " | ".join(columns) + " |", "|--:|---|---|---|"]
        lines += [f"| {md_cell(r[0])} | {md_cell(r[1])} | {md_cell(r[2])} | {md_cell(r[3])} |" for r in rows]
    else:
        lines.append("No alerts were raised." if summaries or (run_dir / ALERTS_FILE).is_file()
                     else "No alerts: the run had no monitors (`monitors=[...]`).")
    if summaries:
        lines += ["", "## Monitor summaries", ""]
        for key, summary in summaries.items():
            text = json.dumps(summary, ensure_ascii=False, default=str)
            if len(text) > MAX_SUMMARY_CHARS:
                text = text[:MAX_SUMMARY_CHARS] + " …"
            lines.append(f"- **{md_cell(key)}**: `{text.replace('`', chr(39))}`")
    if agreement:
        lines += ["", "## Judge–human agreement by step window", "",
                  f"`rlkit calibrate` on human labels of this run's own completions (judge `{agreement.get('judge')}`,"
                  f" `{AGREEMENT_FILE}`). Agreement falling over training while the judge is unchanged means the "
                  "policy pleases the judge, not the humans.", ""]
        columns, rows = agreement_table(agreement)
        lines += ["| " + " | ".join(columns) + " |", "|--:|---|--:|--:|--:|--:|"]
        lines += [f"| {r[0]} | {md_cell(r[1])} | {r[2]} | {md_number(r[3])} | {md_number(r[4])} | "
                  f"{md_number(r[5])} |" for r in rows]
    if reasons:
        step, rows = reasons
        lines += ["", "## The judge's reasons", "",
                  f"Its one-line reason per dimension (`judge.params.reasons`) on the completions of step {step} "
                  f"(the last in `{SAMPLES_FILE}`) it rewarded least and most.", "",
                  "| reward | prompt | completion | reasons |", "|--:|---|---|---|"]
        lines += [f"| {md_number(r.get('reward'))} | {md_cell(r.get('prompt'))} | {md_cell(r.get('completion'))} | "
                  f"{md_cell(r.get('reasons'))} |" for r in rows]
    lines += ["", "## Plots", ""]
    for stem, name in pngs.items():
        lines += [f"### {stem.replace('_', ' ')}", "", f"![{stem}]({name})", ""]
    return "\n".join(lines).rstrip() + "\n"


# --- entry points ----------------------------------------------------------------------------------


def write_report(run_dir: str | Path) -> RunReport:
    """Read the run's history, alerts and monitor summaries; write ``report/report.md`` and its PNGs."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DataError(no_such(run_dir, "run directory", directory=True), str(run_dir))
    history = read_history(run_dir / METRICS_FILE)
    alerts = read_alerts(run_dir / ALERTS_FILE)
    summaries = read_json_object(run_dir / MONITORS_FILE)  # {monitor key: summary}
    agreement = read_agreement(run_dir / AGREEMENT_FILE)
    dims = dimensions_of(history)
    out = run_dir / REPORT_DIR
    out.mkdir(parents=True, exist_ok=True)
    report = RunReport(markdown=out / REPORT_NAME)
    pngs: dict[str, str] = {}
    for stem, draw in plots(history, dims, summaries, agreement).items():
        data = draw()
        if data is None:
            continue
        path = out / f"{stem}.png"
        atomic_write_bytes(path, data)
        pngs[stem] = path.name
        report.images[f"report/{stem}"] = path
    report.tables["report/dimensions"] = dimension_table(history, dims)
    report.tables["report/alerts"] = alerts_table(alerts)
    if (spend := spend_table(history)) is not None:
        report.tables["report/judge_spend"] = spend
    if agreement:
        report.tables["report/judge_human_agreement"] = agreement_table(agreement)
    reasons = read_reasons(run_dir / SAMPLES_FILE)
    if reasons is not None:
        report.tables["report/judge_reasons"] = (["step", "reward", "prompt", "completion", "reasons"],
                                                 [[reasons[0], r.get("reward"), r.get("prompt"), r.get("completion"),
                                                   r.get("reasons")] for r in reasons[1]])
    triaged = triage(history, alerts, read_samples(run_dir / SAMPLES_FILE), agreement)
    report.tables["report/triage"] = triage_table(triaged)
    evaluations = answers.run_evaluations(run_dir)
    pairs = answers.before_after(evaluations[0].rows, evaluations[-1].rows) if len(evaluations) > 1 else []
    if pairs:
        report.tables["report/heldout_before_after"] = before_after_table(pairs)
    atomic_write_text(report.markdown,
                      render_markdown(run_dir, history, dims, alerts, summaries, pngs, agreement, reasons, triaged,
                                      before_after_section(evaluations, pairs)))
    return report


def build_report(run_dir: str | Path) -> Path:
    """Write the run report and return the path of ``report.md``."""
    return write_report(run_dir).markdown


def log_run_report(logger: Any, report: RunReport) -> None:
    """The report's tables and PNGs to W&B (other loggers take neither, so they get nothing)."""
    from rlkit.runs.loggers import is_wandb, log_report

    if logger and is_wandb(logger):
        log_report(logger, {}, tables=report.tables, images=report.images)
