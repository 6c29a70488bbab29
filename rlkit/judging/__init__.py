"""Model-based judging: backends that answer prompts, the parsing of their answers, and the response cache."""

from rlkit.judging.types import Completion, render_chat

__all__ = ["Completion", "render_chat"]
