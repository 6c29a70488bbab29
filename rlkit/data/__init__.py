"""Records on disk and in memory: prompt records, the synthetic tasks, data files, preparation, preference pairs.

The record helpers of ``rlkit.data.records`` are re-exported here, so ``from rlkit.data import prompt_text``
keeps working.
"""

from rlkit.data.records import (
    MAX_REPORTED_LINES,
    SYNTHETIC_TASKS,
    arithmetic_task,
    json_lines,
    prompt_text,
    read_jsonl,
)

__all__ = ["MAX_REPORTED_LINES", "SYNTHETIC_TASKS", "arithmetic_task", "json_lines", "prompt_text", "read_jsonl"]
