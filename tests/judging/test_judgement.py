"""A judge answers each call with one ``Judgement``; a judge written before it (``score``, then "last call" members)
is read through ``judgement_of`` and keeps working alone and as a composite's member; a plugin's ``ParamError``
names the key where the plugin is really configured."""

from __future__ import annotations

import pytest
import torch

from rlkit.core.errors import ConfigError
from rlkit.core.registry import Registry, create_plugin_manager, load_registry
from rlkit.core.rubric import rubric_from_dict
from rlkit.core.types import Rollout
from rlkit.plugin import Judgement, ParamError, Spend, hookimpl, judgement_of
from rlkit.testing import JudgeContract

RUBRIC = rubric_from_dict({"name": "r", "version": "1", "dimensions": [
    {"name": "a", "type": "scale", "range": [0, 10]}, {"name": "b", "type": "binary"}]}, source="<test>")
ROLLOUT = Rollout(records=[{"prompt": "p"}, {"prompt": "q"}], completions=[["x", "yy"], ["zzz", ""]])


class LegacyJudge:
    """A third-party judge as written before ``Judgement``: the scores, then what the last call said."""

    def __init__(self, params: None = None) -> None:
        self.calls = 0

    def score(self, rollout: Rollout, rubric) -> torch.Tensor:
        self.calls += 1
        lengths = torch.tensor([[float(len(t)) for t in group] for group in rollout.completions])
        return torch.stack([lengths.clamp(max=10), (lengths > 1).float()], dim=-1)

    def reasons(self):
        return [[{"a": f"{len(t)} characters"} for t in group] for group in ROLLOUT.completions]

    def metrics(self) -> dict[str, float]:
        return {"judge/legacy_calls": float(self.calls)}

    def group_confidence(self) -> torch.Tensor:
        return torch.tensor([1.0, 0.5])

    def spend(self) -> Spend:
        return Spend(calls=2 * self.calls, tokens_in=10 * self.calls)


class _Plugin:
    @hookimpl
    def rlkit_register_judges(self, register):
        register("legacy", LegacyJudge)


def _registry() -> Registry:
    return Registry(create_plugin_manager(entry_points=False, extra=[_Plugin()]))


def test_a_judge_written_before_judgement_is_read_whole_by_the_one_adapter():
    judge = LegacyJudge()
    judge.score(ROLLOUT, RUBRIC)  # an earlier call: its spend is not this one's
    said = judgement_of(judge, ROLLOUT, RUBRIC)
    assert isinstance(said, Judgement)
    assert said.scores[0, 1].tolist() == [2.0, 1.0] and said.scores[1, 1].tolist() == [0.0, 0.0]
    assert said.reasons[1][0] == {"a": "3 characters"}
    assert said.confidence.tolist() == [1.0, 0.5]
    assert said.metrics == {"judge/legacy_calls": 2.0}
    assert (said.spend.calls, said.spend.tokens_in) == (2, 10), "the call's own spend, not the running total"


def test_a_legacy_member_reports_through_the_composite_that_delegates_to_it():
    judge = _registry().create("judge", "ensemble", {"members": ["legacy", "legacy"]})
    said = judge.assess(ROLLOUT, RUBRIC)
    assert said.reasons[0][1] == {"a": "legacy#1: 2 characters; legacy#2: 2 characters"}, "labelled by member"
    assert said.metrics["judge/legacy_calls"] == 1.0 and said.metrics["judge/agreement/a"] == 1.0
    assert said.spend.calls == 4 and judge.spend().calls == 4, "both members' calls"
    assert torch.equal(said.scores, judge.score(ROLLOUT, RUBRIC))


class TestLegacyJudgeContract(JudgeContract):
    """The contract suite reads an old-shaped judge through the adapter, as the host does."""

    @pytest.fixture
    def judge(self):
        return LegacyJudge()

    @pytest.fixture
    def rubric(self):
        return RUBRIC

    @pytest.fixture
    def rollout(self):
        return ROLLOUT


def test_a_param_error_names_the_key_where_the_judge_is_configured():
    with pytest.raises(ConfigError) as top:
        load_registry().create("judge", "llm", {"backend": "tiny", "permutations": 0})
    assert top.value.where == "judge.params.permutations"
    with pytest.raises(ConfigError) as member:
        load_registry().create("judge", "hybrid", {"judges": {"rule": "rule", "llm": {
            "name": "llm", "params": {"backend": "tiny", "permutations": 0}}}})
    assert member.value.where == "judge.params.judges.llm.params.permutations"
    assert str(member.value) == "judge.params.judges.llm.params.permutations: must be >= 1"
    with pytest.raises(ConfigError) as nested:
        load_registry().create("judge", "cascade", {"expensive": {"name": "ensemble", "params": {
            "members": ["rule", {"name": "llm", "params": {"backend": "tiny", "parse_retries": -1}}]}}})
    assert nested.value.where == "judge.params.expensive.params.members[1].params.parse_retries"


def test_a_members_rubric_refusal_names_the_members_params():
    class Picky(LegacyJudge):
        def check_rubric(self, rubric) -> None:
            raise ParamError("wants a dimension named c", "dimension")

    class _Picky:
        @hookimpl
        def rlkit_register_judges(self, register):
            register("picky", Picky)

    registry = Registry(create_plugin_manager(entry_points=False, extra=[_Plugin(), _Picky()]))
    with pytest.raises(ConfigError) as alone:
        registry.create("judge", "picky").check_rubric(RUBRIC)
    assert alone.value.where == "judge.params.dimension"
    judge = registry.create("judge", "cascade", {"cheap": "legacy", "expensive": "picky"})
    with pytest.raises(ConfigError) as member:
        judge.check_rubric(RUBRIC)
    assert member.value.where == "judge.params.expensive.params.dimension"
