"""Validating every part of a composed config without building anything heavy."""

from __future__ import annotations

import json
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic
from omegaconf import DictConfig, OmegaConf

from rlkit.config.checkpoints import check_checkpoint
from rlkit.config.compose import config_source
from rlkit.config.machine import check_machine
from rlkit.config.schemas import (
    GROUP_SCHEMAS,
    PASS_THROUGH_KEYS,
    TRAINER_ARGUMENTS,
    TRAINER_KEYS_RLKIT_SETS,
    DataConfig,
    DebiasConfig,
    EvalConfig,
    ModelConfig,
    RubricEvolveConfig,
    RunConfig,
)
from rlkit.core.errors import ConfigError, DataError, PluginError, Problems, RlkitError, did_you_mean
from rlkit.core.logger_settings import LoggerSettings
from rlkit.core.objective import SIGNALS
from rlkit.core.package_files import resolve_path
from rlkit.core.registry import KINDS, KINDS_BY_GROUP, Registry
from rlkit.core.rubric import Rubric, load_rubric
from rlkit.reward.pipeline import HeldoutScoring


def _choice(cfg: DictConfig, group: str) -> str | None:
    choices = OmegaConf.select(cfg, "hydra.runtime.choices", default=None)
    if choices is None:  # inside @hydra.main the hydra node lives in HydraConfig, not in cfg
        from hydra.core.hydra_config import HydraConfig

        choices = HydraConfig.get().runtime.choices if HydraConfig.initialized() else {}
    value = choices.get(group)
    return None if value in (None, "null") else str(value)


def _where(registry: Registry, cfg: DictConfig, group: str, field_name: str = "") -> str:
    key = f"{group}.{field_name}" if field_name else group
    return f"{key} ({config_source(registry, group, _choice(cfg, group), cfg)})"


_BOUNDS = {"greater_than_equal": (">=", "ge"), "greater_than": (">", "gt"), "less_than_equal": ("<=", "le"),
           "less_than": ("<", "lt")}


def schema_message(err: Any, schema: type[pydantic.BaseModel] | None = None) -> str:
    """One pydantic error as rlkit says it: the rule broken and the value given (``must be >= 1, got 0``)."""
    kind, given = err["type"], err.get("input")
    if kind == "extra_forbidden":
        if schema is None:
            return "unknown key"
        return (f"unknown key; valid keys: {', '.join(schema.model_fields)}"
                f"{did_you_mean(err['loc'][-1] if err.get('loc') else None, schema.model_fields)}")
    if kind == "missing":
        return "required value is missing"
    if kind in _BOUNDS:
        sign, key = _BOUNDS[kind]
        return f"must be {sign} {err['ctx'][key]}, got {given!r}"
    if kind == "finite_number":
        return f"must be a finite number, got {given!r}"
    if kind == "literal_error":
        return f"must be one of {err['ctx']['expected']}, got {given!r}"
    if kind == "value_error":
        return str(err["ctx"]["error"])
    text = f"{err['msg'][:1].lower()}{err['msg'][1:]}"
    return text if " got " in text else f"{text}, got {given!r}"


def check_block(schema: type[pydantic.BaseModel], node: Any, where: str) -> Any:
    """``node`` bound to ``schema``; each problem is a ``ConfigError`` naming ``where.<field>`` and the
    rule. Every block of the config (the run's keys, ``score``, ``serve``, ``eval``, ...) is checked this one way."""
    try:
        return schema.model_validate(node if node is not None else {})
    except pydantic.ValidationError as exc:
        problems = Problems()
        for err in exc.errors():  # every field's problem, one line each
            loc = [str(p) for p in err["loc"]]
            owner = schema
            for part in loc[:-1]:  # the model that owns the failing field, so "unknown key" can list its valid keys
                field = owner.model_fields.get(part) if isinstance(owner, type) else None
                inner = field.annotation if field is not None else None
                owner = inner if isinstance(inner, type) and issubclass(inner, pydantic.BaseModel) else None
            path = ".".join(p for p in [where, *loc] if p)
            problems.errors.append(ConfigError(schema_message(err, owner), path))
        problems.raise_if_any()
        raise  # unreachable: a ValidationError holds at least one error


def _check_schema(registry: Registry, cfg: DictConfig, group: str, schema: type[pydantic.BaseModel]) -> Any:
    node = OmegaConf.to_container(cfg[group], resolve=True) if cfg.get(group) is not None else {}
    try:
        validated = schema.model_validate(node)
        return validated.root if isinstance(validated, pydantic.RootModel) else validated
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        loc = list(err["loc"])
        if isinstance(node, dict) and loc and loc[0] == node.get("name"):
            loc = loc[1:]  # a discriminated union puts the variant's name first
        field_name = ".".join(str(p) for p in loc)
        raise ConfigError(schema_message(err), _where(registry, cfg, group, field_name)) from None


def run_keys(cfg: DictConfig) -> dict[str, Any]:
    """The composed config's top-level keys that :class:`RunConfig` checks (every key but groups and pass-throughs)."""
    groups = set(GROUP_SCHEMAS) | set(KINDS_BY_GROUP) | set(PASS_THROUGH_KEYS)
    return {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v) else v
            for k, v in cfg.items() if k not in groups}


