"""Prompt records: JSONL files checked line by line, and the built-in synthetic task."""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.core.errors import DataError, no_such

if TYPE_CHECKING:
    from rlkit.core.types import Rollout

MAX_REPORTED_LINES = 10


# the roles chat templates know (OpenAI's and TRL's conversational format); a template meeting another one either
# raises deep inside a run or renders it as something else
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function", "ipython")


def _prompt_problem(prompt: Any, field: str = "prompt") -> str | None:
    """Why ``prompt`` (the record's ``field``) is not non-empty text or chat messages; None when it is."""
    if isinstance(prompt, str):
        return None if prompt.strip() else f'"{field}" is empty'
    if isinstance(prompt, list) and prompt and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in prompt
    ):
        for i, message in enumerate(prompt):
            if message["role"] not in CHAT_ROLES:
                return f'"{field}"[{i}]: unknown role {message["role"]!r}; a chat message\'s role is one of ' \
                       f'{", ".join(CHAT_ROLES)}'
        return None
    for i, message in enumerate(prompt if isinstance(prompt, list) else []):
        if isinstance(message, dict) and "content" in message and not isinstance(message["content"], str):
            return f'"{field}"[{i}]: content must be text, got {type(message["content"]).__name__}'
    return f'"{field}" must be text or a list of chat messages {{role, content}}'


def _completion_problem(record: dict[str, Any]) -> str | None:
    if "completions" in record:
        comps = record["completions"]
        if not isinstance(comps, list) or not comps or not all(isinstance(c, str) for c in comps):
            return '"completions" must be a non-empty list of strings'
        return None
    if "completion" not in record:
        return 'missing "completion" (or "completions", or "chosen" and "rejected")'
    if not isinstance(record["completion"], str):
        return '"completion" must be a string'
    return None


def _is_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(m, dict) and "role" in m for m in value)


def content_text(content: Any) -> str:
    """A chat message's content as text: a string, or the text parts of a list of content parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type", "text") == "text")
    return "" if content is None else str(content)


def assistant_text(messages: Sequence[dict[str, Any]]) -> str:
    """The answer a conversational completion ends with: its last assistant message (all its text when there is
    none, e.g. a completion written as a single message of another role)."""
    answers = [m for m in messages if isinstance(m, dict) and m.get("role") == "assistant"]
    if answers:
        return content_text(answers[-1].get("content"))
    return "".join(content_text(m.get("content")) for m in messages if isinstance(m, dict))


def _split_conversation(messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str | None]:
    """A whole conversation as (prompt turns, final assistant answer or None)."""
    if messages[-1].get("role") == "assistant":
        return messages[:-1], content_text(messages[-1].get("content"))
    return messages, None


def from_trl(record: dict[str, Any], *, need_completions: bool = False) -> dict[str, Any] | str:
    """A record in one of TRL's dataset formats as an rlkit record, or why it cannot be one.

    TRL's formats (trl docs, "Dataset formats and types"): ``prompt`` as text or messages; ``completion``,
    ``chosen`` and ``rejected`` as text or as messages (conversational), the answer being the last assistant turn;
    ``messages`` alone (conversational language modelling: the turns before the last assistant message are the
    prompt, that message the completion); ``chosen``/``rejected`` conversations without a ``prompt`` (implicit
    prompt: their shared opening turns). With ``need_completions``, a preference record's ``chosen`` and
    ``rejected`` are the completions to score. rlkit's own records come back unchanged.
    """
    out = dict(record)
    if "prompt" not in out and "messages" in out:
        if not _is_messages(out["messages"]):
            return '"messages" must be a non-empty list of chat messages {role, content}'
        prompt, answer = _split_conversation(out.pop("messages"))
        if not prompt:
            return '"messages" has no turn before the assistant\'s answer to use as the prompt'
        out["prompt"] = prompt
        if answer is not None and "completion" not in out and "completions" not in out:
            out["completion"] = answer
    if "prompt" not in out and _is_messages(out.get("chosen")) and _is_messages(out.get("rejected")):
        chosen, rejected = out["chosen"], out["rejected"]
        shared = 0
        while shared < min(len(chosen), len(rejected)) - 1 and chosen[shared] == rejected[shared]:
            shared += 1
        if shared == 0:
            return '"chosen" and "rejected" share no opening turn to use as the prompt; add a "prompt"'
        out["prompt"], out["chosen"], out["rejected"] = chosen[:shared], chosen[shared:], rejected[shared:]
    for key in ("completion", "chosen", "rejected"):
        if _is_messages(out.get(key)):
            out[key] = assistant_text(out[key])
    if isinstance(out.get("completions"), list):
        out["completions"] = [assistant_text(c) if _is_messages(c) else c for c in out["completions"]]
    if need_completions and "completion" not in out and "completions" not in out and "chosen" in out:
        if not isinstance(out.get("chosen"), str) or not isinstance(out.get("rejected"), str):
            return '"chosen" and "rejected" must both be text or chat messages'
        out["completions"] = [out["chosen"], out["rejected"]]
    return out


def _check_record(record: Any, need_completions: bool) -> dict[str, Any] | str:
    if not isinstance(record, dict):
        return f"a record must be a JSON object, got {type(record).__name__}"
    converted = from_trl(record, need_completions=need_completions)
    if isinstance(converted, str):
        return converted
    if "prompt" not in converted:
        return 'missing "prompt" (or TRL\'s "messages")'
    return _prompt_problem(converted["prompt"]) or (
        _completion_problem(converted) if need_completions else None) or converted


def _jsonl_lines(path: Path) -> Iterable[tuple[int, Any]]:
    """(line number, parsed JSON or the reason the line is not JSON) for every non-blank line."""
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            try:
                # Some editors start a UTF-8 file with a byte-order mark; it is not part of the JSON.
                text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                yield line_no, _Problem(f"not UTF-8 (byte {exc.start})")
                continue
            if not text.strip():
                continue
            try:
                # without its line ending: a line cut short fails at the newline, which json counts as column 1
                # of the next line, so the column said would be 1 for every unfinished line
                yield line_no, json.loads(text.rstrip("\r\n"))
            except json.JSONDecodeError as exc:
                yield line_no, _Problem(f"invalid JSON ({exc.msg} at column {exc.colno})")


class _Problem(str):
    """A line that could not be parsed, told apart from a JSON string value."""


def json_lines(path: Path) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON) for every non-blank line of a JSONL file rlkit wrote or reads whole (results,
    alerts, samples, labels): the first line that is not UTF-8 JSON is a ``DataError`` naming ``file:line``."""
    for line_no, value in _jsonl_lines(path):
        if isinstance(value, _Problem):
            raise DataError(str(value), f"{path}:{line_no}")
        yield line_no, value


