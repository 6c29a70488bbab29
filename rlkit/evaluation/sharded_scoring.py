"""``rlkit score score.output=...``: scoring in shards that survive a kill, resumed by running the command again.

Layout, for ``score.output=out.jsonl``::

    out.jsonl.shards/manifest.json       what the run scores: input file (path, size, sha256), records,
                                         shard size, rubric hash, judge name, hash of the reward config
    out.jsonl.shards/shard-00000.jsonl   records 1..shard_size scored, one line per completion
    out.jsonl.shards/shard-00001.jsonl   ...

Each shard file is written atomically (temp file + rename), so it is either absent or complete. A second run
of the same command reads the manifest, refuses it if the input or the reward config changed, skips the shards
present and scores the rest. When every shard is there they are concatenated, in input order, into
``out.jsonl`` (atomically) and the ``.shards`` folder is removed.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch
from omegaconf import DictConfig, OmegaConf

from rlkit.config import CheckedConfig, ScoreConfig, check_block, resolve_path
from rlkit.config.validate import REWARD_CONFIG_KEYS
from rlkit.core.atomic import atomic_write_text
from rlkit.core.errors import ConfigError, DataError, JudgeError
from rlkit.data.files import source_fingerprint
from rlkit.evaluation.scoring import JudgeRetriesExhausted, ScoreResult, score_records, scored_lines

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1


# The `score` block's schema lives with every other block's (rlkit.config.schemas); the old name stays.
ScoreOptions = ScoreConfig


def score_options(cfg: DictConfig) -> ScoreConfig:
    """``cfg.score`` checked; a bad value raises a ``ConfigError`` naming ``score.<key>``."""
    node = cfg.get("score")
    return check_block(ScoreConfig, OmegaConf.to_container(node, resolve=True) if node is not None else {}, "score")


def shards_dir(output: Path) -> Path:
    """The folder holding an unfinished run's shards: ``<output>.shards`` beside the output."""
    return output.with_name(output.name + ".shards")


def run_manifest(validated: CheckedConfig, shard_size: int) -> dict[str, Any]:
    """What a sharded run scores; a resumed run must match it field by field."""
    assert validated.records is not None and validated.data.path is not None
    source = resolve_path(validated.data.path)
    reward_config = validated.reward_config
    return {
        "format": MANIFEST_FORMAT,
        "input": {"path": str(source.resolve()), **source_fingerprint(source)},
        "records": len(validated.records),
        "shard_size": shard_size,
        "rubric_hash": validated.rubric.content_hash,
        "judge": validated.plugin_names["judge"],
        "reward_config_sha256": hashlib.sha256(json.dumps(reward_config, sort_keys=True).encode()).hexdigest(),
    }


_WHAT_CHANGED = {"input": "input file", "records": "number of records", "shard_size": "score.shard_size",
                 "rubric_hash": "rubric", "judge": "judge", "reward_config_sha256": "reward config (" +
                 ", ".join(REWARD_CONFIG_KEYS) + ")", "format": "manifest format"}


def _check_manifest(path: Path, expected: dict[str, Any]) -> None:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise DataError(f"unreadable manifest ({exc}); delete {path.parent} to start over", str(path)) from None
    for key, what in _WHAT_CHANGED.items():
        old, new = found.get(key), expected[key]
        if key == "input" and isinstance(old, dict):
            # the content decides: the same file moved or reached through another path is the same input
            same = (old.get("size"), old.get("sha256")) == (new["size"], new["sha256"])
        else:
            same = old == new
        if not same:
            if key == "input" and isinstance(old, dict):
                old, new = (f"{old.get('path')} sha256 {str(old.get('sha256'))[:12]}",
                            f"{new['path']} sha256 {new['sha256'][:12]}")
            raise ConfigError(f"{path.parent} holds an unfinished run of another {what} ({old} then, {new} now); "
                              f"run the original command to finish it, or delete {path.parent} to start over",
                              str(path))


def _shard_path(folder: Path, index: int) -> Path:
    return folder / f"shard-{index:05d}.jsonl"


def _completions(record: dict[str, Any]) -> int:
    return len(record["completions"]) if "completions" in record else 1


@dataclass
class ShardedScoreResult:
    """What a sharded run did and every completion's scores (read back from the shards) for the summary."""

    result: ScoreResult
    lines: int
    shards: int
    shards_skipped: int


