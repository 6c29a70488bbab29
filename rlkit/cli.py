"""The ``rlkit`` command and its subcommands (see ``USAGE``); Hydra overrides follow the command word."""

from __future__ import annotations

import argparse
import math
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path

from rich.console import Console
from rich.table import Table

from rlkit.core.errors import RlkitError

USAGE = """rlkit <command> [--debug] [key=value ...]

commands:
  plugins     list every registered plugin by kind, with the distribution that provides it
  validate    compose the config and check every part (plugins, params, rubric, data, model path)
  score       score prompt/completion records (data.path=...) with the configured judge
  calibrate   agreement of the configured judge with human labels (calibrate.labels=...), per dimension
  eval        golden-set evaluation of a checkpoint (eval.checkpoint=..., eval.prompts=...), per dimension
  fit         train the policy with the configured judge, aggregator and estimator (-m for sweeps)
  report      (re)build a run's report: `rlkit report outputs/<date>/<time>` (plots + report.md)
  train-grm   train a generative reward model on preference pairs or rankings (grm.data.train=...)
  serve       serve the configured judge as an HTTP reward API (serve.port=..., Ctrl-C stops it)
  data        data tools: pairs (rankings -> preference pairs), prepare (PII, de-dup, mix); `rlkit data` for help
  rubric      rubric versions: `rlkit rubric diff old.yaml new.yaml`, `rlkit rubric hash rubric.yaml`
  new         scaffold a plugin package: `rlkit new plugin NAME --kind judge` (rlkit new for help)

Overrides are Hydra's: judge=rule rubric.path=/abs/rubric.yaml data.path=/abs/records.jsonl
Set --debug or HYDRA_FULL_ERROR=1 to see tracebacks."""


def _console() -> Console:
    # Outside a terminal rich assumes 80 columns and truncates plugin names; logs can be wider.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def cmd_plugins(overrides: Sequence[str]) -> int:
    from rlkit.config import group_options
    from rlkit.core.registry import load_registry

    registry = load_registry()
    table = Table(title="rlkit plugins")
    for column in ("kind", "name", "provided by", "config"):
        table.add_column(column)
    for kind in registry.kinds():
        entries = registry.entries(kind.key)
        options = set(group_options(registry, kind.group))
        if not entries:
            table.add_row(kind.key, "—", "", f"{kind.group}=…")
        for entry in entries:
            selector = f"{kind.group}={entry.name}" if entry.name in options else f"{kind.group}.name={entry.name}"
            if kind.selected_by:
                selector = f"{kind.selected_by}={entry.name}"
            elif kind.many:  # a list group: several may be selected together
                # "\[": rich would read [name] as markup
                selector = (f"{kind.group}=\\[{entry.name}]" if entry.name in options
                            else f"+{kind.group}.{entry.name}=…")
            table.add_row(kind.key, entry.name, entry.provider, selector)
    _console().print(table)
    return 0


def _validated(overrides: Sequence[str], *, need_completions: bool = False, read_data: bool = True):
    from rlkit.config import compose_config, validate_config
    from rlkit.core.registry import load_registry

    registry = load_registry()
    cfg = compose_config(registry, list(overrides))
    return validate_config(cfg, registry, need_completions=need_completions, read_data=read_data)


def cmd_validate(overrides: Sequence[str]) -> int:
    validated = _validated(overrides)
    rubric = validated.rubric
    console = _console()
    console.print(f"config ok: rubric {rubric.name} v{rubric.version} (hash {rubric.short_hash}, "
                  f"{len(rubric.dimensions)} dimensions)")
    for kind, name in validated.plugin_names.items():
        console.print(f"  {kind}: {name}")
    data = validated.data
    if validated.records is not None:
        console.print(f"  data: {len(validated.records)} records from {data.path}")
    else:
        console.print(f"  data: synthetic task {data.task!r}")
    model = validated.model
    console.print(f"  model: {model.name_or_path or 'embedded tiny policy'}")
    return 0


def _fmt(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.3f}"