def check_trainer(cfg: DictConfig) -> dict[str, Any]:
    """``trainer.*`` are ``lightning.Trainer``'s own arguments: each must be one it takes and rlkit does not set, and
    the step counts must make sense; Lightning checks the values it alone understands when the trainer is built."""
    node = cfg.get("trainer")
    container = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    if not isinstance(container, dict):
        raise ConfigError("must be a mapping of lightning.Trainer arguments", "trainer")
    takes = set(TRAINER_ARGUMENTS)
    for key in container:
        if key in TRAINER_KEYS_RLKIT_SETS:
            raise ConfigError(f"set by rlkit itself; leave it out (rlkit sets: {', '.join(TRAINER_KEYS_RLKIT_SETS)})",
                              f"trainer.{key}")
        if key not in takes:
            allowed = sorted(takes - set(TRAINER_KEYS_RLKIT_SETS))
            raise ConfigError(f"unknown key: not an argument of lightning.Trainer (it takes: {', '.join(allowed)})"
                              f"{did_you_mean(key, allowed)}", f"trainer.{key}")
    for key, low in (("max_steps", -1), ("log_every_n_steps", 1)):
        value = container.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
            raise ConfigError(f"must be an integer >= {low}" + (" (-1: no limit)" if low < 0 else "") +
                              f", got {value!r}", f"trainer.{key}")
    return container


def check_run(cfg: DictConfig) -> RunConfig:
    """The top-level keys and blocks bound to :class:`RunConfig` (milliseconds: nothing is built)."""
    return check_block(RunConfig, run_keys(cfg), "")


@dataclass
class ValidatedConfig:
    """The outcome of validation: every plugin built (cheaply) and the rubric loaded."""

    cfg: DictConfig
    rubric: Rubric
    run: RunConfig = field(default_factory=RunConfig)
    plugins: dict[str, Any] = field(default_factory=dict)
    # What the judge's scores follow: the rubric itself, unless the judge derives its own (scored_rubric).
    reward_rubric: Rubric = None  # type: ignore[assignment]  # set by validate_config
    plugin_names: dict[str, str] = field(default_factory=dict)
    records: list[dict[str, Any]] | None = None
    model: ModelConfig | None = None
    data: DataConfig | None = None
    objective: Any = None
    debias: DebiasConfig | None = None
    evolve: RubricEvolveConfig | None = None  # rubric.evolve: criteria written during training (every > 0)
    rubric_dropout: float = 0.0  # rubric.dropout: the share of a group's dimensions left out of its training reward

    @property
    def reference_monitors(self) -> list[str]:
        """The keys of monitors that read the reference policy (``reads_reference``): the run keeps one for them."""
        return [key for key, monitor in (self.plugins.get("monitor") or {}).items()
                if getattr(monitor, "reads_reference", False)]

    @property
    def needs_reference(self) -> bool:
        """Whether the run keeps a reference policy: for the objective, or for a monitor that reads one."""
        return self.objective.reference_use is not None or bool(self.reference_monitors)

    @property
    def judge_config(self) -> dict[str, Any]:
        """The ``judge`` block, resolved: what audits and calibration rounds are keyed by."""
        return _resolved(self.cfg.judge)

    @property
    def reward_config(self) -> dict[str, Any]:
        """The blocks that decide a record's reward (:data:`REWARD_CONFIG_KEYS`), resolved: a resumed scoring run
        must match them."""
        return {key: _resolved(self.cfg.get(key)) for key in REWARD_CONFIG_KEYS}

    @property
    def trainer_kwargs(self) -> dict[str, Any]:
        """The ``trainer`` block, resolved: lightning.Trainer's keyword arguments (checked by ``check_trainer``)."""
        return _resolved(self.cfg.trainer)

    @property
    def logger_settings(self) -> LoggerSettings:
        return LoggerSettings.of(self.cfg)

    @property
    def eval_block(self) -> EvalConfig:
        """The ``eval`` block (the golden set), checked against its schema."""
        return check_block(EvalConfig, _resolved(OmegaConf.select(self.cfg, "eval", default=None)) or {}, "eval")

    def heldout_scoring(self) -> HeldoutScoring | None:
        """Held-out scoring on an absolute yardstick, or None when training's own scoring is one. A training judge
        that only ranks within groups hands held-out completions to ``heldout_judge`` on the user's rubric; a
        group-relative aggregator (a lone completion's rank says nothing) leaves the judge as it is. Either way the
        scores are weighted by ``heldout_weights`` and combined by ``heldout_aggregator``."""
        ranks = self._ranks_within_groups()
        if ranks is None:
            return None
        judge = "heldout_judge" if ranks == "judge" else "judge"
        return HeldoutScoring(judge=self.plugins[judge], judge_name=self.plugin_names[judge], rubric=self.rubric,
                              aggregator=self.plugins["heldout_aggregator"], scheduler=self.plugins["heldout_weights"])

    def heldout_yardstick(self) -> str | None:
        """Why held-out rewards are not the training reward, for the start/end table's title; None when they are."""
        ranks, names = self._ranks_within_groups(), self.plugin_names
        if ranks == "judge":
            return (f"judge={names['judge']} ranks within groups: held-out scored by {names['heldout_judge']}, "
                    f"reward = {names['heldout_aggregator']}")
        if ranks == "aggregator":
            return (f"aggregator={names['aggregator']} ranks within groups: held-out reward = "
                    f"{names['heldout_aggregator']} of the same scores")
        return None

    def _ranks_within_groups(self) -> str | None:
        """Which training part only ranks within groups, so held-out scoring needs its own yardstick: the judge
        (it derives a ranking rubric), the aggregator (group-relative), or None."""
        if self.reward_rubric is not self.rubric:
            return "judge"
        return "aggregator" if is_group_relative(self.plugins.get("aggregator")) else None


