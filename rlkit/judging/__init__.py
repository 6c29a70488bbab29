"""Model-based judging: backends that answer prompts, the parsing of their answers, and the response cache."""

from rlkit.judging.types import Completion

__all__ = ["Completion"]
