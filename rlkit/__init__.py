"""rlkit: RL fine-tuning of language models from explicit, inspectable rubric rewards."""

from rlkit.errors import ConfigError, DataError, JudgeError, PluginError, RlkitError, RubricError
from rlkit.registry import hookimpl
from rlkit.rubric import Dimension, Rubric, load_rubric, rubric_from_dict
from rlkit.types import PreferencePairs, RewardBatch, Rollout

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
