"""What the test server reads from a request and records about it: the JSON body's checks, the 400s they raise,
and the canned malformed answers its fault injection sends."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

_GARBAGE: tuple[tuple[str, bytes], ...] = (
    ("application/json", b'{"choices": [{"message": {"content": "unterminated'),
    ("text/html", b"<html><body>502 Bad Gateway</body></html>"),
    ("application/json", b'{"choices": []}'),
    ("application/json", b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": null}}]}'),
    ("application/json", b'{"id": "chatcmpl-garbage", "object": "chat.completion"}'),
)
_DEFAULT_MAX_TOKENS = 16


@dataclass(frozen=True)
class RequestRecord:
    """One request the server received: its method and path, the ``Authorization`` header, the status sent and
    the injected fault (``fail``, ``garbage`` or None); for an answered generation, the ``usage`` it reported."""

    method: str
    path: str
    authorization: str | None
    status: int
    fault: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0


class _BadRequest(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind


def _json_object(raw: bytes) -> dict[str, Any]:
    """A request body that must be a JSON object; a 400 otherwise."""
    try:
        body = json.loads(raw or b"null")
    except ValueError:
        raise _BadRequest(400, "the request body is not JSON") from None
    if not isinstance(body, dict):
        raise _BadRequest(400, "the request body must be a JSON object")
    return body


def _messages(body: dict[str, Any]) -> list[dict[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise _BadRequest(400, "'messages' must be a non-empty list")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise _BadRequest(400, f"messages[{i}] must be an object with a string 'role'")
        content = m.get("content")
        if isinstance(content, list):  # OpenAI's content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if not isinstance(content, str):
            raise _BadRequest(400, f"messages[{i}].content must be a string or a list of text parts")
        out.append({"role": m["role"], "content": content})
    return out


def _number(body: dict[str, Any], key: str, default: float, low: float, integer: bool = False) -> Any:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int if integer else (int, float)) or value < low:
        raise _BadRequest(400, f"'{key}' must be {'an integer' if integer else 'a number'} >= {low}, got {value!r}")
    return value

