"""The contract every environment (``rlkit_register_environments``) must honour, as a pytest suite.

Subclass it with an ``environment`` fixture (and, where the environment reads its own kind of record, ``records``):

    from rlkit.testing import EnvironmentContract

    class TestMyEnvironment(EnvironmentContract):
        @pytest.fixture
        def environment(self):
            return MyEnvironment(MyEnvironment.Params())
"""

from __future__ import annotations

from typing import Any

import pytest

from rlkit.core.types import EnvStep

# What a policy may write in a turn: answers, well- and ill-formed tool calls in common formats, noise.
HOSTILE_TURNS = ("", "42", '[calc(e="2*3")]', "[calc(e=2*3)]", '[nope(x="1")]', "[", "]]]", '<tool_call>{"name": "x"',
                 '<tool_call>{"name": "calc", "arguments": {"e": "1/0"}}</tool_call>', "\x00\n\t", "9" * 500,
                 '[calc(e="9**9**9")]', "A:R:Q:T:", "<eos>")


def _is_message(m: Any) -> bool:
    return isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)


class EnvironmentContract:
    """``max_turns``/``max_tokens``, ``reset`` giving a prompt, and ``step`` answering any text with an ``EnvStep``
    of well-formed messages and numeric counts, never an exception."""

    @pytest.fixture
    def records(self) -> list[dict[str, Any]]:
        return [{"prompt": "2+3=", "reference": "5"},
                {"prompt": [{"role": "user", "content": "37*14"}], "reference": "518"}]

    @pytest.fixture
    def tokenizer(self) -> Any:
        """The tiny policy's tokenizer with the tool-calling chat template rlkit ships (experiment=calculator)."""
        import yaml

        from rlkit.core.package_files import resolve_path
        from rlkit.lm.conversation import apply_chat_format
        from rlkit.lm.models import build_tiny_policy, load_policy

        _, tokenizer = load_policy(build_tiny_policy())
        return apply_chat_format(tokenizer, resolve_path("pkg://rlkit.templates/chat/tiny_tools.jinja").read_text(),
                                 yaml.safe_load(resolve_path("pkg://rlkit.templates/chat/tiny_tools_response.yaml")
                                                .read_text()))

    def _ready(self, environment: Any, tokenizer: Any) -> Any:
        setup = getattr(environment, "setup", None)
        if callable(setup) and int(environment.max_turns) > 1:
            setup(tokenizer)
        return environment

    def test_limits(self, environment: Any) -> None:
        turns, tokens = environment.max_turns, environment.max_tokens
        assert isinstance(turns, int) and not isinstance(turns, bool) and turns >= 1
        assert tokens is None or (isinstance(tokens, int) and tokens >= 1)

    def test_reset_gives_a_prompt(self, environment: Any, records: list[dict[str, Any]]) -> None:
        for record in records:
            first = environment.reset(record)
            assert isinstance(first, str) or (isinstance(first, list) and first and all(map(_is_message, first))), \
                f"reset must return a prompt string or chat messages, got {first!r}"

    def test_step_answers_anything(self, environment: Any, records: list[dict[str, Any]], tokenizer: Any) -> None:
        from rlkit.lm.conversation import as_messages

        env = self._ready(environment, tokenizer)
        try:
            for record in records:
                messages = as_messages(env.reset(record))
                for text in HOSTILE_TURNS:
                    out = env.step(list(messages), text)
                    assert isinstance(out, EnvStep), f"step must return rlkit.plugin.EnvStep, got {type(out)}"
                    assert isinstance(out.done, bool)
                    assert all(map(_is_message, out.observation)), f"malformed observation {out.observation!r}"
                    assert out.done or out.observation, "an episode that goes on needs something to observe"
                    assert all(isinstance(v, int | float) and not isinstance(v, bool) for v in out.info.values())
        finally:
            close = getattr(env, "close", None)
            if callable(close):
                close()

    def test_tools_are_schemas(self, environment: Any) -> None:
        tools = getattr(environment, "tools", None)
        if not callable(tools):
            pytest.skip("this environment offers no tools")
        for schema in tools():
            assert schema.get("type") == "function" and isinstance(schema["function"]["name"], str)

    def test_has_close(self, environment: Any) -> None:
        assert callable(getattr(environment, "close", None))
