"""The plugin kinds, declared once: for each, its hook, config group, protocol, built-ins' folder, contract suite and
scaffold template.

The registry, ``rlkit new plugin``, ``rlkit validate``'s declaration check and the kind tables of
``docs/concepts.md`` and ``docs/plugin-api.md`` (:mod:`rlkit.core.kind_docs`) all read :data:`KINDS`; what a plugin
of a kind has is its protocol in :mod:`rlkit.core.protocols`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlkit.core import protocols
from rlkit.core.protocols import required_members


@dataclass(frozen=True)
class PluginKind:
    """One kind of plugin: how it registers, what selects it, what it is and where its pieces live."""

    key: str  # the registry's name for the kind (``registry.get("advantage_estimator", ...)``)
    hook: str  # the registration hook in rlkit.core.hookspecs
    group: str  # the config group that selects one (for a kind no group selects, its key)
    label: str  # plural words for messages: "unknown advantage estimator 'x'; available advantage estimators: ..."
    protocol: type  # every member the host reads, required and optional (rlkit.core.protocols)
    folder: str  # the built-ins: plugins/rlkit_plugins/<folder>/
    contract: str  # the suite in rlkit.testing that a plugin of the kind passes
    fixture: str  # the fixture that suite asks for
    scaffold: str | None = None  # `rlkit new plugin --kind <scaffold>`: templates/plugin/kinds/<scaffold>/
    suffix: str = ""  # of a generated plugin's class name
    selects: tuple[str, ...] = ()  # further overrides a generated plugin needs to be used (a constructor: group_dpo)
    selected_by: str | None = None  # a kind chosen inside another setting, not by a config group
    many: bool = False  # the group selects a list of plugins, each under ``<group>.<key>`` (monitors)
    listed: bool = False  # selected as a list (``monitors=[a,b]``, ``audit.probes=[a,b]``), not one name
    page: str | None = None  # the docs page that says more

    @property
    def declares(self) -> tuple[str, ...]:
        """What every plugin of the kind must have: its protocol's required members. Checked when one is built, so a
        plugin missing one fails ``rlkit validate`` with one line instead of the run failing at the step that reads
        it."""
        return required_members(self.protocol)

    @property
    def setting(self) -> str:
        """The config key that names a plugin of the kind: its group, or the setting that selects it."""
        return self.selected_by or self.group

    def selector(self, name: str = "<name>") -> str:
        """The override that selects plugin ``name``: ``advantage=grpo``, ``monitors=[length_drift]``."""
        return f"{self.setting}=[{name}]" if self.listed else f"{self.setting}={name}"


KINDS: tuple[PluginKind, ...] = (
    PluginKind("judge", "rlkit_register_judges", "judge", "judges", protocols.JudgeProtocol, "judges",
               "JudgeContract", "judge", scaffold="judge", suffix="Judge", page="judges.md"),
    PluginKind("aggregator", "rlkit_register_aggregators", "aggregator", "aggregators", protocols.AggregatorProtocol,
               "aggregators", "AggregatorContract", "aggregator", scaffold="aggregator", suffix="Aggregator",
               page="aggregation-and-advantages.md"),
    PluginKind("advantage_estimator", "rlkit_register_advantage_estimators", "advantage", "advantage estimators",
               protocols.AdvantageEstimatorProtocol, "advantages", "AdvantageEstimatorContract", "estimator",
               scaffold="advantage", suffix="Advantage", page="aggregation-and-advantages.md"),
    PluginKind("preference_constructor", "rlkit_register_preference_constructors", "preference",
               "preference constructors", protocols.PreferenceConstructorProtocol, "preferences",
               "PreferenceConstructorContract", "constructor", scaffold="preference", suffix="Pairs",
               selects=("objective=group_dpo",), page="preference-path.md"),
    PluginKind("weight_scheduler", "rlkit_register_weight_schedulers", "weights", "weight schedulers",
               protocols.WeightSchedulerProtocol, "weights", "WeightSchedulerContract", "scheduler",
               scaffold="weights", suffix="Weights"),
    PluginKind("objective", "rlkit_register_objectives", "objective", "objectives", protocols.ObjectiveProtocol,
               "objectives", "ObjectiveContract", "objective", scaffold="objective", suffix="Objective"),
    PluginKind("generator", "rlkit_register_generators", "generator", "generators", protocols.GeneratorProtocol,
               "generators", "GeneratorContract", "generator", scaffold="generator", suffix="Generator"),
    PluginKind("prompt_sampler", "rlkit_register_prompt_samplers", "sampler", "prompt samplers",
               protocols.PromptSamplerProtocol, "samplers", "PromptSamplerContract", "sampler", scaffold="sampler",
               suffix="Sampler", page="data.md"),
    PluginKind("environment", "rlkit_register_environments", "environment", "environments",
               protocols.EnvironmentProtocol, "environments", "EnvironmentContract", "environment",
               scaffold="environment", suffix="Environment", page="environments.md"),
    # no template: a backend is written beside the judge that asks it (docs/judges.md)
    PluginKind("judge_backend", "rlkit_register_judge_backends", "judge_backend", "judge backends",
               protocols.JudgeBackendProtocol, "backends", "JudgeBackendContract", "backend",
               selected_by="judge.params.backend", page="judges.md"),
    PluginKind("monitor", "rlkit_register_monitors", "monitors", "monitors", protocols.MonitorProtocol, "monitors",
               "MonitorContract", "monitor", scaffold="monitor", suffix="Monitor", many=True, listed=True,
               page="monitors-and-evaluation.md"),
    # not a config group: `rlkit rubric audit` runs every probe unless audit.probes names some
    PluginKind("audit_probe", "rlkit_register_audit_probes", "audit_probe", "audit probes",
               protocols.AuditProbeProtocol, "probes", "AuditProbeContract", "probe", scaffold="probe",
               suffix="Probe", selected_by="audit.probes", listed=True, page="rubric-audit.md"),
)
KINDS_BY_KEY = {k.key: k for k in KINDS}
KINDS_BY_GROUP = {k.group: k for k in KINDS}
