"""Schemas of the config groups that are not plugins (model, data, objective, rubric, optim, debias)."""

from __future__ import annotations

from typing import Annotated, Literal

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


class PolicyGradientObjective(_Schema):
    name: Literal["policy_gradient"]
    beta: float = pydantic.Field(default=0.04, ge=0)
    epsilon: float = pydantic.Field(default=0.2, gt=0)
    epsilon_high: float | None = None
    num_iterations: int = pydantic.Field(default=1, ge=1)
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo"] = "grpo"
    mask_truncated_completions: bool = False


class GroupDpoObjective(_Schema):
    """Preference pairs from each group, trained with a DPO-family loss (see conf/objective/group_dpo.yaml)."""

    name: Literal["group_dpo"]
    loss_type: Literal["sigmoid", "ipo", "simpo"] = "sigmoid"
    beta: float = pydantic.Field(default=0.1, gt=0)
    label_smoothing: float = pydantic.Field(default=0.0, ge=0, lt=0.5)
    simpo_gamma: float = 0.5
    sft_weight: float = pydantic.Field(default=0.0, ge=0)
    min_gap: float = pydantic.Field(default=0.1, ge=0)
    mask_saturated: bool = True
    auto_lexicographic: bool = False
    conflict_threshold: float = pydantic.Field(default=0.2, ge=0, le=1)
    conflict_window: int = pydantic.Field(default=50, ge=1)
    num_iterations: int = pydantic.Field(default=1, ge=1)
    mask_truncated_completions: bool = False


OBJECTIVES: dict[str, type[_Schema]] = {"policy_gradient": PolicyGradientObjective, "group_dpo": GroupDpoObjective}


class ObjectiveConfig(pydantic.RootModel[Annotated[PolicyGradientObjective | GroupDpoObjective,
                                                   pydantic.Field(discriminator="name")]]):
    """The ``objective`` group: one schema per objective, picked by ``name``."""


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
    "objective": ObjectiveConfig,
    "rubric": RubricConfig,
    "optim": OptimConfig,
    "debias": DebiasConfig,
}


