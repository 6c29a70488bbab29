"""``self_internalisation``: a verifier-free reading, from the policy's own log-probs, of whether training still
moves the policy toward the task's answers or only toward its own outputs.

The name and the idea are arXiv 2605.12474's (Mahmoud et al., "Reward Hacking in Rubric-Based Reinforcement
Learning", 2026: a "self-internalization gap" from policy log-probabilities that tracks the reference judges'
quality and shows when a policy trained on a weak verifier stops improving). The paper's formula could not be read
here (only its abstract is reachable), so the definition below is rlkit's own reading, not the paper's:

For records with a ``reference`` answer, with ``ℓ_m(y)`` the mean per-token log-prob of ``y`` as the record's
completion under model ``m`` (π the policy now, ρ the run's reference policy, the starting policy under
``model.reference=frozen``):

* ``internalised`` = mean over records of ``ℓ_π(reference) − ℓ_ρ(reference)``: how much more likely the policy has
  made the task's answers since it started;
* ``own_drift`` = mean over the policy's completions of ``ℓ_π(y) − ℓ_ρ(y)`` (the k1 KL estimate per token);
* ``gap`` = ``own_drift − internalised``.

While training teaches the task, the policy's own completions and the references move together and the gap stays
small. When it learns to please the judge instead (a template, padding), its own outputs gain likelihood the
references do not: the gap grows, and ``internalised`` stalls or falls. No judge is asked; ``rlkit doctor`` reads
both series.

Measured after the step's update. The monitor sets ``reads_reference``: the run keeps a reference policy for it
even when the objective has no KL term. Which completions: without ``prompts`` the step's own records and
completions; with a JSONL of prompt records (a held-out file with references) the policy samples
``num_generations`` completions of each at every measurement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlkit.plugin import ConfigError, MonitorView, due, hookimpl
from rlkit_plugins.monitors.prompt_records import read_monitor_prompts

WHERE = "monitors.self_internalisation.params"


class SelfInternalisation:
    """Logs ``internalised``, ``own_drift`` and ``gap`` (nats per token) every ``every`` steps."""

    reads_reference = True  # the run keeps a reference policy for it (under LoRA: the adapters switched off)

    @dataclass
    class Params:
        every: int = 5
        prompts: str | None = None  # JSONL of records with a `reference`; None: the step's own records
        num_generations: int = 2    # completions sampled per record with `prompts`
        limit: int = 0              # only the first `limit` records of `prompts` (0: all)

    def __init__(self, params: Params) -> None:
        if params.every < 1 or params.num_generations < 1:
            raise ConfigError("every and num_generations must be >= 1", WHERE)
        if params.limit < 0:
            raise ConfigError("limit must be >= 0", WHERE)
        self.params = params
        self.records: list[dict[str, Any]] | None = None
        self.history: list[dict[str, float]] = []

    def check_rubric(self, rubric: Any) -> None:
        """The prompts file read now, so a missing one or one without references fails before training."""
        if self.params.prompts is None or self.records is not None:
            return
        self.records = read_monitor_prompts(
            self.params.prompts, self.params.limit, f"{WHERE}.prompts", keep=lambda r: r.get("reference") is not None,
            none_left="holds no record with a `reference`: the gap measures the policy's move toward the references")

    def observe(self, step: int, view: MonitorView) -> dict[str, float]:
        if not due(step, self.params.every):
            return {}
        if view.log_probs is None or view.generate is None:
            raise ConfigError("self_internalisation reads the policy's log-probs; it runs inside rlkit fit", WHERE)
        if self.params.prompts is not None:
            if self.records is None:
                self.check_rubric(view.rubric)
            assert self.records is not None
            records = self.records
            texts = view.generate(records, self.params.num_generations)
        else:
            kept = [i for i, r in enumerate(view.records) if r.get("reference") is not None]
            if not kept:
                raise ConfigError(f"step {step}: no training record has a `reference`; give records with one as "
                                  "`prompts`", WHERE)
            records = [view.records[i] for i in kept]
            texts = [list(view.texts[i]) for i in kept]
        policy_own, reference_own = view.log_probs(records, texts)
        policy_ref, reference_ref = view.log_probs(records, [[str(r["reference"])] for r in records])
        if reference_own is None or reference_ref is None:
            raise ConfigError("the run has no reference policy: the gap is measured against the policy the run "
                              "started from (model.reference=frozen)", WHERE)
        internalised = float((policy_ref - reference_ref).mean())
        own_drift = float((policy_own - reference_own).mean())
        point = {"step": float(step), "internalised": internalised, "own_drift": own_drift,
                 "gap": own_drift - internalised}
        self.history.append(point)
        return {k: v for k, v in point.items() if k != "step"}

    def alerts(self) -> list[Any]:
        return []  # the trend is read by rlkit doctor and the triage monitor, which see the reward beside it

    def summary(self) -> dict[str, Any]:
        first, last = (self.history[0], self.history[-1]) if self.history else ({}, {})
        return {"measurements": len(self.history), "start_internalised": first.get("internalised"),
                "final_internalised": last.get("internalised"), "start_gap": first.get("gap"),
                "final_gap": last.get("gap")}

    def state_dict(self) -> dict[str, Any]:
        return {"history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [dict(point) for point in state["history"]]


@hookimpl
def rlkit_register_monitors(register):
    register("self_internalisation", SelfInternalisation)
