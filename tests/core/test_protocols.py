"""Every plugin member the host reads is declared by its kind's protocol (rlkit/core/protocols.py).

Two scans of the host's source (``rlkit/``, the contract suites included; not the plugins):

* every name the host asks for by string, ``getattr(x, "name", ...)``, ``hasattr(x, "name")`` or the judging helpers'
  ``_optional(judge, "name", ...)``, is a member of some kind's protocol, or on :data:`NOT_PLUGIN_MEMBERS` with the
  reason it is not a plugin's;
* wherever the object is plainly a plugin of one kind (a variable named ``judge``, ``objective``, ``parts.scheduler``,
  ``result.plugins.get("judge")`` ...), each attribute read on it, ``getattr`` included, is a member of THAT kind's
  protocol, or on :data:`NOT_THAT_KINDS` with its reason.

A new optional member read anywhere by string, or read on a plugin variable under any spelling, fails here until its
protocol declares it (with its docstring), so the docs generated from the protocols list it too.
"""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlkit.core.kinds import KINDS, KINDS_BY_KEY
from rlkit.core.protocols import protocol_members

HOST = Path(__file__).resolve().parents[2] / "rlkit"

# the helpers that read a member by the name they are given as their second argument
BY_NAME = {"getattr", "hasattr", "_optional"}

# names the host reads by string that are no plugin's member, with why
_NOT_PLUGIN: dict[str, tuple[str, ...]] = {
    "a factory's, not a plugin's (the registration contract in hookspecs.py)": ("Params", "__name__", "__module__"),
    "transformers, peft, accelerate and torch objects (the policy, its config, tokenizer, tensors)": (
        "peft_config", "r", "_no_split_modules", "hf_device_map", "activation_checkpointing_enable", "get_base_model",
        "_is_fsdp_managed_module", "config", "generation_config", "is_encoder_decoder", "quantization_config", "dtype",
        "torch_dtype", "initializer_range", "sliding_window", "max_position_embeddings", "chat_template",
        "eos_token_id", "bias", "detach", "head_dim", "tie_word_embeddings", "rope_parameters", "rope_scaling",
        "rope_theta", "_name_or_path"),
    "Lightning's trainer, module, data module, checkpoint callback and loggers, and TRL's trainer state": (
        "datamodule", "dirpath", "global_step", "history", "last_rollout", "log_step_metrics", "log_table", "save",
        "_rng_before_validation", "upcoming", "resume_at", "read"),
    "argparse namespaces of the rlkit command line": ("cfg", "info", "multirun", "resolve", "run",
                                                      "shell_completion"),
    "exceptions and YAML marks, read for their messages": ("context", "context_mark", "problem", "problem_mark", "name",
                                                           "errno", "strerror", "transient", "__self__", "exit_code"),
    "typing, pydantic and OmegaConf objects the config reference walks": ("UnionType", "allow_inf_nan", "model_dump"),
    "rlkit.judging.asking.JudgeBackend, the host's wrapper a model judge holds as `backend`": ("get", "offline",
                                                                                              "chat_model"),
    "the host's own config and rubric objects (CheckedConfig, DataConfig, Rubric)": ("evolve", "task",
                                                                                       "template_path"),
    "a field of a generator's Params (GeneratorProtocol.params), named in its docstring": ("reference_model",),
    "the host's reference-model handle (rlkit.lm.reference), not the generator": ("request",),
    "the test inference server's request log (rlkit.testing.openai_server)": ("recorded",),
    "rlkit.core.protocols' own marker on an optional member": ("absent",),
}
NOT_PLUGIN_MEMBERS = {name: reason for reason, names in _NOT_PLUGIN.items() for name in names}

# what a variable of this name holds in the host: a plugin of that kind
PLUGIN_VARIABLES = {
    "judge": "judge", "aggregator": "aggregator", "estimator": "advantage_estimator",
    "constructor": "preference_constructor", "scheduler": "weight_scheduler", "objective": "objective",
    "generator": "generator", "sampler": "prompt_sampler", "environment": "environment", "env": "environment",
    "monitor": "monitor", "backend": "judge_backend", "configured": "judge_backend", "probe": "audit_probe",
}

# (variable, member) reads on a variable of a plugin's name that are not that plugin's, with why
NOT_THAT_KINDS: dict[tuple[str, str], str] = {
    **{("judge", m): "ranking alignment results (rlkit.evaluation.ranking_alignment): a judge's row, not a judge"
       for m in ("agreement", "agreement_interval", "first", "groups", "pairs", "tau", "tau_interval", "tied_pairs",
                 "unscored")},
    **{("backend", m): "rlkit.judging.asking.JudgeBackend, the host's wrapper a model judge holds as `backend`"
       for m in ("get", "offline", "chat_model")},
    **{("backend", m): "a tokenizers backend building the test GGUF files (rlkit.testing.gguf_files)"
       for m in ("to_str", "train_from_iterator")},
    **{("env", m): "a Jinja environment" for m in ("from_string", "get_template")},
    **{("probe", m): "rlkit.evaluation.audit.Probe, the host's record of a probe (its plugin is `.plugin`)"
       for m in ("name", "plugin")},
    ("probe", "content_hash"): "a rubric probed by rubric generation (rlkit.evaluation.rubric_generation)",
    ("sampler", "resume_at"): "the host's epoch-shuffle sampler (rlkit.data), not a prompt sampler",
}


