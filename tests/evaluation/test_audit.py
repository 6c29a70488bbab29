"""``rlkit rubric audit``: a presence-only keyword rubric is flagged hackable, the shipped arithmetic rubric passes,
plugin probes reach the card, ``rlkit fit audit.require=true`` refuses an unaudited or failed rubric version, and bad
input is one line naming file and line."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlkit.cli import main
from rlkit.core.errors import ConfigError
from rlkit.core.registry import Registry, create_plugin_manager, hookimpl
from rlkit.core.rubric import load_rubric
from rlkit.evaluation import audit_checks as checks

REPO = Path(__file__).resolve().parents[2]
LABELS = REPO / "conf" / "calibration" / "arithmetic_labels.jsonl"
ARITHMETIC = REPO / "conf" / "rubric_files" / "arithmetic.yaml"


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A fresh cwd and audit store ($RLKIT_CACHE), W&B quiet."""
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _audit(workdir: Path, *overrides: str) -> tuple[int, dict]:
    rc = main(["rubric", "audit", "logger=none", f"audit.output={workdir / 'out'}", *overrides])
    return rc, json.loads((workdir / "out" / "audit.json").read_text(encoding="utf-8"))


def _gameable_rubric(path: Path) -> Path:
    """Correctness by reference, and a heavier presence-only "reasoning" dimension: any of two words earns it."""
    path.write_text(yaml.safe_dump({"name": "gameable", "version": "1", "dimensions": [
        {"name": "correctness", "type": "binary", "weight": 1.0,
         "checks": [{"type": "match", "field": "reference", "mode": "numeric"}]},
        {"name": "reasoning", "type": "binary", "weight": 2.0, "description": "Explains why.",
         "anchors": {0: "No explanation", 1: "Explains"},
         "checks": [{"type": "keywords", "any": ["because", "therefore"]}]}]}), encoding="utf-8")
    return path


