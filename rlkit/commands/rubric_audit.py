"""``rlkit rubric audit``: probe the run's rubric, judge and aggregator for cheap tricks before training on them."""

from __future__ import annotations

from collections.abc import Sequence

from rich.table import Table

from rlkit.commands.common import compose_and_check, rich_console, run_registry
from rlkit.config.outputs import check_writable
from rlkit.core.errors import ConfigError

FAIL_UNDER_FLAG = "--fail-under"
SKIPPED_LABELS = {"order": "dimension-order invariance", "redundancy": "redundant dimension pairs",
                  "alignment": "human alignment"}


def audit_overrides(args: Sequence[str]) -> list[str]:
    """``--fail-under 0.8`` (or ``--fail-under=0.8``) as the override ``audit.fail_under=0.8``; the rest unchanged."""
    out: list[str] = []
    rest = list(args)
    while rest:
        arg = rest.pop(0)
        if arg == FAIL_UNDER_FLAG:
            if not rest:
                raise ConfigError("give a trust score in [0, 1] after it", FAIL_UNDER_FLAG)
            out.append(f"audit.fail_under={rest.pop(0)}")
        elif arg.startswith(FAIL_UNDER_FLAG + "="):
            out.append(f"audit.fail_under={arg.partition('=')[2]}")
        else:
            out.append(arg)
    return out


def cmd_rubric_audit(args: Sequence[str]) -> int:
    from rlkit.evaluation.audit import plan_audit, read_audit_records, run_audit, sample_audit_records
    from rlkit.evaluation.audit_report import (
        audit_payload,
        audited_key,
        describe_audit,
        judge_config,
        store_audit,
        strongest_audit,
        summarize,
        write_outputs,
    )

    overrides = audit_overrides(args)
    validated = compose_and_check(overrides)
    options, rubric = validated.run.audit, validated.rubric
    check_writable(options.output, "audit.output", folder=True)
    console = rich_console()
    if options.records is not None:
        items, labelled = read_audit_records(options.records, rubric)
        source = options.records
    else:
        console.print(f"sampling {options.num_prompts} completions from the policy "
                      f"({validated.model.name_or_path or 'embedded tiny policy'}); audit.records=FILE audits a file",
                      markup=False)
        items, labelled, source = sample_audit_records(validated, options.num_prompts), None, ""
    registry = run_registry()
    plan = plan_audit(validated, registry, items, labelled, source)
    calls = plan.judge_calls()
    # printed before the first call: a paid judge's bill is known before it is run up
    model = plan.model_calls()
    console.print(f"judge {validated.plugin_names['judge']} will score {sum(calls.values())} completions"
                  + (" (ranked in pairs: each gamed or degraded one against its original)" if plan.ranked else "")
                  + ": "
                  + ", ".join(f"{v} {k}" for k, v in calls.items() if v) + "; "
                  + ("no model calls (its dimensions are judged by rules)" if model is None else
                     f"{model.calls:,} model calls ({model.formula}), ≈{model.tokens_in:,} tokens in, "
                     f"≤{model.tokens_out:,} out" + ("" if model.cost is None else f", ≈${model.cost:,.4f}")),
                  markup=False)
    result = run_audit(validated, registry, plan)
    summary = summarize(result)
    payload = audit_payload(result, summary, calls)
    payload["audited"] = audited_key(plan.items, judge_config(validated.cfg))
    console.print(audit_table(payload))
    json_path, md_path = write_outputs(payload, options.output)
    stored = store_audit(payload)
    for check, why in payload["skipped"].items():
        console.print(f"skipped {SKIPPED_LABELS.get(check, check)}: {why}", markup=False)
    # counted, not scored: `rlkit rubric lint` lists them one by one
    console.print(f"{payload['anchors']['summary']} (not part of the trust score; `rlkit rubric lint "
                  f"{rubric.source or 'RUBRIC.yaml'}` lists them)", markup=False)
    console.print(payload["verdict"], markup=False, style="bold green" if summary.passed else "bold red")
    for warning in payload["warnings"]:
        console.print(f"warning: {warning}", markup=False)
    console.print(f"wrote {json_path} and {md_path}; stored for `rlkit fit audit.require=true` in {stored}",
                  markup=False)
    strongest = strongest_audit(rubric, payload["audited"]["judge_config"])
    if strongest is not None and strongest[0] != stored:  # kept, not replaced: say which one a run will rely on
        console.print(f"audit.require keeps accepting {describe_audit(*strongest)}, "
                      f"over more records than this one ({payload['records']})", markup=False)
    return 0 if summary.passed else 1


def audit_table(payload: dict) -> Table:
    """One row per probe and per check, with 95% bootstrap intervals over records."""
    from rlkit.evaluation.audit_report import interval_text as _est

    rubric = payload["rubric"]
    table = Table(title=f"audit of {rubric['name']} v{rubric['version']} ({rubric['hash'][:12]}) — judge "
                        f"{payload['judge']}, {payload['records']} records")
    for column in ("check", "n", "result [95% CI]", "flag"):
        table.add_column(column, justify="left" if column in ("check", "flag") else "right")
    higher = "ranked above the original" if payload["ranked_in_pairs"] else "scores higher"
    for p in payload["probes"]:
        against = p.get("against_empty", 0)
        table.add_row(f"probe {p['name']}: {higher}", str(p["applied"]), _est(p["gain_share"], True),
                      "; ".join(filter(None, ["HACKABLE" if p["hackable"] else "", f"{against} vs the empty answer "
                                              "(>= original)" if against else ""])))
    if payload["ladder"]:
        share, floor = payload["ladder"]["never_beats_original"], payload["ladder"]["empty_scores_as_high"]
        table.add_row("ladder: no degraded answer beats the original", str(share["n"]), _est(share, True),
                      f"empty answer >= original on {floor}" if floor else "")
    regrade = "re-grade agreement" + (" (pair orders)" if payload["ranked_in_pairs"] else "")
    for key, label in (("stability", regrade), ("order", "dimension-order invariance")):
        if payload[key]:
            table.add_row(label, str(payload[key]["agreement"]["n"]), _est(payload[key]["agreement"], True), "")
    pairs = payload["redundancy"]["pairs"]
    if "redundancy" not in payload["skipped"]:  # a ranker's: said below the table, with why
        table.add_row("redundant dimension pairs", "", str(len(pairs)),
                      ", ".join(f"{p['first']}~{p['second']}" for p in pairs))
    if payload["alignment"] and payload["alignment"]["score"] is not None:
        table.add_row("human alignment (mean κ)", "", f"{payload['alignment']['score']:.2f}", "")
    table.add_row("trust score", str(payload["records"]), _est(payload["trust"]),
                  "pass" if payload["passed"] else f"below {payload['fail_under']:.2f} or hackable")
    return table
