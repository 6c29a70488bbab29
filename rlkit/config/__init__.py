"""Composing the Hydra config and validating every part of it before anything heavy is built.

``compose`` finds and composes the YAML, ``schemas`` holds the non-plugin groups' schemas, ``validate`` binds every
part. The names below are the package's face: ``from rlkit.config import compose_config, check_config``.
"""

from rlkit.config.compose import (
    CONFIG_MODULE,
    HYDRA_VERSION_BASE,
    PRIMARY_CONFIG,
    compose_config,
    config_source,
    group_options,
    plugin_search_paths,
    resolve_path,
    search_path_override,
)
from rlkit.config.schemas import (
    GROUP_SCHEMAS,
    CalibrateConfig,
    DataConfig,
    DebiasConfig,
    EvalConfig,
    LogSamplesConfig,
    LoraConfig,
    ModelConfig,
    OptimConfig,
    RubricConfig,
    RunConfig,
    ScoreConfig,
    ServeConfig,
    register_run_defaults,
)
from rlkit.config.validate import CheckedConfig, check_block, check_config, check_model_path, check_run

__all__ = [
    "CONFIG_MODULE", "GROUP_SCHEMAS", "HYDRA_VERSION_BASE", "PRIMARY_CONFIG", "CalibrateConfig", "CheckedConfig",
    "DataConfig", "DebiasConfig", "EvalConfig", "LogSamplesConfig", "LoraConfig", "ModelConfig", "OptimConfig",
    "RubricConfig", "RunConfig", "ScoreConfig", "ServeConfig", "check_block", "check_config", "check_model_path",
    "check_run", "compose_config", "config_source", "group_options", "plugin_search_paths", "register_run_defaults",
    "resolve_path", "search_path_override",
]
