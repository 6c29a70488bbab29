"""The run's own state in a Lightning checkpoint (``checkpoint["rlkit"]``): the rubric it was trained with, the model
fingerprint, the weight scheduler, every process's RNG, the data and sampling positions, the objective's,
debiasing's, monitors' and generator's state, rollouts requested ahead, the held-out start and the wall time so far,
so that a resumed run draws and trains what the uninterrupted one would have and reports the start and the cost it
had.

Under LoRA the checkpoint's ``state_dict`` holds the trainable weights alone (``"weights": "trainable"``): the frozen
base is the model file the run names, loaded again on resume (SmolLM2-135M at r=16: 57 MB, the adapter and its AdamW
state, instead of 570 MB)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from rlkit.core.errors import ConfigError
from rlkit.core.rng import capture_rng_state
from rlkit.train.distributed import Spread
from rlkit.train.lookahead import RolloutQueue
from rlkit.train.run_position import RunPosition
from rlkit.train.step_rewards import RewardPipeline


@dataclass
class CheckpointedParts:
    """Every part of a run whose state a checkpoint carries beyond Lightning's own (the weights, the optimiser)."""

    rewards: RewardPipeline  # the rubric trained with; the scheduler's, objective's and bias correction's state
    position: RunPosition
    fingerprint: Callable[[], dict[str, Any]]  # the model's (what `rlkit validate` compares on resume)
    generator: Any
    rollouts: RolloutQueue
    monitors: Any = None  # rlkit.train.monitoring.MonitorHost or None
    filters: bool = False  # dynamic sampling filters groups: its own position in the data matters
    # the policy's frozen weights by state-dict key (under LoRA, the base): left out of the checkpoint, taken from
    # the loaded model on resume; None keeps every weight in it
    frozen: Callable[[], dict[str, torch.Tensor]] | None = None
    # the held-out means measured before the first step: a resumed run reports them as its start instead of
    # answering and judging the split again on the untrained weights (``start_of_resumed``)
    heldout_start: dict[str, float] | None = None


def save_run_state(run: CheckpointedParts, checkpoint: dict[str, Any]) -> None:
    """What a resumed run needs beyond Lightning's own state, under ``checkpoint["rlkit"]``."""
    # Lightning builds the checkpoint on every process and rank 0 writes it: each process's generators
    # travel in it, so a resumed multi-process run draws what the uninterrupted one would have.
    spread, parts = Spread.current(), run.rewards.parts
    rng_by_rank = spread.gather_objects(capture_rng_state())
    state: dict[str, Any] = {"rubric": run.rewards.rubric.identity(), "model": run.fingerprint(),
                             "weight_scheduler": parts.scheduler.state_dict(),
                             "rng": rng_by_rank[0], "data_position": list(run.position.data),
                             "wall_time": run.position.clock.state_dict()}
    checkpoint["rlkit"] = state
    if run.heldout_start:
        state["heldout_start"] = dict(run.heldout_start)
    if run.frozen is not None:
        weights = checkpoint.get("state_dict")
        # only keys as the module names them (a strategy that renames them keeps every weight)
        dropped = [key for key in run.frozen() if key in weights] if isinstance(weights, dict) else []
        for key in dropped:
            del weights[key]
        if dropped:
            state["weights"] = "trainable"
    if run.filters and run.position.sampling is not None:
        state["sampling_position"] = list(run.position.sampling)
    objective_state = getattr(parts.objective, "state_dict", None)
    if callable(objective_state):
        state["objective"] = objective_state()
    if parts.debias is not None:
        state["debias"] = parts.debias.state_dict()
    if len(rng_by_rank) > 1:
        state["rng_by_rank"] = rng_by_rank
    if run.monitors is not None:
        state["monitors"] = run.monitors.state_dict()
    generator_state = getattr(run.generator, "state_dict", None)
    if callable(generator_state):
        state["generator"] = generator_state()
    if run.rollouts.depth:
        # every process's rollouts requested ahead (sampled by now: the weight sync waited for them), so a
        # resumed run trains on what the uninterrupted one would have
        state["rollouts_ahead_by_rank"] = spread.gather_objects(run.rollouts.state_dict())


def saved_heldout_start(checkpoint: dict[str, Any]) -> dict[str, float] | None:
    """The held-out start means a checkpoint carries, or None (an earlier checkpoint, or a run with no evaluation)."""
    start = checkpoint.get("rlkit", {}).get("heldout_start")
    return {str(k): float(v) for k, v in start.items()} if isinstance(start, dict) and start else None


def load_run_state(run: CheckpointedParts, checkpoint: dict[str, Any], device: Callable[[], torch.device],
                   data: Any = None) -> None:
    """Check a checkpoint against this run (its rubric) and hand each part its saved state; ``data`` (the run's data
    module, when it has one that resumes) is put at the saved data position."""
    state = checkpoint.get("rlkit", {})
    rubric, parts, spread = run.rewards.rubric, run.rewards.parts, Spread.current()
    saved = state.get("rubric", {}).get("hash")
    if saved and saved != rubric.content_hash:
        raise ConfigError(f"the checkpoint was trained with rubric {state['rubric']['name']} "
                          f"v{state['rubric']['version']} (hash {saved[:12]}), this run uses "
                          f"{rubric.name} v{rubric.version} ({rubric.short_hash})", "ckpt_path")
    if "weight_scheduler" in state:
        parts.scheduler.load_state_dict(state["weight_scheduler"])
    if "monitors" in state and run.monitors is not None:
        run.monitors.load_state_dict(state["monitors"])
    if "generator" in state and callable(getattr(run.generator, "load_state_dict", None)):
        run.generator.load_state_dict(state["generator"])
    ahead = state.get("rollouts_ahead_by_rank")
    if ahead is not None and run.rollouts.depth and len(ahead) == spread.world_size:
        run.rollouts.load_state_dict(ahead[spread.rank], device)
    if "debias" in state and parts.debias is not None:
        try:
            parts.debias.load_state_dict(state["debias"])
        except ValueError as exc:
            raise ConfigError(f"{exc}; resume with the same debias.features and debias.dimensions",
                              "ckpt_path") from None
    if state.get("weights") == "trainable":
        if run.frozen is None:
            raise ConfigError("the checkpoint holds a LoRA adapter alone (its base is the model file its run named); "
                              "resume it with that run's model.name_or_path and model.lora", "ckpt_path")
        weights = checkpoint.setdefault("state_dict", {})
        for key, value in run.frozen().items():  # the base as this run loaded it from model.name_or_path
            weights.setdefault(key, value)
    by_rank = state.get("rng_by_rank")
    own = by_rank[spread.rank] if by_rank is not None and len(by_rank) == spread.world_size else None
    run.position.rng_to_restore = own or state.get("rng")
    run.position.clock.resume_from(state.get("wall_time"))
    objective_state = state.get("objective")
    if objective_state is not None and callable(getattr(parts.objective, "load_state_dict", None)):
        parts.objective.load_state_dict(objective_state)
    if "sampling_position" in state:
        run.position.sampling = tuple(state["sampling_position"])
    if "data_position" in state:
        run.position.data = tuple(state["data_position"])
        if data is not None and hasattr(data, "resume_at"):
            data.resume_at(*run.position.data)
