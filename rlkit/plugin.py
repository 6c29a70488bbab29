"""The one door for plugins: everything a plugin, built-in or third-party, may import from rlkit.

A plugin imports from here (and from ``rlkit.testing`` in its tests), never from the host's subpackages: those
may move between minor releases, these names may not. ``docs/plugin-api.md`` says what each group promises.
rlkit's own plugins (``rlkit_plugins``) are held to this by the import-layer contract in CI.

Each name is imported from its module when a plugin first asks for it (PEP 562): building the registry imports every
plugin module, and a door that imported all of rlkit would load torch and transformers for ``rlkit plugins`` and
``rlkit validate``, which use neither. The imports below, read by type checkers, are also the list of names.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # --- the contract: marking hooks, the register callback, errors -------------------------------------------
    from rlkit.core.errors import (
        ConfigError,
        DataError,
        EngineError,
        GeneratorError,
        JudgeError,
        ParamError,
        PluginError,
        RlkitError,
        RubricError,
    )
    from rlkit.core.hookspecs import Register
    from rlkit.core.objective import CompletionLossInputs, PairLossInputs, PairTargets
    from rlkit.core.package_files import resolve_path

    # --- what a plugin of each kind is: every member the host reads, required and optional ------------------
    from rlkit.core.protocols import (
        AdvantageEstimatorProtocol,
        AggregatorProtocol,
        AuditProbeProtocol,
        EnvironmentProtocol,
        GeneratorProtocol,
        JudgeBackendProtocol,
        JudgeProtocol,
        MonitorProtocol,
        ObjectiveProtocol,
        PluginProtocol,
        PreferenceConstructorProtocol,
        PromptSamplerProtocol,
        WeightSchedulerProtocol,
    )
    from rlkit.core.refs import AggregatorRef, BackendRef, JudgeRef, PluginRef, WeightSchedulerRef

    # --- what flows between plugins: rubric, rollouts, scores, pairs ----------------------------------------------
    from rlkit.core.registry import hookimpl
    from rlkit.core.rubric import Anchor, Dimension, Rubric, load_rubric, rubric_from_dict
    from rlkit.core.stats import kendall_tau_b, nan_mean_std, nan_median, nan_weighted_sum, scored_values_differ
    from rlkit.core.templates import chosen_template, render_template, template_hash, template_path
    from rlkit.core.types import EnvStep, Episode, PreferencePairs, RecordField, RewardBatch, Rollout
    from rlkit.data.prepare import allocate as allocate_shares
    from rlkit.data.records import prompt_text, seen_prompt
    from rlkit.data.records import read_jsonl as read_records
    from rlkit.evaluation.calibration import DEFAULT_LABELS as DEFAULT_CALIBRATION_LABELS
    from rlkit.evaluation.calibration import calibrate, judge_records, read_labels
    from rlkit.evaluation.label_examples import LabelledExample, read_label_examples

    # --- generative reward models and the reward API's wire format ------------------------------------------------
    from rlkit.grm.model import GenerativeRewardModel, read_grm_format
    from rlkit.grm.reward_model import ScalarRewardModel, is_reward_model_folder

    # --- model-based judging: backends, the response cache, parsing, HTTP ---------------------------------------
    from rlkit.judging.asking import (
        FailureWarning,
        JudgeBackend,
        ReferenceLeakCheck,
        answer_with_levels,
        ask,
        split_levels,
    )
    from rlkit.judging.cache import ResponseCache
    from rlkit.judging.http import (
        MAX_BACKOFF_S,
        Attempt,
        answered_attempt,
        post_with_retries,
        retry_after_seconds,
        retry_delay,
        run_async,
        snippet,
        tls_context,
    )
    from rlkit.judging.members import (
        Member,
        MemberJudges,
        check_member_judge,
        close_judges,
        judgement_of,
        last_reasons,
        member_model_folders,
        member_record_fields,
        member_scope_caveats,
        merge_reasons,
    )
    from rlkit.judging.parsing import ScoreParse, parse_reasons, parse_scores
    from rlkit.judging.ranking_parsing import RankingParse, parse_ranking, ranks_from_order
    from rlkit.judging.rate_limit import rate_limiter
    from rlkit.judging.schema import dimension_levels, rubric_json_schema
    from rlkit.judging.shown import DEFAULT_MAX_COMPLETION_CHARS, CompletionView
    from rlkit.judging.spend import (
        CallPlan,
        JudgeLoad,
        Spend,
        approx_tokens,
        judge_spend,
        plan_judge,
        read_cached_tokens,
        read_usage,
        sum_plans,
        sum_spend,
        token_price,
    )
    from rlkit.judging.tiny_judge import (
        RANKING_COMPACT_TEMPLATE,
        RANKING_SPEC,
        TinyJudgeSpec,
        build_tiny_judge,
        group_labels,
        ranking_spec,
        tiny_judge_caveats,
    )
    from rlkit.judging.types import Completion, Judgement, render_chat

    # --- generators: what a sampler is asked for and hands back; models by path ---------------------------------
    from rlkit.lm.constrained import JsonSchemaConstraint
    from rlkit.lm.decoding import decode_with_kv_cache, end_token_ids, loop_can_decode
    from rlkit.lm.gguf_export import EXPORT_TYPES, write_gguf
    from rlkit.lm.joined_files import QWEN_CODER_JUDGE, is_parts_ref, model_file
    from rlkit.lm.judge_models import JUDGE_MODELS, JudgeModel, installed_judge_model
    from rlkit.lm.llama_server import LlamaServer, LlamaServerSettings
    from rlkit.lm.logprobs import masked_nll
    from rlkit.lm.models import build_tiny_policy, check_model_directory, load_policy, locate_model
    from rlkit.lm.placement import Placement, input_device, plan_placement
    from rlkit.lm.sampling import GenerationRequest, SampledBatch, assemble_sampled_batch, tokenize_prompts
    from rlkit.lm.seeded import SeededSampling, group_row_seeds, seeded_gumbel
    from rlkit.lm.weight_versions import WeightVersions

    # --- reward helpers: normalisation, saturation, weight schedulers, monitors -----------------------------------
    from rlkit.reward.diagnostics import ConflictWatch, conflict_rate, group_conflict_rates, saturation_share
    from rlkit.reward.dropout import CRITERIA_DROPOUT_FIELD
    from rlkit.reward.monitor_view import Alert, BaselineDrift, MonitorView, due, make_view
    from rlkit.reward.pipeline import normalize_scores
    from rlkit.reward.preferences import (
        chosen_win_share,
        confidence_weighted,
        drop_close_pairs,
        ordering_batch,
        pair_gaps,
    )
    from rlkit.reward.weighting import StepRecordScheduler

    # --- a run's triage (``rlkit doctor``'s checks), for a monitor that runs them live --------------------------
    from rlkit.runs.triage import triage, triage_reads
    from rlkit.serve.protocol import InfoResponse, RewardResponse


def _exported_names() -> dict[str, tuple[str, str]]:
    """name -> (module, name there), from the ``if TYPE_CHECKING:`` imports above: one list for type checkers and
    for this door."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    return {alias.asname or alias.name: (node.module, alias.name) for node in block.body
            if isinstance(node, ast.ImportFrom) for alias in node.names}