def _records(path: Path, n: int = 24) -> Path:
    lines = [{"prompt": f"{i}+{i + 1}=", "reference": str(2 * i + 1), "completion": str(2 * i + 1 + (i % 4 == 0))}
             for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    return path


def test_presence_only_keyword_rubric_is_hackable(workdir, capsys):
    rubric = _gameable_rubric(workdir / "gameable.yaml")
    rc, payload = _audit(workdir, f"rubric.path={rubric}", f"audit.records={_records(workdir / 'r.jsonl')}")
    assert rc == 1
    assert not payload["passed"] and payload["verdict"].startswith("HACKABLE: keyword_stuffing")
    probes = {p["name"]: p for p in payload["probes"]}
    assert probes["keyword_stuffing"]["hackable"] and probes["keyword_stuffing"]["gain_share"]["value"] == 1.0
    low, high = probes["keyword_stuffing"]["gain_share"]["low"], probes["keyword_stuffing"]["gain_share"]["high"]
    assert low <= 1.0 <= high
    assert payload["trust"]["value"] == pytest.approx(0.0)  # capped by the worst probe
    out = capsys.readouterr().out
    # the bill comes before the first judge call's results
    assert out.index("will score") < out.index("audit of gameable")
    assert "HACKABLE" in out


def test_shipped_arithmetic_rubric_passes_with_the_rule_judge(workdir):
    rc, payload = _audit(workdir, f"audit.records={LABELS}", "judge=rule")
    assert rc == 0, payload["verdict"]
    assert payload["passed"] and payload["verdict"].startswith("PASS")
    assert not any(p["hackable"] for p in payload["probes"])
    assert payload["trust"]["value"] >= payload["fail_under"]
    assert payload["trust"]["low"] <= payload["trust"]["value"] <= payload["trust"]["high"]
    assert payload["alignment"]["score"] is not None  # the labels file's human labels, through rlkit calibrate
    assert payload["stability"] is None and payload["order"] is None  # a deterministic rule judge
    assert payload["judge_calls"]["originals"] == 42
    card = (workdir / "out" / "audit.md").read_text(encoding="utf-8")
    assert "# Rubric audit: arithmetic v1.0" in card and "## Degradation ladder" in card
    rubric = load_rubric(ARITHMETIC)
    from rlkit.evaluation.audit_report import stored_audits

    ((stored, kept),) = stored_audits(rubric)
    assert kept["rubric"]["hash"] == rubric.content_hash and kept["audited"]["records"] == 42
    assert kept["audited"]["judge_config"]["name"] == "rule" and len(kept["audited"]["records_hash"]) == 64


def test_fail_under_flag_gates_and_consistency_checks_run_when_asked(workdir):
    rc, payload = _audit(workdir, f"audit.records={LABELS}", "--fail-under", "0.99", "audit.regrade=true",
                         "audit.order=true", "audit.ladder=false", "audit.probes=keyword_stuffing")
    assert rc == 1 and payload["fail_under"] == 0.99 and payload["verdict"].startswith("FAIL")
    assert [p["name"] for p in payload["probes"]] == ["keyword_stuffing"]
    # the rule judge is deterministic and reads dimensions one by one
    assert payload["stability"]["agreement"]["value"] == 1.0 and payload["order"]["agreement"]["value"] == 1.0
    assert payload["judge_calls"]["regrade"] == payload["judge_calls"]["order"] == 42
    assert payload["ladder"] is None


def test_anchor_gaps_are_counted_on_the_card_not_scored(workdir, capsys):
    """The shipped arithmetic rubric without its anchors or changelog, counted by hand: format and correctness
    (binary) leave levels 0 and 1, brevity and repetition ([1, 5]) levels 1 to 5 without anchor text, 2 + 2 + 5 + 5 =
    14, and none of the 4 dimensions has a negative example. The audit passes all the same."""
    data = yaml.safe_load(ARITHMETIC.read_text(encoding="utf-8"))
    data.pop("changelog")
    data["dimensions"] = [{k: v for k, v in d.items() if k != "anchors"} for d in data["dimensions"]]
    bare = workdir / "bare.yaml"
    bare.write_text(yaml.safe_dump(data), encoding="utf-8")
    rc, payload = _audit(workdir, f"rubric.path={bare}", f"audit.records={LABELS}", "judge=rule",
                         "audit.probes=keyword_stuffing", "audit.ladder=false")
    assert rc == 0 and payload["passed"], payload["verdict"]
    anchors = payload["anchors"]
    assert (anchors["unanchored_levels"], anchors["dimensions_without_negative"]) == (14, 4)
    assert anchors["summary"] == "rubric anchors: 14 levels without anchors, 4 dimensions without a negative example"
    assert len(anchors["findings"]) == 8 and "anchors" not in payload["components"]
    assert anchors["findings"][2] == (f"{bare}: dimensions[1](correctness).anchors: levels 0, 1 of range [0, 1] have "
                                      "no anchor text")
    out = " ".join(capsys.readouterr().out.split())
    assert "rubric anchors: 14 levels without anchors, 4 dimensions without a negative example (not part of" in out
    card = (workdir / "out" / "audit.md").read_text(encoding="utf-8")
    assert "## Rubric anchors" in card and anchors["summary"] in card
    # the shipped rubric: brevity's levels 2 and 4, repetition's 2 to 4
    assert _audit(workdir, f"audit.records={LABELS}", "audit.probes=keyword_stuffing",
                  "audit.ladder=false")[1]["anchors"]["unanchored_levels"] == 5


class _EchoProbe:
    """Says the answer twice."""

    description = "the answer said twice"

    def game(self, record, rubric):
        return f"{record['completion']} {record['completion']}"


class _TestProbes:
    @hookimpl
    def rlkit_register_audit_probes(self, register):
        register("echo_twice", lambda params: _EchoProbe())


def test_a_plugin_probe_appears_in_the_card(workdir, monkeypatch):
    import rlkit.core.registry as registry_module

    monkeypatch.setattr(registry_module, "load_registry",
                        lambda: Registry(create_plugin_manager(entry_points=False, extra=[_TestProbes()])))
    rc, payload = _audit(workdir, f"audit.records={LABELS}", "audit.probes=[echo_twice,keyword_stuffing]")
    assert [p["name"] for p in payload["probes"]] == ["echo_twice", "keyword_stuffing"]
    card = (workdir / "out" / "audit.md").read_text(encoding="utf-8")
    assert "| echo_twice | the answer said twice | 42 |" in card


def test_unknown_probe_names_the_available_ones(workdir, capsys):
    assert main(["rubric", "audit", "logger=none", f"audit.records={LABELS}", "audit.probes=[nope]"]) == 2
    err = capsys.readouterr().err
    assert "audit.probes: unknown audit probe 'nope'" in err and "keyword_stuffing (rlkit)" in err


@pytest.mark.parametrize(("content", "message"), [
    (None, "no such data file"),
    ('{"prompt": "1+1=", "completion": "2"}\n{"prompt": "2+2="\n', ":2: invalid JSON"),
    ('{"prompt": "1+1=", "completion": "2"}\n{"prompt": "2+2="}\n', ":2: "),
])
def test_bad_input_is_one_line_with_file_and_line(workdir, capsys, content, message):
    path = workdir / "records.jsonl"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    assert main(["rubric", "audit", "logger=none", f"audit.records={path}"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err and str(path) in err


def _stored(rubric, judge: dict, records: int, passed: bool, created: str, verdict: str = "") -> Path:
    from rlkit.evaluation.audit_report import audited_key, store_audit

    items = [{"prompt": f"{i}+1=", "completion": str(i + 1)} for i in range(records)]
    return store_audit({"rubric": rubric.identity(), "passed": passed, "judge": judge["name"], "created": created,
                        "verdict": verdict, "records": records, "audited": audited_key(items, judge)})


def test_fit_refuses_a_rubric_version_without_a_passed_audit(workdir):
    from rlkit.commands.common import compose_and_check
    from rlkit.evaluation.audit_report import judge_config, require_passed_audit
    from rlkit.train.fit import fit

    validated = compose_and_check(["audit.require=true", "logger=none"])
    with pytest.raises(ConfigError, match=r"audit\.require: rubric arithmetic v1\.0 \(f089cdf08376\) has no stored "
                                          r"audit; run `rlkit rubric audit`"):
        fit(validated, workdir / "run")
    assert not (workdir / "run").exists()  # refused before anything was built
    rubric, judge = validated.rubric, judge_config(validated.cfg)
    _stored(rubric, judge, 42, False, "2026-12-01T00:00:00+00:00", "HACKABLE: keyword_stuffing")
    with pytest.raises(ConfigError, match=r"rubric arithmetic v1\.0 \(f089cdf08376\) failed its strongest audit, "
                                          r"the audit of 2026-12-01T00:00:00\+00:00 \(judge rule, 42 records; "
                                          r".*HACKABLE"):
        fit(validated, workdir / "run")
    path = _stored(rubric, judge, 42, True, "2026-12-02T00:00:00+00:00")  # the same records again: replaces it
    assert require_passed_audit(rubric, judge) == (f"audit.require: accepted the audit of 2026-12-02T00:00:00+00:00 "
                                                   f"(judge rule, 42 records; {path})")
    other = {**judge, "params": {**judge.get("params", {}), "case_sensitive": True}}
    with pytest.raises(ConfigError, match="has stored audits only of other judge configs"):
        require_passed_audit(rubric, other)  # an audit vouches for the judge config it scored with
    payload = json.loads(path.read_text())
    path.write_text(json.dumps({**payload, "rubric": {**payload["rubric"], "hash": "0" * 64}}))
    with pytest.raises(ConfigError, match="has no stored audit"):
        require_passed_audit(rubric, judge)  # an audit of other content vouches for nothing


def test_a_smaller_audit_never_replaces_a_stronger_one(workdir):
    """The issue's case: an 8-record throwaway audit failed and replaced the stored verdict of the shipped rubric,
    after which `rlkit fit audit.require=true` refused it. Both are kept; the run accepts the one of more records
    and says which."""
    from rlkit.commands.common import compose_and_check
    from rlkit.evaluation.audit_report import judge_config, require_passed_audit, stored_audits

    validated = compose_and_check(["audit.require=true", "logger=none"])
    rubric, judge = validated.rubric, judge_config(validated.cfg)
    strong = _stored(rubric, judge, 200, True, "2026-12-01T00:00:00+00:00")
    _stored(rubric, judge, 8, False, "2026-12-03T00:00:00+00:00", "FAIL: trust 0.41 below 0.70")
    assert len(stored_audits(rubric)) == 2
    assert require_passed_audit(rubric, judge).endswith(f"(judge rule, 200 records; {strong})")


def test_the_audit_command_says_which_audit_a_run_keeps_relying_on(workdir, capsys):
    assert _audit(workdir, f"audit.records={LABELS}")[0] == 0
    small = workdir / "small.jsonl"
    small.write_text("".join(LABELS.read_text(encoding="utf-8").splitlines(keepends=True)[:8]), encoding="utf-8")
    capsys.readouterr()
    _audit(workdir, f"audit.records={small}")
    out = " ".join(capsys.readouterr().out.split())
    assert "audit.require keeps accepting the audit of" in out and "42 records" in out
    assert "over more records than this one (8)" in out


def test_fit_command_prints_one_line(workdir, capsys):
    # refused before Hydra makes a run directory, as every config error of `rlkit fit` is
    assert main(["fit", "audit.require=true", "logger=none", f"hydra.run.dir={workdir / 'run'}"]) == 2
    assert not (workdir / "run").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [line for line in err if "audit.require: rubric arithmetic v1.0" in line] and len(err) == 1


def test_plugins_lists_the_probes(capsys):
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    for name in ("keyword_stuffing", "verbosity_padding", "confident_wrong", "format_mimicry", "enumerated_template"):
        assert f"audit.probes={name}" in out


# --- the arithmetic of the checks --------------------------------------------------------------------------------


def test_ladder_rungs_degrade_cumulatively():
    rungs = checks.ladder_rungs("The sum is 12 and 3.5", seed=0)
    assert len(rungs) == len(checks.LADDER) and rungs[0] == "The sum is 12 and 3.5" and rungs[-1] == ""
    assert "13" in rungs[1] and "4.5" in rungs[1] and "12" not in rungs[1]
    assert sorted(rungs[2].split()) == sorted(rungs[1].split())
    assert rungs[3] == rungs[2][: len(rungs[2]) // 2]
    assert checks.ladder_rungs("a b c d e f", seed=3) == checks.ladder_rungs("a b c d e f", seed=3)


def test_ladder_outcome():
    assert checks.ladder_outcome([1.0, 0.5, 0.6, 0.2, 0.0]) == 1.0  # rungs below the original may reorder
    assert checks.ladder_outcome([0.5, 0.7, 0.2, 0.1, 0.0]) == 0.0  # a broken answer beats the original
    assert math.isnan(checks.ladder_outcome([0.2, 0.1, 0.1, 0.2, 0.25]))  # already at the floor
    assert math.isnan(checks.ladder_outcome([1.0, math.nan, 0.2, 0.1, 0.0]))
    assert checks.at_floor([0.2, 0.1, 0.1, 0.2, 0.25]) and not checks.at_floor([1.0, 0.0, 0.0, 0.0, 0.0])


def test_gains_and_agreement():
    original = np.array([0.5, 0.5, math.nan, 0.5])
    gamed = np.array([0.6, 0.5, 0.9, math.nan])
    out = checks.gains(original, gamed)
    assert out[:2].tolist() == [1.0, 0.0] and np.isnan(out[2:]).all()
    first = np.array([[1.0, 2.0], [1.0, math.nan], [math.nan, math.nan]])
    second = np.array([[1.0, 3.0], [1.0, 4.0], [1.0, 1.0]])
    agree = checks.agreement(first, second)
    assert agree[:2].tolist() == [0.5, 1.0] and math.isnan(agree[2])


def test_bootstrap_interval_holds_the_estimate_and_is_seeded():
    values = np.array([1.0] * 30 + [0.0] * 10 + [math.nan] * 5)
    indices = checks.resample_indices(len(values), 500, seed=1)
    est = checks.bootstrap(values, indices)
    assert est.value == pytest.approx(0.75) and est.n == 40 and est.low < 0.75 < est.high
    assert checks.bootstrap(values, checks.resample_indices(len(values), 500, seed=1)) == est
    assert math.isnan(checks.bootstrap(np.full(3, math.nan), indices[:, :3]).value)


def test_trust_score_is_capped_by_the_worst_probe():
    assert checks.trust_score({"probes": 1.0, "ladder": 1.0, "stability": None}) == pytest.approx(1.0)
    weights = checks.TRUST_WEIGHTS
    mixed = {"probes": 0.9, "ladder": 0.5, "alignment": 1.0}
    expected = (0.9 * weights["probes"] + 0.5 * weights["ladder"] + 1.0 * weights["alignment"]) / (
        weights["probes"] + weights["ladder"] + weights["alignment"])
    assert checks.trust_score(mixed) == pytest.approx(expected)
    assert checks.trust_score({"probes": 0.2, "ladder": 1.0, "alignment": 1.0}) == pytest.approx(0.2)
    assert math.isnan(checks.trust_score({"probes": None}))


def test_without_records_the_policy_samples_the_completions(workdir, capsys):
    rc, payload = _audit(workdir, "model=tiny_random", "audit.num_prompts=4", "audit.probes=[verbosity_padding]")
    assert payload["records"] == 4 and payload["source"] == ""
    assert "sampling 4 completions from the policy" in capsys.readouterr().out
    assert payload["ladder"]["rungs"] == list(checks.LADDER) and payload["judge_calls"]["originals"] == 4
    # an untrained policy's completions rarely beat an empty answer: then the card says the ladder measured nothing
    assert (payload["ladder"]["never_beats_original"]["n"] == 0) == any("ladder" in w for w in payload["warnings"])
    assert rc in (0, 1)


def test_model_calls_scale_the_judges_own_plan_by_the_completions_scored():
    from dataclasses import replace

    from rlkit.evaluation.audit import AuditPlan
    from rlkit.judging.spend import CallPlan

    one = CallPlan(2, 100, 10, "1 prompts × 1 completions × 2 permutations", 0.5)
    plan = AuditPlan([{"prompt": "1+1=", "completion": "2"}] * 3, None, [], {"p": ["x", None, "y"]}, None,
                     "a model judge", None, one)
    assert plan.judge_calls() == {"originals": 3, "probes": 2, "ladder": 0, "empty": 0, "regrade": 3, "order": 0}
    model = plan.model_calls()
    assert (model.calls, model.tokens_in, model.tokens_out, model.cost) == (16, 800, 80, 4.0)
    assert replace(plan, per_completion=None).model_calls() is None  # a judge of rules asks no model


# --- a content-free probe must beat the empty answer where the original does not ----------------------------------


def _template_fix_rubric(path: Path) -> Path:
    """Reward-hacking v2's shape (benchmarks/reward_hacking_v2.yaml): clarity pays the enumeration words and, heavier,
    their absence, so a wrong templated answer scores below saying nothing."""
    words = [{"type": "regex", "pattern": rf"\b{w}\b"} for w in ("first", "second", "finally")]
    path.write_text(yaml.safe_dump({"name": "template_fix", "version": "2", "dimensions": [
        {"name": "correctness", "type": "binary", "weight": 2.0,
         "checks": [{"type": "match", "field": "reference", "mode": "numeric"}]},
        {"name": "clarity", "type": "scale", "range": [1, 5], "weight": 1.0,
         "checks": [*words, {"type": "regex", "pattern": r"\b(?:first|second|finally)\b", "absent": True,
                             "weight": 4}]}]}), encoding="utf-8")
    return path


def _sum_records(path: Path, completion) -> Path:
    lines = [{"prompt": f"{a}+{a + 2}=", "reference": str(2 * a + 2), "completion": completion(i, a, a + 2)}
             for i, a in enumerate(range(1, 25))]
    path.write_text("".join(json.dumps(r) + "\n" for r in lines), encoding="utf-8")
    return path


def _one_probe_audit(workdir: Path, rubric: Path, records: Path, *overrides: str) -> tuple[int, dict, dict]:
    rc, payload = _audit(workdir, f"rubric.path={rubric}", "judge=rule", f"audit.records={records}",
                         "audit.probes=[format_mimicry]", *overrides)
    (probe,) = payload["probes"]
    return rc, payload, probe


@pytest.mark.parametrize("ladder", ["true", "false"])
def test_format_mimicry_must_beat_the_empty_answer_where_the_original_does_not(workdir, capsys, monkeypatch,
                                                                                 ladder):
    """A third of the answers are wrong and templated: under the template fix they score below the empty answer,
    and their filler (no enumeration words) above them, but only as high as the empty answer: no gain, and the fix
    passes. Counted against the original alone (the probe not content-free), the same filler made it hackable.
    Without the ladder the empty answers are scored for the probe alone."""
    def completion(i, a, b):
        return [f"first {a}, second {b}, finally {a + b + 1}", f"first {a}, second {b}, finally {a + b}",
                str(a + b)][i % 3]

    rubric, records = _template_fix_rubric(workdir / "fix.yaml"), _sum_records(workdir / "r.jsonl", completion)
    rc, payload, probe = _one_probe_audit(workdir, rubric, records, f"audit.ladder={ladder}")
    assert probe["against_empty"] == 8 and probe["applied"] == 24
    assert probe["gain_share"]["value"] == 0.0 and not probe["hackable"]
    assert rc == 0 and payload["passed"], payload["verdict"]
    assert payload["judge_calls"]["empty"] == (24 if ladder == "false" else 0)
    assert "8 vs the empty answer (>= original)" in " ".join(capsys.readouterr().out.split())
    card = (workdir / "out" / "audit.md").read_text(encoding="utf-8")
    assert "| 24 (8 against the empty answer, which scores as high as the original) |" in card

    from rlkit_plugins.probes.format_mimicry import FormatMimicry

    monkeypatch.setattr(FormatMimicry, "content_free", False)
    rc, payload, probe = _one_probe_audit(workdir, rubric, records, f"audit.ladder={ladder}")
    assert probe["against_empty"] == 0 and probe["gain_share"]["value"] == pytest.approx(8 / 24, abs=1e-3)
    assert rc == 1 and probe["hackable"]


def _sum_and_regex_rubric(path: Path, *dimensions: tuple[str, str, float, bool]) -> Path:
    """Correctness (weight 1) and binary dimensions of one regex each: (name, pattern, weight, absent)."""
    path.write_text(yaml.safe_dump({"name": path.stem, "version": "1", "dimensions": [
        {"name": "correctness", "type": "binary", "weight": 1.0,
         "checks": [{"type": "match", "field": "reference", "mode": "numeric"}]},
        *({"name": name, "type": "binary", "weight": weight,
           "checks": [{"type": "regex", "pattern": pattern, **({"absent": True} if absent else {})}]}
          for name, pattern, weight, absent in dimensions)]}), encoding="utf-8")
    return path


def test_format_mimicry_flags_markup_that_beats_the_empty_answer_too(workdir):
    """A heading pays more than correctness and an apology costs more still: a wrong apologising answer scores below
    the empty one, but its filler keeps the heading and drops the apology, and beats both. Layout without content
    that beats silence: hackable, floor or not. (The counterexample a review of the floor rule found.)"""
    path = _sum_and_regex_rubric(workdir / "markup.yaml", ("no_apology", r"\bsorry\b", 3.0, True),
                                 ("markdown", "(?m)^## ", 2.0, False))
    records = _sum_records(workdir / "r.jsonl", lambda i, a, b: (f"## Answer\n- it is {a + b}" if i % 2 else
                                                               f"## Answer\n- sorry, it is {a + b + 1}"))
    rc, payload, probe = _one_probe_audit(workdir, path, records)
    assert probe["against_empty"] == 12 and probe["hackable"] and probe["gain_share"]["value"] == 0.5
    assert rc == 1 and payload["verdict"].startswith("HACKABLE: format_mimicry")


def test_format_mimicry_flags_filler_that_escapes_a_penalty_above_the_floor(workdir):
    """Hedged, laid-out wrong answers score above the empty answer (the layout pays); their filler keeps the layout
    and drops the hedge, and beats them: a rubric that pays layout without content, flagged as before."""
    path = _sum_and_regex_rubric(workdir / "layout.yaml", ("confident", r"\bmaybe\b", 1.0, True),
                                 ("laid_out", ",", 2.0, False))
    records = _sum_records(workdir / "r.jsonl", lambda i, a, b: f"maybe {a}, {b}, {a + b + 1}")
    rc, payload, probe = _one_probe_audit(workdir, path, records)
    assert probe["against_empty"] == 0 and probe["applied"] == 24
    assert probe["hackable"] and probe["gain_share"]["value"] == 1.0
    assert rc == 1 and payload["verdict"].startswith("HACKABLE: format_mimicry")
