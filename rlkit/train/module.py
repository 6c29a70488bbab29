"""The LightningModule that moves data along the pipeline: sample → judge → weights → aggregate → advantages or
pairs → the objective's updates (``rlkit.train.updates``). It computes no rewards, advantages or losses itself."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn

from rlkit.core.rng import capture_rng_state, restore_rng_state
from rlkit.core.rubric import Rubric
from rlkit.core.stats import nan_mean_std
from rlkit.core.types import RewardBatch
from rlkit.judging.spend import StepSpend
from rlkit.lm.logprobs import ImportanceCorrection
from rlkit.lm.model_config import model_fingerprint
from rlkit.lm.models import make_adamw
from rlkit.lm.reference import ReferencePolicy
from rlkit.lm.sampling import GenerationRequest, SampledBatch, demonstration_batch
from rlkit.reward.debias import LengthFormatDebias
from rlkit.reward.diagnostics import ConflictWatch, RunningMeans, SignalWatch
from rlkit.reward.pipeline import (
    aggregate_rewards,
    check_judge_output,
)
from rlkit.runs.heldout_answers import answer_rows
from rlkit.runs.history import MetricsHistory
from rlkit.train.callbacks import RolloutSnapshot
from rlkit.train.checkpoint_state import load_run_state, save_run_state
from rlkit.train.distributed import Spread
from rlkit.train.dynamic_sampling import SamplingSettings, informative_rollout, shape_truncated
from rlkit.train.episodes import EpisodeRunner
from rlkit.train.lookahead import RolloutQueue
from rlkit.train.step_judging import Judged, as_rollout, judge_step, reward_batch
from rlkit.train.step_metrics import StepTimes, log_step_metrics, step_metrics
from rlkit.train.updates import advantage_step, demonstration_step, pair_step


@dataclass
class RewardParts:
    """The reward plugins of a run, built from config by the registry."""

    judge: Any
    judge_name: str
    aggregator: Any
    estimator: Any
    scheduler: Any
    aggregator_name: str = ""
    score_normalization: str = "range"
    objective: Any = None      # the objective plugin (its signal: advantages or pairs)
    constructor: Any = None    # preference constructor (objectives whose signal is pairs)
    debias: LengthFormatDebias | None = None  # length/format bias correction of training scores
    heldout: Any = None  # rlkit.reward.pipeline.HeldoutScoring; None: held-out scored like training completions


@dataclass
class TrainingSettings:
    """The loop's settings (what the objective itself needs is its own params)."""

    num_generations: int
    max_completion_length: int
    temperature: float
    lr: float
    weight_decay: float
    warmup_steps: int
    gradient_clip_val: float | None
    gradient_accumulation_steps: int = 1
    length_buckets: int = 1  # policy-gradient passes over rows grouped by completion length
    seed: int = 0  # the run seed; with the step and a prompt's batch position it seeds that prompt's sampling
    rubric_dropout: float = 0.0  # rubric.dropout: with the seed and the step it draws the dimensions a group drops
    # the correction against an engine's log-probs (rlkit.lm.logprobs.ImportanceCorrection); None: off
    is_correction: ImportanceCorrection | None = field(default_factory=ImportanceCorrection)
    sampling: SamplingSettings = field(default_factory=SamplingSettings)  # dynamic sampling, cut completions' reward




