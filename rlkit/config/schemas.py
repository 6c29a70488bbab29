"""Schemas of the config groups that are not plugins (model, data, rubric, optim, debias)."""

from __future__ import annotations

from typing import Literal

import pydantic


class _Schema(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


class LoraConfig(_Schema):
    """peft LoRA on the policy; ``r: 0`` trains the full model."""

    r: int = pydantic.Field(default=0, ge=0)
    alpha: float | None = pydantic.Field(default=None, gt=0)  # None: 2·r, a common choice
    dropout: float = pydantic.Field(default=0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"
    save: Literal["merged", "adapter"] = "merged"

    @property
    def enabled(self) -> bool:
        return self.r > 0


class ModelConfig(_Schema):
    name_or_path: str | None = None
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "float32"
    reference: Literal["frozen", "adapter_off", "ema", "none"] = "frozen"
    ema_decay: float = pydantic.Field(default=0.99, ge=0, lt=1)  # reference=ema: ref ← d·ref + (1 − d)·policy
    lora: LoraConfig = pydantic.Field(default_factory=LoraConfig)
    gradient_checkpointing: bool = False


class DataConfig(_Schema):
    path: str | None = None
    task: str | None = "arithmetic"
    num_prompts: int | None = pydantic.Field(default=256, gt=0)
    heldout_fraction: float = pydantic.Field(default=0.125, ge=0, lt=1)
    seed: int = 0


class RubricConfig(_Schema):
    path: str


class OptimConfig(_Schema):
    lr: float = pydantic.Field(default=2e-3, ge=0)
    weight_decay: float = pydantic.Field(default=0.0, ge=0)
    warmup_steps: int = pydantic.Field(default=0, ge=0)
    gradient_clip_val: float | None = pydantic.Field(default=1.0, gt=0)
    gradient_accumulation_steps: int = pydantic.Field(default=1, ge=1)
    length_buckets: int = pydantic.Field(default=1, ge=1)


class DebiasConfig(_Schema):
    """Length/format bias correction of judge scores (``rlkit/debias.py``); off by default."""

    enabled: bool = False
    features: list[str] = pydantic.Field(default_factory=lambda: ["length", "newlines", "markdown"])
    dimensions: list[str] | None = None  # None: every dimension but gates and condition targets
    window: int = pydantic.Field(default=512, ge=1)
    min_samples: int = pydantic.Field(default=64, ge=2)
    ridge: float = pydantic.Field(default=1e-3, ge=0)


GROUP_SCHEMAS: dict[str, type[pydantic.BaseModel]] = {
    "model": ModelConfig,
    "data": DataConfig,
    "rubric": RubricConfig,
    "optim": OptimConfig,
    "debias": DebiasConfig,
}