def checked_json_lines(path: str | Path, problem: Callable[[Any], str | None], empty: str,
                       what: str | None = None) -> list[Any]:
    """Every line of a JSONL file rlkit wrote for people or commands (labels, comparisons, answers), each checked by
    ``problem`` (why the line is bad, or None): the first bad line is a ``DataError`` naming ``file:line``, a file
    without lines one saying ``empty``, and with ``what`` (``labelling file``) an absent file, or a folder, one
    saying which."""
    path = Path(path)
    if what is not None and not path.is_file():
        raise DataError(no_such(path, what), str(path))
    lines = []
    for number, line in json_lines(path):
        why = problem(line)
        if why:
            raise DataError(why, f"{path}:{number}")
        lines.append(line)
    if not lines:
        raise DataError(empty, str(path))
    return lines


def read_jsonl(path: str | Path, *, need_completions: bool = False) -> list[dict[str, Any]]:
    """Read prompt records; every bad line is reported with file and line number, none skipped.

    A record is a JSON object with ``prompt`` (text or chat messages) and any other fields
    (``reference`` for match checks). With ``need_completions`` each record also carries
    ``completion`` or ``completions``. TRL's dataset formats are read too (:func:`from_trl`), and ``path`` may be a
    directory saved with ``datasets``' ``save_to_disk`` (its rows are reported as ``row N``, from 0).
    """
    path = Path(path)
    if path.is_dir():
        from rlkit.data.hf_datasets import dataset_rows

        rows, unit = dataset_rows(path), "row"
    elif path.is_file():
        rows, unit = _jsonl_lines(path), "line"
    else:
        raise DataError("no such data file or datasets directory", str(path))
    problems: list[tuple[int, str]] = []
    records: list[dict[str, Any]] = []
    for position, value in rows:
        checked = value if isinstance(value, _Problem) else _check_record(value, need_completions)
        if isinstance(checked, str):
            problems.append((position, checked))
        else:
            records.append(checked)
    if problems:
        shown = "; ".join(f"{unit} {n}: {p}" for n, p in problems[:MAX_REPORTED_LINES])
        more = f"; and {len(problems) - MAX_REPORTED_LINES} more" if len(problems) > MAX_REPORTED_LINES else ""
        if len(problems) == 1:
            where = f"{path}:{problems[0][0]}" if unit == "line" else f"{path} row {problems[0][0]}"
            raise DataError(problems[0][1], where)
        raise DataError(f"{len(problems)} bad {unit}s: {shown}{more}", str(path))
    if not records:
        raise DataError("the file holds no records" if unit == "line" else "the dataset holds no records", str(path))
    return records


