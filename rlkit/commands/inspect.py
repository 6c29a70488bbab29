"""Commands that look without training: ``plugins``, ``config-reference``, ``validate``, ``report``, ``rubric``."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from rlkit.commands.common import compose_and_check, rich_console, run_registry


def cmd_plugins(overrides: Sequence[str]) -> int:
    """Every registered plugin by kind; ``--kind KIND`` (a kind or its config group: ``judge``, ``advantage``) lists one
    kind. A table on a terminal; piped, one plain line a plugin (kind, selector, provider, summary), never cut."""
    from rlkit.config import group_options
    from rlkit.core.errors import ConfigError, did_you_mean

    registry = run_registry()
    kinds = list(registry.kinds())
    args = list(overrides)
    if args[:1] == ["--kind"] and len(args) == 2 or (len(args) == 1 and args[0].startswith("--kind=")):
        wanted = args[1] if len(args) == 2 else args[0].split("=", 1)[1]
        names = [k.key for k in kinds] + [k.group for k in kinds]
        kinds = [k for k in kinds if wanted in (k.key, k.group)]
        if not kinds:
            raise ConfigError(f"unknown kind {wanted!r}; kinds: {', '.join(k.key for k in registry.kinds())}"
                              f"{did_you_mean(wanted, names)}", "--kind")
    elif args:
        raise ConfigError(f"takes only --kind KIND, got {' '.join(args)}", "rlkit plugins")
    rows = []
    for kind in kinds:
        entries = registry.entries(kind.key)
        options = set(group_options(registry, kind.group))
        if not entries:
            rows.append((kind.key, "—", "", f"{kind.group}=…", ""))
        for entry in entries:
            selector = f"{kind.group}={entry.name}" if entry.name in options else f"{kind.group}.name={entry.name}"
            if kind.selected_by:
                selector = f"{kind.selected_by}={entry.name}"
            elif kind.many:  # a list group: several may be selected together
                selector = f"{kind.group}=[{entry.name}]" if entry.name in options else f"+{kind.group}.{entry.name}=…"
            rows.append((kind.key, entry.name, entry.provider, selector, plugin_summary(entry.factory)))
    if not sys.stdout.isatty():
        width = max(len(r[3]) for r in rows)
        for kind_key, _, provider, selector, summary in rows:
            print(f"{kind_key:<23} {selector:<{width}}  ({provider}) {summary}".rstrip())
        return 0
    from rich.markup import escape

    # no kind column: the selector names the group, and three no-wrap columns leave an 80-column terminal too little
    table = Table(title="rlkit plugins" if len(kinds) > 1 else f"rlkit plugins: {kinds[0].key}")
    table.add_column("config", no_wrap=True)  # selectors are copied from here: never broken across lines
    table.add_column("provided by", overflow="fold")  # a long distribution name may fold; it is read, not copied
    table.add_column("what it is", min_width=16)  # gives way to a narrow terminal, wrapping between words
    for _, _, provider, selector, summary in rows:
        table.add_row(escape(selector), provider, escape(summary))
    rich_console().print(table)
    return 0


def plugin_summary(factory: Any) -> str:
    """The first line of the factory's docstring, else of its module's (a plugin registered as a lambda)."""
    import inspect

    doc = inspect.getdoc(factory) if getattr(factory, "__name__", "") != "<lambda>" else None
    if not doc:
        module = sys.modules.get(getattr(factory, "__module__", "") or "")
        doc = inspect.getdoc(module) if module is not None else None
    # plain text: reST's ``literal`` marks are noise in a listing
    return (doc or "").strip().split("\n")[0].replace("``", "")


def cmd_config_reference(args: Sequence[str]) -> int:
    """Print the config reference (Markdown): every key of ``conf/config.yaml`` with its type, default and rule, then
    every registered plugin's params, the page the docs site builds from the same schemas. Every ``--help`` points
    here, because the page itself is generated on build and is not in a clone."""
    from rlkit.config.reference import config_reference_markdown
    from rlkit.core.errors import ConfigError

    if args:
        raise ConfigError(f"takes no arguments, got {' '.join(args)}", "rlkit config-reference")
    print(config_reference_markdown(run_registry()), end="")
    return 0


def cmd_validate(overrides: Sequence[str]) -> int:
    from rlkit.core.rubric import anchor_report

    validated = compose_and_check(overrides)
    rubric = validated.rubric
    console = rich_console()
    console.print(f"config ok: rubric {rubric.name} v{rubric.version} (hash {rubric.short_hash}, "
                  f"{len(rubric.dimensions)} dimensions)")
    # here, in one line, and in `rlkit rubric lint` in full; not in `rlkit fit`: advice on writing the rubric, not
    # news about the run, and not a stderr warning on every validation of a rubric the user may not own
    anchors = anchor_report(rubric)
    if anchors.unanchored_levels or anchors.dimensions_without_negative:
        console.print(f"  {anchors.summary()} (warning; `rlkit rubric lint {rubric.source or 'RUBRIC.yaml'}` lists "
                      "them)", markup=False, soft_wrap=True)
    for kind, name in validated.plugin_names.items():
        console.print(f"  {kind}: {name}")
    data = validated.data
    if validated.records is not None:
        console.print(f"  data: {len(validated.records)} records from {data.path}")
    else:
        console.print(f"  data: synthetic task {data.task!r}")
    model = validated.model
    console.print(f"  model: {model.name_or_path or 'embedded tiny policy'}")
    from rlkit.config.spend_estimate import estimate_judge_spend

    estimate = estimate_judge_spend(validated)  # None: the judge makes no model calls
    for line in estimate.lines() if estimate is not None else []:
        console.print(f"  {line}", markup=False)
    return 0


def cmd_report(args: Sequence[str]) -> int:
    from rlkit.core.errors import ConfigError
    from rlkit.runs.report import write_report
    from rlkit.runs.report_comparison import write_comparison

    usage = "usage: rlkit report <run dir> [<run dir> ... [output=comparison.md]]"
    output = [a.removeprefix("output=") for a in args if a.startswith("output=")]
    run_dirs = [a for a in args if not a.startswith("output=")]
    if not run_dirs or len(output) > 1 or any("=" in a for a in run_dirs) or (output and len(run_dirs) == 1):
        raise ConfigError(usage, "rlkit report")
    for run_dir in run_dirs:
        report = write_report(Path(run_dir))
        rich_console().print(f"wrote {report.markdown} and {len(report.images)} plots", markup=False)
    if len(run_dirs) > 1:  # several runs: their golden-set results side by side, by rubric version
        path = write_comparison([Path(d) for d in run_dirs], output[0] if output else None)
        print(path.read_text(encoding="utf-8"))
        rich_console().print(f"wrote {path}", markup=False)
    return 0


RUBRIC_USAGE = """rlkit rubric <tool> ...

