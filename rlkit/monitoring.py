"""Reward-hacking and health monitors: the view a monitor reads, and the host that runs them in ``rlkit fit``.

A monitor (plugin kind ``monitor``, hook ``rlkit_register_monitors``) is selected as a list,
``monitors=[template_phrases,length_drift]``; each lands under its own key ``monitors.<name>``. Every training
step the host hands each monitor a :class:`MonitorView` and logs what it returns as ``monitors/<key>/<metric>``.

Two files in the run directory (written by rank 0 only), read by ``rlkit report``:

* ``alerts.jsonl``: one JSON object per alert, appended as it is raised:
  ``{"monitor": "<key>", "step": <int>, "severity": "warning" | "info", "message": "<text>"}``.
* ``monitors.json``: written once at the end of the run, ``{"<key>": <that monitor's summary() dict>}``.
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from rlkit.errors import ConfigError, PluginError

if TYPE_CHECKING:
    from rlkit.registry import Registry
    from rlkit.rubric import Rubric

SEVERITIES = ("info", "warning")
ALERTS_FILE = "alerts.jsonl"
SUMMARY_FILE = "monitors.json"


@dataclass(frozen=True)
class Alert:
    """Something a monitor wants a person to look at: which monitor, at which step, and why."""

    monitor: str
    step: int
    message: str
    severity: str = "warning"

    def as_dict(self) -> dict[str, Any]:
        """The ``alerts.jsonl`` line."""
        return {"monitor": self.monitor, "step": self.step, "severity": self.severity, "message": self.message}


@dataclass(frozen=True)
class MonitorView:
    """One training step as a monitor sees it (this process's share of the batch).

    * ``texts`` ``[B][G]`` completions of ``records`` (B prompt records);
    * ``raw_scores`` ``float32 [B, G, D]`` in each dimension's range, ``scores`` the same in [0, 1] (NaN = unscored);
    * ``rewards`` ``float32 [B, G]``; ``completion_lengths`` ``[B, G]`` token counts;
    * ``saturated`` ``bool [B, D]``: the host's saturation detector (:func:`rlkit.diagnostics.saturated_groups`);
    * ``judge_scores(records, completions [N][G]) -> float32 [N, G, D]``: the run's judge on other texts;
    * ``generate(records, num_generations) -> [N][G] texts``: the policy sampling other prompts.

    Both callables leave the training's random streams untouched; they are None outside a training run.
    """

    step: int
    records: Sequence[dict[str, Any]]
    texts: Sequence[Sequence[str]]
    raw_scores: torch.Tensor
    scores: torch.Tensor
    rewards: torch.Tensor
    rubric: Rubric
    completion_lengths: torch.Tensor
    saturated: torch.Tensor
    judge_scores: Callable[[Sequence[dict[str, Any]], Sequence[Sequence[str]]], torch.Tensor] | None = None
    generate: Callable[[Sequence[dict[str, Any]], int], list[list[str]]] | None = None


def make_view(step: int, records: Sequence[dict[str, Any]], texts: Sequence[Sequence[str]], raw_scores: torch.Tensor,
              rubric: Rubric, rewards: torch.Tensor | None = None, completion_lengths: torch.Tensor | None = None,
              **callables: Any) -> MonitorView:
    """A view from texts and raw scores (tests, offline use): scores, saturation and defaults filled in."""
    from rlkit.diagnostics import saturated_groups
    from rlkit.rewards import normalize_scores
    from rlkit.stats import nan_weighted_sum

    scores = normalize_scores(raw_scores, rubric)
    if rewards is None:
        weights = torch.tensor(rubric.initial_weights(), dtype=torch.float32)
        rewards = nan_weighted_sum(scores, weights / weights.sum())
    if completion_lengths is None:
        completion_lengths = torch.tensor([[float(len(t.split())) for t in group] for group in texts])
    return MonitorView(step, records, texts, raw_scores, scores, rewards, rubric, completion_lengths,
                       saturated_groups(scores), **callables)


class BaselineDrift:
    """A measured value against its mean over the first ``baseline_steps`` measurements; the alert is
    edge-triggered (raised when the value leaves the band, again only after it has come back)."""

    def __init__(self, baseline_steps: int) -> None:
        self.baseline_steps = baseline_steps
        self.first: list[float] = []
        self.outside = False

    @property
    def baseline(self) -> float:
        return sum(self.first) / len(self.first) if self.first else float("nan")

    @property
    def ready(self) -> bool:
        return len(self.first) >= self.baseline_steps

    def update(self, value: float, outside: Callable[[float, float], bool]) -> bool:
        """Record ``value``; True when ``outside(value, baseline)`` has just become true."""
        if not self.ready:
            if not math.isnan(value):
                self.first.append(value)
            return False
        now = not math.isnan(value) and outside(value, self.baseline)
        raised = now and not self.outside
        self.outside = now
        return raised

    def state_dict(self) -> dict[str, Any]:
        return {"first": list(self.first), "outside": self.outside}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.first, self.outside = list(state["first"]), bool(state["outside"])


def due(step: int, every: int) -> bool:
    """A monitor with cadence ``every`` measures at this step (steps 0, every, 2·every, …)."""
    return every > 0 and step % every == 0


# --- config ------------------------------------------------------------------------------------


def validate_monitors(registry: Registry, cfg: Any, rubric: Rubric) -> dict[str, Any]:
    """Build every monitor of the ``monitors`` node (``{key: {name, params}}``), checked against the rubric."""
    from omegaconf import OmegaConf

    from rlkit.config import config_source

    node = cfg.get("monitors")
    if node is None:
        return {}
    container = OmegaConf.to_container(node, resolve=True)
    if not isinstance(container, dict):
        raise ConfigError("must be selected as a list, e.g. monitors=[length_drift,reward_collapse]", "monitors")
    built: dict[str, Any] = {}
    for key, entry in container.items():
        name = entry.get("name") if isinstance(entry, dict) else None
        where = f"monitors.{key} ({config_source(registry, 'monitors', name or str(key))})"
        if not isinstance(entry, dict) or not isinstance(name, str) or not name:
            raise ConfigError("must be a mapping with `name` and `params`", where)
        extra = sorted(set(entry) - {"name", "params"})
        if extra:
            raise ConfigError(f"unknown key {extra[0]!r}; a monitor node has only `name` and `params`", where)
        params = entry.get("params") or {}
        if not isinstance(params, dict):
            raise ConfigError("`params` must be a mapping", f"monitors.{key}.params")
        try:
            monitor = registry.create("monitor", name, params, where=f"monitors.{key}.params")
        except (ValueError, TypeError) as exc:
            raise ConfigError(str(exc), f"monitors.{key}.params") from None
        check = getattr(monitor, "check_rubric", None)
        if check is not None:
            check(rubric)
        built[str(key)] = monitor
    return built


# --- the host ------------------------------------------------------------------------------------


def _finite(value: Any, key: str, where: str) -> float:
    number = float(value)
    if math.isnan(number) or math.isinf(number):
        raise PluginError(f"monitor {where} returned {number} for {key!r}; return only finite metrics")
    return number


@dataclass
class MonitorHost:
    """Owns a run's monitors: calls them each step, prefixes their metrics, and records alerts and summaries.

    ``run_dir`` None keeps everything in memory (tests); ``writer`` decides whether this process writes files
    (rank 0 under DDP).
    """

    monitors: dict[str, Any]
    run_dir: Path | None = None
    writer: Callable[[], bool] = lambda: True
    alerts: list[Alert] = field(default_factory=list)

    def observe(self, view: MonitorView) -> dict[str, float]:
        """Every monitor's metrics for this step as ``monitors/<key>/<metric>``; new alerts are recorded."""
        metrics: dict[str, float] = {}
        for key, monitor in self.monitors.items():
            for metric, value in (monitor.observe(view.step, view) or {}).items():
                metrics[f"monitors/{key}/{metric}"] = _finite(value, metric, key)
            for alert in monitor.alerts():
                alert = Alert(key, int(alert.step), str(alert.message), alert.severity)
                self.alerts.append(alert)
                if self.writer():  # one process speaks for the run (Lightning's rank_zero_warn, without its import)
                    warnings.warn(f"rlkit monitor {key}, step {alert.step}: {alert.message}", UserWarning, stacklevel=2)
                self._append(alert)
        return metrics

    def _append(self, alert: Alert) -> None:
        if self.run_dir is None or not self.writer():
            return
        with (self.run_dir / ALERTS_FILE).open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(alert.as_dict(), ensure_ascii=False) + "\n")

    def summary(self) -> dict[str, dict[str, Any]]:
        """``{key: summary}``, written to ``monitors.json`` in the run directory (rank 0)."""
        out = {key: monitor.summary() for key, monitor in self.monitors.items()}
        if self.run_dir is not None and self.writer():
            from rlkit.atomic import atomic_write_text

            atomic_write_text(self.run_dir / SUMMARY_FILE, json.dumps(out, indent=2, ensure_ascii=False) + "\n")
        return out

    def state_dict(self) -> dict[str, Any]:
        """Each monitor's state where it keeps one, so a resumed run compares with the same baselines."""
        return {key: m.state_dict() for key, m in self.monitors.items() if callable(getattr(m, "state_dict", None))}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.items():
            monitor = self.monitors.get(key)
            if monitor is not None and callable(getattr(monitor, "load_state_dict", None)):
                monitor.load_state_dict(value)


