"""``rlkit rubric tighten RUN_DIR [--out FILE] [--rubric FILE] [--min-share X] [--no-split] [--no-audit]
[tighten.backend=...]``: a harder version of the run's rubric for each dimension it saturated (rules in
:mod:`rlkit.evaluation.rubric_tightening`, splits in :mod:`rlkit.evaluation.rubric_splitting`, anchors by a model
backend where ``tighten.backend`` names one: :mod:`rlkit.evaluation.rubric_tightening_model`), written as YAML, shown
as a diff and audited before anyone trains on it."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlkit.commands.common import rich_console
from rlkit.core.errors import ConfigError

USAGE = ("rlkit rubric tighten RUN_DIR [--out FILE] [--rubric FILE] [--min-share X] [--no-split] [--no-audit] "
         "[tighten.backend={name: openai, params: {base_url: URL, model: NAME}}]")
# this command's own keys (not part of the run's config), as `rlkit rubric generate` has generate.*
OWN_PREFIX = "tighten."
OWN_KEYS = ("backend",)
JUDGE_BACKEND_PARAMS = "judge.params.backend.params"


def _options(args: Sequence[str]) -> tuple[Path, dict[str, str], set[str], list[str]]:
    rest, options, flags, own, run_dir = list(args), {}, set(), [], None
    while rest:
        arg = rest.pop(0)
        flag, eq, value = arg.partition("=")
        if flag in ("--out", "--rubric", "--min-share"):
            if not eq:
                if not rest:
                    raise ConfigError(f"{flag} needs a value; usage: {USAGE}", "rubric tighten")
                value = rest.pop(0)
            options[flag[2:]] = value
        elif arg in ("--no-audit", "--no-split"):
            flags.add(arg[2:])
        elif eq and flag.lstrip("+").startswith(OWN_PREFIX):
            own.append(arg.lstrip("+"))
        elif arg.startswith("-") or eq or run_dir is not None:
            raise ConfigError(f"unexpected argument {arg!r}; usage: {USAGE}", "rubric tighten")
        else:
            run_dir = Path(arg)
    if run_dir is None:
        raise ConfigError(f"give the run directory; usage: {USAGE}", "rubric tighten")
    if not run_dir.is_dir():
        raise ConfigError(f"{run_dir} is not a directory (a run directory of rlkit fit)", "rubric tighten RUN_DIR")
    return run_dir, options, flags, own


def _backend_ref(own: Sequence[str]) -> Any:
    """``tighten.backend`` as a judge-backend reference (a name, or ``{name, params}`` as ``judge.params.backend``
    takes), from the command's ``tighten.*`` arguments; None when none is given."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from rlkit.core.refs import BackendRef

    if not own:
        return None
    try:
        tree = OmegaConf.to_container(OmegaConf.from_dotlist(list(own)), resolve=True)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"cannot read {' '.join(own)}: {str(exc).splitlines()[0]}", "tighten") from None
    mine = tree.get("tighten") if isinstance(tree, dict) else None
    unknown = sorted(set(mine or {}) - set(OWN_KEYS))
    if unknown:
        raise ConfigError(f"unknown option; valid: {', '.join(OWN_PREFIX + k for k in OWN_KEYS)}",
                          f"{OWN_PREFIX}{unknown[0]}")
    try:
        return BackendRef.coerce(mine["backend"])
    except ValueError as exc:
        raise ConfigError(str(exc), "tighten.backend") from None


def _model_writer(ref: Any, rubric: Any) -> tuple[Any, Any]:
    """The model that writes anchors, and the wrapper to close when done: the backend ``ref`` names, built by the
    run's registry as the ``llm`` judge's ``backend`` is and wrapped as a judge holds it
    (:class:`rlkit.judging.asking.JudgeBackend`)."""
    import dataclasses

    import pydantic

    from rlkit.commands.common import run_registry
    from rlkit.evaluation.rubric_tightening_model import DEFAULT_RETRIES, ModelAnchors
    from rlkit.judging.asking import JudgeBackend

    registry = run_registry()
    where = "tighten.backend.params"
    wrapper = None
    try:
        bound = registry.validate_params("judge_backend", ref.name, ref.params, where)
        ref.plugin = registry.create("judge_backend", ref.name, ref.params, where)
        wrapper = JudgeBackend(ref, build_offline=lambda *_: None)
        if wrapper.offline:
            raise ConfigError(f"backend {ref.name} names no model to write anchors with; point it at one "
                              "(tighten.backend={name: openai, params: {base_url: ..., model: ...}})",
                              "tighten.backend")
        wrapper.check_ready()
    except ConfigError as exc:
        if wrapper is not None:
            wrapper.close()
        # a backend names its own keys where a judge configures it (judge.params.backend.params.base_url): here they
        # are this command's
        if exc.where and exc.where.startswith(JUDGE_BACKEND_PARAMS):
            raise ConfigError(exc.message, where + exc.where[len(JUDGE_BACKEND_PARAMS):]) from None
        raise
    # the backend's own retries (its max_retries param), as its requests are retried; a backend without one: 1
    fields = (dataclasses.asdict(bound) if dataclasses.is_dataclass(bound) else
              pydantic.TypeAdapter(type(bound)).dump_python(bound) if bound is not None else {})
    retries = fields.get("max_retries", DEFAULT_RETRIES)
    return ModelAnchors(wrapper.get(), int(retries), rubric.name, rubric.description), wrapper


