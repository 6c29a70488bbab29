"""Golden-set evaluation (``rlkit eval`` and the periodic fit callback): greedy generation on a held-out prompt
set that never enters training, scored with the rubric and, where records carry a reference, with exact,
numeric and embedding-similarity match; results keyed by checkpoint and rubric identity."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch

from rlkit.core.atomic import atomic_write_text
from rlkit.core.digest import file_sha256
from rlkit.core.errors import ConfigError, DataError
from rlkit.core.rubric import Rubric
from rlkit.core.stats import json_number, nan_mean_std
from rlkit.core.types import Rollout
from rlkit.data.records import prompt_text, read_jsonl
from rlkit.lm.sampling import GenerationRequest

if TYPE_CHECKING:
    from rlkit.config import CheckedConfig
from rlkit.reward.pipeline import aggregate_rewards, check_judge_output
from rlkit.runs.history import read_result_rows
from rlkit.runs.report_comparison import rubric_label
from rlkit.text.similarity import normalize_whitespace

REFERENCE_METRICS = ("exact_match", "numeric_match", "embedding_similarity")
MAX_OVERLAPS_SHOWN = 5
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


# --- the golden set and its separation from training ------------------------------------------------


def normalized_prompt(prompt: Any) -> str:
    """The prompt's text as compared for overlap: Unicode NFKC, case-folded, whitespace collapsed."""
    return normalize_whitespace(unicodedata.normalize("NFKC", prompt_text(prompt))).casefold()


def prompt_hash(prompt: Any) -> str:
    """sha256 of the normalised prompt text (text prompts and chat messages alike)."""
    return hashlib.sha256(normalized_prompt(prompt).encode("utf-8")).hexdigest()


def record_lines(path: Path) -> list[int]:
    """The 1-based line number of each record ``read_jsonl`` returns (it skips blank lines only)."""
    with path.open("rb") as fh:
        return [n for n, raw in enumerate(fh, start=1) if raw.strip()]


def training_prompts(validated: Any) -> tuple[list[dict[str, Any]], str]:
    """Every prompt record of the configured ``data`` (both the training and the held-out split) and its name."""
    from rlkit.config import resolve_path

    data = validated.data
    if data.path is not None:
        records = validated.records if validated.records is not None else read_jsonl(resolve_path(data.path))
        return records, str(data.path)
    return data.synthetic_records(), f"synthetic task {data.task!r}"


def check_no_overlap(golden: Sequence[dict[str, Any]], golden_path: Path, training: Sequence[dict[str, Any]],
                     training_name: str) -> None:
    """A ``DataError`` naming the golden file and its first overlapping lines if any golden prompt is also a
    training prompt (after normalisation): a score on prompts trained on measures memory, not skill."""
    seen = {prompt_hash(r["prompt"]) for r in training}
    lines = record_lines(golden_path)
    overlap = [(line, r) for line, r in zip(lines, golden, strict=True) if prompt_hash(r["prompt"]) in seen]
    if overlap:
        first = overlap[:MAX_OVERLAPS_SHOWN]
        shown = ", ".join(f"line {line} ({prompt_text(r['prompt'])[:40]!r})" for line, r in first)
        more = f" and {len(overlap) - MAX_OVERLAPS_SHOWN} more" if len(overlap) > MAX_OVERLAPS_SHOWN else ""
        raise DataError(f"{len(overlap)} golden prompt(s) also in the training data ({training_name}): {shown}{more}; "
                        "the golden set must never enter training", f"{golden_path}:{overlap[0][0]}")


def load_golden(path: Path, validated: Any) -> list[dict[str, Any]]:
    """The golden records, checked to share no prompt with the configured training data."""
    records = read_jsonl(path)
    training, name = training_prompts(validated)
    check_no_overlap(records, path, training, name)
    return records


# --- options ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EvalOptions:
    prompts: Path
    checkpoint: str | None
    output: Path
    every: int
    batch_size: int
    max_completion_length: int
    reference_field: str
    embedding: str | None  # "auto": the bundled model when installed; None: off

    @property
    def markdown(self) -> Path:
        """The markdown table beside the JSONL results."""
        return self.output.with_suffix(".md")