def summary_lines(summaries: dict[str, dict[str, Any]], alerts: Sequence[Alert]) -> list[str]:
    """One line per monitor for ``fit``'s end summary: its summary's numbers and its alert count."""
    lines = []
    for key, summary in summaries.items():
        numbers = [f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}" for k, v in summary.items()
                   if isinstance(v, int | float | str) and not isinstance(v, bool)]
        count = sum(a.monitor == key for a in alerts)
        lines.append(f"monitor {key}: {', '.join(numbers) or 'no measurements'}; {count} alert(s)")
    return lines


# --- glue to the training module -------------------------------------------------------------------


def step_view(module: Any, step: int, records: Sequence[dict[str, Any]], sampled: Any, batch: Any) -> MonitorView:
    """The view of one training step of ``RubricRLModule``: this process's rows, the judge and the generator."""
    from rlkit.diagnostics import saturated_groups
    from rlkit.rewards import check_judge_output
    from rlkit.sampling import GenerationRequest
    from rlkit.types import Rollout

    spread, rubric = module.spread, module.rubric
    scores = spread.local(batch.scores).cpu()
    g = len(sampled.texts[0])

    def judge_scores(recs: Sequence[dict[str, Any]], completions: Sequence[Sequence[str]]) -> torch.Tensor:
        rollout = Rollout(records=list(recs), completions=[list(c) for c in completions])
        with torch.random.fork_rng(devices=[]):  # a sampling judge must not shift the training's draws
            raw = module.parts.judge.score(rollout, module.judged_rubric)
        return check_judge_output(raw, rollout, rubric, module.parts.judge_name).cpu()

    def generate(recs: Sequence[dict[str, Any]], num_generations: int) -> list[list[str]]:
        s = module.settings
        # fixed seeds per record: a generator that honours them samples the same noise at every measurement
        request = GenerationRequest(list(recs), num_generations, s.max_completion_length, s.temperature,
                                    False, [s.seed * 7_919 + i for i in range(len(recs))])
        devices = [module.device] if module.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            out = module.generator.generate(module.policy, module.tokenizer, request)
        return [list(group) for group in out.texts]

    return MonitorView(step=step, records=records, texts=sampled.texts, raw_scores=spread.local(batch.raw_scores).cpu(),
                       scores=scores, rewards=spread.local(batch.rewards).cpu(), rubric=rubric,
                       completion_lengths=sampled.completion_token_counts.view(len(records), g).float().cpu(),
                       saturated=saturated_groups(scores), judge_scores=judge_scores, generate=generate)


def monitor_host(validated: Any, run_dir: Path) -> MonitorHost | None:
    """The run's monitor host, or None when ``monitors=[]``."""
    from rlkit.distributed import Spread

    monitors = validated.plugins.get("monitor") or {}
    if not monitors:
        return None
    return MonitorHost(monitors, run_dir, writer=lambda: Spread.current().rank == 0)


__all__ = ["Alert", "BaselineDrift", "MonitorHost", "MonitorView", "due", "make_view", "validate_monitors"]
