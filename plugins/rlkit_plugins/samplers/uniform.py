"""``uniform``: every training prompt once per epoch, in a fresh seeded order each epoch.

This is the data loader's own epoch shuffle (a permutation drawn from the run seed and the epoch alone), so the
sampler has no ``pick``: the loop trains on that order as it is, reads it ahead for a generator's ``max_lag``
lookahead and resumes mid-epoch from the checkpointed position. It learns nothing and keeps no state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlkit.plugin import hookimpl


class UniformSampler:
    """The epoch shuffle as it is: every prompt once per epoch, in a fresh order from (seed, epoch)."""

    adaptive = False

    def __init__(self, params: None = None) -> None:
        del params  # no params

    def setup(self, records: list[dict[str, Any]], seed: int) -> None:
        """Nothing to prepare: the loader shuffles."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Nothing to restore: the loader's position is the module's."""


@hookimpl
def rlkit_register_prompt_samplers(register: Callable[..., None]) -> None:
    register("uniform", UniformSampler)