def _rule_rescorer(rubric: Any) -> Any:
    """The rule judge's scores of one dimension under ``rubric`` (the run's): what tighten's pattern rule reads to
    tell whether the top samples' score rests on their shared words (rlkit.evaluation.rubric_tightening)."""
    import math

    from rlkit import Rollout
    from rlkit.commands.common import run_registry

    judge = run_registry().create("judge", "rule", {}, "rubric tighten")

    def rescore(name: str, pairs: Sequence[tuple[str, dict[str, Any]]]) -> list[float | None]:
        if not pairs:
            return []
        at = rubric.dimension_names.index(name)
        scores = judge.score(Rollout(records=[dict(r) for _, r in pairs], completions=[[t] for t, _ in pairs]), rubric)
        return [None if math.isnan(v) else float(v) for v in scores[:, 0, at].tolist()]

    return rescore


def cmd_rubric_tighten(args: Sequence[str]) -> int:
    from rlkit.core.atomic import atomic_write_text
    from rlkit.core.rubric import load_rubric
    from rlkit.core.rubric_diff import diff_rubrics, render_diff
    from rlkit.evaluation.rubric_tightening import (
        MIN_SHARE,
        audit_records,
        judging_overrides,
        proposal_yaml,
        propose,
        read_by_rules,
        read_saturation,
        run_config,
        run_judge,
        run_rubric,
    )

    run_dir, options, flags, own = _options(args)
    audit = "no-audit" not in flags
    ref = _backend_ref(own)
    try:
        min_share = float(options.get("min-share", MIN_SHARE))
    except ValueError:
        raise ConfigError(f"must be a number in [0, 1), got {options['min-share']!r}", "--min-share") from None
    if not 0 <= min_share < 1:
        raise ConfigError(f"must be in [0, 1), got {min_share:g}", "--min-share")
    rubric = run_rubric(run_dir, options.get("rubric"))
    saturation = read_saturation(run_dir, rubric, min_share)
    console = rich_console()
    if not saturation:
        print(f"no dimension saturated: none of rubric {rubric.name} v{rubric.version}'s dimensions is saturated in "
              f"more than {min_share:.0%} of groups over the run's last steps; nothing written")
        return 0
    writer, wrapper = _model_writer(ref, rubric) if ref is not None and any(s.at_top for s in saturation) else \
        (None, None)
    try:
        proposal = propose(rubric, saturation, run_judge(run_dir), split="no-split" not in flags,
                           run_config=run_config(run_dir), anchors=writer,
                           anchors_by=writer.label if writer is not None else None,
                           rescore=_rule_rescorer(rubric))
    finally:
        if wrapper is not None:
            wrapper.close()
    for sat in proposal.floored:
        print(f"{sat.name}: saturated in {sat.share:.0%} of groups (steps {sat.steps[0]}-{sat.steps[1]}) but below "
              f"its ceiling ({sat.at_ceiling:.0%} of the window's samples at {sat.ceiling}): too hard there, not too "
              "easy; left as it is")
    for sat in proposal.saturated:
        high = next(d.high for d in rubric.dimensions if d.name == sat.name)
        below = f" (below the range's top {high:g}: no completion got more; do its checks contradict each other?)" \
            if sat.ceiling is not None and sat.ceiling < high - 1e-6 else ""
        print(f"{sat.name}: saturated in {sat.share:.0%} of groups (steps {sat.steps[0]}-{sat.steps[1]}), "
              f"{sat.at_ceiling:.0%} of the window's samples at its ceiling {sat.ceiling:g}{below}; "
              f"{len(sat.top)} distinct top samples, {len(sat.others)} below")
        for change in proposal.changes.get(sat.name, []):
            print(f"  → {change}")
        if sat.name in proposal.unchanged:
            print(f"  no rule applies: {proposal.unchanged[sat.name]}; tighten it by hand (docs/rubrics.md)")
        if sat.name in proposal.whole:
            print(f"  no split: {proposal.whole[sat.name]}")
    if proposal.data is None:
        print("nothing to propose: no saturated dimension has a rule that makes it harder; nothing written")
        return 0
    new = proposal.new_rubric
    assert new is not None
    out = Path(options["out"]) if "out" in options else run_dir / "tighten" / f"{rubric.name}-v{new.version}.yaml"
    if out.exists() and out.is_dir():
        raise ConfigError(f"{out} is a directory; give a file", "--out")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, proposal_yaml(proposal, run_dir))
    written = load_rubric(out)  # what the file says, checked as a run will load it
    diff = diff_rubrics(rubric, written)
    console.print(render_diff(diff, str(rubric.source), str(out)))
    print(f"wrote {out} ({written.name} v{written.version}, hash {written.short_hash})")
    judge = run_judge(run_dir)
    if diff.text_only and read_by_rules(rubric, proposal.changes, judge):
        # the audit scores with the run's judge too, so it passes a proposal that changes nothing that judge reads
        print("rlkit: warning: the proposal changes only anchors or descriptions (texts a model reads) of "
              f"dimensions the run's judge ({judge}) scores by rules, which do not read them: a run continued on it "
              "with the same judge trains as before. "
              "Judge these dimensions with a model (judge=llm, or judge=hybrid routing them to it) or tighten their "
              "checks by hand (docs/rubrics.md)", file=sys.stderr)
    if not audit:
        print(f"not audited (--no-audit); before training on it: rlkit rubric audit rubric.path={out} "
              "audit.records=FILE")
        return 0
    records = out.parent / f"{out.stem}.audit_records.jsonl"
    rows = audit_records(run_dir)
    atomic_write_text(records, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    overrides = [*judging_overrides(run_dir), f"rubric.path={out.resolve()}", f"audit.records={records.resolve()}",
                 f"audit.output={(out.parent / f'{out.stem}.audit').resolve()}"]
    print(f"$ rlkit rubric audit {' '.join(overrides)}  ({len(rows)} of the run's own completions)")
    sys.stdout.flush()
    from rlkit.commands.rubric_audit import cmd_rubric_audit

    return cmd_rubric_audit(overrides)
