"""Episodes given as conversations: a scored file's episode records and the reward API's ``messages``.

Outside training nobody played the episode, so it is read back from the conversation. An episode is the
conversation after the prompt, as TRL writes a conversational completion: the assistant's turns (the policy's) with
other turns between them (``tool`` results, a ``user``'s replies), ending with the assistant's final answer. What is
inferred, the way ``environment=tools`` counts while it plays:

* ``turns``: the assistant messages' text (``content``; a list of content parts, its text parts; missing or null,
  ""). TRL's structured ``tool_calls`` field is not rendered into the text: a rubric reads what the policy wrote.
* ``info["tool_calls"]``: the ``tool`` messages (the environment answers each call, a malformed one included, with
  one); ``info["tool_errors"]``: those whose content starts with ``error:``. How the episode ended is not known, so
  ``info`` has no ``ended``.

Step scores reuse :mod:`rlkit.reward.steps` as the training loop does: :func:`judged_steps` asks the judge once per
turn index (``score_steps``), or, for single-turn rollouts, takes each completion's own scores as its one step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rlkit.core.rubric import Rubric
from rlkit.core.types import Episode, Rollout
from rlkit.data.records import content_text
from rlkit.lm.conversation import as_messages
from rlkit.reward.steps import score_steps, single_turn_steps

if TYPE_CHECKING:
    import torch


def episode_problem(conversation: Any) -> str | None:
    """Why ``conversation`` (an episode after its prompt) cannot be scored; None when it can."""
    if not isinstance(conversation, list) or not conversation:
        return "an episode must be a non-empty list of chat messages"
    for i, message in enumerate(conversation):
        if not isinstance(message, dict):
            return f"message {i} must be an object {{role, content}}"
        role, content = message.get("role"), message.get("content")
        if not isinstance(role, str) or not role:
            return f"message {i} needs a role (a non-empty string)"
        if content is not None and not isinstance(content, str | list):
            return f"message {i}'s content must be text, got {type(content).__name__}"
    if conversation[-1].get("role") != "assistant":
        return "an episode must end with the assistant's turn (its final answer)"
    return None


def split_messages(messages: Sequence[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A whole conversation as (prompt: the messages before the first assistant turn, episode: the rest)."""
    first = next((i for i, m in enumerate(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
                 len(messages))
    return list(messages[:first]), list(messages[first:])


def conversation_episode(prompt: str | Sequence[dict[str, Any]], conversation: str | Sequence[dict[str, Any]]
                         ) -> Episode:
    """The :class:`Episode` of ``conversation`` after ``prompt`` (text: a one-turn episode), counts inferred."""
    head = as_messages(prompt)
    turns = [{"role": "assistant", "content": conversation}] if isinstance(conversation, str) else \
        [dict(m) for m in conversation]
    tools = [m for m in turns if m.get("role") == "tool"]
    errors = sum(content_text(m.get("content")).startswith("error:") for m in tools)
    return Episode(tuple([*head, *turns]), tuple(content_text(m.get("content")) for m in turns
                                                 if m.get("role") == "assistant"),
                   {"tool_calls": len(tools), "tool_errors": errors}, len(head))


def judged_rollout(records: Sequence[dict[str, Any]], groups: Sequence[Sequence[Any]]) -> Rollout:
    """A rollout of ``groups[b]``: texts, or episodes given as their messages after ``records[b]``'s prompt. With
    any episode in it, every completion is one (a text: a one-turn episode, as an environment that is answered at
    once plays it) and ``completions`` are the episodes' last turns; otherwise a single-turn rollout of the texts."""
    if not any(isinstance(c, list) for group in groups for c in group):
        return Rollout(records, [list(group) for group in groups])
    episodes = [[conversation_episode(record["prompt"], c) for c in group]
                for record, group in zip(records, groups, strict=True)]
    return Rollout(records, [[e.turns[-1] for e in group] for group in episodes], episodes=episodes)


def judged_steps(score: Callable[[Rollout], torch.Tensor], rollout: Rollout, raw: torch.Tensor,
                 rubric: Rubric) -> torch.Tensor:
    """``[B, G, T, D]`` step scores as the training loop takes them: ``score`` (a checked judge call) once per
    turn index of the rollout's episodes, T its longest episode; single-turn rollouts: ``raw``, their one step."""
    if rollout.episodes is None:
        return single_turn_steps(raw.cpu(), rubric)
    turns = max(e.num_turns for group in rollout.episodes for e in group)
    return score_steps(score, rollout, rubric, turns)


def step_lists(steps: torch.Tensor, num_turns: int, rubric: Rubric) -> dict[str, list[float | None]]:
    """One completion's step scores ``[T, D]`` as ``{dimension: [score per turn]}`` for its ``num_turns`` turns,
    step-scoped dimensions only; None where a turn was not scored."""
    return {rubric.dimensions[i].name: [None if math.isnan(v) else v for v in steps[:num_turns, i].tolist()]
            for i in rubric.step_dimensions}


def num_turns(rollout: Rollout) -> list[list[int]]:
    """``[B][G]`` policy turns of each completion (1 for single-turn rollouts)."""
    if rollout.episodes is None:
        return [[1] * len(group) for group in rollout.completions]
    return [[e.num_turns for e in group] for group in rollout.episodes]
