"""The end-of-run summary names an ensemble's agreement per dimension (logged each step as judge/agreement/<dim>,
shown nowhere before)."""

from __future__ import annotations

from rlkit.reward.diagnostics import RunningMeans
from rlkit.testing.config import validate_overrides
from rlkit.train.fit import print_summary


def test_the_summary_shows_the_members_agreement_per_dimension(capsys):
    validated = validate_overrides(["judge=ensemble", "judge.params.members=[rule, rule]"])
    means = RunningMeans()
    for value in (0.5, 0.3):
        means.update({"judge/agreement/format": 1.0, "judge/agreement/correctness": value,
                      "dimension_conflict_rate": 0.0})
    row = {name: 0.5 for name in [*validated.rubric.dimension_names, "reward"]}
    print_summary({"start": row, "end": row, "steps": 2, "diagnostics": means, "policy_dir": "p"}, validated)
    out = " ".join(capsys.readouterr().out.split())
    assert "judge members' agreement per dimension: format 1.00, correctness 0.40" in out
