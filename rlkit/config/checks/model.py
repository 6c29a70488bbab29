"""Checks of the policy model and what it runs on: its path (read without loading weights), chat format, learning
rate, reference, and a judge that would be the policy itself."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

from omegaconf import DictConfig

from rlkit.config.checks.blocks import config_where
from rlkit.config.checks.outcome import CheckedConfig
from rlkit.config.schemas import (
    ModelConfig,
)
from rlkit.core.errors import ConfigError
from rlkit.core.package_files import resolve_path
from rlkit.core.registry import Registry


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


def has_chat_template(model: ModelConfig) -> bool | None:
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


def check_reference(registry: Registry, cfg: DictConfig, model: ModelConfig, result: CheckedConfig) -> None:
    where = config_where(registry, cfg, "model", "reference")
    if model.reference == "none" and result.objective.reference_use is not None:
        raise ConfigError(f"model.reference=none leaves no reference for {result.objective.reference_use}", where)
    if model.reference == "none" and result.reference_monitors:
        raise ConfigError(f"model.reference=none leaves no reference for monitors.{result.reference_monitors[0]}, "
                          "which measures the policy against it", where)
    if model.reference == "adapter_off" and not model.lora.enabled:
        raise ConfigError("adapter_off needs LoRA adapters to switch off; set model.lora.r > 0 or use frozen", where)


def check_engine_reference(registry: Registry, cfg: DictConfig, model: ModelConfig, result: CheckedConfig) -> None:
    """``model.reference=engine`` asks the generator's engine for the reference's log-probs: the generator must
    offer it (``score_reference``) and be told the reference's served name."""
    if model.reference != "engine" or not result.needs_reference:
        return
    generator = result.plugins.get("generator")
    name = result.plugin_names.get("generator")
    if not callable(getattr(generator, "score_reference", None)):
        raise ConfigError(f"reference=engine scores with the inference engine's reference model; generator={name} "
                          "has none: use generator=openai_server", config_where(registry, cfg, "model", "reference"))
    if getattr(getattr(generator, "params", None), "reference_model", None) is None:
        raise ConfigError("reference=engine needs the name the server serves the reference model under (vLLM with "
                          "LoRA: the base model's; the test server: --reference-model)",
                          "generator.params.reference_model")


SAME_BASE_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")


def base_signature(folder: Path) -> tuple[Any, ...] | None:
    """What a model's ``config.json`` says of its architecture and size: equal for a base and its fine-tunes."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    signature = tuple(config.get(key) for key in SAME_BASE_KEYS)
    return signature if all(v is not None for v in signature) else None


def check_judge_is_not_the_policy(result: CheckedConfig) -> None:
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
    policy_base = base_signature(policy)
    for folder in judged:
        same = Path(folder).resolve() == policy
        if same or (policy_base is not None and base_signature(Path(folder)) == policy_base):
            sizes = ", ".join(f"{k} {v}" for k, v in zip(SAME_BASE_KEYS, policy_base or (), strict=False))
            what = "is the policy's own model" if same else f"shares the policy's base ({sizes})"
            warnings.warn(f"judge={result.plugin_names.get('judge')}: its model {folder} {what}: a judge can be "
                          "pleased by the model it trains (the rubric design note's collusion risk); use a judge of "
                          "another family, or set allow_self_judge=true if this is meant", stacklevel=3)
            return


def check_instruct_on_plain_prompts(result: CheckedConfig, records: list[dict[str, Any]] | None) -> None:
    """A hint when a model with a chat template (an instruct model) is to be trained on plain-text prompts: it answers
    its chat turns, not raw text, and a full fine-tune of it costs far more than a LoRA adapter."""
    model, data = result.model, result.data
    if model.name_or_path is None or has_chat_template(model) is not True:
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
