"""The contract suite of audit probes (``rlkit_register_audit_probes``): ``game`` returns text or None, is a pure
function of the record and rubric, leaves the record as it was, and copes with records that lack a reference or
give their prompt as chat messages."""

from __future__ import annotations

import copy
from typing import Any

from rlkit.core.rubric import Rubric, rubric_from_dict


def example_audit_records() -> list[dict[str, Any]]:
    """Audited records of several shapes: a correct and a wrong number, prose, no reference, chat messages, empty."""
    return [{"prompt": "3+4=", "completion": "7", "reference": "7"},
            {"prompt": "9+8=", "completion": "16", "reference": "17"},
            {"prompt": "Name the capital of France.", "completion": "Paris is the capital.\n- because: history",
             "reference": "Paris"},
            {"prompt": "Say hello.", "completion": "hello"},
            {"prompt": [{"role": "user", "content": "2+2="}], "completion": "4", "reference": 4},
            {"prompt": "1+1=", "completion": "", "reference": "2"}]


def example_audit_rubric() -> Rubric:
    """A rule-checked rubric with keyword checks and anchors, what keyword-minded probes read."""
    return rubric_from_dict({"name": "probe-contract", "version": "1", "dimensions": [
        {"name": "correctness", "type": "binary", "anchors": {1: {"text": "Correct", "positive": ["7"]}},
         "checks": [{"type": "match", "field": "reference", "mode": "numeric"}]},
        {"name": "explains", "type": "binary", "checks": [{"type": "keywords", "any": ["because", "therefore"]}]}]},
        source="<probe contract rubric>")


class AuditProbeContract:
    """Subclass and provide a ``probe`` fixture (and optionally ``records`` and ``rubric``)."""

    def _cases(self, request: Any) -> tuple[list[dict[str, Any]], Rubric]:
        names = request.fixturenames
        records = request.getfixturevalue("records") if "records" in names else example_audit_records()
        rubric = request.getfixturevalue("rubric") if "rubric" in names else example_audit_rubric()
        return records, rubric

    def test_returns_text_or_none(self, probe, request):
        records, rubric = self._cases(request)
        for record in records:
            out = probe.game(dict(record), rubric)
            assert out is None or isinstance(out, str), f"game() returned {type(out).__name__}"

    def test_changes_something_where_it_applies(self, probe, request):
        records, rubric = self._cases(request)
        outs = [probe.game(dict(r), rubric) for r in records]
        assert any(o is not None for o in outs), "the probe applied to none of the example records"
        for record, out in zip(records, outs, strict=True):
            assert out is None or out != record["completion"], "a gamed completion equal to the original tests nothing"

    def test_is_deterministic_and_leaves_the_record(self, probe, request):
        records, rubric = self._cases(request)
        for record in records:
            before = copy.deepcopy(record)
            first, second = probe.game(record, rubric), probe.game(record, rubric)
            assert first == second, "game() must be a pure function of the record and rubric"
            assert record == before, "game() must not change the record"

    def test_describes_itself(self, probe):
        description = getattr(probe, "description", None)
        assert description is None or (isinstance(description, str) and description.strip())

    def test_content_free_is_a_bool(self, probe):
        # a content-free probe's completion must beat the empty answer too where the original does not: a truthy
        # non-bool (a string "false") would switch that on by mistake
        assert isinstance(getattr(probe, "content_free", False), bool), "content_free must be True or False"