def golden_options(validated: CheckedConfig) -> EvalOptions:
    """The golden-set options of the run's checked ``eval`` block; relative paths are relative to the cwd, and its
    ``max_completion_length`` defaults to the run's."""
    from rlkit.config import resolve_path

    block = validated.eval_block
    embedding = block.embedding
    return EvalOptions(resolve_path(block.prompts), block.checkpoint, Path(block.output).expanduser(), block.every,
                       block.batch_size, block.max_completion_length or validated.run.max_completion_length,
                       block.reference_field, None if embedding in (None, "", "none", "off") else embedding)


def resolve_embedder(option: str | None) -> tuple[Any, str | None]:
    """(embedder or None, why none): ``auto`` skips a missing model with a reason; a named one must load."""
    if option is None:
        return None, "eval.embedding is off"
    from rlkit.text.embeddings import embedding_available, shared_embedder

    model = None if option == "auto" else option
    problem = embedding_available(model)
    if problem is not None:
        if option == "auto":
            return None, problem
        raise ConfigError(problem.removeprefix("embedder: "), "eval.embedding")
    return shared_embedder(model), None


# --- reference metrics -----------------------------------------------------------------------------


def exact_match(completion: str, reference: str) -> float:
    """1.0 when the texts are equal after trimming and collapsing whitespace."""
    return float(normalize_whitespace(completion) == normalize_whitespace(reference))


def first_number(text: str) -> float | None:
    """The first number written in ``text`` (commas as thousands separators allowed), else None."""
    match = _NUMBER.search(text.replace(",", ""))
    return float(match.group()) if match else None


def numeric_match(completion: str, reference: str) -> float:
    """1.0 when the completion's first number equals the reference's (relative tolerance 1e-6); NaN when the
    reference holds no number (not applicable)."""
    want = first_number(reference)
    if want is None:
        return math.nan
    got = first_number(completion)
    return float(got is not None and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9))


def reference_scores(records: Sequence[dict[str, Any]], completions: Sequence[str], field: str,
                     embedder: Any = None) -> dict[str, torch.Tensor]:
    """Per completion ``exact_match``, ``numeric_match`` and (with an embedder) ``embedding_similarity``;
    NaN where the record has no reference."""
    refs = [r.get(field) for r in records]
    refs = [None if v is None else str(v) for v in refs]
    out = {
        "exact_match": torch.tensor([math.nan if r is None else exact_match(c, r)
                                     for c, r in zip(completions, refs, strict=True)]),
        "numeric_match": torch.tensor([math.nan if r is None else numeric_match(c, r)
                                       for c, r in zip(completions, refs, strict=True)]),
    }
    if embedder is not None:
        from rlkit.text.embeddings import cosine_similarity

        sims = torch.full((len(refs),), math.nan)
        have = [i for i, r in enumerate(refs) if r is not None]
        if have:
            sims[have] = cosine_similarity(embedder, [completions[i] for i in have], [refs[i] for i in have])
        out["embedding_similarity"] = sims
    return out


# --- generation, scoring, results ------------------------------------------------------------------