REWARD_CONFIG_KEYS = ("judge", "aggregator", "weights", "score_normalization")
"""The config keys that change a completion's scores or reward (batch size, retries and progress do not)."""


def _resolved(node: Any) -> Any:
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


def is_group_relative(plugin: Any) -> bool:
    """Whether a plugin compares completions within their group (``group_relative = True``), so a lone completion
    or a group of one gives it nothing to compare."""
    return bool(getattr(plugin, "group_relative", False))


def _plugin_node(registry: Registry, cfg: DictConfig, group: str) -> tuple[str, dict[str, Any]] | None:
    node = cfg.get(group)
    if node is None:
        return None
    where = _where(registry, cfg, group)
    container = OmegaConf.to_container(node, resolve=True)
    if not isinstance(container, dict):
        raise ConfigError("must be a mapping with `name` and `params`", where)
    extra = sorted(set(container) - {"name", "params"})
    if extra:
        raise ConfigError(f"unknown key {extra[0]!r}; a plugin node has only `name` and `params`", where)
    name = container.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigError("missing plugin `name`", where)
    params = container.get("params") or {}
    if not isinstance(params, dict):
        raise ConfigError("`params` must be a mapping", _where(registry, cfg, group, "params"))
    return name, params


def check_model_path(model: ModelConfig) -> None:
    """The model must be a local directory or a hub id in the local HF cache, whose ``config.json`` transformers can
    read (``AutoConfig``: no weights are loaded), or a GGUF file whose header transformers' GGUF loader supports; what
    cannot be found is said with ``model.install_hint`` where the preset gives one."""
    from rlkit.lm.gguf import is_gguf, read_header
    from rlkit.lm.model_config import read_model_config
    from rlkit.lm.models import locate_model

    if model.name_or_path is not None:
        where = f"model.name_or_path ({model.name_or_path})"
        hint = f"; to install it: {model.install_hint}" if model.install_hint else ""
        try:
            path = resolve_path(model.name_or_path)
        except ConfigError as exc:  # pkg:// naming a package that is not installed
            raise ConfigError(exc.message + hint, where) from None
        try:
            if is_gguf(path):
                read_header(path, where)  # imported on first use by the command that loads it, not here
            else:
                read_model_config(locate_model(path), where)
        except ConfigError as exc:
            if not hint:
                raise
            raise ConfigError(exc.message + hint, exc.where) from None
    read_chat_format(model)


def _check_environment(result: ValidatedConfig) -> None:
    """A multi-turn environment samples each turn after the last: nothing to request ahead, no demonstrations to
    play (its episodes are the rollouts)."""
    if result.rubric.step_dimensions and callable(getattr(result.plugins.get("judge"), "scored_rubric", None)):
        step = result.rubric.dimensions[result.rubric.step_dimensions[0]].name
        raise ConfigError(f"dimension {step!r} is `scope: step` (scored on each turn alone); judge="
                          f"{result.plugin_names.get('judge')} ranks whole groups instead: use judge=rule or judge=llm",
                          "judge")
    environment = result.plugins.get("environment")
    if environment is None or int(getattr(environment, "max_turns", 1)) <= 1:
        return
    if int(getattr(result.plugins.get("generator"), "max_lag", 0) or 0) > 0:
        raise ConfigError("a multi-turn environment samples each turn after the last one, so its rollouts cannot be "
                          "requested ahead: use generator.params.max_lag=0", "generator.params.max_lag")
    if getattr(result.objective, "signal", None) == "demonstrations":
        raise ConfigError("an objective that learns from demonstrations plays no episodes: use environment="
                          "single_turn (multi-turn demonstrations are records whose completion holds tool turns)",
                          "environment")
    if _has_chat_template(result.model) is False:
        raise ConfigError("a multi-turn environment needs a chat template to render its turns; this model's tokenizer "
                          "has none: set model.chat_template to a Jinja file (e.g. pkg://rlkit.templates/chat/"
                          "tiny_tools.jinja for the embedded policy)", "model.chat_template")


