"""Commands that judge without training: ``score``, ``calibrate``, ``eval``, ``serve``."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from rlkit.commands.common import compose_and_check, fmt, rich_console, run_registry
from rlkit.config.outputs import check_writable


def cmd_score(overrides: Sequence[str]) -> int:
    from dataclasses import replace

    from rlkit.config import resolve_path
    from rlkit.evaluation.episode_records import with_episodes
    from rlkit.evaluation.scoring import dimension_table, score_records
    from rlkit.evaluation.sharded_scoring import score_options, score_progress, score_to_file, shards_dir

    validated = compose_and_check(overrides, need_completions=True)
    assert validated.records is not None and validated.data.path is not None
    # episode records keep their conversations (reading them gave each its last answer)
    validated = replace(validated, records=with_episodes(resolve_path(validated.data.path), validated.records))
    options = score_options(validated.cfg)
    if options.output:
        check_writable(options.output, "score.output")
    sharded = None
    with score_progress(options.progress) as on_progress:
        if options.output:
            # written shard by shard: a killed run resumes where it stopped when the command is run again
            sharded = score_to_file(validated, Path(options.output), options, on_progress)
            result = sharded.result
        else:
            total = sum(len(r["completions"]) if "completions" in r else 1 for r in validated.records or [])
            done = 0

            def advance(n: int) -> None:
                nonlocal done
                done += n
                on_progress(done, total)

            result = score_records(validated, batch_size=options.batch_size, retries=options.retries,
                                   retry_backoff=options.retry_backoff, on_batch=advance)
    rubric = validated.rubric
    table = Table(title=f"{rubric.name} v{rubric.version} ({rubric.short_hash}) — "
                        f"{len(result.rewards)} completions, judge {validated.plugin_names['judge']}")
    for column in ("dimension", "mean", "std", "min", "max", "scored", "unscored"):
        table.add_column(column, justify="left" if column == "dimension" else "right")
    rows = dimension_table(result)
    absent = _not_applicable(validated, rows)
    rows = [row for row in rows if row["name"] not in absent]
    for row in rows:
        table.add_row(row["name"], fmt(row["mean"]), fmt(row["std"]), fmt(row["min"]), fmt(row["max"]),
                      str(row["scored"]), str(row["unscored"]))
    console = rich_console()
    console.print(table)
    if absent:
        console.print(f"not applicable: {', '.join(absent)} (judge {validated.plugin_names['judge']} has nothing to "
                      "score there on these records; weight 0, not part of the reward)", markup=False)
    from rlkit.evaluation.redundancy import REDUNDANT_RHO, redundant_pairs

    for pair in redundant_pairs(result.raw_scores, result.dimension_names):
        console.print(f"redundant: {pair.first} and {pair.second} rank completions alike (Spearman ρ {pair.rho:.3f} "
                      f"over {pair.n}, |ρ| >= {REDUNDANT_RHO:g}): one measures what the other does; merge them or "
                      "make them distinct (the rubric's dimensions should not overlap)", markup=False)
    if sharded is not None:
        resumed = f" ({sharded.shards_skipped} of {sharded.shards} shards from an earlier run in " \
                  f"{shards_dir(Path(options.output))})" if sharded.shards_skipped else ""
        console.print(f"wrote {sharded.lines} scored completions to {options.output}{resumed}", markup=False)
    _refuse_unscored(rows[:-1], len(result.rewards), validated, result.judge_metrics)  # the last row: the reward's
    return 0


def _not_applicable(validated: Any, rows: list[dict[str, Any]]) -> list[str]:
    """Dimensions the judge says it has nothing to score on these records (its ``not_applicable``), of weight 0 and
    scored on none of the completions: not applicable, so neither a NaN row nor exit status 3."""
    names = getattr(validated.plugins.get("judge"), "not_applicable", None)
    if not callable(names):
        return []
    weights = dict(zip(validated.rubric.dimension_names, validated.rubric.initial_weights(), strict=True))
    unscored = {row["name"] for row in rows if row["scored"] == 0}
    return [n for n in names(validated.records or [], validated.rubric) if n in unscored and weights.get(n) == 0]


def _refuse_unscored(rows: list[dict[str, Any]], completions: int, validated: Any,
                     judge_metrics: dict[str, float]) -> None:
    """A dimension scored on none of the completions ends ``rlkit score`` with exit status 3: its table and file
    show NaN, and a reward made of the other dimensions alone is not the rubric's. ``rows``: the dimensions' rows
    of the summary table; ``judge_metrics``: the last batch's judgement's."""
    from rlkit.core.errors import UnscoredError

    unscored = [row["name"] for row in rows if row["scored"] == 0 and row["unscored"] > 0]
    if not unscored:
        return
    judge = validated.plugin_names["judge"]
    rate = judge_metrics.get("judge/parse_failure_rate")
    why = f" ({rate:.0%} of its dimension scores in the last batch could not be parsed)" if rate else ""
    then = ("no reward could be made" if len(unscored) == len(rows)
            else "the rewards are made of the other dimensions alone")
    raise UnscoredError(f"judge {judge} scored {', '.join(unscored)} on none of the {completions} "
                        f"completions{why}: {then}", "score")


def cmd_calibrate(overrides: Sequence[str]) -> int:
    if overrides and overrides[0] == "sample":
        from rlkit.commands.calibration_sample import cmd_calibrate_sample

        return cmd_calibrate_sample(overrides[1:])
    from dataclasses import replace

    from rlkit.core.atomic import atomic_write_text
    from rlkit.evaluation.audit_report import judge_config
    from rlkit.evaluation.calibration import (
        DEFAULT_OUTPUT,
        calibrate,
        calibrate_by_window,
        calibrate_options,
        dropped_labels,
        judge_records,
        log_calibration,
        log_windows,
        read_all_labels,
        run_dir_of,
        write_report,
        write_windows,
    )
    from rlkit.evaluation.calibration_rounds import (
        ROUND_NAME,
        compare_rounds,
        line_changes,
        line_scores,
        read_round,
        render_rounds_markdown,
        round_payload,
        store_round,
        worst_disagreements,
    )
    from rlkit.evaluation.labeller_agreement import labeller_agreement, render_agreement_markdown
    from rlkit.evaluation.scoring import score_records
    from rlkit.runs.loggers import finish_logger, logger_name, make_logger

    validated = compose_and_check(overrides, read_data=False)  # the records are the labelled lines, not data.path
    cfg, rubric = validated.cfg, validated.rubric
    options = calibrate_options(cfg)
    if validated.scored_rubric is not rubric:
        # such a judge scores completions against the others of their group: it is held to the humans' rankings
        return _calibrate_ranking(validated, options)
    run_dir = run_dir_of(options.labels)
    if run_dir is not None and str(options.output) == DEFAULT_OUTPUT:
        # labels of a run's own completions: the numbers belong with the run, and in its report
        options = replace(options, output=run_dir / "calibration")
    check_writable(options.output, "calibrate.output", folder=True)
    labelled = read_all_labels(options.labels, rubric)
    # read before scoring: a wrong file should not cost a judge pass
    previous = read_round(options.previous, rubric) if options.previous is not None else None
    judge = validated.plugin_names["judge"]
    scored = score_records(replace(validated, records=judge_records(labelled)),
                           batch_size=int(cfg.score.batch_size))
    report = calibrate(labelled, scored.raw_scores, rubric, options.threshold, judge=judge,
                       labels_path=str(options.labels))
    fields = getattr(validated.plugins.get("judge"), "record_fields", None)
    report.dropped = dropped_labels(labelled, report, fields(rubric) if callable(fields) else ())
    table = Table(title=f"judge {judge} vs human labels — {rubric.name} v{rubric.version} ({rubric.short_hash}), "
                        f"{report.total} completions")
    for column in ("dimension", "n", "κ", "ρ", "bias", "flagged"):
        table.add_column(column, justify="left" if column in ("dimension", "flagged") else "right")
    for row in report.rows:
        table.add_row(row.name, str(row.n), fmt(row.kappa), fmt(row.spearman), fmt(row.bias),
                      "yes" if row.flagged else "")
    console = rich_console()
    console.print(table)
    details = scored.details or []
    written = None
    if details and all("written" in detail for detail in details):
        # scoring: expected read each answer twice, as the levels' expectation and as the level written
        import torch

        written = calibrate(labelled, torch.tensor([detail["written"] for detail in details]), rubric,
                            options.threshold, judge=judge, labels_path=str(options.labels))
        _print_both_scorings(console, report, written)
    for line in report.dropped:
        console.print(f"labels left out: {line}", markup=False)
    for row in report.rows:
        if row.flagged:
            console.print(f"flagged {row.name}: {row.advice(report.threshold)}", markup=False)
    between = labeller_agreement(labelled, rubric, scored.raw_scores)
    if between:
        _print_labellers(console, between)
    lines = line_scores(labelled, scored.raw_scores, rubric, scored.details)
    worst = worst_disagreements(lines, options.disagreements)
    if worst:
        _print_disagreements(console, worst)
    changes = moved = None
    if previous is not None:
        changes, moved = compare_rounds(previous, report), line_changes(previous, lines, rubric)
        _print_round_changes(console, previous, changes, moved)
    windows = calibrate_by_window(labelled, scored.raw_scores, rubric, options.threshold)
    if len(windows) > 1 or (windows and run_dir is not None):
        _print_windows(console, windows)
    extra = render_rounds_markdown(worst, changes, previous, moved) if options.disagreements or changes else ""
    extra += render_agreement_markdown(between) if between else ""
    paths = write_report(report, options.output, windows, extra)
    payload = round_payload(report, lines, written)
    round_file = atomic_write_text(options.output / ROUND_NAME,
                                   json.dumps(payload, indent=1, ensure_ascii=False) + "\n")
    stored = store_round(payload, judge_config(cfg))
    console.print(f"wrote {paths[0]} and {len(paths) - 1} confusion-matrix PNGs; this round's scores: {round_file} "
                  f"(calibrate.previous= it in the next round); kept for rlkit fit's start-up check: {stored}",
                  markup=False)
    if windows:
        console.print(f"wrote {write_windows(windows, report, options.output)}", markup=False)
    if run_dir is not None:
        from rlkit.runs.report import build_report

        console.print(f"run report with judge-human agreement by step window: {build_report(run_dir)}", markup=False)
    logger = make_logger(cfg, options.output, job_type="calibrate")
    if logger:
        try:
            log_calibration(report, logger, paths[1:])
            if windows:
                log_windows(windows, logger)
        finally:
            finish_logger(logger)
        console.print(f"logged the numbers to {logger_name(cfg)} under {options.output}")
    return 0


def _print_labellers(console, rows) -> None:
    table = Table(title="agreement between labellers (κ over the lines both labelled), beside the judge's with each")
    for column in ("dimension", "labellers", "n", "κ between them", "κ judge–first", "κ judge–second"):
        table.add_column(column, justify="left" if column in ("dimension", "labellers") else "right")
    for row in rows:
        table.add_row(row.dimension, f"{row.first} – {row.second}", str(row.n), fmt(row.kappa), fmt(row.judge_first),
                      fmt(row.judge_second))
    console.print(table)


def _calibrate_ranking(validated, options) -> int:
    """``rlkit calibrate judge=ranking`` (or another judge that scores a group's completions against each other, such
    as ``grm``): the judge's orders of the labelled groups against the humans', with bootstrap intervals over groups,
    overall and by step window."""
    from dataclasses import replace

    from omegaconf import OmegaConf

    from rlkit.core.atomic import atomic_write_text
    from rlkit.evaluation.ranking_alignment import (
        JSON_NAME,
        REPORT_NAME,
        interval_text,
        judge_alignment,
        judge_alignment_by_window,
        labeller_alignments,
        ranked_groups,
        ranking_payload,
        render_ranking_markdown,
    )
    from rlkit.evaluation.scoring import score_records

    scored_dims = validated.scored_rubric.dimension_names
    if len(scored_dims) != 1:
        from rlkit.core.errors import ConfigError

        raise ConfigError(f"scores groups on {len(scored_dims)} dimensions ({', '.join(scored_dims)}); a human ranking "
                          "is held to one score per completion", f"judge={validated.plugin_names['judge']}")
    check_writable(options.output, "calibrate.output", folder=True)
    groups = ranked_groups(options.labels)
    records = [{k: line[k] for k in ("prompt", "completions", "reference") if line.get(k) is not None}
               for line in groups]
    judge = validated.plugin_names["judge"]
    scored = score_records(replace(validated, records=records), batch_size=int(validated.cfg.score.batch_size))
    flat, scores = [float(x) for x in scored.raw_scores[:, 0].tolist()], []
    for line in groups:
        scores.append(flat[:len(line["completions"])])
        flat = flat[len(line["completions"]):]
    seed = int(OmegaConf.select(validated.cfg, "seed", default=0) or 0)  # the bootstrap's resampling of groups
    versus_judge, between = judge_alignment(groups, scores, judge, seed=seed), labeller_alignments(groups)
    windows = judge_alignment_by_window(groups, scores, judge, seed=seed)
    table = Table(title=f"ranking judge {judge} vs human rankings — {len(groups)} groups (95% bootstrap intervals "
                        "over groups)")
    for column in ("compared", "groups", "pairs", "tied pairs", "pairwise agreement", "95% interval", "Kendall τ-b",
                   "95% interval"):
        table.add_column(column, justify="left" if column == "compared" else "right")
    table.add_row(f"judge {judge} – humans", str(versus_judge.groups), str(versus_judge.pairs),
                  str(versus_judge.tied_pairs), fmt(versus_judge.agreement),
                  interval_text(versus_judge.agreement_interval), fmt(versus_judge.tau),
                  interval_text(versus_judge.tau_interval))
    for row in between:
        table.add_row(f"{row.first} – {row.second}", str(row.groups), str(row.pairs), "", fmt(row.agreement), "",
                      fmt(row.tau), "")
    console = rich_console()
    console.print(table)
    if len(windows) > 1:
        by_window = Table(title=f"ranking judge {judge} vs human rankings by step window (first step of each)")
        for column in ("window", "groups", "pairs", "pairwise agreement", "95% interval", "Kendall τ-b",
                       "95% interval"):
            by_window.add_column(column, justify="right")
        for w in windows:
            by_window.add_row(str(w.window), str(w.judge.groups), str(w.judge.pairs), fmt(w.judge.agreement),
                              interval_text(w.judge.agreement_interval), fmt(w.judge.tau),
                              interval_text(w.judge.tau_interval))
        console.print(by_window)
    if versus_judge.unscored:
        console.print(f"{versus_judge.unscored} of {len(groups)} groups the judge left unscored: not in the numbers")
    options.output.mkdir(parents=True, exist_ok=True)
    written = atomic_write_text(options.output / REPORT_NAME,
                                render_ranking_markdown(versus_judge, between, str(options.labels), windows))
    numbers = atomic_write_text(options.output / JSON_NAME, json.dumps(
        ranking_payload(versus_judge, between, windows, str(options.labels)), indent=1, ensure_ascii=False) + "\n")
    console.print(f"wrote {written} and {numbers}", markup=False)
    return 0


def _print_both_scorings(console, expected, sampled) -> None:
    table = Table(title="the same answers scored both ways: expected (the levels' probability-weighted mean) and "
                        "sampled (the level written)")
    for column in ("dimension", "κ expected", "ρ expected", "κ sampled", "ρ sampled"):
        table.add_column(column, justify="left" if column == "dimension" else "right")
    for by_expectation, as_written in zip(expected.rows, sampled.rows, strict=True):
        table.add_row(by_expectation.name, fmt(by_expectation.kappa), fmt(by_expectation.spearman),
                      fmt(as_written.kappa), fmt(as_written.spearman))
    console.print(table)


def _print_disagreements(console, worst) -> None:
    from rlkit.evaluation.calibration_rounds import pair_text

    table = Table(title=f"the {len(worst)} lines where judge and humans disagree most (human → judge)")
    for column in ("#", "id", "prompt", "completion", "human → judge", "disagreement"):
        table.add_column(column, justify="right" if column in ("#", "disagreement") else "left",
                         overflow="fold" if column == "human → judge" else "ellipsis",
                         max_width=None if column in ("#", "disagreement", "human → judge") else 24)
    for rank, line in enumerate(worst, start=1):
        table.add_row(str(rank), line.record_id or str(line.index + 1), line.prompt.replace("\n", "⏎"),
                      line.completion.replace("\n", "⏎"), pair_text(line), f"{line.size:.2f}")
    console.print(table)


def _print_round_changes(console, previous, changes, moved) -> None:
    table = Table(title=f"since the previous round ({previous['path']})")
    for column in ("dimension", "κ before", "κ now", "Δκ", "ρ before", "ρ now"):
        table.add_column(column, justify="left" if column == "dimension" else "right")
    for change in changes:
        table.add_row(change.name, fmt(change.kappa_before), fmt(change.kappa_now),
                      "—" if change.kappa_change != change.kappa_change else f"{change.kappa_change:+.3f}",
                      fmt(change.spearman_before), fmt(change.spearman_now))
    console.print(table)
    fixed, broken, matched = moved
    console.print(f"of {matched} lines in both rounds: {fixed} now agree that did not, {broken} now disagree that did "
                  "not", markup=False)


def _print_windows(console, windows) -> None:
    table = Table(title="judge vs human labels by step window (first step of each)")
    for column in ("window", "dimension", "n", "κ", "ρ", "bias"):
        table.add_column(column, justify="left" if column == "dimension" else "right")
    for w in windows:
        for row in w.report.rows:
            table.add_row(str(w.window), row.name, str(row.n), fmt(row.kappa), fmt(row.spearman), fmt(row.bias))
    console.print(table)


def cmd_eval(overrides: Sequence[str]) -> int:
    from rlkit.evaluation.golden import checkpoint_label, golden_options, run_eval

    validated = compose_and_check(overrides)  # data is read: its prompts are what the golden set must not contain
    options = golden_options(validated)
    check_writable(options.output, "eval.output")
    result, rows, no_embedding = run_eval(validated)
    rubric = result.rubric
    table = Table(title=f"golden set {options.prompts.name} ({len(result.completions)} prompts) — "
                        f"{checkpoint_label(result.checkpoint)}, rubric {rubric['name']} v{rubric['version']} "
                        f"({rubric['hash'][:12]}), judge {result.judge}")
    for column in ("dimension", "kind", "mean", "std", "n"):
        table.add_column(column, justify="left" if column in ("dimension", "kind") else "right")
    for row in result.summary():
        table.add_row(row["dimension"], row["kind"], fmt(row["mean"] if row["mean"] is not None else math.nan),
                      fmt(row["std"] if row["std"] is not None else math.nan), str(row["n"]))
    console = rich_console()
    console.print(table)
    if no_embedding:
        console.print(f"embedding_similarity left out: {no_embedding}", markup=False)
    console.print(f"appended {len(result.rows())} rows to {options.output} ({len(rows)} in all); "
                  f"table by checkpoint and rubric version in {options.markdown}", markup=False)
    return 0


def cmd_serve(overrides: Sequence[str]) -> int:
    import logging

    from rlkit.config import check_config, compose_config
    from rlkit.serve.app import RewardServer, create_app, listening_socket, serve_settings

    cfg = compose_config(run_registry(), list(overrides))
    settings = serve_settings(cfg)
    sock = listening_socket(settings.host, settings.port)  # before the judge loads: a port in use fails at once
    try:
        validated = check_config(cfg, run_registry(), read_data=False)  # requests bring the texts, not data.path
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        server = RewardServer(create_app(validated, settings), settings.host, log_level="info", sock=sock)
    except BaseException:
        sock.close()
        raise
    rubric = validated.rubric
    print(f"serving judge {validated.plugin_names['judge']} on rubric {rubric.name} v{rubric.version} "
          f"({rubric.short_hash}) at {server.url} (OpenAPI: {server.url}/openapi.json); Ctrl-C stops", flush=True)
    server.serve_forever()
    return 0