@dataclass
class GoldenScorer:
    """What scores golden completions: a judge on a rubric, the step-0 weights of a scheduler, an aggregator."""

    judge: Any
    judge_name: str
    rubric: Rubric
    aggregator: Any
    scheduler: Any
    normalization: str = "range"

    def score(self, records: Sequence[dict[str, Any]], completions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw scores ``[N, D]`` and rewards ``[N]``; each completion is its own group of one."""
        rollout = Rollout(records=list(records), completions=[[c] for c in completions])
        raw = check_judge_output(self.judge.score(rollout, self.rubric), rollout, self.rubric, self.judge_name)
        # a fresh copy at step 0: results stay comparable across checkpoints, and a training scheduler
        # (the periodic callback shares the run's) is never advanced by evaluation
        batch = aggregate_rewards(raw, self.rubric, copy.deepcopy(self.scheduler), self.aggregator, 0,
                                  self.normalization)
        return batch.raw_scores[:, 0], batch.rewards[:, 0]


def scorer_from(validated: Any) -> GoldenScorer:
    """The configured judge, aggregator and weights; ``heldout_judge`` when the judge only ranks within groups."""
    normalization = validated.run.score_normalization
    other = validated.heldout_scoring()
    if other is not None:
        return GoldenScorer(other.judge, other.judge_name, other.rubric, other.aggregator, other.scheduler,
                            normalization)
    return GoldenScorer(validated.plugins["judge"], validated.plugin_names["judge"], validated.rubric,
                        validated.plugins["aggregator"], validated.plugins["weight_scheduler"], normalization)


def generate_greedy(generator: Any, policy: Any, tokenizer: Any, records: Sequence[dict[str, Any]],
                    max_new_tokens: int, batch_size: int) -> list[str]:
    """One greedy completion per record, in batches."""
    texts: list[str] = []
    for start in range(0, len(records), batch_size):
        chunk = list(records[start:start + batch_size])
        request = GenerationRequest(chunk, 1, max_new_tokens, 1.0, True, [0] * len(chunk))
        texts.extend(row[0] for row in generator.generate(policy, tokenizer, request).texts)
    return texts


@dataclass
class GoldenResult:
    """One evaluation: per-completion scores plus what keys it (checkpoint, rubric, golden set)."""

    checkpoint: str
    rubric: dict[str, str]
    judge: str
    prompts: str
    prompts_hash: str
    dimension_names: list[str]
    raw_scores: torch.Tensor             # [N, D]
    rewards: torch.Tensor                # [N]
    references: dict[str, torch.Tensor]  # metric -> [N]
    completions: list[str]
    step: int | None = None

    def summary(self) -> list[dict[str, Any]]:
        """One row per dimension, the reward and each reference metric: kind, mean, std, n (NaN as None)."""
        columns = [("rubric", n, self.raw_scores[:, i]) for i, n in enumerate(self.dimension_names)]
        columns.append(("reward", "reward", self.rewards))
        columns += [("reference", name, values) for name, values in self.references.items()]
        rows = []
        for kind, name, values in columns:
            mean, std, n = nan_mean_std(values.float(), dim=0)
            rows.append({"dimension": name, "kind": kind, "mean": json_number(float(mean)),
                         "std": json_number(float(std)), "n": int(n)})
        return rows

    def rows(self) -> list[dict[str, Any]]:
        """The JSONL rows: one per (checkpoint, rubric name+version+hash, dimension)."""
        key = {"checkpoint": self.checkpoint, "step": self.step, "rubric": self.rubric, "judge": self.judge,
               "prompts": self.prompts, "prompts_hash": self.prompts_hash}
        return [{**key, **row} for row in self.summary()]

    def metrics(self, prefix: str = "eval/") -> dict[str, float]:
        """Flat numbers for a logger: ``eval/<dimension>``, ``eval/reward``, ``eval/<reference metric>``."""
        return {f"{prefix}{row['dimension']}": row["mean"] for row in self.summary() if row["mean"] is not None}


def evaluate(generator: Any, policy: Any, tokenizer: Any, records: Sequence[dict[str, Any]], scorer: GoldenScorer,
             options: EvalOptions, *, checkpoint: str, embedder: Any = None, step: int | None = None) -> GoldenResult:
    """Generate greedily on the golden records, score with the rubric and the reference metrics."""
    completions = generate_greedy(generator, policy, tokenizer, records, options.max_completion_length,
                                  options.batch_size)
    raw, rewards = scorer.score(records, completions)
    refs = reference_scores(records, completions, options.reference_field, embedder)
    return GoldenResult(checkpoint, scorer.rubric.identity(), scorer.judge_name, str(options.prompts),
                        file_sha256(options.prompts), scorer.rubric.dimension_names, raw, rewards, refs, completions,
                        step)


def read_results(path: Path) -> list[dict[str, Any]]:
    """The rows already in a results file (none if it does not exist); a bad line is a ``DataError``."""
    return read_result_rows(path, ("checkpoint", "rubric", "dimension"), "an eval result row")


def append_results(path: Path, result: GoldenResult) -> list[dict[str, Any]]:
    """Add the result's rows to the JSONL file and rewrite its markdown table, each atomically; all rows."""
    rows = read_results(path) + result.rows()
    markdown = results_markdown(rows)
    atomic_write_text(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    atomic_write_text(path.with_suffix(".md"), markdown)
    return rows



def checkpoint_label(checkpoint: str) -> str:
    """A short column header: the last two path parts of a checkpoint path."""
    parts = Path(checkpoint).parts
    return "/".join(parts[-2:]) if len(parts) > 1 else checkpoint


def results_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Per rubric version (name, version, hash) a table: one row per dimension, one column per checkpoint; a
    checkpoint evaluated twice under the same rubric and golden set shows its latest result."""
    groups: dict[str, dict[str, Any]] = {}
    for row in rows:
        label = rubric_label(row["rubric"])
        group = groups.setdefault(label, {"checkpoints": [], "dimensions": [], "cells": {}, "prompts": set()})
        column = row["checkpoint"] if row.get("step") is None else f"{row['checkpoint']}@{row['step']}"
        if column not in group["checkpoints"]:
            group["checkpoints"].append(column)
        if row["dimension"] not in group["dimensions"]:
            group["dimensions"].append(row["dimension"])
        group["cells"][(row["dimension"], column)] = row
        group["prompts"].add(str(row.get("prompts", "?")))
    lines = ["# Golden-set evaluation", "",
             "Mean (± std, n) per dimension; rubric dimensions in their own units, `reward` normalised to [0, 1], "
             "reference metrics in [0, 1] (cosine similarity for `embedding_similarity`).", ""]
    for label, group in groups.items():
        lines += [f"## rubric {label}", "", f"golden set: {', '.join(f'`{p}`' for p in sorted(group['prompts']))}",
                  "", "| dimension | " + " | ".join(checkpoint_label(c).replace("|", "\\|")
                                                     for c in group["checkpoints"]) + " |",
                  "|---|" + "--:|" * len(group["checkpoints"])]
        for dim in group["dimensions"]:
            cells = []
            for column in group["checkpoints"]:
                row = group["cells"].get((dim, column))
                if row is None or row.get("mean") is None:
                    cells.append("—")
                else:
                    std = row.get("std")
                    cells.append(f"{row['mean']:.3f} ± {0.0 if std is None else std:.3f} (n {row['n']})")
            lines.append(f"| {dim} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


# --- rlkit eval ------------------------------------------------------------------------------------


def run_heldout_records(data: Any) -> list[dict[str, Any]]:
    """The held-out prompts ``fit`` would split off the synthetic task (none from a file: no warm start there)."""
    from rlkit.data.records import split_heldout

    if data.path is not None:
        return []
    return split_heldout(data.synthetic_records(), data.heldout_fraction)[1]


def load_checkpoint(checkpoint: str | None, validated: Any) -> tuple[Any, Any, str, int | None]:
    """(policy, tokenizer, key, step) for ``eval.checkpoint``: a policy folder in Hugging Face format, a Lightning
    ``.ckpt`` of this config's model (its policy weights loaded into it), or None for ``model.name_or_path``."""
    from rlkit.config.validate import read_chat_format
    from rlkit.lm.adapters import load_weights
    from rlkit.lm.models import apply_lora, load_policy, resolve_policy_path
    from rlkit.lm.warm_start import starting_policy

    model = validated.model
    if checkpoint is None:  # the policy a run of this config starts from, warm start included
        path = starting_policy(model, validated.data, run_heldout_records(validated.data),
                               max_new_tokens=validated.run.max_completion_length,
                               chat_format=read_chat_format(model))
        policy, tokenizer = load_policy(path, model.dtype)
        return policy, tokenizer, str(path), None
    path = Path(checkpoint).expanduser().resolve()
    if path.is_dir():
        from rlkit.lm.adapters import is_adapter_folder

        if not (path / "config.json").is_file() and not is_adapter_folder(path):
            raise ConfigError("not a policy folder (no config.json nor adapter_config.json) nor a Lightning .ckpt",
                              f"eval.checkpoint ({path})")
        policy, tokenizer = load_policy(path, model.dtype)  # a LoRA adapter folder: merged into its base
        return policy, tokenizer, str(path), None
    if not path.is_file():
        raise ConfigError("no such file or folder", f"eval.checkpoint ({path})")
    from rlkit.config.checkpoints import verify_checkpoint

    verify_checkpoint(path, "eval.checkpoint")  # torch.load would read a flipped byte as a wrong weight
    try:
        state = torch.load(path, map_location="cpu", weights_only=False)
    except Exception as exc:  # pickle, zip and torch errors alike: the file is not a checkpoint
        raise ConfigError(f"not a readable Lightning checkpoint ({type(exc).__name__})",
                          f"eval.checkpoint ({path})") from None
    weights = {k.removeprefix("policy."): v for k, v in state.get("state_dict", {}).items() if k.startswith("policy.")}
    if not weights:
        raise ConfigError("the checkpoint holds no policy weights (state_dict['policy.*'])",
                          f"eval.checkpoint ({path})")
    # under LoRA the checkpoint holds the adapter alone: its base is the policy the run started from, warm start
    # included (for a full fine-tune every weight comes from the checkpoint)
    base = starting_policy(model, validated.data, run_heldout_records(validated.data),
                           max_new_tokens=validated.run.max_completion_length, chat_format=read_chat_format(model)) \
        if model.lora.enabled else resolve_policy_path(model.name_or_path)
    policy, tokenizer = load_policy(base, model.dtype)
    if model.lora.enabled:
        policy = apply_lora(policy, model.lora)
    try:  # a LoRA checkpoint holds the adapter alone; its frozen base is model.name_or_path's
        load_weights(policy, weights)
    except RuntimeError as exc:
        raise ConfigError(f"its policy does not fit model.name_or_path / model.lora: {str(exc).splitlines()[0]}",
                          f"eval.checkpoint ({path})") from None
    return policy, tokenizer, str(path), state.get("global_step")


def run_eval(validated: Any) -> tuple[GoldenResult, list[dict[str, Any]], str | None]:
    """``rlkit eval``: check the golden set, load the checkpoint, generate, score, append the results.

    Returns the result, every row of the results file and why embedding similarity was left out (or None)."""
    options = golden_options(validated)
    records = load_golden(options.prompts, validated)  # before any model loads: an overlap fails fast
    read_results(options.output)  # likewise a corrupt results file
    embedder, no_embedding = resolve_embedder(options.embedding)
    scorer = scorer_from(validated)
    policy, tokenizer, key, step = load_checkpoint(options.checkpoint, validated)
    generator = validated.plugins["generator"]
    generator.setup(policy, tokenizer)
    try:
        result = evaluate(generator, policy, tokenizer, records, scorer, options, checkpoint=key, embedder=embedder,
                          step=step)
    finally:
        generator.close()
    return result, append_results(options.output, result), no_embedding


# --- the periodic callback of rlkit fit ------------------------------------------------------------


def golden_callbacks(validated: Any, run_dir: Path) -> list[Any]:
    """``[GoldenSetCallback]`` when ``eval.every > 0``, else []; the golden set is read and checked here, before
    any model loads, so an overlap with the training data fails the run at once."""
    options = golden_options(validated)
    if options.every <= 0:
        return []
    records = load_golden(options.prompts, validated)
    embedder, _ = resolve_embedder(options.embedding)
    return [GoldenSetCallback(options, records, scorer_from(validated), run_dir, embedder)]


class GoldenSetCallback(L.Callback):
    """Every ``eval.every`` steps: greedy golden-set evaluation of the current policy with the
    module's generator, logged as ``eval/<dimension>``, ``eval/reward``, ``eval/<reference metric>`` and appended
    to ``run_dir/eval/results.jsonl`` keyed ``<run_dir>`` at the step. Rank 0 only."""

    def __init__(self, options: EvalOptions, records: list[dict[str, Any]], scorer: GoldenScorer, run_dir: Path,
                 embedder: Any = None) -> None:
        self.options, self.records, self.scorer, self.embedder = options, records, scorer, embedder
        self.run_dir = Path(run_dir)
        self.output = self.run_dir / "eval" / "results.jsonl"
        self.last: GoldenResult | None = None

    def on_train_batch_end(self, trainer: Any, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        step = trainer.global_step  # after the update: the policy evaluated is the one trained for `step` steps
        if step % self.options.every == 0:
            self.run(trainer, pl_module, step)

    def run(self, trainer: Any, pl_module: L.LightningModule, step: int) -> None:
        """Evaluate now and log; other ranks do nothing (generation here is local, no collective is involved)."""
        if not trainer.is_global_zero:
            return
        policy = pl_module.policy
        with torch.no_grad():
            result = evaluate(pl_module.generator, policy, pl_module.tokenizer, self.records, self.scorer,
                              self.options, checkpoint=str(self.run_dir), embedder=self.embedder, step=step)
        self.last = result
        metrics = result.metrics()
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
        history = getattr(pl_module, "history", None)
        if history is not None:
            history.append(step, metrics)
        append_results(self.output, result)