def cmd_score(overrides: Sequence[str]) -> int:
    from rlkit.evaluation.scoring import dimension_table, score_records
    from rlkit.evaluation.sharded_scoring import score_options, score_progress, score_to_file, shards_dir

    validated = _validated(overrides, need_completions=True)
    options = score_options(validated.cfg)
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
    for row in dimension_table(result):
        table.add_row(row["name"], _fmt(row["mean"]), _fmt(row["std"]), _fmt(row["min"]), _fmt(row["max"]),
                      str(row["scored"]), str(row["unscored"]))
    console = _console()
    console.print(table)
    if sharded is not None:
        resumed = f" ({sharded.shards_skipped} of {sharded.shards} shards from an earlier run in " \
                  f"{shards_dir(Path(options.output))})" if sharded.shards_skipped else ""
        console.print(f"wrote {sharded.lines} scored completions to {options.output}{resumed}", markup=False)
    return 0


def cmd_calibrate(overrides: Sequence[str]) -> int:
    from dataclasses import replace

    from rlkit.evaluation.calibration import (
        calibrate,
        calibrate_options,
        judge_records,
        log_calibration,
        read_labels,
        write_report,
    )
    from rlkit.evaluation.scoring import score_records
    from rlkit.runs.loggers import finish_logger, logger_name, make_logger

    validated = _validated(overrides, read_data=False)  # the records are the labelled lines, not data.path
    cfg, rubric = validated.cfg, validated.rubric
    if validated.reward_rubric is not rubric:
        from rlkit.core.errors import ConfigError

        # the labels are per rubric dimension; such a judge's scores follow its own derived rubric
        raise ConfigError(f"judge={validated.plugin_names['judge']} scores completions against the others of their "
                          f"group ({', '.join(validated.reward_rubric.dimension_names)}), not the rubric's "
                          "dimensions one by one; calibrate needs a judge that does (rule, llm, hybrid, ensemble)",
                          "judge")
    options = calibrate_options(cfg)
    labelled = read_labels(options.labels, rubric)
    judge = validated.plugin_names["judge"]
    scored = score_records(replace(validated, records=judge_records(labelled)),
                           batch_size=int(cfg.score.batch_size))
    report = calibrate(labelled, scored.raw_scores, rubric, options.threshold, judge=judge,
                       labels_path=str(options.labels))
    table = Table(title=f"judge {judge} vs human labels — {rubric.name} v{rubric.version} ({rubric.short_hash}), "
                        f"{report.total} completions")
    for column in ("dimension", "n", "κ", "ρ", "bias", "flagged"):
        table.add_column(column, justify="left" if column in ("dimension", "flagged") else "right")
    for row in report.rows:
        table.add_row(row.name, str(row.n), _fmt(row.kappa), _fmt(row.spearman), _fmt(row.bias),
                      "yes" if row.flagged else "")
    console = _console()
    console.print(table)
    if report.flagged:
        console.print(f"flagged (κ or ρ below {report.threshold:g}, or undefined): {', '.join(report.flagged)} "
                      "— its anchors need rewriting")
    paths = write_report(report, options.output)
    console.print(f"wrote {paths[0]} and {len(paths) - 1} confusion-matrix PNGs")
    logger = make_logger(cfg, options.output, job_type="calibrate")
    if logger:
        try:
            log_calibration(report, logger, paths[1:])
        finally:
            finish_logger(logger)
        console.print(f"logged the numbers to {logger_name(cfg)} under {options.output}")
    return 0


def cmd_serve(overrides: Sequence[str]) -> int:
    import logging

    from rlkit.serve.app import RewardServer, create_app, serve_settings

    validated = _validated(overrides, read_data=False)  # requests bring the texts; data.path is not read
    settings = serve_settings(validated.cfg)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    server = RewardServer(create_app(validated, settings), settings.host, settings.port, log_level="info")
    rubric = validated.rubric
    print(f"serving judge {validated.plugin_names['judge']} on rubric {rubric.name} v{rubric.version} "
          f"({rubric.short_hash}) at {server.url} (OpenAPI: {server.url}/openapi.json); Ctrl-C stops", flush=True)
    server.serve_forever()
    return 0


