"""What a model is, read without its weights: a folder's ``config.json`` through ``AutoConfig``, and the few fields
that say whether a checkpoint's weights fit a model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError

# The fields that decide whether saved weights load into a model: two models that differ in any have different
# parameter shapes. A checkpoint records them (RubricRLModule.on_save_checkpoint) and `rlkit validate` compares.
FINGERPRINT_FIELDS = ("model_type", "vocab_size", "hidden_size", "num_hidden_layers")


def read_model_config(path: Path, where: str) -> Any:
    """``AutoConfig`` of a local model folder (no weights); a config transformers cannot read is a ``ConfigError``."""
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        reason = " ".join(str(exc).split())
        raise ConfigError(f"{path / 'config.json'} is not a config transformers can read: {reason[:300]}",
                          where) from None


def model_fingerprint(config: Any, lora_r: int = 0) -> dict[str, Any]:
    """The fields of a transformers config that fix the parameter shapes, plus the LoRA rank."""
    out = {name: getattr(config, name, None) for name in FINGERPRINT_FIELDS}
    out["lora_r"] = int(lora_r)
    return out


def tiny_policy_fingerprint(spec: Any, lora_r: int = 0) -> dict[str, Any]:
    """The embedded tiny policy's fingerprint from its spec alone (its vocabulary is fixed only once built)."""
    from rlkit.lm.models import _architecture

    config_cls = _architecture()[0]
    return {"model_type": config_cls.model_type, "vocab_size": None, "hidden_size": spec.hidden_size,
            "num_hidden_layers": spec.num_hidden_layers, "lora_r": int(lora_r)}