def prompt_text(prompt: str | Sequence[dict[str, str]]) -> str:
    """Plain text of a prompt, for display and for judges that read the prompt."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


def seen_prompt(rollout: Rollout, i: int) -> str:
    """Record ``i``'s prompt as the policy saw it (``rollout.prompt_texts``), else :func:`prompt_text` of it: what a
    judge that reads the prompt should read."""
    if rollout.prompt_texts is not None:
        return rollout.prompt_texts[i]
    return prompt_text(rollout.records[i]["prompt"])


def arithmetic_task(num_prompts: int, seed: int, max_operand: int = 20, chat: bool = False,
                    instruction: str | None = None) -> list[dict[str, Any]]:
    """The default synthetic task: small sums with a numeric ``reference`` a rule judge can check. As text the prompt
    is ``a+b=`` (a base model's continuation); with ``chat`` it is one user message (TRL's conversational ``prompt``)
    asking ``What is a + b?``, followed by ``instruction`` where given. The operands are the same either way."""
    rng = random.Random(seed)
    records = []
    for i in range(num_prompts):
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        if chat:
            question = f"What is {a} + {b}?" + (f" {instruction}" if instruction else "")
            prompt: str | list[dict[str, str]] = [{"role": "user", "content": question}]
        else:
            prompt = f"{a}+{b}=" if not instruction else f"{instruction}\n{a}+{b}="
        records.append({"id": f"arith-{i}", "prompt": prompt, "reference": str(a + b)})
    return records


# The JSON schema of rlkit_plugins.environments.calculator:calc as transformers' get_json_schema writes it (a test
# keeps the two equal): the tools a calculator record lists, so a warm start renders its prompts as episodes do.
CALCULATOR_TOOLS = [{"type": "function", "function": {
    "name": "calc", "description": "Evaluate an arithmetic expression.",
    "parameters": {"type": "object", "properties": {"e": {
        "type": "string", "description": "The expression, e.g. 37*14 or (3+4)**2."}}, "required": ["e"]},
    "return": {"type": "string"}}}]


def calculator_task(num_prompts: int, seed: int, chat: bool = True,
                    instruction: str | None = None) -> list[dict[str, Any]]:
    """Two-digit products, too hard for the tiny policy to work out alone and easy with ``environment=tools``'
    calculator: chat prompts (whatever ``chat`` says: the tools need them), a numeric ``reference``, the ``tools``
    they may call (TRL's dataset column), and a demonstration ``completion`` (TRL's conversational format) that calls
    the tool and copies its result, for a warm start."""
    rng = random.Random(seed)
    records = []
    for i in range(num_prompts):
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        call = f'[calc(e="{a}*{b}")]'
        question = f"{a}*{b}" + (f" {instruction}" if instruction else "")
        records.append({"id": f"calc-{i}", "prompt": [{"role": "user", "content": question}],
                        "reference": str(a * b), "tools": CALCULATOR_TOOLS,
                        "completion": [{"role": "assistant", "content": call},
                                       {"role": "tool", "name": "calc", "content": str(a * b)},
                                       {"role": "assistant", "content": str(a * b)}]})
    return records


SYNTHETIC_TASKS = {"arithmetic": arithmetic_task, "calculator": calculator_task}


def synthetic_records(task: str, count: int, seed: int, chat: bool = False,
                      instruction: str | None = None) -> list[dict[str, Any]]:
    """``count`` records of the synthetic ``task`` under ``seed``, their prompts as chat messages where ``chat``."""
    return SYNTHETIC_TASKS[task](count, seed, chat=chat, instruction=instruction)


def disjoint_task_records(task: str, count: int, seed: int, exclude: Iterable[dict[str, Any]], chat: bool = False,
                          instruction: str | None = None) -> list[dict[str, Any]]:
    """``count`` draws of the synthetic ``task`` under ``seed`` whose prompts are none of ``exclude``'s: demonstrations
    a warm start may learn from without seeing a run's training or held-out prompts."""
    taken = {json.dumps(r["prompt"], sort_keys=True) for r in exclude}
    return [r for r in synthetic_records(task, count, seed, chat, instruction)
            if json.dumps(r["prompt"], sort_keys=True) not in taken]


def _prompt_key(record: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(record["prompt"], sort_keys=True).encode()).hexdigest()


def split_heldout(records: list[dict[str, Any]], fraction: float) -> tuple[list[dict], list[dict]]:
    """(training, held-out): a deterministic split by prompt hash, so a prompt never lands in both halves."""
    if fraction <= 0:
        return records, []
    keyed = sorted(records, key=_prompt_key)
    n_held = max(1, round(len(records) * fraction)) if len(records) > 1 else 0
    held_keys = {_prompt_key(r) for r in keyed[:n_held]}
    train = [r for r in records if _prompt_key(r) not in held_keys]
    held = [r for r in records if _prompt_key(r) in held_keys]
    return train, held
