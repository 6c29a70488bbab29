"""The judge calls and tokens a run is expected to make, printed by ``rlkit validate`` before anything is spent.

Each judge counts its own calls (``planned_calls``, following how it really batches them: ``llm`` one call a
completion and permutation with every dimension in it, ``ranking`` one a group and repetition, ``hybrid`` each member
with its own dimensions, ``ensemble`` every member, ``cascade`` the cheap judge plus at most the expensive one on
every group); this multiplies by the steps. Tokens are estimated without a tokenizer (about 4 characters a token) from
the judge's own template rendered with prompts as long as the data's and completions of ``max_completion_length``
tokens; answers count as ``max_tokens`` long, so ``tokens out`` is an upper bound. Cache hits and re-asks of
unreadable answers are left aside: the first lowers the real figure, the second raises it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rlkit.judging.spend import CallPlan, JudgeLoad, plan_judge

SYNTHETIC_SAMPLE = 64  # prompts drawn from a synthetic task to measure its prompt length


@dataclass(frozen=True)
class SpendEstimate:
    """A step's expected judge calls, and the run's when it has a step limit."""

    per_step: CallPlan
    steps: int | None
    extra_rounds: int = 0  # sampling.filter may sample this many more rounds a step
    evolve_every: int = 0  # rubric.evolve.every: a round of new criteria every this many steps
    prompts: int = 0       # prompts a step (a round asks once for each, best against worst completion)

    @property
    def run(self) -> CallPlan | None:
        return self.per_step.times(self.steps) if self.steps else None

    def lines(self) -> list[str]:
        step, run = self.per_step, self.run
        total = (f"; × {self.steps} steps = {run.calls:,} calls" if run is not None
                 else " (trainer.max_steps=-1: no run total)")
        figures = run or step
        cost = f"; cost ≈ {figures.cost:.4g}" if figures.cost is not None else ""
        lines = [f"judge calls: {step.formula} = {step.calls:,} a step{total}",
                 f"judge tokens{'' if run is None else ' (run)'}: ≈ {figures.tokens_in:,} in, ≤ {figures.tokens_out:,} "
                 f"out{cost} (≈ 4 characters a token; cache hits and re-asks aside)"]
        if self.extra_rounds:
            lines.append(f"  sampling.filter may sample up to {self.extra_rounds} extra rounds a step: up to "
                         f"×{self.extra_rounds + 1} these figures")
        if self.evolve_every:
            rounds = f"{self.steps // self.evolve_every} rounds" if self.steps else "every round"
            calls = f" = {self.steps // self.evolve_every * self.prompts:,} calls" if self.steps else ""
            lines.append(f"  rubric.evolve: {rounds} × {self.prompts} prompts (one call each, best against worst "
                         f"completion){calls} writing criteria, besides the judging above")
        return lines


def mean_prompt_chars(records: list[dict[str, Any]] | None, data: Any, seed: int) -> int:
    """The mean prompt length in characters: of the records read, else of a sample of the synthetic task."""
    from rlkit.data.records import SYNTHETIC_TASKS, prompt_text

    if not records and getattr(data, "task", None) in SYNTHETIC_TASKS:
        records = data.synthetic_records(SYNTHETIC_SAMPLE, seed)
    if not records:
        return 0
    return round(sum(len(prompt_text(r["prompt"])) for r in records) / len(records))


def estimate_judge_spend(validated: Any) -> SpendEstimate | None:
    """The run's expected judge calls and tokens; None when its judge makes no model calls (``rule``)."""
    run, data = validated.run, validated.data
    load = JudgeLoad(prompts=run.batch_size, generations=run.num_generations,
                     prompt_chars=mean_prompt_chars(validated.records, data, run.seed),
                     completion_tokens=run.max_completion_length)
    plan = plan_judge(validated.plugins.get("judge"), load, validated.rubric)
    if plan is None:
        return None
    steps = validated.cfg.get("trainer", {}).get("max_steps", -1)
    extra = run.sampling.max_rounds if run.sampling.filter != "none" else 0
    evolve = getattr(validated, "evolve", None)
    return SpendEstimate(plan, int(steps) if isinstance(steps, int) and steps > 0 else None, extra,
                         evolve.every if evolve is not None else 0, run.batch_size)
