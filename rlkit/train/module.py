"""The LightningModule that moves data along the pipeline: sample → reward → update → log. Its collaborators own
what they read and never take the module back: the reward pipeline (``rlkit.train.step_rewards``) turns a step's
rollouts into a ``RewardBatch``, the objective signal's update (``rlkit.train.updates``) trains on it through an
optimiser port, the step's metrics come from ``rlkit.train.step_metrics``, and where the run stands in its data is a
``RunPosition`` that ``rlkit.train.checkpoint_state`` saves and loads. It computes no rewards, advantages or losses
itself."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn

from rlkit.core.errors import ConfigError
from rlkit.core.rng import capture_rng_state, restore_rng_state
from rlkit.core.rubric import Rubric
from rlkit.core.stats import nan_mean_std
from rlkit.core.types import RewardBatch
from rlkit.judging.spend import StepSpend
from rlkit.lm.adapters import frozen_weights
from rlkit.lm.model_config import model_fingerprint
from rlkit.lm.models import make_adamw
from rlkit.lm.reference import ReferencePolicy
from rlkit.lm.sampling import GenerationRequest, SampledBatch, demonstration_batch
from rlkit.reward.diagnostics import RunningMeans, SignalWatch
from rlkit.runs.heldout_answers import answer_rows, append_heldout_samples
from rlkit.runs.history import MetricsHistory
from rlkit.train.callbacks import RolloutSnapshot
from rlkit.train.checkpoint_state import CheckpointedParts, load_run_state, save_run_state
from rlkit.train.distributed import Spread
from rlkit.train.dynamic_sampling import informative_rollout
from rlkit.train.episodes import EpisodeRunner
from rlkit.train.lookahead import RolloutQueue
from rlkit.train.monitoring import MonitorSources
from rlkit.train.run_position import RunPosition
from rlkit.train.settings import RewardParts, TrainingSettings
from rlkit.train.step_metrics import StepMetrics, StepTimes, log_step_metrics
from rlkit.train.step_rewards import Judged, RewardPipeline
from rlkit.train.updates import NonFiniteWatch, OptimizerPort, UpdateContext, update_for

__all__ = ["RewardParts", "RubricRLModule", "TrainingSettings"]


def step_snapshot(step: int, records: list[dict[str, Any]], sampled: SampledBatch, batch: RewardBatch,
                  advantages: torch.Tensor, reasons: list[list[dict[str, str]]] | None) -> RolloutSnapshot:
    """What the callbacks write of a step: this process's rows. The judge's reasons are kept only where they are
    this batch's, one per sampled completion (a rubric with step-scoped dimensions asks the judge again per turn, so
    its last reasons are a turn's)."""
    spread = Spread.current()
    steps = batch.extras.get("step_raw_scores")
    if steps is not None or reasons is None or [len(group) for group in reasons] != [len(t) for t in sampled.texts]:
        reasons = None
    return RolloutSnapshot(step, records, sampled.texts, spread.local(batch.raw_scores), spread.local(batch.rewards),
                           advantages, sampled.episodes, spread.local(steps) if steps is not None else None, reasons,
                           rubric_version=batch.extras.get("rubric_version"))