def _scores_from_lines(lines: list[str], dimension_names: list[str]) -> ScoreResult:
    nan = float("nan")
    rows = [json.loads(line) for line in lines]
    raw = torch.tensor([[nan if r["scores"].get(n) is None else r["scores"][n] for n in dimension_names]
                        for r in rows], dtype=torch.float32).reshape(len(rows), len(dimension_names))
    rewards = torch.tensor([nan if r["reward"] is None else r["reward"] for r in rows], dtype=torch.float32)
    return ScoreResult(dimension_names, raw, rewards, [])


def score_to_file(validated: CheckedConfig, output: Path, options: ScoreOptions,
                  on_progress: Callable[[int, int], None] | None = None) -> ShardedScoreResult:
    """Score ``validated.records`` into ``output`` shard by shard, resuming a killed run of the same command.

    ``on_progress(done, total)`` gets completion counts: once for the shards already done, then per batch.
    """
    records = validated.records
    assert records is not None
    folder = shards_dir(output)
    manifest = run_manifest(validated, options.shard_size)
    manifest_path = folder / MANIFEST
    if manifest_path.exists():
        _check_manifest(manifest_path, manifest)
        for stale in folder.glob(".*.tmp"):  # a killed writer's temp file; its shard is scored again
            stale.unlink(missing_ok=True)
    else:
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(manifest_path, json.dumps(manifest, indent=2) + "\n")
    rubric_identity = validated.rubric.identity()
    starts = range(0, len(records), options.shard_size)
    total = sum(_completions(r) for r in records)
    done_paths = [i for i, _ in enumerate(starts) if _shard_path(folder, i).exists()]
    done = sum(_completions(r) for i in done_paths for r in records[starts[i]:starts[i] + options.shard_size])
    if on_progress is not None:
        on_progress(done, total)

    def advance(n: int) -> None:
        nonlocal done
        done += n
        if on_progress is not None:
            on_progress(done, total)

    judge_metrics: dict[str, float] = {}  # the last batch scored now (none when every shard was done before)
    for index, start in enumerate(starts):
        path = _shard_path(folder, index)
        if path.exists():
            continue
        chunk = records[start:start + options.shard_size]
        try:
            scored = score_records(replace(validated, records=chunk), batch_size=options.batch_size,
                                   retries=options.retries, retry_backoff=options.retry_backoff, on_batch=advance)
        except JudgeRetriesExhausted as exc:
            finished = sum(_shard_path(folder, i).exists() for i in range(len(starts)))
            raise JudgeError(f"shard {index} ({path}): judge {validated.plugin_names['judge']} failed "
                             f"{exc.attempts} times on input records {start + exc.first + 1}-{start + exc.last + 1} "
                             f"({type(exc.cause).__name__}: {exc.cause}); {finished} of {len(starts)} shards are "
                             f"done and kept in {folder}: run the same command again to resume") from exc
        atomic_write_text(path, "".join(line + "\n" for line in scored_lines(scored, rubric_identity)),
                          temp_dir=folder)
        judge_metrics = scored.judge_metrics
    lines = []
    for index, start in enumerate(starts):
        path = _shard_path(folder, index)
        shard_lines = path.read_text(encoding="utf-8").splitlines()
        expected = sum(_completions(r) for r in records[start:start + options.shard_size])
        if len(shard_lines) != expected:
            raise DataError(f"holds {len(shard_lines)} scored completions, expected {expected}; delete it to score "
                            "that shard again", str(path))
        lines.extend(shard_lines)
    # The temp file lives in the shards folder: a kill here leaves nothing beside the output, and the next run
    # (which finds every shard done) writes the output again.
    atomic_write_text(output, "".join(line + "\n" for line in lines), temp_dir=folder)
    shutil.rmtree(folder)
    result = replace(_scores_from_lines(lines, validated.scored_rubric.dimension_names), judge_metrics=judge_metrics)
    return ShardedScoreResult(result, len(lines), len(starts), len(done_paths))


@contextmanager
def score_progress(enabled: bool) -> Iterator[Callable[[int, int], None]]:
    """A rich progress bar on stderr (completions, rate, ETA) fed by ``(done, total)``; silent off a terminal."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class RateColumn(ProgressColumn):
        def render(self, task: Any) -> Text:
            return Text("?/s" if not task.speed else f"{task.speed:.1f}/s")

    console = Console(stderr=True)
    progress = Progress(TextColumn("scoring"), BarColumn(), MofNCompleteColumn(), RateColumn(),
                        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(), console=console,
                        disable=not (enabled and console.is_terminal))
    task = None

    def update(done: int, total: int) -> None:
        nonlocal task
        if task is None:
            # what earlier runs finished is the starting point, so the rate and ETA are this run's own
            task = progress.add_task("scoring", total=total, completed=done)
        else:
            progress.update(task, completed=done)

    with progress:
        yield update