def cmd_eval(overrides: Sequence[str]) -> int:
    from rlkit.evaluation.golden import checkpoint_label, eval_options, run_eval

    validated = _validated(overrides)  # data is read: its prompts are what the golden set must not contain
    options = eval_options(validated.cfg)
    result, rows, no_embedding = run_eval(validated)
    rubric = result.rubric
    table = Table(title=f"golden set {options.prompts.name} ({len(result.completions)} prompts) — "
                        f"{checkpoint_label(result.checkpoint)}, rubric {rubric['name']} v{rubric['version']} "
                        f"({rubric['hash'][:12]}), judge {result.judge}")
    for column in ("dimension", "kind", "mean", "std", "n"):
        table.add_column(column, justify="left" if column in ("dimension", "kind") else "right")
    for row in result.summary():
        table.add_row(row["dimension"], row["kind"], _fmt(row["mean"] if row["mean"] is not None else math.nan),
                      _fmt(row["std"] if row["std"] is not None else math.nan), str(row["n"]))
    console = _console()
    console.print(table)
    if no_embedding:
        console.print(f"embedding_similarity left out: {no_embedding}", markup=False)
    console.print(f"appended {len(result.rows())} rows to {options.output} ({len(rows)} in all); "
                  f"table by checkpoint and rubric version in {options.markdown}", markup=False)
    return 0


def cmd_report(args: Sequence[str]) -> int:
    from rlkit.core.errors import ConfigError
    from rlkit.runs.report import write_report

    if len(args) != 1 or "=" in args[0]:
        raise ConfigError("usage: rlkit report <run dir>", "rlkit report")
    report = write_report(Path(args[0]))
    _console().print(f"wrote {report.markdown} and {len(report.images)} plots", markup=False)
    return 0


# Set for the processes Lightning starts for the other ranks of a DDP run: they re-run this program with the
# first process's Hydra arguments (no command word), and read the command from here.
RELAUNCHED_COMMAND = "RLKIT_RELAUNCHED_COMMAND"


def _run_hydra(command: str, config_name: str, overrides: Sequence[str], body) -> int:
    """Run ``body(cfg, run_dir) -> float`` as a Hydra app on ``config_name`` (run dirs, multirun, sweepers); an
    rlkit error inside a job is one line and its exit code. The float is what a sweeper optimises."""
    import hydra

    from rlkit.config import search_path_override
    from rlkit.core.registry import load_registry

    relaunched = os.environ.get(RELAUNCHED_COMMAND) == command

    @hydra.main(config_path="pkg://rlkit.conf", config_name=config_name, version_base="1.3")
    def task(cfg) -> float:
        from hydra.core.hydra_config import HydraConfig

        try:
            return body(cfg, Path(HydraConfig.get().runtime.output_dir))
        except RlkitError as exc:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print(f"rlkit: error: {exc}", file=sys.stderr)
            sys.exit(exc.exit_code)

    argv = sys.argv
    # Hydra's parser takes its flags (-m, --cfg job, ...) before the positional overrides.
    flags = [o for o in overrides if o.startswith("-")]
    positional = [o for o in overrides if not o.startswith("-")]
    search = [] if relaunched else search_path_override(load_registry())  # a relaunched rank has it already
    # argv[0] stays this program: Lightning's DDP launcher starts the other ranks with it and these arguments.
    sys.argv = [argv[0], *flags, *search, *positional]
    previous = os.environ.get(RELAUNCHED_COMMAND)
    os.environ[RELAUNCHED_COMMAND] = command
    try:
        task()
    finally:
        sys.argv = argv
        if previous is None:
            os.environ.pop(RELAUNCHED_COMMAND, None)
    return 0


def _fit_job(cfg, run_dir: Path) -> float:
    import time

    from rlkit.config import validate_config
    from rlkit.core.registry import load_registry
    from rlkit.runs.sweep import write_job_summary
    from rlkit.train.fit import fit, print_summary

    started = time.monotonic()

    # A launcher that runs jobs in other processes (submitit) pickles this function: it carries no registry
    # and builds one where it runs.
    validated = validate_config(cfg, load_registry())
    summary = fit(validated, run_dir)
    if summary["global_zero"]:
        print_summary(summary, validated)
        write_job_summary(run_dir, summary, time.monotonic() - started)  # a sweep's summary table reads it
    return summary["end"]["reward"]


def cmd_fit(overrides: Sequence[str]) -> int:
    relaunched = os.environ.get(RELAUNCHED_COMMAND) == "fit"
    if not relaunched and not any(o in ("-m", "--multirun") for o in overrides):
        # Fail in milliseconds with one line, before Hydra sets up a run directory.
        _validated(overrides)
    return _run_hydra("fit", "fit", overrides, _fit_job)


