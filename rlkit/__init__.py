"""rlkit: RL fine-tuning of language models from explicit, inspectable rubric rewards."""

from rlkit.core.errors import ConfigError, DataError, JudgeError, PluginError, RlkitError, RubricError
from rlkit.core.registry import hookimpl
from rlkit.core.rubric import Dimension, Rubric, load_rubric, rubric_from_dict
from rlkit.core.types import PreferencePairs, RewardBatch, Rollout

__version__ = "0.1.0"

# Modules that moved, by their old name: importing one says where it went instead of "No module named"
MOVED_MODULES = {
    "rlkit.sampling": "rlkit.lm.sampling",
    "rlkit.stats": "rlkit.core.stats",
    "rlkit.monitoring": "rlkit.reward.monitor_view (the view, alerts) and rlkit.train.monitoring (the host)",
    "rlkit.rubric": "rlkit.core.rubric",
    "rlkit.registry": "rlkit.core.registry",
    "rlkit.weighting": "rlkit.reward.weighting",
    "rlkit.grm.prompts": "rlkit.data.prompts (reward_prompt, beside the held-out split's prompt_key)",
}


class _MovedModuleFinder:
    """A meta-path finder that answers only the moved names, with an ImportError naming the new home."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> None:
        if name in MOVED_MODULES:
            raise ModuleNotFoundError(f"{name} moved: import {MOVED_MODULES[name]} (plugins import "
                                      "everything they use from rlkit.plugin)", name=name)


def _install_moved_module_finder() -> None:
    import sys

    if not any(isinstance(f, _MovedModuleFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())


_install_moved_module_finder()

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