_EXPORTED = _exported_names()


def __getattr__(name: str) -> Any:
    if name not in _EXPORTED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, original = _EXPORTED[name]
    value = getattr(importlib.import_module(module), original)
    globals()[name] = value  # asked once: later lookups find it without coming here
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "CRITERIA_DROPOUT_FIELD",
    "DEFAULT_CALIBRATION_LABELS",
    "DEFAULT_MAX_COMPLETION_CHARS",
    "MAX_BACKOFF_S",
    "RANKING_COMPACT_TEMPLATE",
    "RANKING_SPEC",
    "AggregatorRef",
    "Alert",
    "Anchor",
    "Attempt",
    "EnvStep",
    "Episode",
    "BackendRef",
    "BaselineDrift",
    "Completion",
    "CompletionLossInputs",
    "CompletionView",
    "ConfigError",
    "ConflictWatch",
    "DataError",
    "EngineError",
    "GeneratorError",
    "Dimension",
    "FailureWarning",
    "GenerationRequest",
    "GenerativeRewardModel",
    "ScalarRewardModel",
    "is_reward_model_folder",
    "InfoResponse",
    "JsonSchemaConstraint",
    "JudgeBackend",
    "JudgeError",
    "JudgeRef",
    "Judgement",
    "MonitorView",
    "PairLossInputs",
    "PairTargets",
    "Placement",
    "PluginError",
    "ParamError",
    "PluginRef",
    "PreferencePairs",
    "RankingParse",
    "ReferenceLeakCheck",
    "RecordField",
    "Register",
    "ResponseCache",
    "RewardBatch",
    "RewardResponse",
    "RlkitError",
    "Rollout",
    "Rubric",
    "RubricError",
    "SampledBatch",
    "ScoreParse",
    "SeededSampling",
    "StepRecordScheduler",
    "TinyJudgeSpec",
    "WeightSchedulerRef",
    "allocate_shares",
    "answer_with_levels",
    "ask",
    "assemble_sampled_batch",
    "build_tiny_judge",
    "tiny_judge_caveats",
    "build_tiny_policy",
    "calibrate",
    "check_member_judge",
    "close_judges",
    "check_model_directory",
    "chosen_template",
    "chosen_win_share",
    "confidence_weighted",
    "conflict_rate",
    "group_conflict_rates",
    "drop_close_pairs",
    "pair_gaps",
    "due",
    "group_labels",
    "decode_with_kv_cache",
    "end_token_ids",
    "dimension_levels",
    "group_row_seeds",
    "hookimpl",
    "input_device",
    "judge_records",
    "load_policy",
    "load_rubric",
    "locate_model",
    "QWEN_CODER_JUDGE",
    "JUDGE_MODELS",
    "JudgeModel",
    "installed_judge_model",
    "is_parts_ref",
    "model_file",
    "EXPORT_TYPES",
    "LlamaServer",
    "LlamaServerSettings",
    "WeightVersions",
    "write_gguf",
    "make_view",
    "loop_can_decode",
    "masked_nll",
    "member_model_folders",
    "member_record_fields",
    "member_scope_caveats",
    "merge_reasons",
    "Member",
    "MemberJudges",
    "judgement_of",
    "last_reasons",
    "nan_mean_std",
    "nan_median",
    "kendall_tau_b",
    "nan_weighted_sum",
    "normalize_scores",
    "ordering_batch",
    "parse_ranking",
    "parse_reasons",
    "parse_scores",
    "plan_placement",
    "answered_attempt",
    "post_with_retries",
    "prompt_text",
    "seen_prompt",
    "ranking_spec",
    "ranks_from_order",
    "read_grm_format",
    "read_labels",
    "read_label_examples",
    "LabelledExample",
    "read_records",
    "render_chat",
    "render_template",
    "rubric_json_schema",
    "resolve_path",
    "retry_after_seconds",
    "retry_delay",
    "rubric_from_dict",
    "run_async",
    "saturation_share",
    "scored_values_differ",
    "seeded_gumbel",
    "snippet",
    "split_levels",
    "tls_context",
    "template_hash",
    "template_path",
    "tokenize_prompts",
    # judge spend and rate limits (rlkit.judging.spend, rlkit.judging.rate_limit)
    "CallPlan",
    "JudgeLoad",
    "Spend",
    "approx_tokens",
    "judge_spend",
    "plan_judge",
    "rate_limiter",
    "read_cached_tokens",
    "read_usage",
    "sum_plans",
    "sum_spend",
    "token_price",
    # a run's triage (rlkit.runs.triage)
    "triage",
    "triage_reads",
    # what a plugin of each kind is (rlkit.core.protocols)
    "AdvantageEstimatorProtocol",
    "AggregatorProtocol",
    "AuditProbeProtocol",
    "EnvironmentProtocol",
    "GeneratorProtocol",
    "JudgeBackendProtocol",
    "JudgeProtocol",
    "MonitorProtocol",
    "ObjectiveProtocol",
    "PluginProtocol",
    "PreferenceConstructorProtocol",
    "PromptSamplerProtocol",
    "WeightSchedulerProtocol",
]