def _train_grm_job(cfg, run_dir: Path) -> float:
    from rlkit.grm.training import print_grm_summary, train_grm

    summary = train_grm(cfg, run_dir)
    print_grm_summary(summary)
    return summary["end"]["accuracy"]


def cmd_train_grm(overrides: Sequence[str]) -> int:
    if not any(o in ("-m", "--multirun") for o in overrides):
        from rlkit.config import compose_config
        from rlkit.core.registry import load_registry
        from rlkit.grm.training import check_grm_config

        # Fail in milliseconds with one line, before Hydra sets up a run directory.
        check_grm_config(compose_config(load_registry(), list(overrides), config_name="train_grm"))
    return _run_hydra("train-grm", "train_grm", overrides, _train_grm_job)


DATA_USAGE = """rlkit data <tool> [key=value ...]

tools:
  pairs in=<records.jsonl> out=<pairs.jsonl> [mode=all|adjacent] [near_duplicate=0.9]
        [near_duplicate_method=ngram|embedding]
        listwise {prompt, responses: [{text, rank}]} (rank 1 = best) or pairwise {prompt, chosen, rejected}
        records in (optional "domain"); de-duplicated pairwise records out, plus <out>.report.json and, when
        lines are bad, <out>.rejects.jsonl. mode=all pairs every two ranks, adjacent only neighbouring ranks;
        pairs whose two texts are >= near_duplicate similar are dropped (ngram: character 3-gram Jaccard;
        embedding: sentence-embedding cosine).
  prepare in=<records.jsonl or datasets dir> out=<prepared.jsonl> [text_field=prompt] [pii=true]
        [dedup=embedding|ngram|none] [dedup_threshold=0.92] [embedding_model=<name>]
        [mix=easy:3,medium:5,hard:2] [mix_field=difficulty] [size=N] [seed=0] [split=<name>]
        prompt records in: JSONL, or a directory saved by datasets' save_to_disk (split= picks a split).
        pii=true replaces e-mails, phone numbers, ID and order numbers and URLs carrying a token, key,
        session or signature in every string by [EMAIL], [PHONE], [ID], [ORDER], [URL]; then a record whose
        text_field is >= dedup_threshold similar to an earlier kept one is dropped; then mix= samples
        without replacement to those shares of mix_field's levels, seeded (size= defaults to the most the
        levels allow; a short level gives all it has). Writes <out>, <out>.report.json (what was removed
        and why) and, when lines are bad, <out>.rejects.jsonl."""


def _tool_usage(tool: str) -> str:
    """The ``rlkit data <tool> ...`` synopsis from ``DATA_USAGE``: the tool's line and its ``[option]`` lines."""
    lines = DATA_USAGE.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"  {tool} "))
    synopsis = [lines[start].strip()]
    for line in lines[start + 1:]:
        if not line.strip().startswith("["):
            break
        synopsis.append(line.strip())
    return "rlkit data " + " ".join(synopsis)


def _print_rejects(source: Path, rejects: Sequence) -> None:
    """The first bad lines (or dataset rows) as ``file:LINE: reason`` on stderr."""
    for reject in rejects[:MAX_SHOWN_REJECTS]:
        where = f"{source}:{reject.line}" if reject.unit == "line" else f"{source}[row {reject.line}]"
        print(f"{where}: {reject.reason}", file=sys.stderr)
    if len(rejects) > MAX_SHOWN_REJECTS:
        print(f"... and {len(rejects) - MAX_SHOWN_REJECTS} more bad lines", file=sys.stderr)


def _key_values(args: Sequence[str], schema: type, usage: str, where: str):
    """Bind ``key=value`` arguments to a pydantic ``schema``; a bad one raises a ``ConfigError`` naming it."""
    import pydantic

    from rlkit.core.errors import ConfigError

    values = {}
    for arg in args:
        key, sep, value = arg.partition("=")
        if not sep or not key:
            raise ConfigError(f"expected key=value, got {arg!r}; usage: {usage}", where)
        values[key] = value
    try:
        return schema.model_validate(values)
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        problem = "unknown argument" if err["type"] == "extra_forbidden" else err["msg"]
        raise ConfigError(f"{key}: {problem}; usage: {usage}", where) from None


