"""A conversation as the token ids a policy trains on: the first messages through the chat template, then policy turns
as the ids they were sampled as and the environment's turns as the template renders them after the policy's
end-of-turn token. Earlier turns are never re-tokenised, so the ids the loss scores are the ids that were sampled.

An environment turn's ids are the template's rendering of the conversation with the new messages (and the next
generation prompt) minus its rendering without them, cut after the last end-of-turn (EOS) token: templates such as
Qwen's write ``<|im_end|>\\n`` after a turn, and the model only sampled up to ``<|im_end|>`` (TRL's
``_get_tool_suffix_ids`` makes the same cut). A template whose rendering of a conversation is not a prefix of its
rendering of a longer one cannot be continued this way, and says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from rlkit.core.errors import ConfigError


def as_messages(observation: str | Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A prompt string as one user message; chat messages as they are."""
    if isinstance(observation, str):
        return [{"role": "user", "content": observation}]
    return [dict(m) for m in observation]


@dataclass
class ChatFormat:
    """Renders conversations with ``tokenizer``'s chat template (and ``tools``, transformers' ``tools=`` format)."""

    tokenizer: Any
    tools: list[dict[str, Any]] | None = None
    _checked: bool = field(default=False, repr=False)

    def check(self) -> None:
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError("a multi-turn environment needs a chat template to render its turns; this tokenizer has "
                              "none: set model.chat_template to a Jinja file", "model.chat_template")

    def render_ids(self, messages: Sequence[dict[str, Any]], *, generation_prompt: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(list(messages), tools=self.tools or None, tokenize=True,
                                                 add_generation_prompt=generation_prompt, return_dict=False)
        return list(ids[0] if ids and isinstance(ids[0], list) else ids)

    def prompt_ids(self, messages: Sequence[dict[str, Any]]) -> list[int]:
        """The first messages and the generation prompt of the first policy turn."""
        if not self._checked:
            self.check()
            self._checked = True
        return self.render_ids(messages, generation_prompt=True)

    def observation_ids(self, history: Sequence[dict[str, Any]], observation: Sequence[dict[str, Any]]) -> list[int]:
        """The ids that follow the policy's last turn (``history`` ends with it) when ``observation`` is appended:
        the observation's messages and the next turn's generation prompt."""
        before = self.render_ids(history, generation_prompt=False)
        after = self.render_ids([*history, *observation], generation_prompt=True)
        eos = self.tokenizer.eos_token_id
        ends = [i for i, t in enumerate(before) if t == eos]
        if ends:
            before = before[:ends[-1] + 1]
        if after[:len(before)] != before:
            raise ConfigError("the chat template renders a conversation differently once messages follow it, so a "
                              "turn cannot be appended to the ids sampled so far; use a template whose rendering of "
                              "earlier turns does not change (most do; reasoning templates that drop old <think> "
                              "blocks do not)", "model.chat_template")
        return after[len(before):]


def apply_chat_format(tokenizer: Any, chat_template: str | None, response_template: dict[str, Any] | None) -> Any:
    """``tokenizer`` with the run's chat template and response template where set (``model.chat_template``,
    ``model.response_template``); ``save_pretrained`` writes both with the policy."""
    if chat_template is not None:
        tokenizer.chat_template = chat_template
    if response_template is not None:
        tokenizer.response_template = response_template
    return tokenizer


def is_conversation(completion: Any) -> bool:
    """A TRL conversational completion with turns other than the assistant's (tool results, a user's replies)."""
    return isinstance(completion, list) and any(
        isinstance(m, dict) and m.get("role") not in ("assistant", None) for m in completion)


def conversation_ids(tokenizer: Any, prompt: str | Sequence[dict[str, Any]], completion: Sequence[dict[str, Any]],
                     max_turn_tokens: int, tools: list[dict[str, Any]] | None = None
                     ) -> tuple[list[int], list[int], list[int], list[tuple[int, int]]]:
    """A multi-turn demonstration as an episode would hold it: the prompt's ids, then the completion's ids with a
    mask of 1 on the assistant's tokens (its content and EOS, at most ``max_turn_tokens`` a turn) and 0 on the other
    turns' (rendered as :meth:`ChatFormat.observation_ids`), and the assistant turns' [start, end) columns."""
    chat = ChatFormat(tokenizer, tools)
    history = as_messages(prompt)
    prompt_ids = chat.prompt_ids(history)
    ids: list[int] = []
    mask: list[int] = []
    spans: list[tuple[int, int]] = []
    waiting: list[dict[str, Any]] = []
    for message in completion:
        if message.get("role") != "assistant":
            waiting.append(dict(message))
            continue
        if waiting:
            extra = chat.observation_ids(history, waiting)
            ids, mask = ids + extra, mask + [0] * len(extra)
            history, waiting = [*history, *waiting], []
        turn = (tokenizer(str(message.get("content") or ""), add_special_tokens=False)["input_ids"]
                + [tokenizer.eos_token_id])[:max_turn_tokens]
        spans.append((len(ids), len(ids) + len(turn)))
        ids, mask = ids + turn, mask + [1] * len(turn)
        history.append({"role": "assistant", "content": message.get("content") or ""})
    return prompt_ids, ids, mask, spans
