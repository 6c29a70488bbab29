"""``label_sample``: every ``every`` steps, a stratified sample of the run's own completions goes to a labelling file.

This is the human side of the collusion check. A judge the policy learns to please keeps agreeing with itself and
with any fixed labelled set (``judge_stability``), because the policy's outputs never enter that set; only humans
labelling what the policy writes *now* can see judge–human agreement fall. The sample is stratified by reward:
the step's completions are sorted by reward, cut into ``size`` equal slices and one is drawn from each (seeded by
``seed`` and the step), so high-reward completions, where a colluding judge over-scores, are always in it.

Each measurement writes ``<run dir>/labelling/step_<step>.jsonl`` (or ``output``) in the format of
``rlkit.evaluation.labelling``: prompt, completion, the rubric's anchors, every label null. ``rlkit label <file>``
fills it in; ``rlkit calibrate calibrate.labels=<run dir>/labelling`` reports κ and ρ per dimension per step window.
Under DDP, process 0 writes its share of the batch. Outside a Hydra run and without ``output`` (a test, a notebook)
there is no run directory: the samples are kept in memory (``samples``) instead of written.
"""

from __future__ import annotations

import json
import math
import os
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.plugin import ConfigError, MonitorView, Rubric, due, hookimpl, prompt_text

WHERE = "monitors.label_sample.params"


def _run_dir() -> Path | None:
    """The Hydra run directory of ``rlkit fit``, or None outside a Hydra job (a test, a notebook)."""
    try:
        from hydra.core.hydra_config import HydraConfig
    except ImportError:
        return None
    if not HydraConfig.initialized():
        return None
    return Path(HydraConfig.get().runtime.output_dir)


def _is_writer() -> bool:
    import torch.distributed as dist

    return not (dist.is_available() and dist.is_initialized()) or dist.get_rank() == 0


def _number(x: float) -> float | None:
    return None if math.isnan(x) else round(float(x), 6)


def stratified_by_reward(rewards: list[float], size: int, rng: random.Random) -> list[int]:
    """Indices of ``size`` items, one drawn from each of ``size`` equal slices of the reward order (NaN last)."""
    order = sorted(range(len(rewards)), key=lambda i: (math.isnan(rewards[i]), rewards[i]))
    if len(order) <= size:
        return order
    cuts = [round(k * len(order) / size) for k in range(size + 1)]
    return [order[rng.randrange(cuts[k], cuts[k + 1])] for k in range(size)]


class LabelSample:
    """Writes the sample; logs ``written`` (completions written at this measurement)."""

    @dataclass
    class Params:
        every: int = 50
        """Steps between samples (steps 0, every, 2·every, …)."""
        size: int = 24
        """Completions per sample, one per slice of the step's reward order (the rubric design note asks for 20–30)."""
        seed: int = 0
        """Seeds the draw within each slice, with the step."""
        output: str | None = None
        """A folder for the labelling files; null: <run dir>/labelling."""

    def __init__(self, params: Params) -> None:
        if params.every < 1:
            raise ConfigError("must be >= 1", f"{WHERE}.every")
        if params.size < 1:
            raise ConfigError("must be >= 1", f"{WHERE}.size")
        self.params = params
        self.files: list[str] = []
        self.samples: dict[int, list[dict[str, Any]]] = {}  # by step, when there is nowhere to write

    def _folder(self) -> Path | None:
        if self.params.output:
            return Path(self.params.output).expanduser()
        run_dir = _run_dir()
        return run_dir / "labelling" if run_dir is not None else None

    def observe(self, step: int, view: MonitorView) -> dict[str, float]:
        if not due(step, self.params.every) or not _is_writer():
            return {}
        g = len(view.texts[0]) if view.texts else 0
        rewards = [float(r) for r in view.rewards.reshape(-1).tolist()]
        picked = stratified_by_reward(rewards, self.params.size, random.Random(self.params.seed * 1_000_003 + step))
        lines = [self._line(step, view, i // g, i % g) for i in sorted(picked)]
        folder = self._folder()
        if folder is None:
            self.samples[step] = lines
            return {"written": float(len(lines))}
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"step_{step:07d}.jsonl"
        _write_atomically(path, "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
        self.files.append(str(path))
        return {"written": float(len(lines))}

    @staticmethod
    def _line(step: int, view: MonitorView, b: int, j: int) -> dict[str, Any]:
        rubric: Rubric = view.rubric
        record = view.records[b]
        prompt = record["prompt"]
        line: dict[str, Any] = {"prompt": prompt if isinstance(prompt, str) else prompt_text(prompt),
                                "completion": view.texts[b][j]}
        if record.get("reference") is not None:
            line["reference"] = record["reference"]
        # the format of rlkit.evaluation.labelling.labelling_line (a plugin reaches the host only through its door)
        line.update({
            "step": step, "window": step, "rubric": rubric.identity(),
            "judge": {d.name: _number(float(view.raw_scores[b, j, x])) for x, d in enumerate(rubric.dimensions)},
            "reward": _number(float(view.rewards[b, j])),
            "dimensions": [{"name": d.name, "description": d.description, "type": d.type, "range": [d.low, d.high],
                            "anchors": {f"{level:g}": a.text for level, a in sorted(d.anchors.items())}}
                           for d in rubric.dimensions],
            "labels": {d.name: None for d in rubric.dimensions}})
        return line

    def alerts(self) -> list:
        return []

    def summary(self) -> dict[str, Any]:
        return {"files": len(self.files), "last": self.files[-1] if self.files else None}

    def state_dict(self) -> dict[str, Any]:
        return {"files": list(self.files)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.files = list(state["files"])


def _write_atomically(path: Path, text: str) -> None:
    # a labeller may open the folder mid-run: never show a half-written file
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@hookimpl
def rlkit_register_monitors(register):
    register("label_sample", LabelSample)