def cmd_data_pairs(args: Sequence[str]) -> int:
    from rlkit.core.errors import DataError
    from rlkit.data.pairs import (
        PairsOptions,
        listwise_to_pairs,
        pair_report,
        read_preference_records,
        sidecar_paths,
        write_pair_files,
    )

    options = _key_values(args, PairsOptions, _tool_usage("pairs"), "rlkit data pairs")
    source, out = options.input, options.out
    records, rejects = read_preference_records(source)
    _print_rejects(source, rejects)
    if not records and not rejects:
        raise DataError("the file holds no records", str(source))
    result = listwise_to_pairs(records, options.mode, options.near_duplicate,
                               options.near_duplicate_method) if records else None
    report = pair_report(records, rejects, result or listwise_to_pairs([]), source=str(source))
    paths = write_pair_files(out, result, rejects, report)
    if result is None:
        raise DataError(f"every line ({len(rejects)}) is bad; they are in {paths['rejects']}", str(source))
    table = Table(title=f"{source} -> {out}")
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_row("records read", str(report["records_read"]))
    table.add_row("bad lines (rejected)", str(report["rejected_lines"]))
    table.add_row("pairs written", str(report["pairs_written"]))
    for reason, n in report["dropped"].items():
        table.add_row(f"dropped: {reason}", str(n))
    table.add_row("conflicting labels", str(report["conflicting_labels"]))
    share = report["length_bias"]["chosen_longer_share"]
    table.add_row("chosen is the longer", "—" if share is None else f"{share:.1%}")
    for domain, counts in report.get("domains", {}).items():
        table.add_row(f"domain {domain}", f"{counts['records']} records, {counts['pairs']} pairs")
    console = _console()
    console.print(table)
    for conflict in report["conflict_examples"]:
        console.print(f"conflict: lines {conflict['a_better_on_lines']} vs {conflict['b_better_on_lines']}: "
                      f"{conflict['a'][:40]!r} / {conflict['b'][:40]!r}", markup=False)
    console.print(f"wrote {report['pairs_written']} pairs to {out} and the report to {sidecar_paths(out)[0]}",
                  markup=False)
    if rejects:
        print(f"rlkit: warning: {len(rejects)} bad lines skipped; they are in {paths['rejects']}", file=sys.stderr)
    return 0


def cmd_data_prepare(args: Sequence[str]) -> int:
    from rlkit.core.errors import DataError
    from rlkit.data.files import sidecar_paths, write_data_files
    from rlkit.data.prepare import PrepareOptions, prepare, read_source

    options = _key_values(args, PrepareOptions, _tool_usage("prepare"), "rlkit data prepare")
    source, out = options.input, options.out
    records, rejects = read_source(source, options.text_field, options.split)
    _print_rejects(source, rejects)
    if not records and not rejects:
        raise DataError("the input holds no records", str(source))
    prepared = prepare(records, rejects, options)
    report = prepared.report
    paths = write_data_files(out, prepared.records if records else None, rejects, report)
    if not records:
        raise DataError(f"every line ({len(rejects)}) is bad; they are in {paths['rejects']}", str(source))
    table = Table(title=f"{source} -> {out}")
    table.add_column("")
    table.add_column("count", justify="right")
    table.add_row("records read", str(report["records_read"]))
    for reason, n in report["removed"].items():
        table.add_row(f"removed: {reason.replace('_', ' ')}", str(n))
    pii = report["pii"]
    if pii["enabled"]:
        table.add_row("PII replaced", ", ".join(f"{kind} {n}" for kind, n in pii["replacements"].items()))
    mix = report["mix"]
    for level, row in (mix or {}).get("levels", {}).items():
        share = "—" if row["realised_share"] is None else f"{row['realised_share']:.1%}"
        table.add_row(f"{mix['field']}={level}", f"{row['sampled']} of {row['available']} "
                                                 f"({share}, asked {row['requested_share']:.1%})")
    table.add_row("records written", str(report["records_written"]))
    console = _console()
    console.print(table)
    for example in report["dedup"]["examples"][:3]:
        unit = next(iter(example))
        console.print(f"duplicate: {unit} {example[unit]} ~ {unit} {example['kept_' + unit]} "
                      f"(similarity {example['similarity']:.3f}): {example['text'][:60]!r}", markup=False)
    console.print(f"wrote {report['records_written']} records to {out} and the report to {sidecar_paths(out)[0]}",
                  markup=False)
    for warning in (mix or {}).get("warnings", []):
        print(f"rlkit: warning: {warning}", file=sys.stderr)
    if rejects:
        print(f"rlkit: warning: {len(rejects)} bad lines skipped; they are in {paths['rejects']}", file=sys.stderr)
    return 0