def _has_chat_template(model: ModelConfig) -> bool | None:
    """Whether the run's tokenizer will have a chat template, read from the model folder without loading it; None
    where that cannot be told here (a hub id: ``rlkit fit`` checks the loaded tokenizer)."""
    import json
    from pathlib import Path

    if model.chat_template is not None:
        return True
    if model.name_or_path is None:
        return False  # the embedded tiny policy's tokenizer has none
    folder = Path(resolve_path(model.name_or_path))
    if not folder.is_dir():
        return None
    if any((folder / name).is_file() for name in ("chat_template.jinja", "chat_template.json")):
        return True
    try:
        return bool(json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8")).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        return None


def _check_instruct_on_plain_prompts(result: ValidatedConfig, records: list[dict[str, Any]] | None) -> None:
    """A hint when a model with a chat template (an instruct model) is to be trained on plain-text prompts: it answers
    its chat turns, not raw text, and a full fine-tune of it costs far more than a LoRA adapter."""
    model, data = result.model, result.data
    if model.name_or_path is None or _has_chat_template(model) is not True:
        return
    if data.path is None:
        if data.chat:
            return
        fix = "data.chat=true gives it the task as chat turns"
    elif records and all(isinstance(r.get("prompt"), str) for r in records):
        fix = f"write {data.path}'s prompts as chat messages (TRL's conversational format) to give it chat turns"
    else:
        return
    lora = "" if model.lora.enabled else (", and model.lora.r=16 trains a LoRA adapter instead of every weight "
                                          "(far less memory and disk)")
    # experiment=smollm2_arithmetic is the shipped example: data.chat=true and LoRA on an instruct model
    warnings.warn(f"{model.name_or_path} carries a chat template (an instruct model) but is trained on plain "
                  f"prompts: {fix}{lora}; experiment=smollm2_arithmetic shows both", stacklevel=2)


def read_chat_format(model: ModelConfig) -> tuple[str | None, dict[str, Any] | None]:
    """``model.chat_template``'s text and ``model.response_template``'s dict (None where unset), read and checked."""
    import yaml


    template = response = None
    if model.chat_template is not None:
        path = resolve_path(model.chat_template)
        try:
            template = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read {path}: {exc.strerror or exc}", "model.chat_template") from None
    if model.response_template is not None:
        path = resolve_path(model.response_template)
        try:
            response = yaml.safe_load(path.read_text(encoding="utf-8"))
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"cannot read {path}: {str(exc).splitlines()[0]}", "model.response_template") from None
        from transformers.utils.chat_parsing.response_templates import load_response_template

        try:
            load_response_template(response)
        except (ValueError, TypeError) as exc:
            raise ConfigError(f"{path}: not a response_template: {exc}", "model.response_template") from None
    return template, response


# Above these, a pretrained model's learning rate is far from what RL fine-tuning uses: the rubric design note starts
# GRPO at 1e-6 for full fine-tuning (TRL's GRPOConfig defaults to 1e-6 as well); supervised fine-tuning goes up to a
# few 1e-5; a LoRA adapter takes about ten times a full model's rate (Thinking Machines, "LoRA Without Regret", 2025).
PRETRAINED_LR_LIMIT = {"full": 2e-5, "lora": 5e-4}


def check_learning_rate(model: ModelConfig, lr: float) -> str | None:
    """The warning a pretrained model (``model.name_or_path``) trained at a rate far above what suits it deserves;
    None where the rate is in reach, or for the embedded policy (built from scratch, it takes a from-scratch rate)."""
    if model.name_or_path is None:
        return None
    how = "lora" if model.lora.enabled else "full"
    if lr <= PRETRAINED_LR_LIMIT[how]:
        return None
    suits = ("1e-6 to 1e-5 in full (the rubric design note starts GRPO at 1e-6)" if how == "full" else
             "about ten times a full fine-tune's 1e-6 to 1e-5 under LoRA, so 1e-5 to 1e-4")
    return (f"optim.lr={lr:g} is far above what suits a pretrained model ({model.name_or_path}): RL fine-tuning uses "
            f"{suits}; {lr:g} suits a model trained from scratch, such as the embedded tiny policy. A rate this high "
            f"can wreck what the model knows within a few steps (model=smollm2 uses 2e-4 with LoRA)")


def _check_reward_path(result: ValidatedConfig) -> None:
    estimator = result.plugins.get("advantage_estimator")
    aggregator = result.plugin_names.get("aggregator")
    if getattr(result.objective, "kl_in_reward", False) and getattr(estimator, "ignores_aggregator", False):
        raise ConfigError(f"a KL penalty in the reward is subtracted from each completion's reward, which "
                          f"advantage={result.plugin_names['advantage_estimator']} does not read (it forms advantages "
                          "from the dimensions' scores): use objective.params.kl.where=loss",
                          "objective.params.kl.where")
    if getattr(estimator, "ignores_aggregator", False) and aggregator not in (None, "weighted_sum"):
        warnings.warn(f"advantage={result.plugin_names['advantage_estimator']} forms advantages from the "
                      f"dimensions directly; aggregator={aggregator} only feeds the logged reward", stacklevel=2)


def _run_records(result: ValidatedConfig, data: DataConfig) -> list[dict[str, Any]] | None:
    """The records the run reads: the data file's, else a synthetic task's (built here), else None."""
    from rlkit.data.records import SYNTHETIC_TASKS

    if result.records is None and data.path is None and data.task in SYNTHETIC_TASKS:
        return data.synthetic_records()
    return result.records


def _check_prompt_sampler(run: RunConfig, result: ValidatedConfig, records: list[dict[str, Any]] | None) -> None:
    """A sampler that picks each step's prompts and dynamic sampling, which reads its prompts on in the epoch shuffle
    itself, would each decide what a step trains on: one of them must. A sampler that picks is set up (on a copy) on
    the run's records, so records it cannot use fail here."""
    import copy

    sampler = result.plugins.get("prompt_sampler")
    if not callable(getattr(sampler, "pick", None)):
        return
    if run.sampling.filter != "none":
        raise ConfigError(f"sampler={result.plugin_names['prompt_sampler']} picks each step's prompts and "
                          f"sampling.filter={run.sampling.filter} reads them on in the epoch shuffle; use "
                          "sampler=uniform or sampling.filter=none", "sampler, sampling.filter")
    if records:
        copy.deepcopy(sampler).setup(records, run.seed)


