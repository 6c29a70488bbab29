"""The optimiser side of a training step, shared by every objective: log-prob passes, micro-batches, DDP scaling,
``num_iterations`` optimiser steps. An objective only turns each micro-batch's tensors into a loss.

Two passes, by what the objective learns from (its ``signal``):

* ``advantages``: rows of completions, grouped by length (:func:`rlkit.lm.sampling.length_buckets`); the objective's
  loss normalises by the step's global sequence and token counts, so micro-batch losses sum to the one-pass loss.
* ``pairs``: only the completions that appear in a pair go through the model, as summed log-probs; a micro-batch's
  weighted-mean loss is scaled by its share of the step's pair weight.

Under DDP each process holds its own rows; losses are scaled by ``world_size`` because DDP averages gradients, and
metrics are summed over processes (:class:`rlkit.train.distributed.Spread`).

:class:`AdvantageUpdate`, :class:`DemonstrationUpdate` and :class:`PairUpdate` are one training step of each signal
(``UPDATES``, by the objective's ``signal``): what the objective learns from is formed over the global batch, then the
passes above update on this process's rows. They read the policy and its optimiser through an
:class:`UpdateContext`, never the LightningModule.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from rlkit.core.errors import TrainingError
from rlkit.core.objective import CompletionLossInputs, PairLossInputs, PairTargets
from rlkit.core.timeline import span
from rlkit.core.types import PreferencePairs, RewardBatch
from rlkit.lm.logprobs import importance_correction, sequence_logp_sums
from rlkit.lm.sampling import (
    SampledBatch,
    length_buckets,
    micro_batches,
    sequence_log_probs,
    sequence_log_probs_and_entropy,
)
from rlkit.reward.diagnostics import distinct_values_per_group
from rlkit.reward.pipeline import confidence_scaled
from rlkit.train.distributed import Spread
from rlkit.train.episodes import episode_means, token_advantages
from rlkit.train.settings import RewardParts, TrainingSettings


@dataclass
class OptimizerPort:
    """The part of Lightning's manual optimisation an update uses: the optimiser, its learning-rate schedule, the
    backward pass (``manual_backward``: precision and DDP handled) and gradient clipping by norm."""

    optimizer: Any
    lr_scheduler: Any
    backward: Callable[[torch.Tensor], None]
    clip_gradients: Callable[[Any, float], None]


@dataclass
class UpdateContext:
    """What one step's update reads: the policy and what moves with it (the generator's weights, the reference),
    the loop's settings, the reward parts (objective, estimator, preference constructor), where the step runs and
    the optimiser port."""

    policy: Any
    reference: Any
    generator: Any
    settings: TrainingSettings
    parts: RewardParts
    port: OptimizerPort
    device: torch.device
    step: int
    spread: Spread = field(default_factory=Spread.current)


def outside_inference(t: torch.Tensor | None) -> torch.Tensor | None:
    """A normal copy of a tensor made under ``torch.inference_mode`` (the no-grad passes run there, which skips
    autograd's version counting): autograd may save it for backward, which it refuses for an inference tensor."""
    return None if t is None else t.clone()


def _grad_norm(policy: Any) -> float:
    """The L2 norm of the policy's gradient before clipping (of the last inner iteration when logged)."""
    norms = [p.grad.detach().norm() for p in policy.parameters() if p.grad is not None]
    return float(torch.linalg.vector_norm(torch.stack(norms))) if norms else 0.0


def optimizer_step(ctx: UpdateContext, opt: Any, loss: torch.Tensor) -> tuple[float, bool]:
    """Clip (when configured), step, and bring the generator and the reference up to the new weights; returns the
    gradient norm before clipping and whether the update was made.

    A loss or gradient that is not finite (on any process) skips the update: one such step would poison AdamW's
    moments for good. The optimiser is still stepped with no gradients, which changes no parameter and no state
    (AdamW skips parameters without one) but counts the step, so the step count, the learning-rate schedule and the
    data stay where an uninterrupted run has them."""
    s = ctx.settings
    with span("trainer", "optimizer step"):
        grad_norm = _grad_norm(ctx.policy)
        bad = float(not (math.isfinite(grad_norm) and bool(torch.isfinite(loss).all())))
        finite = ctx.spread.sum(bad, ctx.device) == 0  # every process decides alike
        if finite:
            if s.gradient_clip_val:
                ctx.port.clip_gradients(opt, s.gradient_clip_val)
        else:
            opt.zero_grad(set_to_none=True)
        opt.step()
    with span("trainer", "weight sync"):
        ctx.generator.sync_weights(ctx.policy)  # unchanged weights after a skip: the engine's version still counts
    if ctx.reference is not None and finite:
        ctx.reference.on_optimizer_step(ctx.policy)
    return grad_norm, finite


class NonFiniteWatch:
    """Counts steps in a row whose update was skipped for a non-finite loss or gradient (``train/skipped_nonfinite``
    in the step's metrics): each one is said, and ``limit`` in a row stop the run (``optim.max_nonfinite``; 0: never).
    """

    def __init__(self, limit: int = 3) -> None:
        self.limit, self.in_a_row, self.total = limit, 0, 0
        self.last_cause = ""

    def update(self, step: int, metrics: dict[str, float]) -> str | None:
        """The message this step calls for, if any."""
        if not metrics.get("train/skipped_nonfinite"):
            self.in_a_row = 0
            return None
        self.in_a_row, self.total = self.in_a_row + 1, self.total + 1
        self.last_cause = (f"the loss or gradient was not finite (loss {metrics.get('loss', float('nan')):g}, "
                           f"gradient norm {metrics.get('grad_norm', float('nan')):g})")
        return f"step {step}: {self.last_cause}: the update was skipped, the weights and optimiser state are unchanged"

    @property
    def exhausted(self) -> bool:
        return bool(self.limit) and self.in_a_row >= self.limit

    def error(self, step: int) -> TrainingError:
        return TrainingError(f"{self.last_cause} in {self.in_a_row} steps in a row, up to step {step}: stopped. "
                             "Look for a judge or plugin that returns inf or NaN (the steps' rewards/* metrics), or "
                             "overflow in half precision (trainer.precision=32-true)", "optim.max_nonfinite")


def row_chunks(ctx: UpdateContext, sampled: SampledBatch) -> list[torch.Tensor]:
    """The step's passes: rows sorted by completion length, then split where it saves the most padding, each pass
    cut to its own longest completion (sequence_log_probs). Accumulation bounds a pass's rows (its memory); losses
    are sums over rows, so any split gives the same gradient."""
    s = ctx.settings
    n_rows = sampled.completion_mask.shape[0]
    # One process may merge passes that save under 5% of the positions; DDP processes must make as many.
    return length_buckets(sampled.completion_spans, max(s.gradient_accumulation_steps, s.length_buckets),
                          width=sampled.prompt_length, max_rows=-(-n_rows // max(s.gradient_accumulation_steps, 1)),
                          slack=None if ctx.spread.world_size > 1 else 0.05)


def rows_of(sampled: SampledBatch, chunks: list[torch.Tensor], log_probs: Any, device: Any) -> torch.Tensor:
    """``log_probs`` of every row ``[n, C]``, a pass per chunk."""
    out = torch.zeros(sampled.completion_mask.shape, device=device)
    for rows in chunks:
        out[rows] = log_probs(sampled.rows(rows)).to(out.dtype)
    return out


def sampling_and_reference_log_probs(ctx: UpdateContext, sampled: SampledBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """The completions' log-probs under the policy as it sampled them (no update yet this step) and under the
    reference, no grad: what a KL-penalised reward needs before the advantages are formed."""
    chunks, device = row_chunks(ctx, sampled), ctx.device
    request = getattr(ctx.reference, "request", None)
    with span("trainer", "log-prob passes"), torch.inference_mode():
        logp = rows_of(sampled, chunks, lambda sub: sequence_log_probs(ctx.policy, sub), device)
        ref = request(sampled).result().to(device) if callable(request) else \
            rows_of(sampled, chunks, lambda sub: ctx.reference.log_probs(ctx.policy, sub), device)
    return outside_inference(logp), outside_inference(ref)


def objective_reference(ctx: UpdateContext, objective: Any) -> Any:
    """The reference the objective's update reads: None where the objective uses none, even when the run keeps one
    for a monitor (``reads_reference``), so the update never pays a pass for it."""
    return ctx.reference if objective.reference_use is not None else None


def completion_update(ctx: UpdateContext, objective: Any, sampled: SampledBatch, advantages: torch.Tensor,
                      group_size: int, known: tuple[torch.Tensor, torch.Tensor] | None = None,
                      ) -> tuple[torch.Tensor, dict[str, float], float]:
    """``num_iterations`` optimiser steps on this process's completions (``advantages`` ``[n]``, groups of
    ``group_size`` consecutive rows), each accumulated over micro-batches; ``known``: the sampling policy's and the
    reference's log-probs when the step already made them. Returns the last iteration's loss over the global batch,
    its token-weighted metrics and the time the no-grad log-prob passes (old policy, reference) finished."""
    s, spread, device = ctx.settings, ctx.spread, ctx.device
    opt, sched = ctx.port.optimizer, ctx.port.lr_scheduler
    mask = sampled.completion_mask.float()
    if objective.mask_truncated_completions:
        mask = mask * (~sampled.truncated).float().unsqueeze(1)
    chunks = row_chunks(ctx, sampled)

    def all_rows(log_probs: Any) -> torch.Tensor:
        return rows_of(sampled, chunks, log_probs, device)

    # Completions an engine sampled are corrected towards the policy that trains on them, which needs the policy's
    # own log-probs at sampling time. With one inner iteration those are the training pass's own (the weights have
    # not moved yet), read from it detached, so no old-policy pass is made; with more, the pass is needed anyway.
    engine = sampled.engine_logprobs if s.is_correction is not None else None
    # A reference scored elsewhere (model.reference=engine) is asked now and read after the policy's first pass,
    # which it overlaps.
    reference = objective_reference(ctx, objective)
    request = getattr(reference, "request", None)
    ref_pending = request(sampled) if callable(request) and known is None else None
    wants_old = objective.num_iterations > 1 and (objective.needs_old_logprobs or engine is not None)
    with span("trainer", "log-prob passes"), torch.inference_mode():
        if known is not None:  # made before the advantages (a KL-penalised reward): the same passes
            old_logp, ref_logp = (known[0] if wants_old else None), known[1]
        else:
            old_logp = all_rows(lambda sub: sequence_log_probs(ctx.policy, sub)) if wants_old else None
            ref_logp = all_rows(lambda sub: reference.log_probs(ctx.policy, sub)) \
                if reference is not None and ref_pending is None else None
    old_logp, ref_logp = outside_inference(old_logp), outside_inference(ref_logp)
    t_logprob = time.perf_counter()
    num_tokens = float(spread.sum(mask.sum(), device))
    num_sequences = len(advantages) * spread.world_size
    # a process holds whole groups, so each group's token count is its own; the step's groups are every process's
    group_tokens = mask.sum(-1).reshape(-1, group_size).sum(-1).repeat_interleave(group_size)
    num_groups = len(advantages) // group_size * spread.world_size
    sampling_weights, correction_sums = None, {}
    if engine is not None and old_logp is not None:
        sampling_weights, correction_sums = importance_correction(old_logp, engine.to(old_logp), mask, s.is_correction)
    # `entropy`: the policy's mean per-token entropy over the step's completion tokens (masked as the loss is), from
    # the first iteration's logits (the policy that sampled), so it costs no pass of its own. An objective with an
    # entropy bonus gets every pass's entropy with its gradient.
    needs_entropy = bool(getattr(objective, "needs_entropy", False))
    entropy_mask = None
    quantile = float(getattr(objective, "top_entropy_quantile", 1.0))
    if quantile < 1.0:
        with span("trainer", "entropy pass"), torch.inference_mode():
            sampling_entropy = all_rows(lambda sub: sequence_log_probs_and_entropy(ctx.policy, sub)[1])
        entropy_mask = outside_inference(high_entropy_mask(sampling_entropy, mask, quantile, spread, device))
    entropy_sum = torch.zeros((), device=device)
    skipped = False
    for iteration in range(objective.num_iterations):
        opt.zero_grad()
        loss = torch.zeros((), device=device)
        weighted: dict[str, torch.Tensor] = {}
        for rows in chunks:
            entropy = None
            with span("trainer", "policy forward"):
                if iteration == 0 or needs_entropy:
                    logp, entropy = sequence_log_probs_and_entropy(ctx.policy, sampled.rows(rows), needs_entropy)
                    if iteration == 0:
                        entropy_sum = entropy_sum + torch.where(mask[rows] > 0, entropy.detach(), 0.0).sum()
                else:
                    logp = sequence_log_probs(ctx.policy, sampled.rows(rows))
            if ref_pending is not None:
                with span("trainer", "reference wait"):
                    ref_logp, ref_pending = ref_pending.result().to(device), None
            weights = None if sampling_weights is None else sampling_weights[rows]
            if engine is not None and old_logp is None:  # one iteration: the lag correction reads this pass
                weights, chunk_sums = importance_correction(logp.detach(), engine[rows].to(logp), mask[rows],
                                                            s.is_correction)
                correction_sums = {k: correction_sums.get(k, 0.0) + v for k, v in chunk_sums.items()}
            with span("trainer", "policy backward"):
                part, part_metrics = objective.loss(CompletionLossInputs(
                    logp=logp, old_logp=logp.detach() if old_logp is None else old_logp[rows],
                    ref_logp=None if ref_logp is None else ref_logp[rows], advantages=advantages[rows],
                    mask=mask[rows], num_sequences=num_sequences, num_tokens=num_tokens,
                    max_completion_length=s.max_completion_length, sampling_weights=weights,
                    entropy=entropy if needs_entropy else None, group_tokens=group_tokens[rows],
                    num_groups=num_groups, entropy_mask=None if entropy_mask is None else entropy_mask[rows]))
                ctx.port.backward(part * spread.world_size)
            loss = loss + part.detach()
            share = mask[rows].sum() / max(num_tokens, 1.0)
            for key, value in part_metrics.items():
                weighted[key] = weighted.get(key, 0.0) + value * share
        grad_norm, updated = optimizer_step(ctx, opt, loss)
        skipped = skipped or not updated
    sched.step()
    # the engine correction's token sums over the step's (global) token count, reduced with the rest in one call;
    # the mismatch KL over the tokens the engine gave a log-prob (NaN in engine_logprobs: none), once reduced
    rollout = {} if engine is None else {
        f"rollout/{name}": torch.as_tensor(correction_sums.get(key, 0.0), device=device) / max(num_tokens, 1.0)
        for key, name in (("ratio", "is_ratio_mean"), ("clipped", "is_clipped_frac"), ("masked", "is_masked_frac"))
    } | {"rollout/mismatch_kl": correction_sums.get("mismatch_kl", 0.0),
         "rollout/known_tokens": correction_sums.get("known", 0.0)}
    summed = spread.sum_all({"loss": loss, **weighted, "entropy": entropy_sum / max(num_tokens, 1.0), **rollout},
                            device)
    if engine is not None:
        summed["rollout/mismatch_kl"] /= max(summed.pop("rollout/known_tokens"), 1.0)
    loss_value = summed.pop("loss")
    summed["grad_norm"] = grad_norm  # the same on every process once DDP has averaged the gradients
    summed["train/skipped_nonfinite"] = float(skipped)
    return torch.as_tensor(loss_value), summed, t_logprob


def high_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, quantile: float, spread: Any,
                      device: Any = None) -> torch.Tensor:
    """``float [n, C]``: 1 on the completion tokens whose entropy is in the step's top ``quantile`` over every
    process (the 80/20 paper, arXiv 2506.01939; TRL's ``top_entropy_quantile``: at least the ``1 - quantile``
    quantile of the masked tokens' entropies), 0 elsewhere. TRL takes the quantile per micro-batch from the pass
    that trains; here it is the whole step's, from the policy that sampled, so how the step is cut into micro-batches
    does not change which tokens train."""
    values = torch.where(mask > 0, entropy.float(), torch.nan)
    # processes' completions differ in width: pad to the widest before gathering
    width = values.shape[1]
    widest = int(max(spread.gather_objects(width))) if spread.distributed else width
    padded = torch.nn.functional.pad(values, (0, widest - width), value=torch.nan)
    every = spread.gather(padded, device)
    kept = every[~torch.isnan(every)]
    if kept.numel() == 0:
        return torch.zeros_like(values)
    threshold = torch.quantile(kept, 1.0 - quantile)
    return ((values >= threshold) & (mask > 0)).to(mask.dtype)


def _zero_loss(policy: Any, device: Any) -> torch.Tensor:
    """A zero that touches every trainable parameter: a process with nothing to learn from in a micro-batch still
    joins the others' gradient all-reduce."""
    return sum((p.sum() * 0.0 for p in policy.parameters() if p.requires_grad), torch.zeros((), device=device))


def local_targets(targets: PairTargets, global_prompts: int, spread: Any) -> PairTargets:
    """The pairs of this process's prompts, indexed within its own rows."""
    if not spread.distributed:
        return targets
    size = global_prompts // spread.world_size
    start = spread.rank * size
    p = targets.pairs
    keep = (p.prompt_index >= start) & (p.prompt_index < start + size)
    pairs = PreferencePairs(p.prompt_index[keep] - start, p.chosen[keep], p.rejected[keep], p.weight[keep])
    return PairTargets(pairs, targets.labels[keep], targets.weights[keep])


def pair_update(ctx: UpdateContext, objective: Any, sampled: SampledBatch, targets: PairTargets,
                ) -> tuple[torch.Tensor, dict[str, float], float]:
    """``num_iterations`` optimiser steps on this process's pairs, each accumulated over micro-batches. Under DDP
    the loss is normalised by the weight of every process's pairs, so the averaged gradient is the single-process
    one. Returns the loss, its pair-weighted metrics and when the reference pass finished."""
    s, spread, device = ctx.settings, ctx.spread, ctx.device
    opt, sched = ctx.port.optimizer, ctx.port.lr_scheduler
    g = s.num_generations
    pairs = targets.pairs
    n = len(pairs)
    n_all = int(spread.sum(n, device))
    if n_all == 0:
        # No preference this step: count the step (Lightning counts optimiser steps) without moving anything;
        # parameters without a gradient are skipped by the optimiser, momentum included.
        opt.zero_grad(set_to_none=True)
        opt.step()
        ctx.generator.sync_weights(ctx.policy)
        sched.step()
        return torch.zeros((), device=device), {"loss/preference": 0.0}, time.perf_counter()
    chosen_rows = (pairs.prompt_index * g + pairs.chosen).to(device)
    rejected_rows = (pairs.prompt_index * g + pairs.rejected).to(device)
    labels, weights = targets.labels.to(device), targets.weights.to(device)
    total = spread.sum(weights.sum(), device)
    # Every process runs the same number of backward passes (each one joins a gradient all-reduce).
    chunks = micro_batches(n, s.gradient_accumulation_steps, exact=spread.distributed)

    def logp_sums(log_probs: Any, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        unique, inverse = torch.unique(rows, return_inverse=True)
        sums, lengths = sequence_logp_sums(log_probs(sampled.rows(unique)), sampled.completion_mask[unique])
        return sums[inverse], lengths[inverse]

    # a reference scored elsewhere (model.reference=engine): the whole batch in one answer, asked when it was read
    reference = objective_reference(ctx, objective)
    request = getattr(reference, "request", None)
    scored = request(sampled).result().to(device) if callable(request) else None
    refs: list[tuple[torch.Tensor, torch.Tensor] | None] = []
    with span("trainer", "log-prob passes"), torch.inference_mode():
        for rows in chunks:
            if reference is None or rows.start == rows.stop:
                refs.append(None)
                continue
            both = torch.cat([chosen_rows[rows], rejected_rows[rows]])
            if scored is not None:
                sums, _ = sequence_logp_sums(scored[both], sampled.completion_mask[both])
            else:
                sums, _ = logp_sums(lambda sub: reference.log_probs(ctx.policy, sub), both)
            refs.append((sums[:len(both) // 2], sums[len(both) // 2:]))
    refs = [None if r is None else (outside_inference(r[0]), outside_inference(r[1])) for r in refs]
    logprob_at = time.perf_counter()
    skipped = False
    for _ in range(objective.num_iterations):
        opt.zero_grad()
        loss = torch.zeros((), device=device)
        weighted: dict[str, float] = {}
        for rows, ref in zip(chunks, refs, strict=True):
            if rows.start == rows.stop:
                ctx.port.backward(_zero_loss(ctx.policy, device))
                continue
            both = torch.cat([chosen_rows[rows], rejected_rows[rows]])
            sums, lengths = logp_sums(lambda sub: sequence_log_probs(ctx.policy, sub), both)
            half = len(both) // 2
            part, part_metrics = objective.loss(PairLossInputs(
                chosen_logp=sums[:half], rejected_logp=sums[half:], ref_chosen_logp=None if ref is None else ref[0],
                ref_rejected_logp=None if ref is None else ref[1], chosen_lengths=lengths[:half],
                rejected_lengths=lengths[half:], labels=labels[rows], weights=weights[rows]))
            # micro-batch losses are weighted means; scaling by their weight share sums them to the whole
            share = float(weights[rows].sum()) / total if total > 0 else 0.0
            # DDP averages gradients over processes: × world_size makes that average the sum of the shares
            ctx.port.backward(part * share * spread.world_size)
            loss = loss + part.detach() * share
            for key, value in part_metrics.items():
                if key != "pairs":
                    weighted[key] = weighted.get(key, 0.0) + float(value) * (rows.stop - rows.start) / n_all
        grad_norm, updated = optimizer_step(ctx, opt, loss)
        skipped = skipped or not updated
    sched.step()
    weighted["loss/preference"] = float(loss)
    summed = spread.sum_all(weighted, device)
    summed["grad_norm"] = grad_norm  # the same on every process once DDP has averaged the gradients
    summed["train/skipped_nonfinite"] = float(skipped)
    return torch.as_tensor(summed["loss/preference"]), summed, logprob_at


# --- one step of each kind of objective ------------------------------------------------------------------


@dataclass
class StepOutcome:
    """What an objective's step hands back to ``training_step``."""

    loss: torch.Tensor
    metrics: dict[str, float]
    advantages: torch.Tensor  # [B, G], for the sample table
    decided_at: float         # when advantages / pairs were ready
    logprob_at: float         # when the no-grad log-prob passes were done


def advantage_metrics(advantages: torch.Tensor) -> dict[str, float]:
    return {
        "advantages/mean": float(advantages.mean()), "advantages/std": float(advantages.std()),
        "advantages/frac_zero": float((advantages == 0).float().mean()),
        "advantages/frac_zero_groups": float((advantages == 0).all(dim=1).float().mean()),
        "advantages/distinct_per_group": float(distinct_values_per_group(advantages).float().mean()),
    }


class AdvantageUpdate:
    """An objective that learns from advantages: the estimator's (scaled by the judge's group confidence),
    then the objective's updates on this process's completions."""

    def __call__(self, ctx: UpdateContext, sampled: SampledBatch, batch: RewardBatch,
                 truncated: torch.Tensor) -> StepOutcome:
        objective, known, penalty_metrics = ctx.parts.objective, None, {}
        if getattr(objective, "kl_in_reward", False):
            # the reward the advantages are formed from is the judge's less the completion's KL to the reference
            known = sampling_and_reference_log_probs(ctx, sampled)
            penalty = ctx.spread.gather(objective.reward_penalty(*known, sampled.completion_mask.float()),
                                        ctx.device).reshape(batch.rewards.shape).to(batch.rewards)
            batch = batch.with_rewards(batch.rewards - penalty)
            penalty_metrics = {"kl_reward/penalty": float(penalty.mean()), "kl_reward/reward": float(
                torch.nanmean(batch.rewards))}
        advantages = confidence_scaled(ctx.parts.estimator.advantages(batch), batch)  # the global batch's
        local = ctx.spread.local(advantages)
        if advantages.dim() == 3:  # one per policy turn (rlkit.train.episodes): each turn's tokens get its own
            flat = token_advantages(local.reshape(-1, local.shape[-1]), sampled.turn_spans,
                                    sampled.completion_mask.shape[1])
            advantages = episode_means(advantages, batch.extras.get("num_turns"))
            local = ctx.spread.local(advantages)
        else:
            flat = local.reshape(-1)
        decided = time.perf_counter()
        loss, metrics, logprob_at = completion_update(ctx, objective, sampled, flat.to(ctx.device), local.shape[1],
                                                      known)
        metrics.update(advantage_metrics(advantages))
        metrics.update(penalty_metrics)
        return StepOutcome(loss, metrics, local, decided, logprob_at)


class DemonstrationUpdate:
    """An objective that learns from demonstrations: no advantages to form (the objective's loss gets zeros);
    the judge's scores of the demonstrations are still logged."""

    def __call__(self, ctx: UpdateContext, sampled: SampledBatch, batch: RewardBatch,
                 truncated: torch.Tensor) -> StepOutcome:
        local = torch.zeros(ctx.spread.local(batch.rewards).shape)
        decided = time.perf_counter()
        loss, metrics, logprob_at = completion_update(ctx, ctx.parts.objective, sampled,
                                                      local.reshape(-1).to(ctx.device), local.shape[1])
        return StepOutcome(loss, metrics, local, decided, logprob_at)


class PairUpdate:
    """An objective that learns from preference pairs: the objective picks them with the constructor over the
    global batch (``truncated``: ``bool [B*G]``, every process's rows), then updates on this process's. The
    snapshot's "advantage" is each completion's net preference count (times chosen minus times rejected)."""

    def __call__(self, ctx: UpdateContext, sampled: SampledBatch, batch: RewardBatch,
                 truncated: torch.Tensor) -> StepOutcome:
        objective = ctx.parts.objective
        targets, pair_metrics = objective.pair_targets(batch, truncated, constructor=ctx.parts.constructor,
                                                       aggregator=ctx.parts.aggregator, step=ctx.step)
        decided = time.perf_counter()
        loss, metrics, logprob_at = pair_update(ctx, objective, sampled,
                                                local_targets(targets, batch.shape[0], ctx.spread))
        pairs = targets.pairs
        net = torch.zeros(batch.shape[:2])
        net.index_put_((pairs.prompt_index, pairs.chosen), torch.ones(len(pairs)), accumulate=True)
        net.index_put_((pairs.prompt_index, pairs.rejected), -torch.ones(len(pairs)), accumulate=True)
        metrics.update(pair_metrics)
        return StepOutcome(loss, metrics, ctx.spread.local(net), decided, logprob_at)


# what each objective signal's step is: the LightningModule looks the objective's signal up here
UPDATES: dict[str, Callable[[], Any]] = {"advantages": AdvantageUpdate, "pairs": PairUpdate,
                                         "demonstrations": DemonstrationUpdate}


def update_for(signal: str) -> Any:
    """The update of an objective whose signal is ``signal``."""
    try:
        return UPDATES[signal]()
    except KeyError:
        raise ValueError(f"an objective's signal must be one of {sorted(UPDATES)}, got {signal!r}") from None
