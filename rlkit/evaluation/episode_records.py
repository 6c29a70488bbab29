"""Episode records for ``rlkit score``: the conversations that reading a data file reduces to their last answer.

``read_jsonl`` reads TRL's conversational formats as single-turn records (a conversational ``completion`` becomes
its last assistant turn's text; ``messages``, the turns before its last assistant turn as the prompt). For scoring,
a record whose completion is an episode keeps it (:mod:`rlkit.reward.episodes_io`):

* ``completion`` (or an entry of ``completions``) a list of messages with turns other than the assistant's (tool
  results, a user's replies): the episode after the record's ``prompt``;
* ``messages`` without ``prompt`` or ``completion``, with turns other than the assistant's after its first
  assistant turn: the messages before that turn are the prompt, the rest the episode.

Everything else stays as ``read_jsonl`` gave it. An episode that cannot be scored is a ``DataError`` naming the
file and line (the row, for a ``datasets`` directory).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlkit.core.errors import DataError
from rlkit.data.records import MAX_REPORTED_LINES
from rlkit.lm.conversation import is_conversation
from rlkit.reward.episodes_io import episode_problem, split_messages


def with_episodes(path: str | Path, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``records`` as ``read_jsonl(path, need_completions=True)`` read them, each episode restored from ``path``."""
    path = Path(path)
    unit = "row" if path.is_dir() else "line"
    out, problems = [], []
    for (position, raw), record in zip(_rows(path), records, strict=True):
        restored = episode_record(raw, record)
        if isinstance(restored, str):
            problems.append((position, restored))
        else:
            out.append(restored)
    if len(problems) == 1:
        position, problem = problems[0]
        raise DataError(problem, f"{path}:{position}" if unit == "line" else f"{path} row {position}")
    if problems:
        shown = "; ".join(f"{unit} {n}: {p}" for n, p in problems[:MAX_REPORTED_LINES])
        more = f"; and {len(problems) - MAX_REPORTED_LINES} more" if len(problems) > MAX_REPORTED_LINES else ""
        raise DataError(f"{len(problems)} bad {unit}s: {shown}{more}", str(path))
    return out


def episode_record(raw: dict[str, Any], record: dict[str, Any]) -> dict[str, Any] | str:
    """``record`` (``raw`` as read) with its episodes as conversations, or why an episode cannot be scored."""
    if "messages" in raw and not {"prompt", "completion", "completions"} & raw.keys():
        prompt, episode = split_messages(raw["messages"])
        if not is_conversation(episode):
            return record
        problem = episode_problem(episode)
        if problem is None and not prompt:
            problem = "has no turn before the first assistant turn to use as the prompt"
        return f'"messages": {problem}' if problem else {**record, "prompt": prompt, "completion": episode}
    if is_conversation(raw.get("completion")):
        problem = episode_problem(raw["completion"])
        return f'"completion": {problem}' if problem else {**record, "completion": raw["completion"]}
    if isinstance(raw.get("completions"), list) and any(is_conversation(c) for c in raw["completions"]):
        completions = list(record["completions"])
        for k, completion in enumerate(raw["completions"]):
            if is_conversation(completion):
                problem = episode_problem(completion)
                if problem:
                    return f'"completions"[{k}]: {problem}'
                completions[k] = completion
        return {**record, "completions": completions}
    return record


def _rows(path: Path) -> Iterable[tuple[int, Any]]:
    """(line or row number, value) of every record, as ``read_jsonl`` numbered them (it has parsed them all)."""
    if path.is_dir():
        from rlkit.data.hf_datasets import dataset_rows

        yield from dataset_rows(path)
        return
    with path.open("rb") as fh:
        for line_no, line in enumerate(fh, start=1):
            text = line.decode("utf-8-sig" if line_no == 1 else "utf-8")
            if text.strip():
                yield line_no, json.loads(text)
