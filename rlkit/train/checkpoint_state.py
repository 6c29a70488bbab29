"""The run's own state in a Lightning checkpoint (``checkpoint["rlkit"]``): the rubric it was trained with, the model
fingerprint, the weight scheduler, every process's RNG, the data and sampling positions, the objective's,
debiasing's, monitors' and generator's state, and rollouts requested ahead, so that a resumed run draws and trains
what the uninterrupted one would have."""

from __future__ import annotations

from typing import Any

from rlkit.core.rng import capture_rng_state


def save_run_state(module: Any, checkpoint: dict[str, Any]) -> None:
    """What a resumed run needs beyond Lightning's own state, under ``checkpoint["rlkit"]``."""
    # Lightning builds the checkpoint on every process and rank 0 writes it: each process's generators
    # travel in it, so a resumed multi-process run draws what the uninterrupted one would have.
    rng_by_rank = module.spread.gather_objects(capture_rng_state())
    checkpoint["rlkit"] = {"rubric": module.judged_rubric.identity(), "model": module.model_fingerprint(),
                           "weight_scheduler": module.parts.scheduler.state_dict(),
                           "rng": rng_by_rank[0], "data_position": list(module._data_position)}
    if module.settings.sampling.filters and module._sampling_position is not None:
        checkpoint["rlkit"]["sampling_position"] = list(module._sampling_position)
    objective_state = getattr(module.parts.objective, "state_dict", None)
    if callable(objective_state):
        checkpoint["rlkit"]["objective"] = objective_state()
    if module.parts.debias is not None:
        checkpoint["rlkit"]["debias"] = module.parts.debias.state_dict()
    if len(rng_by_rank) > 1:
        checkpoint["rlkit"]["rng_by_rank"] = rng_by_rank
    if module.monitors is not None:
        checkpoint["rlkit"]["monitors"] = module.monitors.state_dict()
    generator_state = getattr(module.generator, "state_dict", None)
    if callable(generator_state):
        checkpoint["rlkit"]["generator"] = generator_state()
    if module.rollouts.depth:
        # every process's rollouts requested ahead (sampled by now: the weight sync waited for them), so a
        # resumed run trains on what the uninterrupted one would have
        by_rank = module.spread.gather_objects(module.rollouts.state_dict())
        checkpoint["rlkit"]["rollouts_ahead_by_rank"] = by_rank


def load_run_state(module: Any, checkpoint: dict[str, Any]) -> None:
    """Check a checkpoint against this run (its rubric) and hand each part its saved state."""
    state = checkpoint.get("rlkit", {})
    saved = state.get("rubric", {}).get("hash")
    if saved and saved != module.judged_rubric.content_hash:
        from rlkit.core.errors import ConfigError

        raise ConfigError(f"the checkpoint was trained with rubric {state['rubric']['name']} "
                          f"v{state['rubric']['version']} (hash {saved[:12]}), this run uses "
                          f"{module.judged_rubric.name} v{module.judged_rubric.version} "
                          f"({module.judged_rubric.short_hash})", "ckpt_path")
    if "weight_scheduler" in state:
        module.parts.scheduler.load_state_dict(state["weight_scheduler"])
    if "monitors" in state and module.monitors is not None:
        module.monitors.load_state_dict(state["monitors"])
    module._generator_stale = True  # the checkpoint's weights replace the ones the generator was set up on
    if "generator" in state and callable(getattr(module.generator, "load_state_dict", None)):
        module.generator.load_state_dict(state["generator"])
    ahead = state.get("rollouts_ahead_by_rank")
    if ahead is not None and module.rollouts.depth and len(ahead) == module.spread.world_size:
        module.rollouts.load_state_dict(ahead[module.spread.rank], lambda: module.device)
    if "debias" in state and module.parts.debias is not None:
        try:
            module.parts.debias.load_state_dict(state["debias"])
        except ValueError as exc:
            raise ConfigError(f"{exc}; resume with the same debias.features and debias.dimensions",
                              "ckpt_path") from None
    by_rank, spread = state.get("rng_by_rank"), module.spread
    own = by_rank[spread.rank] if by_rank is not None and len(by_rank) == spread.world_size else None
    module._rng_to_restore = own or state.get("rng")
    # "ordering": what checkpoints before objectives became plugins called group_dpo's state
    objective_state = state.get("objective", state.get("ordering"))
    if objective_state is not None and callable(getattr(module.parts.objective, "load_state_dict", None)):
        module.parts.objective.load_state_dict(objective_state)
    if "sampling_position" in state:
        module._sampling_position = tuple(state["sampling_position"])
    if "data_position" in state:
        module._data_position = tuple(state["data_position"])
        datamodule = getattr(module.trainer, "datamodule", None) if module._trainer is not None else None
        if datamodule is not None and hasattr(datamodule, "resume_at"):
            datamodule.resume_at(*module._data_position)