MAX_SHOWN_REJECTS = 20
DATA_COMMANDS = {"pairs": cmd_data_pairs, "prepare": cmd_data_prepare}


def cmd_data(overrides: Sequence[str]) -> int:
    if not overrides or overrides[0] not in DATA_COMMANDS:
        if overrides:
            print(f"rlkit: error: unknown data tool {overrides[0]!r}; tools: {', '.join(DATA_COMMANDS)}",
                  file=sys.stderr)
        print(DATA_USAGE, file=sys.stderr)
        return 2
    return DATA_COMMANDS[overrides[0]](overrides[1:])


RUBRIC_USAGE = """rlkit rubric <tool> ...

tools:
  diff OLD.yaml NEW.yaml   dimensions added, removed and changed (each field, anchors level by level), versions
                           and content hashes, and what the changelog still needs
  hash RUBRIC.yaml         the content hash to store as `hash:` in the changelog entry for the rubric's version"""


def cmd_rubric(args: Sequence[str]) -> int:
    from rlkit.core.rubric import load_rubric
    from rlkit.core.rubric_diff import diff_rubrics, render_diff

    tool, files = (args[0], list(args[1:])) if args else (None, [])
    if (tool, len(files)) not in (("diff", 2), ("hash", 1)):
        print(RUBRIC_USAGE, file=sys.stderr)
        return 2
    # a stale changelog hash is what these tools help to fix, so they read the file without checking it
    rubrics = [load_rubric(f, verify_changelog=False) for f in files]
    if tool == "hash":
        rubric = rubrics[0]
        print(rubric.content_hash)
        entry = next((e for e in rubric.changelog if e.version == rubric.version), None)
        if entry is None or entry.hash is None:
            print(f"rlkit: store it as `hash: {rubric.content_hash}` in the changelog entry for version "
                  f"{rubric.version} of {files[0]}", file=sys.stderr)
        elif not rubric.content_hash.startswith(entry.hash):
            print(f"rlkit: the changelog entry for version {rubric.version} stores {entry.hash}: the content "
                  "changed since; bump `version` and add a changelog entry with this hash", file=sys.stderr)
        return 0
    _console().print(render_diff(diff_rubrics(*rubrics), *files))
    return 0


def cmd_new(args: Sequence[str]) -> int:
    from rlkit.commands.scaffold import main as scaffold_main

    return scaffold_main(args)


COMMANDS = {"plugins": cmd_plugins, "validate": cmd_validate, "score": cmd_score, "calibrate": cmd_calibrate,
            "fit": cmd_fit, "data": cmd_data, "serve": cmd_serve, "train-grm": cmd_train_grm,
            "eval": cmd_eval, "report": cmd_report,
            "rubric": cmd_rubric, "new": cmd_new}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlkit", usage=USAGE, add_help=False)
    parser.add_argument("command", nargs="?")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    args, overrides = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if args.help or args.command is None:
        print(USAGE)
        return 0 if args.help else 2
    command = COMMANDS.get(args.command)
    relaunched = os.environ.get(RELAUNCHED_COMMAND)
    if command is None and relaunched in COMMANDS and os.environ.get("LOCAL_RANK", "0") != "0":
        # another rank of a multi-process run: every argument is an override of the first rank's command
        command, overrides = COMMANDS[relaunched], [args.command, *overrides]
    if command is None:
        print(f"rlkit: error: unknown command {args.command!r}; commands: {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    debug = args.debug or os.environ.get("HYDRA_FULL_ERROR") == "1"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            return command(overrides)
    except RlkitError as exc:
        if debug:
            raise
        print(f"rlkit: error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