def _check_group_size(run: RunConfig, result: ValidatedConfig) -> None:
    """A group of one gives a part that compares completions within their group nothing to compare: every
    advantage would be 0, or no pair would form, and the run would train on nothing."""
    if run.num_generations >= 2:
        return
    signal = getattr(result.objective, "signal", None)
    parts = [("objective", "objective", result.objective),
             ("aggregator", "aggregator", result.plugins.get("aggregator"))]
    if signal == "advantages":
        parts.append(("advantage", "advantage_estimator", result.plugins.get("advantage_estimator")))
    if signal == "pairs":
        parts.append(("preference", "preference_constructor", result.plugins.get("preference_constructor")))
    relative = [f"{group}={result.plugin_names[key]}" for group, key, plugin in parts if is_group_relative(plugin)]
    if relative:
        verb = "compares" if len(relative) == 1 else "compare"
        raise ConfigError(f"must be >= 2, got {run.num_generations}: {' and '.join(relative)} {verb} completions "
                          "within their group, and a group of one gives nothing to compare", "num_generations")


def _check_heldout_judge(registry: Registry, cfg: DictConfig, result: ValidatedConfig) -> None:
    """A training judge that only ranks within groups cannot score a lone held-out completion: build the
    ``heldout_judge`` that will, on the user's rubric. A training aggregator that only ranks within groups needs the
    held-out aggregator and weights (an absolute yardstick) but not another judge."""
    if result.reward_rubric is result.rubric:
        if is_group_relative(result.plugins.get("aggregator")):
            _build_heldout_reward(registry, cfg, result)
        return
    name = cfg.get("heldout_judge")
    if not isinstance(name, str) or not name:
        raise ConfigError(f"judge={result.plugin_names['judge']} ranks completions within their group and cannot score "
                          f"held-out completions alone; name a per-dimension judge, e.g. heldout_judge=rule "
                          f"(available: {registry.available('judge')})", "heldout_judge")
    try:
        judge = registry.create("judge", name, {}, where="heldout_judge")
    except RlkitError as exc:
        raise ConfigError(exc.message, "heldout_judge") from None
    if callable(getattr(judge, "scored_rubric", None)):
        raise ConfigError(f"judge {name!r} cannot score held-out completions alone either; use a per-dimension "
                          "judge such as rule", "heldout_judge")
    check = getattr(judge, "check_rubric", None)
    if check is not None:
        check(result.rubric)
    result.plugins["heldout_judge"] = judge
    result.plugin_names["heldout_judge"] = name
    _build_heldout_reward(registry, cfg, result)


def _build_heldout_reward(registry: Registry, cfg: DictConfig, result: ValidatedConfig) -> None:
    for key, kind in (("heldout_aggregator", "aggregator"), ("heldout_weights", "weight_scheduler")):
        chosen = cfg.get(key)
        if not isinstance(chosen, str) or not chosen:
            raise ConfigError(f"name the {kind.replace('_', ' ')} of held-out scores (available: "
                              f"{registry.available(kind)})", key)
        try:
            result.plugins[key] = registry.create(kind, chosen, {}, where=key)
        except RlkitError as exc:
            raise ConfigError(exc.message, key) from None
        result.plugin_names[key] = chosen


def _check_reference(registry: Registry, cfg: DictConfig, model: ModelConfig, result: ValidatedConfig) -> None:
    where = _where(registry, cfg, "model", "reference")
    if model.reference == "none" and result.objective.reference_use is not None:
        raise ConfigError(f"model.reference=none leaves no reference for {result.objective.reference_use}", where)
    if model.reference == "none" and result.reference_monitors:
        raise ConfigError(f"model.reference=none leaves no reference for monitors.{result.reference_monitors[0]}, "
                          "which measures the policy against it", where)
    if model.reference == "adapter_off" and not model.lora.enabled:
        raise ConfigError("adapter_off needs LoRA adapters to switch off; set model.lora.r > 0 or use frozen", where)


def _check_engine_reference(registry: Registry, cfg: DictConfig, model: ModelConfig, result: ValidatedConfig) -> None:
    """``model.reference=engine`` asks the generator's engine for the reference's log-probs: the generator must
    offer it (``score_reference``) and be told the reference's served name."""
    if model.reference != "engine" or not result.needs_reference:
        return
    generator = result.plugins.get("generator")
    name = result.plugin_names.get("generator")
    if not callable(getattr(generator, "score_reference", None)):
        raise ConfigError(f"reference=engine scores with the inference engine's reference model; generator={name} "
                          "has none: use generator=openai_server", _where(registry, cfg, "model", "reference"))
    if getattr(getattr(generator, "params", None), "reference_model", None) is None:
        raise ConfigError("reference=engine needs the name the server serves the reference model under (vLLM with "
                          "LoRA: the base model's; the test server: --reference-model)",
                          "generator.params.reference_model")


def _check_objective_parts(registry: Registry, cfg: DictConfig, result: ValidatedConfig) -> None:
    """The objective learns from something the run must provide: advantages (an estimator) or pairs (a
    preference constructor)."""
    name, objective = result.plugin_names["objective"], result.objective
    signal = getattr(objective, "signal", None)
    if signal not in SIGNALS:
        raise PluginError(f"objective {name!r} has signal {signal!r}; an objective learns from one of "
                          f"{', '.join(SIGNALS)}")
    if signal == "pairs" and "preference_constructor" not in result.plugins:
        raise ConfigError(f"objective={name} builds preference pairs: select a constructor, e.g. "
                          f"preference=best_worst (available: {registry.available('preference_constructor')})",
                          "preference")
    if signal == "advantages" and "advantage_estimator" not in result.plugins:
        raise ConfigError(f"objective={name} learns from advantages: select an estimator, e.g. advantage=grpo "
                          f"(available: {registry.available('advantage_estimator')})", "advantage")