tools:
  diff OLD.yaml NEW.yaml   dimensions added, removed and changed (each field, anchors level by level), versions
                           and content hashes, and what the changelog still needs
  hash RUBRIC.yaml         the content hash to store as `hash:` in the changelog entry for the rubric's version
  lint RUBRIC.yaml         validate the file, then list dimensions whose levels lack anchor text or that have no
                           negative example (warnings: exit 0)
  generate data.path=... judge=llm generate.output=DIR
                           per-prompt rubrics (7-20 criteria) from reference answers, via the judge's backend
  audit [--fail-under X] audit.records=FILE [judge=... aggregator=...]
                           can the rubric be gamed: cheap-trick probes, a degradation ladder, judge consistency,
                           redundancy and human alignment; a trust score, a verdict, a card (docs/rubric-audit.md)
  tighten RUN_DIR [--out FILE] [--rubric FILE] [--min-share X] [--no-split] [--no-audit] [tighten.backend=...]
                           a harder version of the run's rubric for each dimension it saturated (a level raised
                           to what its top samples meet, their shared pattern as a negative anchor, a dimension
                           measuring two things split in two; anchors by a model with tighten.backend), with the
                           diff and the audit's verdict (docs/rubrics.md)"""


# the file tools and the files each takes, in order
RUBRIC_FILE_TOOLS = {"diff": ("OLD.yaml", "NEW.yaml"), "hash": ("RUBRIC.yaml",), "lint": ("RUBRIC.yaml",)}


def cmd_rubric(args: Sequence[str]) -> int:
    from rlkit.core.rubric import anchor_report, load_rubric
    from rlkit.core.rubric_diff import diff_rubrics, render_diff

    tool, files = (args[0], list(args[1:])) if args else (None, [])
    if tool is None:
        print(RUBRIC_USAGE, file=sys.stderr)
        return 2
    wanted = RUBRIC_FILE_TOOLS.get(tool)
    if wanted is None:
        print(f"rlkit: error: rlkit rubric: unknown tool {tool!r}; tools: diff, hash, lint, generate, audit, tighten "
              "(rlkit rubric --help)", file=sys.stderr)
        return 2
    if len(files) != len(wanted):
        print(f"rlkit: error: rlkit rubric {tool} takes {' '.join(wanted)}, got {len(files)} "
              f"argument{'s' * (len(files) != 1)}", file=sys.stderr)
        return 2
    if tool == "lint":  # validation as a run does it (a stale changelog hash is an error), then the advice
        report = anchor_report(load_rubric(files[0]))
        for line in report.messages():
            print(f"warning: {line}")
        print(report.summary())
        return 0
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
    rich_console().print(render_diff(diff_rubrics(*rubrics), *files))
    return 0