def _named(node: ast.expr) -> str | None:
    """The name a plugin object goes by: ``judge``, ``parts.judge``, ``getattr(x, "judge")`` → judge;
    ``x.plugins.get("judge")`` and ``x.plugins["judge"]`` → the kind key's variable."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)):
        return str(node.args[1].value)  # getattr(judge, "backend", None) holds what judge.backend does
    key = None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
            and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "plugins" and node.args):
        key = node.args[0]
    elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) and node.value.attr == "plugins":
        key = node.slice
    if isinstance(key, ast.Constant) and key.value in KINDS_BY_KEY:
        return next(var for var, kind in PLUGIN_VARIABLES.items() if kind == key.value)
    return None


def _reads(source: str) -> Iterator[tuple[str | None, str, int, bool]]:
    """(the object's name, the member, line, read by string) for every member read in ``source``."""
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in BY_NAME
                and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)):
            yield _named(node.args[0]), node.args[1].value, node.lineno, True
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
            yield _named(node.value), node.attr, node.lineno, False


def _declared(kind_key: str) -> set[str]:
    return {m.name for m in protocol_members(KINDS_BY_KEY[kind_key].protocol)}


ANY_KIND = {m.name for kind in KINDS for m in protocol_members(kind.protocol)}


def undeclared(source: str, where: str) -> list[str]:
    """Every plugin member ``source`` reads that no protocol (or not its kind's) declares."""
    found = []
    for name, member, line, by_string in _reads(source):
        kind = PLUGIN_VARIABLES.get(name or "")
        if kind is not None and member not in _declared(kind) and (name, member) not in NOT_THAT_KINDS:
            found.append(f"{where}:{line}: {name}.{member} is not declared by {KINDS_BY_KEY[kind].protocol.__name__}")
        elif by_string and member not in ANY_KIND and member not in NOT_PLUGIN_MEMBERS:
            found.append(f"{where}:{line}: {name}: {member!r} is read by name but no kind's protocol declares it")
    return found


@functools.cache
def _host_sources() -> tuple[tuple[str, str], ...]:
    return tuple((str(path.relative_to(HOST.parent)), path.read_text(encoding="utf-8"))
                 for path in sorted(HOST.rglob("*.py")))


def test_the_host_reads_only_members_the_protocols_declare():
    found = [line for where, source in _host_sources() for line in undeclared(source, where)]
    assert not found, ("declare these in the kind's protocol (rlkit/core/protocols.py), with a docstring, then run "
                       "python -m rlkit.core.kind_docs --write:\n" + "\n".join(found))


@pytest.mark.parametrize(("source", "expected"), [
    # a new optional member read by string, on a plugin variable and on anything else
    ('getattr(judge, "frobnicate", None)', "judge.frobnicate is not declared by JudgeProtocol"),
    ('hasattr(thing, "frobnicate")', "thing: 'frobnicate' is read by name but no kind's protocol declares it"),
    ('callable(getattr(result.plugins.get("objective"), "frobnicate", None))',
     "objective.frobnicate is not declared by ObjectiveProtocol"),
    # a member of another kind read on this one, and a plain attribute read
    ('getattr(objective, "max_lag", 0)', "objective.max_lag is not declared by ObjectiveProtocol"),
    ("ctx.parts.scheduler.frobnicate()", "scheduler.frobnicate is not declared by WeightSchedulerProtocol"),
    ('_optional(judge, "frobnicate", rubric)', "judge.frobnicate is not declared by JudgeProtocol"),
])
def test_an_undeclared_read_is_caught(source, expected):
    assert [f"x.py:1: {expected}"] == undeclared(source, "x.py")


def test_declared_reads_and_allowed_names_pass():
    source = ('getattr(judge, "metrics", None)\nobjective.kl_in_reward\ngetattr(model, "peft_config", None)\n'
              'getattr(backend, "offline", False)\ngetattr(sampler, "pick", None)\n')
    assert undeclared(source, "x.py") == []


def test_every_allowed_name_is_still_read():
    """An entry the host no longer reads is dead weight that would hide a future undeclared read: drop it."""
    reads = [r for _, source in _host_sources() for r in _reads(source)]
    read = {(name, member) for name, member, _, _ in reads}
    by_string = {member for _, member, _, string in reads if string}
    assert set(NOT_PLUGIN_MEMBERS) - by_string == set()
    assert set(NOT_THAT_KINDS) - read == set()
    assert not set(NOT_PLUGIN_MEMBERS) & ANY_KIND, "a declared member needs no allow-list entry"
    assert not [entry for entry in NOT_THAT_KINDS if entry[1] in _declared(PLUGIN_VARIABLES[entry[0]])]
