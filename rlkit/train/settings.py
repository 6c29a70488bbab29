"""What a training run is made of, as the loop's collaborators read it: the reward plugins (``RewardParts``) and the
loop's settings (``TrainingSettings``), both built from the validated config by ``rlkit.train.fit``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rlkit.lm.logprobs import ImportanceCorrection
from rlkit.reward.debias import LengthFormatDebias
from rlkit.train.dynamic_sampling import SamplingSettings


@dataclass
class RewardParts:
    """The reward plugins of a run, built from config by the registry."""

    judge: Any
    judge_name: str
    aggregator: Any
    estimator: Any
    scheduler: Any
    aggregator_name: str = ""
    score_normalization: str = "range"
    objective: Any = None      # the objective plugin (its signal: advantages or pairs)
    constructor: Any = None    # preference constructor (objectives whose signal is pairs)
    debias: LengthFormatDebias | None = None  # length/format bias correction of training scores
    # held-out completions' own judge, aggregator and weights (rlkit.reward.pipeline.HeldoutScoring); None: scored
    # like training completions
    heldout_scoring: Any = None


@dataclass
class TrainingSettings:
    """The loop's settings (what the objective itself needs is its own params)."""

    num_generations: int
    max_completion_length: int
    temperature: float
    lr: float
    weight_decay: float
    warmup_steps: int
    gradient_clip_val: float | None
    gradient_accumulation_steps: int = 1
    length_buckets: int = 1  # policy-gradient passes over rows grouped by completion length
    seed: int = 0  # the run seed; with the step and a prompt's batch position it seeds that prompt's sampling
    rubric_dropout: float = 0.0  # rubric.dropout: with the seed and the step it draws the dimensions a group drops
    max_nonfinite: int = 3  # optim.max_nonfinite: steps in a row with a non-finite loss or gradient before a stop
    # the correction against an engine's log-probs (rlkit.lm.logprobs.ImportanceCorrection); None: off
    is_correction: ImportanceCorrection | None = field(default_factory=ImportanceCorrection)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)  # dynamic sampling, cut completions' reward
