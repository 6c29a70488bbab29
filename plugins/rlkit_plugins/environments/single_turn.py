"""``single_turn``: prompt → one completion, the loop as it always was (the default environment)."""

from __future__ import annotations

from typing import Any

from rlkit.plugin import EnvStep, hookimpl


class SingleTurn:
    """The record's prompt is the observation; the policy's one turn ends the episode."""

    max_turns = 1
    max_tokens = None

    def reset(self, record: dict[str, Any]) -> Any:
        return record["prompt"]

    def step(self, messages: list[dict[str, Any]], completion: str) -> EnvStep:
        return EnvStep(observation=[], done=True)

    def close(self) -> None:
        pass


@hookimpl
def rlkit_register_environments(register):
    register("single_turn", lambda params: SingleTurn())