class RubricRLModule(L.LightningModule):
    """Manual optimisation; inner ``num_iterations`` updates happen inside ``training_step``."""

    def __init__(self, policy: Any, tokenizer: Any, rubric: Rubric, parts: RewardParts,
                 settings: TrainingSettings, reference: ReferencePolicy | None = None,
                 judged_rubric: Rubric | None = None, generator: Any = None, monitors: Any = None,
                 environment: Any = None) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.policy = policy
        self.reference = reference
        self.tokenizer = tokenizer
        # `rubric` is what the scores follow; the judge is asked with `judged_rubric`, the rubric the user
        # versions. They differ only for judges that derive their own (a ranking judge's single `rank`).
        self.rubric = rubric
        self.judged_rubric = judged_rubric or rubric
        self.parts = parts
        self.settings = settings
        if generator is None:
            raise ValueError("RubricRLModule needs a generator (the run's `generator` plugin)")
        self.generator = generator
        # what a rollout is (rlkit.train.episodes); None: one completion per sample, as `single_turn`
        self.episodes = EpisodeRunner(environment, tokenizer) if environment is not None else None
        self.rollouts = RolloutQueue(generator)  # requested ahead of their step (generator max_lag > 0)
        if self.rollouts.depth and self.episodes is not None and self.episodes.multi_turn:
            from rlkit.core.errors import ConfigError

            raise ConfigError("a multi-turn environment samples each turn after the last one, so its rollouts "
                              "cannot be requested ahead: use generator.params.max_lag=0", "generator.params.max_lag")
        self._generator_stale = True  # not set up on the policy's weights yet
        self.heldout: dict[str, float] = {}
        self._val_raw: list[torch.Tensor] = []
        self._val_rewards: list[torch.Tensor] = []
        self._val_answers: list[tuple[dict[str, Any], str]] = []
        self.heldout_answers: list[dict[str, Any]] = []  # the last evaluation's answers (rlkit.runs.heldout_answers)
        # (epoch, prompts trained on in it): where the data sampler resumes from a checkpoint
        self._data_position = (0, 0)
        self._rng_to_restore: dict[str, Any] | None = None
        self.last_rollout: RolloutSnapshot | None = None  # read by callbacks (sample tables)
        # training records -> the same records with each one's current rubric (rubric.evolve sets it,
        # rlkit.train.rubric_evolution); held-out scoring never goes through it, so it keeps the records' own
        self.record_rubrics: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None
        self._requested_ahead = False
        self.history: MetricsHistory | None = None  # run_dir/metrics.jsonl, set by fit; the run report reads it
        self.conflict_watch = ConflictWatch()
        self._initial_scheduler = copy.deepcopy(parts.scheduler)
        self.diagnostics = RunningMeans()
        self.signal_watch = SignalWatch(rubric.dimension_names)  # what the run trains on less than it seems to
        self.judge_spend = StepSpend(parts.judge)  # judge/calls, judge/tokens_in, ... of each step
        self.last_reasons: list[list[dict[str, str]]] | None = None  # the judge's, of this process's last groups
        self._step_started: float | None = None
        self.monitors = monitors  # rlkit.train.monitoring.MonitorHost, or None (monitors=[])
        if settings.sampling.filters and parts.objective is not None and parts.objective.signal == "demonstrations":
            from rlkit.core.errors import ConfigError

            raise ConfigError(f"{settings.sampling.filter} filters groups by reward spread; an objective that learns "
                              "from demonstrations samples no groups: use sampling.filter=none", "sampling.filter")
        # (epoch, prompts read in it) of the prompts a filtering step draws, extra rounds included: ahead of
        # `_data_position` (what the loader yielded) once a step draws more; None until the first such step
        self._sampling_position: tuple[int, int] | None = None

    # --- pipeline pieces -----------------------------------------------------------------------

    def first_turn(self, records: list[dict[str, Any]], step: int | None = None) -> GenerationRequest:
        """A request a generator can be handed directly (asked ahead): single-turn, shaped by the environment."""
        request = self.generation_request(records, step=step)
        return request if self.episodes is None else self.episodes.first_turn(request)

    def sample(self, request: GenerationRequest) -> SampledBatch:
        """The generator's completions of ``request``, played out as episodes by the run's environment."""
        generate = lambda r: self.generator.generate(self.policy, self.tokenizer, r)  # noqa: E731
        return generate(request) if self.episodes is None else self.episodes.run(generate, request)

    def score(self, records: list[dict[str, Any]], sampled: SampledBatch, step: int,
              scheduler: Any | None = None, *, heldout: bool = False) -> RewardBatch:
        """Judge, check, debias (training only), aggregate. ``heldout`` scores leave the bias correction out."""
        return self.reward_batch(self.judge(records, sampled, heldout=heldout), step, scheduler, heldout=heldout)

    def judge(self, records: list[dict[str, Any]], sampled: SampledBatch, *, heldout: bool = False) -> Judged:
        """The judge's checked scores of every process's groups (:func:`rlkit.train.step_judging.judge_step`)."""
        return judge_step(self, records, sampled, heldout=heldout)

    def reward_batch(self, judged: Judged, step: int, scheduler: Any | None = None, *, heldout: bool = False,
                     debias: Any = None) -> RewardBatch:
        """Debias, weigh and aggregate judged scores (:func:`rlkit.train.step_judging.reward_batch`)."""
        return reward_batch(self, judged, step, scheduler, heldout=heldout, debias=debias)

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

    def on_validation_end(self) -> None:
        if self.trainer.state.fn == "fit" and getattr(self, "_rng_before_validation", None) is not None:
            restore_rng_state(self._rng_before_validation)
            self._rng_before_validation = None

    def on_fit_start(self) -> None:
        self._generator_serves_policy()
        spread = self.spread
        if spread.distributed and self.settings.sampling.filters:
            from rlkit.core.errors import ConfigError

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
        if self._rng_to_restore is not None:
            # Restored here, not at load time: nothing between the checkpointed step and this one draws
            # random numbers in an uninterrupted run, but Lightning's setup on resume might.
            restore_rng_state(self._rng_to_restore)
            self._rng_to_restore = None
        epoch, done = self._data_position
        if self._sampling_position is None:
            self._sampling_position = (epoch, done)
        trained = len(records) * self.spread.world_size  # the sampler's position counts the global batch
        self._data_position = (self.current_epoch, (done if epoch == self.current_epoch else 0) + trained)
        t0 = time.perf_counter()
        self.judge_spend.begin()
        # the previous step's whole iteration, Lightning's loop and data loading included
        iteration = t0 - self._step_started if self._step_started is not None else None
        self._step_started = t0
        signal = self.parts.objective.signal
        step = self.global_step  # before the update advances it
        judged: Judged | None = None
        filtered: dict[str, float] = {}  # the sampling/ metrics of a filtering step
        if signal == "demonstrations":  # the records' own completions, tokenised as a generator would return them
            sampled = demonstration_batch(self.tokenizer, records, self.settings.max_completion_length, self.device)
        elif self.settings.sampling.filters:
            records, sampled, judged, filtered = self.informative_rollout(step, len(records))
        else:
            sampled = self.rollout(records)
        t1 = time.perf_counter()
        batch = self.score(records, sampled, step) if judged is None else self.reward_batch(judged, step)
        spread = self.spread
        # every completion's truncation flag: a pair objective may leave cut completions out, and the metrics count them
        truncated = spread.gather(sampled.truncated.float(), self.device)
        if self.settings.sampling.truncated != "keep":
            batch = batch.with_rewards(self.shaped_rewards(batch.rewards, truncated))
        if signal == "pairs":
            outcome = pair_step(self, sampled, batch, truncated > 0.5)
        elif signal == "demonstrations":
            outcome = demonstration_step(self, sampled, batch)
        else:
            outcome = advantage_step(self, sampled, batch)
        # the judge's reasons, kept only where they are this batch's, one per sampled completion (a rubric with
        # step-scoped dimensions asks the judge again per turn, so its last reasons are a turn's)
        reasons = self.last_reasons
        if (batch.extras.get("step_raw_scores") is not None or reasons is None
                or [len(group) for group in reasons] != [len(texts) for texts in sampled.texts]):
            reasons = None
        self.last_rollout = RolloutSnapshot(step, records, sampled.texts, spread.local(batch.raw_scores),
                                            spread.local(batch.rewards), outcome.advantages, sampled.episodes,
                                            spread.local(steps) if (steps := batch.extras.get("step_raw_scores"))
                                            is not None else None, reasons)
        times = StepTimes(t0, t1, outcome.decided_at, outcome.logprob_at, time.perf_counter(), iteration)
        metrics = step_metrics(self, step, records, sampled, batch, outcome, truncated, filtered, times)
        self.diagnostics.update(metrics)
        for message in self.signal_watch.update(step, metrics):
            rank_zero_warn(message)
        log_step_metrics(self, metrics)
        # progress-bar copies only; the logger already has reward/mean and time/step
        self.log("reward", metrics["reward/mean"], prog_bar=True, logger=False, batch_size=len(records))
        self.log("s/step", metrics["time/step"], prog_bar=True, logger=False, batch_size=len(records))
        return outcome.loss

    def rollout(self, records: list[dict[str, Any]], ahead_from: tuple[int, int] | None = None) -> SampledBatch:
        """This step's completions. With a generator that samples ahead (``max_lag`` k > 0), the rollout requested
        for this step earlier when there is one, and before waiting for it, requests for the next k steps' prompts
        (read from ``ahead_from``, by default where the loader stands), so the engine samples them while this step
        judges and updates (``rlkit.train.lookahead``)."""
        queue, step = self.rollouts, self.global_step
        if not queue.depth:
            self._requested_ahead = False
            return self.sample(self.generation_request(records))
        pending = queue.take(step, records)
        self._requested_ahead = pending is not None
        if pending is None:
            pending = self.generator.submit(self.policy, self.tokenizer, self.first_turn(records))
        datamodule = getattr(self.trainer, "datamodule", None)
        upcoming = getattr(datamodule, "upcoming", None)
        if callable(upcoming):
            queue.top_up(step, upcoming(*(ahead_from or self._data_position), queue.depth),
                         lambda ahead, at: self.generator.submit(
                self.policy, self.tokenizer, self.first_turn(ahead, step=at)))
        return pending.result()

    def informative_rollout(self, step: int, wanted: int) -> tuple[list[dict[str, Any]], SampledBatch, Judged,
                                                                   dict[str, float]]:
        """Dynamic sampling's rollout of this step (:func:`rlkit.train.dynamic_sampling.informative_rollout`)."""
        return informative_rollout(self, step, wanted)

    def shaped_rewards(self, rewards: torch.Tensor, truncated: torch.Tensor) -> torch.Tensor:
        """``sampling.truncated``'s reward for completions cut at the length limit (``truncated``: every row's flag)."""
        s = self.settings.sampling
        return shape_truncated(rewards, truncated.reshape(rewards.shape).to(rewards.device) > 0.5, s.truncated,
                               s.truncated_value)

    def log_step_metrics(self, metrics: dict[str, float]) -> None:
        """Metrics of this step from a callback (the sampler's feedback, rubric evolution), logged as the step's."""
        log_step_metrics(self, metrics)

    def on_train_end(self) -> None:
        self.rollouts.clear()  # requested for steps that will not come

    # --- held-out evaluation -------------------------------------------------------------------

    def on_validation_epoch_start(self) -> None:
        self._val_raw, self._val_rewards, self._val_answers = [], [], []

    def validation_step(self, records: list[dict[str, Any]], batch_idx: int) -> None:
        sampled = self.sample(self.generation_request(records, greedy=True))
        other = self.parts.heldout
        if other is not None:
            rollout = as_rollout(records, sampled, self.tokenizer)
            raw = check_judge_output(other.judge.score(rollout, other.rubric), rollout, other.rubric, other.judge_name)
            batch = aggregate_rewards(raw, other.rubric, copy.deepcopy(other.scheduler), other.aggregator,
                                      normalization=self.parts.score_normalization)
        else:
            # Held-out rewards use the scheduler's step-0 weights from a fresh copy: start and end stay
            # comparable while training weights move, and evaluation never feeds the training scheduler.
            # For the same reason they are the judge's uncorrected scores: the bias correction has no fit
            # at the start and a moving one later.
            batch = self.score(records, sampled, 0, scheduler=copy.deepcopy(self._initial_scheduler), heldout=True)
        self._val_raw.append(batch.raw_scores[:, 0])
        self._val_rewards.append(batch.rewards[:, 0])
        self._val_answers += [(record, texts[0]) for record, texts in zip(records, sampled.texts, strict=True)]

    @property
    def heldout_rubric(self) -> Rubric:
        """The rubric held-out scores follow."""
        return self.parts.heldout.rubric if self.parts.heldout is not None else self.rubric

    def on_validation_epoch_end(self) -> None:
        raw, rewards = torch.cat(self._val_raw), torch.cat(self._val_rewards)
        names = self.heldout_rubric.dimension_names
        dims = {name: float(nan_mean_std(raw[:, i], dim=0)[0]) for i, name in enumerate(names)}
        self.heldout = {"reward": float(nan_mean_std(rewards, dim=0)[0]), **dims}
        self.heldout_answers = answer_rows([r for r, _ in self._val_answers], [t for _, t in self._val_answers],
                                           rewards.tolist(), raw.tolist(), names, self.global_step)
        self.log("heldout/reward", self.heldout["reward"], batch_size=len(rewards))
        for name, value in dims.items():
            self.log(f"heldout/{name}", value, batch_size=len(rewards))
        if self.history is not None and self.trainer.state.fn == "fit":  # heldout_every: mid-run, at its step
            self.history.append(self.global_step, {f"heldout/{k}": v for k, v in self.heldout.items()})

    # --- optimisation and checkpoints ----------------------------------------------------------

    def configure_optimizers(self) -> Any:
        s = self.settings
        params = [p for p in self.policy.parameters() if p.requires_grad]
        opt = make_adamw(params, lr=s.lr, weight_decay=s.weight_decay, precision=str(self.trainer.precision),
                         clips_gradients=bool(s.gradient_clip_val))
        warmup = max(s.warmup_steps, 0)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / (warmup + 1)))
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        save_run_state(self, checkpoint)

    def model_fingerprint(self) -> dict[str, Any]:
        """What `rlkit validate` compares a resumed run's model with (parameter shapes and LoRA rank)."""
        peft_config = getattr(self.policy, "peft_config", None) or {}
        adapter = next(iter(peft_config.values()), None)
        return model_fingerprint(self.policy.config, getattr(adapter, "r", 0) or 0)

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        load_run_state(self, checkpoint)