def _check_debias(debias: DebiasConfig, rubric: Rubric) -> None:
    from rlkit.reward.debias import FEATURES, default_dimensions, threshold_dimensions

    for key, names, known, what in (("features", debias.features, list(FEATURES), "available:"),
                                    ("dimensions", debias.dimensions or [], rubric.dimension_names,
                                     f"rubric {rubric.name} has")):
        unknown = [n for n in names if n not in known]
        if unknown:
            singular = key[:-1]
            raise ConfigError(f"unknown {singular} {unknown[0]!r}; {what} {', '.join(known)}", f"debias.{key}")
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ConfigError(f"{twice[0]!r} is listed twice", f"debias.{key}")
    if not debias.features:
        raise ConfigError(f"name at least one feature; available: {', '.join(FEATURES)}", "debias.features")
    # A corrected score is fractional; a gate or a condition threshold compares exact levels.
    threshold = [n for n in debias.dimensions or [] if n in threshold_dimensions(rubric)]
    if threshold:
        raise ConfigError(f"{threshold[0]!r} is a gate or another dimension's condition; its threshold compares "
                          "exact levels, which a corrected score would miss. Leave it out", "debias.dimensions")
    if debias.min_samples > debias.window:
        raise ConfigError(f"{debias.min_samples} exceeds debias.window={debias.window}; the fit would never start",
                          "debias.min_samples")
    chosen = default_dimensions(rubric) if debias.dimensions is None else debias.dimensions
    if debias.enabled and not chosen:
        why = "the list is empty" if debias.dimensions is not None else \
            "every dimension of the rubric is a gate or another dimension's condition"
        raise ConfigError(f"no dimension to correct: {why}", "debias.dimensions")


def validate_monitors(registry: Registry, cfg: Any, rubric: Rubric) -> dict[str, Any]:
    """Build every monitor of the ``monitors`` node (``{key: {name, params}}``), checked against the rubric."""
    from omegaconf import OmegaConf

    node = cfg.get("monitors")
    if node is None:
        return {}
    container = OmegaConf.to_container(node, resolve=True)
    if not isinstance(container, dict):
        raise ConfigError("must be selected as a list, e.g. monitors=[length_drift,reward_collapse]", "monitors")
    built: dict[str, Any] = {}
    for key, entry in container.items():
        name = entry.get("name") if isinstance(entry, dict) else None
        where = f"monitors.{key} ({config_source(registry, 'monitors', name or str(key), cfg)})"
        if not isinstance(entry, dict) or not isinstance(name, str) or not name:
            raise ConfigError("must be a mapping with `name` and `params`", where)
        extra = sorted(set(entry) - {"name", "params"})
        if extra:
            raise ConfigError(f"unknown key {extra[0]!r}; a monitor node has only `name` and `params`", where)
        params = entry.get("params") or {}
        if not isinstance(params, dict):
            raise ConfigError("`params` must be a mapping", f"monitors.{key}.params")
        try:
            monitor = registry.create("monitor", name, params, where=f"monitors.{key}.params")
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), f"monitors.{key}.params") from None
        check = getattr(monitor, "check_rubric", None)
        if check is not None:
            check(rubric)
        built[str(key)] = monitor
    return built


def _known_plugin(registry: Registry, cfg: DictConfig, kind: Any) -> None:
    """The plugin a group names is registered (the registry's one line lists what exists)."""
    selected = _plugin_node(registry, cfg, kind.group)
    if selected is not None:
        registry.get(kind.key, selected[0])


def _check_data_file(path: Path) -> None:
    """``data.path`` names a file or a datasets directory that is there (what is in it is read and checked later,
    by ``rlkit.data.records.read_jsonl``, which says the same of a missing one)."""
    if not path.exists():
        raise DataError("no such data file or datasets directory", str(path))


