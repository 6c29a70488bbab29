"""``rlkit data``: preference pairs from rankings, prepared prompt records, and training data from labels."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from rich.table import Table

from rlkit.commands.common import rich_console
from rlkit.config.outputs import check_writable

DATA_USAGE = """rlkit data <tool> [key=value ...]

tools:
  pairs in=<records.jsonl> out=<pairs.jsonl> [mode=all|adjacent] [near_duplicate=0.9]
        [near_duplicate_method=ngram|embedding]
        listwise {prompt, responses: [{text, rank}]} (rank 1 = best) or pairwise {prompt, chosen, rejected}
        (TRL's preference format; chosen/rejected as text or assistant messages, or conversations with an
        implicit prompt) records in (optional "domain"); de-duplicated pairwise records out, plus
        <out>.report.json and, when lines are bad, <out>.rejects.jsonl. Pairs out are TRL's format: a chat
        prompt's chosen/rejected are written as one assistant message each. mode=all pairs every two ranks,
        adjacent only neighbouring ranks; pairs whose two texts are >= near_duplicate similar are dropped
        (ngram: character 3-gram Jaccard; embedding: sentence-embedding cosine).
  prepare in=<records.jsonl or datasets dir> out=<prepared.jsonl> [text_field=prompt] [pii=true]
        [dedup=embedding|ngram|none] [dedup_threshold=0.92] [embedding_model=<name>]
        [mix=easy:3,medium:5,hard:2] [mix_field=difficulty] [size=N] [seed=0] [split=<name>]
        prompt records in: JSONL, or a directory saved by datasets' save_to_disk (split= picks a split).
        pii=true replaces e-mails, phone numbers, ID and order numbers and URLs carrying a token, key,
        session or signature in every string by [EMAIL], [PHONE], [ID], [ORDER], [URL]; then a record whose
        text_field is >= dedup_threshold similar to an earlier kept one is dropped; then mix= samples
        without replacement to those shares of mix_field's levels, seeded (size= defaults to the most the
        levels allow; a short level gives all it has). Writes <out>, <out>.report.json (what was removed
        and why) and, when lines are bad, <out>.rejects.jsonl.
  from-labels FILE... [--out DIR] [--heldout-fraction 0.1] [--seed 0] [--combine majority|mean]
        [--min-agreement 0.5] [--disagreement drop|weight] [--rank-by DIMENSION]
        labelling files (levels, rankings, several labellers) and a ranking judge's `rlkit score` output -> GRM
        training data (listwise) and preference pairs, split by prompt; `rlkit data from-labels --help`."""


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
    check_writable(out, "out")
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
    console = rich_console()
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
    check_writable(out, "out")
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
    console = rich_console()
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
def cmd_data_from_labels(args: Sequence[str]) -> int:
    from rlkit.commands.from_labels import cmd_data_from_labels as run

    return run(args)


DATA_COMMANDS = {"pairs": cmd_data_pairs, "prepare": cmd_data_prepare, "from-labels": cmd_data_from_labels}


def cmd_data(overrides: Sequence[str]) -> int:
    if list(overrides[-1:]) == ["--help"] and overrides[0] != "from-labels":  # from-labels has its own help
        print(_tool_usage(overrides[0]) if overrides[0] in DATA_COMMANDS else DATA_USAGE)
        return 0
    if not overrides or overrides[0] not in DATA_COMMANDS:
        if overrides:
            print(f"rlkit: error: unknown data tool {overrides[0]!r}; tools: {', '.join(DATA_COMMANDS)}",
                  file=sys.stderr)
        print(DATA_USAGE, file=sys.stderr)
        return 2
    return DATA_COMMANDS[overrides[0]](overrides[1:])


