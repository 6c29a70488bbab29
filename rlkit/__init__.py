"""rlkit: RL fine-tuning of language models from explicit, inspectable rubric rewards."""

from rlkit.core.errors import ConfigError, DataError, JudgeError, PluginError, RlkitError, RubricError
from rlkit.core.registry import hookimpl
from rlkit.core.rubric import Dimension, Rubric, load_rubric, rubric_from_dict
from rlkit.core.types import PreferencePairs, RewardBatch, Rollout

__version__ = "0.1.0"

__all__ = [
    "ConfigError",
    "DataError",
    "Dimension",
    "JudgeError",
    "PluginError",
    "PreferencePairs",
    "RewardBatch",
    "RlkitError",
    "Rollout",
    "Rubric",
    "RubricError",
    "hookimpl",
    "load_rubric",
    "rubric_from_dict",
]