def validate_config(cfg: DictConfig, registry: Registry, *, read_data: bool = True,
                    need_completions: bool = False) -> ValidatedConfig:
    """Check every part of a composed config; the first problem raises a one-line ``RlkitError``."""
    from rlkit.data.records import SYNTHETIC_TASKS, read_jsonl

    # First the parts that depend on nothing else, each checked whatever the others say, so a config with several
    # independent mistakes is told all of them at once (one line each); what builds on them comes after.
    problems = Problems()
    run = problems.attempt(lambda: check_run(cfg))  # milliseconds: nothing is built, no file is read
    problems.attempt(lambda: check_trainer(cfg))
    parts = {group: problems.attempt(lambda group=group, schema=schema: _check_schema(registry, cfg, group, schema))
             for group, schema in GROUP_SCHEMAS.items()}
    for kind in KINDS:  # every plugin name exists (built below, once the blocks above hold)
        if not kind.many:
            problems.attempt(lambda kind=kind: _known_plugin(registry, cfg, kind))
    rubric = problems.attempt(lambda: load_rubric(resolve_path(parts["rubric"].path))) if parts["rubric"] else None
    if parts["model"] is not None:
        problems.attempt(lambda: check_model_path(parts["model"]))
    data_file = parts["data"].path if parts["data"] is not None else None
    if data_file is not None and read_data:
        problems.attempt(lambda: _check_data_file(resolve_path(data_file)))
    problems.raise_if_any()
    result = ValidatedConfig(cfg=cfg, rubric=rubric, run=run, model=parts["model"], data=parts["data"],
                             debias=run.debias, reward_rubric=rubric, evolve=parts["rubric"].evolve,
                             rubric_dropout=parts["rubric"].dropout)
    for kind in KINDS:
        if kind.many:
            continue  # lists of plugins (monitors) are validated below
        selected = _plugin_node(registry, cfg, kind.group)
        if selected is None:
            continue
        name, params = selected
        entry = registry.get(kind.key, name)
        try:
            plugin = registry.create(kind.key, name, params, where=_where(registry, cfg, kind.group, "params"))
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), _where(registry, cfg, kind.group, "params")) from None
        check = getattr(plugin, "check_rubric", None)
        if check is not None:
            # the judge checks the rubric it is asked with; every later part, what the scores follow
            check(rubric if kind.key == "judge" else result.reward_rubric)
        if kind.key == "judge":
            if rubric.per_record and not getattr(plugin, "scores_per_record", False):
                raise ConfigError(f"rubric {rubric.name} is per_record (each record scored against its own rubric); "
                                  f"judge={entry.name} does not score that way: use judge=rule or judge=llm", "judge")
            derive = getattr(plugin, "scored_rubric", None)
            result.reward_rubric = derive(rubric) if callable(derive) else rubric
        result.plugins[kind.key] = plugin
        result.plugin_names[kind.key] = entry.name
    result.plugins["monitor"] = validate_monitors(registry, cfg, result.reward_rubric)  # {key: monitor}
    if result.plugins["monitor"]:
        result.plugin_names["monitor"] = ", ".join(result.plugins["monitor"])
    _check_audit_probes(registry, run)
    _check_debias(run.debias, result.reward_rubric)
    _check_heldout_judge(registry, cfg, result)
    if "objective" not in result.plugins:
        raise ConfigError(f"select an objective, e.g. objective=policy_gradient (available: "
                          f"{registry.available('objective')})", "objective")
    result.objective = result.plugins["objective"]
    _check_objective_parts(registry, cfg, result)
    _check_group_size(run, result)
    _check_reference(registry, cfg, parts["model"], result)
    _check_engine_reference(registry, cfg, parts["model"], result)
    if run.ckpt_path is not None:
        check_checkpoint(resolve_path(run.ckpt_path), result.rubric, parts["model"])
    _check_reward_path(result)
    if "engine_is_cap" in run.model_fields_set:
        value = "null" if run.engine_is_cap is None else run.engine_is_cap
        warnings.warn(f"engine_is_cap is now is_correction (engine_is_cap={value} means "
                      f"{'is_correction=null' if run.engine_is_cap is None else f'is_correction.cap={value}'}); "
                      "the old name will be removed in the next minor release", stacklevel=2)
    if (lr_warning := check_learning_rate(parts["model"], run.optim.lr)) is not None:
        warnings.warn(lr_warning, stacklevel=2)
    _check_environment(result)
    check_machine(cfg, result.model)  # the accelerator, devices and memory this machine has (rlkit.config.machine)
    _check_rubric_evolution(result)
    data: Any = parts["data"]
    if data.path is not None:
        if data.chat or data.instruction is not None:
            key = "data.chat" if data.chat else "data.instruction"
            raise ConfigError("shapes the synthetic task's prompts; a data file's records are read as they are (write "
                              "its prompts as chat messages, TRL's conversational format, to have them rendered with "
                              "the chat template)", key)
        if read_data:
            result.records = read_jsonl(resolve_path(data.path), need_completions=need_completions)
    elif need_completions:
        raise DataError("set data.path to a JSONL file of records with completions", "data.path")
    elif data.task not in SYNTHETIC_TASKS:
        raise ConfigError(f"unknown synthetic task {data.task!r}; available: {', '.join(SYNTHETIC_TASKS)}",
                          _where(registry, cfg, "data", "task"))
    _check_demonstrations(result, data)
    _check_record_fields(result, data)
    records = _run_records(result, data)
    _check_records(result, records)
    _check_judge_scope(result, records)
    _check_judge_is_not_the_policy(result)
    _check_instruct_on_plain_prompts(result, records)
    _check_prompt_sampler(run, result, records)
    return result


_SAME_BASE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")


