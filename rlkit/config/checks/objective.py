"""Checks of what the run learns from and how: the objective's signal and parts, group size, the reward path, a
multi-turn environment and the prompt sampler."""

from __future__ import annotations

import warnings
from typing import Any

from omegaconf import DictConfig

from rlkit.config.checks.model import has_chat_template
from rlkit.config.checks.outcome import CheckedConfig, is_group_relative
from rlkit.config.schemas import (
    RunConfig,
)
from rlkit.core.errors import ConfigError, PluginError
from rlkit.core.objective import SIGNALS
from rlkit.core.registry import Registry


def check_objective_parts(registry: Registry, cfg: DictConfig, result: CheckedConfig) -> None:
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


def check_group_size(run: RunConfig, result: CheckedConfig) -> None:
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


# the rubric design note (000 §4.3): a group of 2 makes the group normalisation unstable, 16 is costly, 8 balances
SMALL_GROUP = 4


def small_group_warning(run: RunConfig, result: CheckedConfig) -> str | None:
    """The warning line for a group-relative advantage estimator over groups smaller than :data:`SMALL_GROUP`, or
    None. Two or three completions give the group's baseline (a mean, a std) from as many values: every advantage
    swings with each one."""
    estimator = result.plugins.get("advantage_estimator")
    if (not 2 <= run.num_generations < SMALL_GROUP or getattr(result.objective, "signal", None) != "advantages"
            or not is_group_relative(estimator)):
        return None
    name = result.plugin_names["advantage_estimator"]
    return (f"num_generations={run.num_generations} with advantage={name}, which sets each completion's advantage "
            f"against its own group: a group under {SMALL_GROUP} makes that baseline unstable (the rubric design "
            f"note §4.3: 2 is unstable, 8 balances cost and stability); use num_generations=8, or at least "
            f"{SMALL_GROUP}")


def check_reward_path(result: CheckedConfig) -> None:
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


def check_environment(result: CheckedConfig) -> None:
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
    if has_chat_template(result.model) is False:
        raise ConfigError("a multi-turn environment needs a chat template to render its turns; this model's tokenizer "
                          "has none: set model.chat_template to a Jinja file (e.g. pkg://rlkit.templates/chat/"
                          "tiny_tools.jinja for the embedded policy)", "model.chat_template")


def check_prompt_sampler(run: RunConfig, result: CheckedConfig, records: list[dict[str, Any]] | None) -> None:
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