class RubricRLModule(L.LightningModule):
    """Manual optimisation; inner ``num_iterations`` updates happen inside ``training_step``."""

    def __init__(self, policy: Any, tokenizer: Any, rubric: Rubric, parts: RewardParts,
                 settings: TrainingSettings, reference: ReferencePolicy | None = None,
                 scored_rubric: Rubric | None = None, generator: Any = None, monitors: Any = None,
                 environment: Any = None) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.policy = policy
        self.reference = reference
        self.tokenizer = tokenizer
        self.parts = parts
        self.settings = settings
        if generator is None:
            raise ValueError("RubricRLModule needs a generator (the run's `generator` plugin)")
        self.generator = generator
        # what a rollout is (rlkit.train.episodes); None: one completion per sample, as `single_turn`
        self.episodes = EpisodeRunner(environment, tokenizer) if environment is not None else None
        self.rollouts = RolloutQueue(generator)  # requested ahead of their step (generator max_lag > 0)
        if self.rollouts.depth and self.episodes is not None and self.episodes.multi_turn:
            raise ConfigError("a multi-turn environment samples each turn after the last one, so its rollouts "
                              "cannot be requested ahead: use generator.params.max_lag=0", "generator.params.max_lag")
        if settings.sampling.filters and parts.objective is not None and parts.objective.signal == "demonstrations":
            raise ConfigError(f"{settings.sampling.filter} filters groups by reward spread; an objective that learns "
                              "from demonstrations samples no groups: use sampling.filter=none", "sampling.filter")
        turn_limit = int(self.episodes.environment.max_turns) if self.episodes is not None else None
        # the judge is asked with `rubric`, the user's; its scores follow `scored_rubric` (default: the same), which
        # differs for a judge that derives its own (rlkit.train.step_rewards.RewardPipeline)
        self.rewards = RewardPipeline(parts, settings, rubric, scored_rubric, tokenizer, turn_limit)
        self.update = update_for(parts.objective.signal) if parts.objective is not None else None
        self.position = RunPosition()
        self.nonfinite = NonFiniteWatch(settings.max_nonfinite)
        self.monitors = monitors  # rlkit.train.monitoring.MonitorHost, or None (monitors=[])
        self.judge_spend = StepSpend(parts.judge)  # judge/calls, judge/tokens_in, ... of each step
        self.step_metrics = StepMetrics(self.rewards, monitors, self.judge_spend, generator)
        self.diagnostics = RunningMeans()
        # what the run trains on less than it seems to; names the judge when it scores every completion alike
        self.signal_watch = SignalWatch(self.rewards.scored_rubric.dimension_names, judge=parts.judge_name)
        self.history: MetricsHistory | None = None  # run_dir/metrics.jsonl, set by fit; the run report reads it
        self.last_rollout: RolloutSnapshot | None = None  # read by callbacks (sample tables)
        self.heldout_means: dict[str, float] = {}  # the last held-out evaluation's: reward and each dimension
        self.heldout_start: dict[str, float] = {}  # the first one's, before any step: checkpoints carry it
        self.heldout_answers: list[dict[str, Any]] = []  # the last evaluation's answers (rlkit.runs.heldout_answers)
        self._val_raw: list[torch.Tensor] = []
        self._val_rewards: list[torch.Tensor] = []
        self._val_answers: list[tuple[dict[str, Any], str]] = []
        self._generator_stale = True  # not set up on the policy's weights yet
        self.requested_ahead = False
        self._step_started: float | None = None

    @property
    def scored_rubric(self) -> Rubric:
        """The rubric the scores follow."""
        return self.rewards.scored_rubric

    # --- pipeline pieces -----------------------------------------------------------------------

    def first_turn(self, records: list[dict[str, Any]], step: int | None = None) -> GenerationRequest:
        """A request a generator can be handed directly (asked ahead): single-turn, shaped by the environment."""
        request = self.generation_request(records, step=step)
        return request if self.episodes is None else self.episodes.first_turn(request)

    def sample(self, request: GenerationRequest) -> SampledBatch:
        """The generator's completions of ``request``, played out as episodes by the run's environment."""
        generate = lambda r: self.generator.generate(self.policy, self.tokenizer, r)  # noqa: E731
        return generate(request) if self.episodes is None else self.episodes.run(generate, request)

    @property
    def spread(self) -> Spread:
        """This process's place in a multi-process run (rank 0 of 1 otherwise)."""
        return Spread.current()

    def generation_request(self, records: list[dict[str, Any]], *, greedy: bool = False,
                           step: int | None = None, first_row: int = 0) -> GenerationRequest:
        """The request of ``step`` (default: this one); each record's seed follows from the run seed, the step and
        the record's position in the global batch (after ``first_row`` prompts the step drew before: dynamic
        sampling's extra rounds), never from the process that holds it or when it is asked."""
        s, spread = self.settings, self.spread
        offset = first_row * spread.world_size + spread.rank * len(records)
        step = self.global_step if step is None else step
        seeds = [((s.seed * 1_000_003 + step) * 1_000_033 + offset + i) & 0xFFFFFFFF
                 for i in range(len(records))]
        return GenerationRequest(records, 1 if greedy else s.num_generations, s.max_completion_length,
                                 s.temperature, greedy, seeds)

    def _generator_serves_policy(self) -> None:
        """Set the generator up on the policy's current weights, once, and again after a checkpoint replaced them:
        an engine must serve the policy before held-out evaluation samples from it (``rlkit fit`` evaluates the
        start before training starts) and before training does."""
        if self._generator_stale:
            self.generator.setup(self.policy, self.tokenizer)
            self._generator_stale = False

    def on_validation_start(self) -> None:
        self._generator_serves_policy()

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        # A held-out evaluation mid-run (heldout_every) draws random numbers (its data loader seeds itself from
        # torch's generator): put them back after it, so training goes on exactly as without the evaluation.
        # (an int only with heldout_every: Lightning reads no interval as 1.0, an end-of-epoch check rlkit never runs)
        due = isinstance(self.trainer.val_check_interval, int)
        self._rng_before_validation = capture_rng_state() if due else None
        if self.nonfinite.exhausted:
            # after ModelCheckpoint's own save at this point of the loop: last.ckpt holds this step, which fit's
            # error line names as the place to resume from
            checkpoints = getattr(self.trainer.checkpoint_callback, "dirpath", None)
            if checkpoints:
                self.trainer.save_checkpoint(str(Path(checkpoints) / "last.ckpt"), weights_only=False)
            raise self.nonfinite.error(self.global_step)

    def on_validation_end(self) -> None:
        if self.trainer.state.fn == "fit" and getattr(self, "_rng_before_validation", None) is not None:
            restore_rng_state(self._rng_before_validation)
            self._rng_before_validation = None

    def on_fit_start(self) -> None:
        self._generator_serves_policy()
        spread = self.spread
        if spread.distributed and self.settings.sampling.filters:
            raise ConfigError(f"{self.settings.sampling.filter} runs on one process for now: its extra rounds would "
                              "leave processes with different numbers of groups", "sampling.filter")
        if spread.distributed:
            # The same seed on every process would draw the same sampling noise for different prompts.
            torch.manual_seed(self.settings.seed + 7919 * spread.rank)

    def on_train_start(self) -> None:
        # from_pretrained returns the policy in eval mode and Lightning (>= 2.2) keeps modules in the mode it
        # finds them, so without this the policy trained in eval mode: gradient checkpointing (active only in
        # training mode) silently did nothing and the model's dropout was off, while under LoRA the peft
        # wrapper's own train mode turned both on after the first generate. The reference stays in eval.
        self.policy.train()

    def training_step(self, records: list[dict[str, Any]], batch_idx: int) -> torch.Tensor:
        step, spread = self.global_step, self.spread  # the step before the update advances it
        self.position.begin_step(self.current_epoch, len(records) * spread.world_size)
        self.judge_spend.begin()
        t0 = time.perf_counter()
        # the previous step's whole iteration, Lightning's loop and data loading included
        iteration = t0 - self._step_started if self._step_started is not None else None
        self._step_started = t0
        records, sampled, judged, filtered = self.rollout_of_step(records, step)
        t1 = time.perf_counter()
        # every completion's truncation flag: a pair objective may leave cut completions out, and the metrics count them
        truncated = spread.gather(sampled.truncated.float(), self.device)
        if judged is None:
            judged = self.rewards.judge(records, sampled, step, self.device)
        batch = self.rewards.batch(judged, step, truncated=truncated)
        outcome = self.update(self.update_context(step), sampled, batch, truncated > 0.5)
        self.last_rollout = step_snapshot(step, records, sampled, batch, outcome.advantages, judged.reasons)
        times = StepTimes(t0, t1, outcome.decided_at, outcome.logprob_at, time.perf_counter(), iteration)
        metrics = self.step_metrics.collect(
            step, records, sampled, batch, outcome, truncated, filtered, times, device=self.device,
            lr=self.lr_schedulers().get_last_lr()[0], sources=self.monitor_sources(),
            requested_ahead=self.requested_ahead if self.rollouts.depth else None, judge_metrics=judged.metrics)
        self.diagnostics.update(metrics)
        messages = self.signal_watch.update(step, metrics)
        for message in [*messages, *filter(None, [self.nonfinite.update(step, metrics)])]:
            rank_zero_warn(message)
        self.log_step_metrics(metrics)
        # progress-bar copies only; the logger already has reward/mean and time/step
        self.log("reward", metrics["reward/mean"], prog_bar=True, logger=False, batch_size=len(records))
        self.log("s/step", metrics["time/step"], prog_bar=True, logger=False, batch_size=len(records))
        return outcome.loss

    def rollout_of_step(self, records: list[dict[str, Any]], step: int,
                        ) -> tuple[list[dict[str, Any]], SampledBatch, Judged | None, dict[str, float]]:
        """This step's records and completions: the records' own (an objective that learns from demonstrations),
        dynamic sampling's informative groups (judged already, with its ``sampling/`` metrics), or a rollout."""
        if self.parts.objective.signal == "demonstrations":  # tokenised as a generator would return them
            sampled = demonstration_batch(self.tokenizer, records, self.settings.max_completion_length, self.device)
            return records, sampled, None, {}
        if self.settings.sampling.filters:
            return self.informative_rollout(step, len(records))
        return records, self.rollout(records), None, {}

    def update_context(self, step: int) -> UpdateContext:
        """What this step's update reads: the policy and what moves with it, and the optimiser port."""
        port = OptimizerPort(self.optimizers(), self.lr_schedulers(), self.manual_backward,
                             lambda opt, value: self.clip_gradients(opt, gradient_clip_val=value,
                                                                    gradient_clip_algorithm="norm"))
        return UpdateContext(self.policy, self.reference, self.generator, self.settings, self.parts, port,
                             self.device, step, self.spread)

    def monitor_sources(self) -> MonitorSources | None:
        """What the monitors' view of a step calls back into (None without monitors)."""
        if self.monitors is None:
            return None
        return MonitorSources(self.rewards, self.sample, self.policy, self.reference, self.tokenizer, self.settings,
                              self.device)

    def rollout(self, records: list[dict[str, Any]], ahead_from: tuple[int, int] | None = None) -> SampledBatch:
        """This step's completions. With a generator that samples ahead (``max_lag`` k > 0), the rollout requested
        for this step earlier when there is one, and before waiting for it, requests for the next k steps' prompts
        (read from ``ahead_from``, by default where the loader stands), so the engine samples them while this step
        judges and updates (``rlkit.train.lookahead``)."""
        queue, step = self.rollouts, self.global_step
        if not queue.depth:
            self.requested_ahead = False
            return self.sample(self.generation_request(records))
        pending = queue.take(step, records)
        self.requested_ahead = pending is not None
        if pending is None:
            pending = self.generator.submit(self.policy, self.tokenizer, self.first_turn(records))
        datamodule = getattr(self.trainer, "datamodule", None)
        upcoming = getattr(datamodule, "upcoming", None)
        if callable(upcoming):
            queue.top_up(step, upcoming(*(ahead_from or self.position.data), queue.depth),
                         lambda ahead, at: self.generator.submit(
                self.policy, self.tokenizer, self.first_turn(ahead, step=at)))
        return pending.result()

    def informative_rollout(self, step: int, wanted: int) -> tuple[list[dict[str, Any]], SampledBatch, Judged,
                                                                   dict[str, float]]:
        """Dynamic sampling's rollout of this step (:func:`rlkit.train.dynamic_sampling.informative_rollout`)."""
        tokenizer = self.tokenizer
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        return informative_rollout(
            step, wanted, data=getattr(self.trainer, "datamodule", None), position=self.position,
            rewards=self.rewards, rollout=lambda records, at: self.rollout(records, ahead_from=at),
            sample_more=lambda records, drawn: self.sample(self.generation_request(records, step=step,
                                                                                   first_row=drawn)),
            pad_id=pad_id, device=self.device)

    def log_step_metrics(self, metrics: dict[str, float]) -> None:
        """Metrics of this step (from the step itself or a callback: the sampler's feedback, rubric evolution),
        logged as the step's."""
        log_step_metrics(self.trainer, self.history, metrics, self.current_epoch)

    def on_train_end(self) -> None:
        self.rollouts.clear()  # requested for steps that will not come

    # --- held-out evaluation -------------------------------------------------------------------

    def on_validation_epoch_start(self) -> None:
        self._val_raw, self._val_rewards, self._val_answers = [], [], []

    def validation_step(self, records: list[dict[str, Any]], batch_idx: int) -> None:
        sampled = self.sample(self.generation_request(records, greedy=True))
        batch = self.rewards.heldout_batch(records, sampled)
        self._val_raw.append(batch.raw_scores[:, 0])
        self._val_rewards.append(batch.rewards[:, 0])
        self._val_answers += [(record, texts[0]) for record, texts in zip(records, sampled.texts, strict=True)]

    def on_validation_epoch_end(self) -> None:
        raw, rewards = torch.cat(self._val_raw), torch.cat(self._val_rewards)
        names = self.rewards.heldout_scored_rubric.dimension_names
        dims = {name: float(nan_mean_std(raw[:, i], dim=0)[0]) for i, name in enumerate(names)}
        self.heldout_means = {"reward": float(nan_mean_std(rewards, dim=0)[0]), **dims}
        self.heldout_answers = answer_rows([r for r, _ in self._val_answers], [t for _, t in self._val_answers],
                                           rewards.tolist(), raw.tolist(), names, self.global_step)
        self.log("heldout/reward", self.heldout_means["reward"], batch_size=len(rewards))
        for name, value in dims.items():
            self.log(f"heldout/{name}", value, batch_size=len(rewards))
        if self.history is not None and self.trainer.state.fn == "fit":  # heldout_every: mid-run, at its step
            self.history.append(self.global_step, {f"heldout/{k}": v for k, v in self.heldout_means.items()})
        if self.history is not None:  # `rlkit fit`'s writing process: every evaluation's answers, beside the metrics
            append_heldout_samples(self.history.path.parent, self.heldout_answers)

    # --- optimisation and checkpoints ----------------------------------------------------------

    def configure_optimizers(self) -> Any:
        s = self.settings
        params = [p for p in self.policy.parameters() if p.requires_grad]
        opt = make_adamw(params, lr=s.lr, weight_decay=s.weight_decay, precision=str(self.trainer.precision),
                         clips_gradients=bool(s.gradient_clip_val))
        warmup = max(s.warmup_steps, 0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / (warmup + 1)))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def checkpointed_parts(self) -> CheckpointedParts:
        """Every part whose state a checkpoint carries beyond Lightning's own."""
        policy = self.policy
        # under LoRA (a peft model) the frozen base comes from the model file the run names, not the checkpoint
        frozen = (lambda: frozen_weights(policy, prefix="policy.")) if getattr(policy, "peft_config", None) else None
        return CheckpointedParts(self.rewards, self.position, self.model_fingerprint, self.generator, self.rollouts,
                                 self.monitors, self.settings.sampling.filters, frozen, self.heldout_start)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        save_run_state(self.checkpointed_parts(), checkpoint)

    def model_fingerprint(self) -> dict[str, Any]:
        """What `rlkit validate` compares a resumed run's model with (parameter shapes and LoRA rank)."""
        peft_config = getattr(self.policy, "peft_config", None) or {}
        adapter = next(iter(peft_config.values()), None)
        return model_fingerprint(self.policy.config, getattr(adapter, "r", 0) or 0)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        datamodule = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        load_run_state(self.checkpointed_parts(), checkpoint, lambda: self.device, datamodule)
        self._generator_stale = True  # the checkpoint's weights replace the ones the generator was set up on
