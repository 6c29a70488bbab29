"""Reusable contract-test suites for plugin authors.

Subclass a suite in your own tests and provide its fixtures; every ``test_*`` method then runs
against your plugin exactly as it runs against rlkit's built-ins::

    import pytest
    from rlkit.testing import JudgeContract

    class TestMyJudge(JudgeContract):
        @pytest.fixture
        def judge(self):
            return MyJudge(MyJudge.Params())
"""

from rlkit.testing.audit_probe_contract import AuditProbeContract, example_audit_records, example_audit_rubric
from rlkit.testing.config import offline_judge, one_error_line, plugin_names, validate_overrides
from rlkit.testing.contracts import (
    AdvantageEstimatorContract,
    AggregatorContract,
    GeneratorContract,
    JudgeBackendContract,
    JudgeContract,
    PreferenceConstructorContract,
    WeightSchedulerContract,
    example_chats,
    example_prompts,
    example_reward_batch,
    example_rollout,
    example_rubric,
)
from rlkit.testing.environment_contract import EnvironmentContract
from rlkit.testing.monitor_contract import MonitorContract, example_monitor_views, run_monitor
from rlkit.testing.objective_contract import ObjectiveContract, example_completion_inputs, example_pair_inputs
from rlkit.testing.runs import fit_killed_at_first_checkpoint
from rlkit.testing.sampler_contract import PromptSamplerContract, example_sampler_records, example_sampler_rubric

__all__ = [
    "AdvantageEstimatorContract",
    "AggregatorContract",
    "AuditProbeContract",
    "EnvironmentContract",
    "GeneratorContract",
    "JudgeBackendContract",
    "JudgeContract",
    "MonitorContract",
    "ObjectiveContract",
    "PreferenceConstructorContract",
    "PromptSamplerContract",
    "WeightSchedulerContract",
    "example_audit_records",
    "example_audit_rubric",
    "example_chats",
    "example_completion_inputs",
    "example_monitor_views",
    "example_pair_inputs",
    "example_prompts",
    "example_reward_batch",
    "example_rollout",
    "example_rubric",
    "example_sampler_records",
    "example_sampler_rubric",
    "fit_killed_at_first_checkpoint",
    "plugin_names",
    "run_monitor",
    "offline_judge",
    "one_error_line",
    "validate_overrides",
]