def _base_signature(folder: Path) -> tuple[Any, ...] | None:
    """What a model's ``config.json`` says of its architecture and size: equal for a base and its fine-tunes."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    signature = tuple(config.get(key) for key in _SAME_BASE_KEYS)
    return signature if all(v is not None for v in signature) else None


def _check_judge_is_not_the_policy(result: ValidatedConfig) -> None:
    """Warn when a model judge asks the policy's own model, or one of its base (the same architecture and size):
    the rubric design note's collusion risk, a judge pleased by what the model it trains writes. ``allow_self_judge``
    says it is meant."""
    from rlkit.lm.models import locate_model

    model = result.model
    folders = getattr(result.plugins.get("judge"), "model_folders", None)
    if result.run.allow_self_judge or model is None or model.name_or_path is None or not callable(folders):
        return
    judged = folders()
    if not judged:
        return
    policy = locate_model(model.name_or_path).resolve()
    policy_base = _base_signature(policy)
    for folder in judged:
        same = Path(folder).resolve() == policy
        if same or (policy_base is not None and _base_signature(Path(folder)) == policy_base):
            sizes = ", ".join(f"{k} {v}" for k, v in zip(_SAME_BASE_KEYS, policy_base or (), strict=False))
            what = "is the policy's own model" if same else f"shares the policy's base ({sizes})"
            warnings.warn(f"judge={result.plugin_names.get('judge')}: its model {folder} {what}: a judge can be "
                          "pleased by the model it trains (the rubric design note's collusion risk); use a judge of "
                          "another family, or set allow_self_judge=true if this is meant", stacklevel=3)
            return


def _check_record_fields(result: ValidatedConfig, data: DataConfig) -> None:
    """Every record field the judge's scoring reads (its ``record_fields``) is in the data: none of the records
    having it is an error (the dimension would never be scored, and a weighted reward would be made of the others
    in silence); some lacking it, a warning with the count."""
    fields = getattr(result.plugins.get("judge"), "record_fields", None)
    if result.records is None or not result.records or not callable(fields):
        return
    records = result.records
    for used in fields(result.rubric):
        lacking = [i for i, record in enumerate(records, 1) if record.get(used.field) is None]
        if len(lacking) == len(records):
            present = sorted({key for record in records for key in record})
            raise DataError(f"no record has a {used.field!r} field, which dimension {used.dimension} is scored from "
                            f"({used.where}), so it would never be scored; the records have "
                            f"{', '.join(present)}: rename the field in the data, or name one they have in the "
                            "check's `field:`", str(data.path))
        if lacking:
            warnings.warn(f"{data.path}: {len(lacking)} of {len(records)} records have no {used.field!r} field "
                          f"(first: record {lacking[0]}); dimension {used.dimension} ({used.where}) is not scored "
                          "on their completions", stacklevel=3)


def _check_records(result: ValidatedConfig, records: list[dict[str, Any]] | None) -> None:
    """The judge's ``check_records``: what scoring these records would refuse (each record's own rubric under
    ``rubric=per_record``) is refused here, as ``fit`` would refuse it, before any model is loaded."""
    check = getattr(result.plugins.get("judge"), "check_records", None)
    if not callable(check) or not records:
        return
    try:
        check(records, result.rubric)
    except RlkitError as exc:
        if result.data.path is None or not str(exc.where or "").startswith("record "):
            raise
        # a rubric given inline in a record: name the data file the record is in
        raise type(exc)(exc.message, f"{result.data.path}: {exc.where}") from None


def _check_judge_scope(result: ValidatedConfig, records: list[dict[str, Any]] | None) -> None:
    """Warn with each of the judge's ``scope_caveats``: the offline tiny judge, which knows only the default task's
    sums, scores a user's own records as if it knew them (on sums of 0-99 it calls most right answers wrong)."""
    caveats = getattr(result.plugins.get("judge"), "scope_caveats", None)
    if not callable(caveats) or not records:
        return
    for line in caveats(records, result.rubric):
        warnings.warn(line, stacklevel=3)


def _check_audit_probes(registry: Registry, run: Any) -> None:
    """``audit.probes`` names registered probes: a misspelled one fails here, not only once ``rlkit rubric audit``
    builds them."""
    for name in run.audit.probes or []:
        try:
            registry.get("audit_probe", name)
        except PluginError as exc:
            raise ConfigError(exc.message, "audit.probes") from None


def _check_rubric_evolution(result: ValidatedConfig) -> None:
    """``rubric.evolve.every > 0`` needs per-record rubrics (the evolved criteria join each record's own) and a judge
    whose backend is a model that can write criteria (``rlkit.evaluation.rubric_evolution``)."""
    from rlkit.core.templates import template_path

    evolve = result.evolve
    if evolve is None or not evolve.every:
        return
    where = "rubric.evolve.every"
    name = result.plugin_names.get("judge")
    backend = getattr(result.plugins.get("judge"), "backend", None)
    if backend is None or not callable(getattr(backend, "get", None)):
        raise ConfigError(f"judge={name} has no model backend to write new criteria; use judge=llm with "
                          "judge.params.backend=openai (or hf with a model), or set it to 0", where)
    if getattr(backend, "offline", False):
        raise ConfigError(f"judge={name}'s backend is the offline tiny judge, which cannot write criteria; point "
                          "judge.params.backend at a real model, or set it to 0", where)
    if not result.rubric.per_record:
        raise ConfigError(f"evolving criteria join each record's own rubric: use rubric=per_record (rubric "
                          f"{result.rubric.name} is not per_record), or set it to 0", where)
    template_path(evolve.template, "rubric.evolve.template")


def _check_demonstrations(result: ValidatedConfig, data: DataConfig) -> None:
    """An objective that learns from demonstrations needs one in every record (the synthetic tasks have a reference);
    a record without is named before any training. A warm start is of the embedded policy, on the synthetic task."""
    from rlkit.lm.sampling import demonstration_text

    model = result.model
    warm = model is not None and model.warm_start.steps > 0
    if warm and model.name_or_path is not None:
        raise ConfigError("warm-starts only the embedded tiny policy (model.name_or_path: null); train a policy of "
                          "your own with `rlkit sft` and pass its policy/ folder instead", "model.warm_start.steps")
    if warm and data.path is not None:
        raise ConfigError("a warm start learns from draws of the synthetic task the run does not use; with "
                          "data.path, warm-start with `rlkit sft` on demonstrations of your own",
                          "model.warm_start.steps")
    demonstrations = getattr(result.objective, "signal", None) == "demonstrations"
    if not demonstrations or result.records is None:
        return
    missing = [i for i, record in enumerate(result.records, 1) if demonstration_text(record) is None]
    if missing:
        raise DataError(f"objective={result.plugin_names['objective']} learns from demonstrations, and record "
                        f"{missing[0]} has neither a `completion` nor a `reference`"
                        + (f" ({len(missing) - 1} more)" if len(missing) > 1 else ""), str(data.path))
