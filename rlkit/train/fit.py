"""``rlkit fit``: build every part from the validated config and run the Lightning loop."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.utilities.exceptions import SIGTERMException

from rlkit.config import CheckedConfig
from rlkit.core.atomic import atomic_directory, storage_error
from rlkit.core.errors import ConfigError, RlkitError
from rlkit.judging.spend import judge_spend, spend_line
from rlkit.lm.logprobs import ImportanceCorrection
from rlkit.reward.debias import LengthFormatDebias
from rlkit.runs.heldout_answers import carry_heldout_samples
from rlkit.runs.history import METRICS_FILE, MetricsHistory
from rlkit.runs.lightning import StreamingCheckpointIO, quiet_lightning
from rlkit.runs.loggers import finish_logger, make_logger
from rlkit.train.callbacks import SampleLogger
from rlkit.train.checkpoint_state import saved_heldout_start
from rlkit.train.dynamic_sampling import SamplingSettings
from rlkit.train.module import RubricRLModule
from rlkit.train.monitoring import monitor_host, summary_lines
from rlkit.train.settings import RewardParts, TrainingSettings
from rlkit.train.threads import SharedCoresWarning, ThreadChoice, default_torch_threads


def settings_from(validated: CheckedConfig) -> TrainingSettings:
    run, optim = validated.run, validated.run.optim
    return TrainingSettings(
        num_generations=run.num_generations, max_completion_length=run.max_completion_length,
        temperature=run.temperature, lr=optim.lr, weight_decay=optim.weight_decay, warmup_steps=optim.warmup_steps,
        gradient_clip_val=optim.gradient_clip_val, gradient_accumulation_steps=optim.gradient_accumulation_steps,
        length_buckets=optim.length_buckets, seed=run.seed,
        rubric_dropout=validated.rubric_dropout, max_nonfinite=optim.max_nonfinite,
        is_correction=None if run.is_correction is None else ImportanceCorrection(**run.is_correction.model_dump()),
        sampling=SamplingSettings(**run.sampling.model_dump()),
    )


def build_debias(validated: CheckedConfig) -> LengthFormatDebias | None:
    """The length/format bias correction of ``debias``, or None when it is off."""
    d = validated.debias
    if d is None or not d.enabled:
        return None
    return LengthFormatDebias.for_rubric(validated.scored_rubric, d.features, d.dimensions, window=d.window,
                                         min_samples=d.min_samples, ridge=d.ridge)


def check_replicas_agree(policy: Any, device: Any) -> int:
    """The number of processes, after checking that every one holds exactly the same trainable parameters
    (DDP gives each the same averaged gradient; any difference means the processes trained different models)."""
    import torch

    from rlkit.train.distributed import Spread

    spread = Spread.current()
    if not spread.distributed:
        return 1
    with torch.no_grad():
        params = [p.detach().double() for p in policy.parameters() if p.requires_grad]
        fingerprint = torch.stack([torch.stack([p.sum(), p.square().sum()]) for p in params]).reshape(1, -1)
    gathered = spread.gather(fingerprint.to(device), device)
    differs = (gathered != gathered[:1]).any(dim=1)
    if bool(differs.any()):
        raise RuntimeError(f"after training, processes {differs.nonzero().flatten().tolist()} hold parameters that "
                           "differ from process 0's; their gradients were not synchronised")
    return spread.world_size


def build_trainer(validated: CheckedConfig, run_dir: Path,
                  extra_callbacks: Sequence[Any] = ()) -> tuple[L.Trainer, Any]:
    """The Lightning trainer of ``trainer.*`` with rlkit's checkpoints, sample log and logger."""
    from rlkit.evaluation.golden import golden_callbacks
    from rlkit.train.datamodule import SamplerFeedback
    from rlkit.train.rubric_evolution import rubric_evolution_callbacks
    from rlkit.train.rubric_schedule import rubric_schedule_callbacks

    golden = golden_callbacks(validated, run_dir)  # before the logger: a bad golden set leaves no W&B run open
    logger = make_logger(validated.logger_settings, run_dir)
    trainer_kwargs = validated.trainer_kwargs
    # rlkit's sampler splits each global batch between processes itself (PromptDataModule)
    trainer_kwargs.setdefault("use_distributed_sampler", False)
    trainer_kwargs.setdefault("plugins", [StreamingCheckpointIO()])
    keep = validated.run.checkpoint_keep_last
    # Lightning refuses save_top_k > 1 without a monitor; its documented way to keep the N most recent is to rank
    # by "step" (always among its monitor candidates) with mode="max". The new file is written before the oldest
    # is deleted, so a failed write never costs a kept one.
    ranked = {"monitor": "step", "mode": "max", "filename": "step-{step:06d}", "auto_insert_metric_name": False} \
        if keep > 0 else {}
    checkpoints = ModelCheckpoint(dirpath=str(run_dir / "checkpoints"), save_last=True, save_top_k=keep,
                                  every_n_train_steps=validated.run.checkpoint_every, **ranked)
    samples = SampleLogger(validated.run.log_samples.every, validated.run.log_samples.rows, run_dir / "samples.jsonl",
                           validated.scored_rubric)
    try:
        trainer = L.Trainer(default_root_dir=str(run_dir), logger=logger, num_sanity_val_steps=0,
                            callbacks=[checkpoints, samples, SamplerFeedback(), *golden,
                                       *rubric_evolution_callbacks(validated, run_dir),
                                       *rubric_schedule_callbacks(validated, run_dir), *extra_callbacks],
                            check_val_every_n_epoch=None,
                            val_check_interval=validated.run.heldout_every, enable_model_summary=False,
                            **trainer_kwargs)
    except (TypeError, ValueError) as exc:  # Lightning's MisconfigurationException is a ValueError
        finish_logger(logger)
        raise ConfigError(str(exc).split("\n")[0], "trainer (passed to lightning.Trainer)") from None
    return trainer, logger


def build_module(validated: CheckedConfig, heldout_records: Sequence[dict[str, Any]] = (), monitors: Any = None,
                 ) -> RubricRLModule:
    """The policy (LoRA-wrapped if asked; warm-started without the ``heldout_records`` prompts when
    ``model.warm_start.steps`` asks), its reference, the reward parts and the generator, in one module."""
    from rlkit.config.validate import read_chat_format
    from rlkit.lm.conversation import apply_chat_format
    from rlkit.lm.models import apply_lora, enable_gradient_checkpointing, load_policy
    from rlkit.lm.reference import build_reference
    from rlkit.lm.warm_start import starting_policy

    chat_format = read_chat_format(validated.model)
    path = starting_policy(validated.model, validated.data, heldout_records,
                           max_new_tokens=validated.run.max_completion_length, chat_format=chat_format)
    policy, tokenizer = load_policy(path, validated.model.dtype)
    apply_chat_format(tokenizer, *chat_format)
    if validated.model.gradient_checkpointing:
        enable_gradient_checkpointing(policy)
    lora = validated.model.lora
    if lora.enabled:
        policy = apply_lora(policy, lora)
    reference = build_reference(validated.model.reference, policy, uses_lora=lora.enabled,
                                needed=validated.needs_reference,
                                ema_decay=validated.model.ema_decay, generator=validated.plugins.get("generator"))
    parts = RewardParts(judge=validated.plugins["judge"], judge_name=validated.plugin_names["judge"],
                        aggregator=validated.plugins["aggregator"],
                        estimator=validated.plugins["advantage_estimator"],
                        scheduler=validated.plugins["weight_scheduler"],
                        aggregator_name=validated.plugin_names["aggregator"],
                        objective=validated.objective,
                        constructor=validated.plugins.get("preference_constructor"),
                        score_normalization=validated.run.score_normalization,
                        debias=build_debias(validated), heldout_scoring=validated.heldout_scoring())
    return RubricRLModule(policy, tokenizer, validated.rubric, parts, settings_from(validated), reference,
                          scored_rubric=validated.scored_rubric, generator=validated.plugins.get("generator"),
                          environment=validated.plugins.get("environment"), monitors=monitors)


def with_resume_hint(exc: RlkitError, run_dir: Path) -> RlkitError:
    """``exc`` with the run's newest whole checkpoint named, when it wrote one: the line a user resumes from
    (``last.ckpt``, or where the disk refused that one, the newest ``step-*.ckpt`` that ``checkpoint_keep_last``
    kept)."""
    from rlkit.config.checkpoints import read_checkpoint_metadata, whole_checkpoint_beside

    last = run_dir / "checkpoints" / "last.ckpt"
    for candidate in (last, whole_checkpoint_beside(last)):
        if candidate is None or not candidate.is_file():
            continue
        try:
            step = read_checkpoint_metadata(candidate, verify=True).get("global_step")
        except RlkitError:
            continue
        return type(exc)(f"{exc.message}; the run's last checkpoint (step {step}) resumes it: ckpt_path={candidate}",
                         exc.where)
    return exc


def carry_earlier_answers(ckpt_path: str, run_dir: Path) -> None:
    """A resumed run's ``heldout_samples.jsonl`` starts with the earlier run's evaluations up to the checkpoint's
    step, so one file holds the whole run; a file that cannot be carried is said in one line and training goes on."""
    from rlkit.config.checkpoints import read_checkpoint_metadata
    from rlkit.core.package_files import resolve_path

    checkpoint = resolve_path(ckpt_path)
    try:
        step = int(read_checkpoint_metadata(checkpoint).get("global_step") or 0)
        carry_heldout_samples(checkpoint, run_dir, step)
    except RlkitError as exc:
        print(f"rlkit: warning: the earlier run's held-out answers are not carried into this run's: {exc}",
              file=sys.stderr)


def start_of_resumed(checkpoint: str | Path | None) -> dict[str, float] | None:
    """The held-out start means a checkpoint carries (``heldout_start``), or None: not resuming, or a checkpoint
    written before they were saved (its run is evaluated at the start again)."""
    if checkpoint is None:
        return None
    from rlkit.config.checkpoints import read_checkpoint_metadata
    from rlkit.core.package_files import resolve_path

    return saved_heldout_start(read_checkpoint_metadata(resolve_path(str(checkpoint))))


def record_heldout(history: MetricsHistory | None, step: int, means: dict[str, float]) -> None:
    """Held-out means into the metric history as ``heldout/<dimension>``, for the run report's start/end columns."""
    if history is not None and means:
        history.append(step, {f"heldout/{k}": v for k, v in means.items()})


def finish_logger_on(run_dir: Path, logger: Any, failing: bool) -> None:
    """Flush and finish ``logger``; a disk that refuses its files is the one StorageError line (naming the run
    folder), said only where no error is on its way out already (``failing``): the first one is the run's."""
    try:
        finish_logger(logger)
    except Exception as exc:
        full = storage_error(exc, str(run_dir))
        if full is None:
            raise
        if not failing:
            raise full from None


def end_of_run_report(run_dir: Path, logger: Any) -> None:
    """Write ``run_dir/report/`` and log its plots and tables to W&B; a report that cannot be built warns, since
    the trained policy is still worth saving."""
    from rlkit.runs.report import log_run_report, write_report

    try:
        report = write_report(run_dir)
    except RlkitError as exc:
        print(f"rlkit: warning: no run report: {exc}", file=sys.stderr)
        return
    log_run_report(logger, report)


def run_caveats(validated: CheckedConfig, heldout_records: Sequence[dict[str, Any]]) -> dict[str, str]:
    """What makes the start/end table mean less than its title says, said once at start-up and in the title:
    ``no_warm_start`` (the embedded policy trained from random weights), ``heldout_is_training`` (no held-out
    split, so the table evaluates training prompts) and ``judge_calibration`` (``rlkit calibrate`` found the run's
    judge, with this config, poor on some of the rubric's dimensions)."""
    out = {}
    model, data = validated.model, validated.data
    if model.name_or_path is None and model.warm_start.steps == 0 and validated.objective.signal != "demonstrations":
        why = "data.path is set and the warm start learns the synthetic task" if data.path is not None \
            else "model.warm_start.steps=0"
        out["no_warm_start"] = (f"the embedded policy starts from random weights, without a warm start ({why}): "
                                "expect rewards near their floor for many steps")
    if not heldout_records:
        why = "data.heldout_fraction=0" if data.heldout_fraction == 0 else "too few prompts to hold one out"
        out["heldout_is_training"] = (f"no held-out split ({why}): the start/end table scores training prompts, "
                                      "which says nothing of generalisation")
    from rlkit.evaluation.calibration_rounds import calibration_caveat

    # a judge that asks a model (it meters its calls): the rule judge's agreement is its rubric's, said by calibrate
    asks_a_model = callable(getattr(validated.plugins.get("judge"), "spend", None))
    poorly_calibrated = calibration_caveat(validated.rubric, validated.judge_config) if asks_a_model else None
    if poorly_calibrated is not None:
        out["judge_calibration"] = poorly_calibrated
    return out


def set_torch_threads(configured: int | None) -> ThreadChoice:
    """Set torch's intra-op threads to ``torch_threads``, or where it is null to the cores other jobs leave
    (``rlkit.train.threads``; its ``reason`` is the line to say when that is fewer than torch's default)."""
    import torch

    choice = ThreadChoice(configured, None) if configured else default_torch_threads(torch.get_num_threads())
    torch.set_num_threads(choice.threads)
    return choice


def fit(validated: CheckedConfig, run_dir: Path, started: float | None = None) -> dict[str, Any]:
    """Train, evaluate the held-out split before and after, and return the summary. Ctrl-C finishes what was
    trained (``rlkit.core.interrupt``); the summary's ``interrupted`` then says at which step and where to resume.
    ``started``: when this invocation began (``time.monotonic()``; default now), the origin of the wall time its
    checkpoints carry; the summary's ``earlier_wall_time_s`` and ``invocations`` are those a resumed checkpoint held
    (``rlkit.train.run_position.RunClock``)."""
    from rlkit.core.interrupt import InterruptGuard
    from rlkit.train.interrupt import requeue_at_exit

    with InterruptGuard("interrupted during start-up; nothing was trained") as guard:
        summary = _fit(validated, run_dir, guard, started)
    requeue_at_exit(guard)  # SLURM's requeue signal: the job runs again and resumes (requeued_checkpoint)
    return summary


def _fit(validated: CheckedConfig, run_dir: Path, guard: Any, started: float | None) -> dict[str, Any]:
    from rlkit.lm.models import save_policy
    from rlkit.train.datamodule import PromptDataModule

    run = validated.run
    if run.audit.require:  # before anything is built: the rubric version's stored audit must have passed
        from rlkit.evaluation.audit_report import require_passed_audit

        print(f"rlkit: {require_passed_audit(validated.rubric, validated.judge_config)}", file=sys.stderr)
    quiet_lightning()
    threads = set_torch_threads(run.torch_threads)  # said below, once the trainer knows which process speaks
    L.seed_everything(run.seed, workers=True, verbose=False)
    from rlkit.train.interrupt import EndEvaluationStopped, StopOnInterrupt, requeued_checkpoint

    # its own name: ModelCheckpoint also saves last.ckpt when the loop stops, at the epoch's end, and would version
    # its file beside ours (last-v1.ckpt)
    stop = StopOnInterrupt(guard, run_dir / "checkpoints" / "interrupted.ckpt")
    # first: a trainer setting Lightning refuses fails fast
    trainer, logger = build_trainer(validated, run_dir, [stop, SharedCoresWarning(threads.threads)])
    module = None
    try:
        datamodule = PromptDataModule(validated.data, batch_size=run.batch_size, seed=run.seed,
                                      sampler=validated.plugins.get("prompt_sampler"),
                                      sampler_name=validated.plugin_names.get("prompt_sampler", "uniform"))
        datamodule.setup()
        caveats = run_caveats(validated, datamodule.heldout_records)
        if trainer.is_global_zero:
            if threads.reason is not None:
                print(f"rlkit: {threads.reason}", file=sys.stderr)
            for line in caveats.values():
                print(f"rlkit: warning: {line}", file=sys.stderr)
        module = build_module(validated, datamodule.heldout_records, monitors=monitor_host(validated, run_dir))
        if started is not None:  # the invocation's start-up (config check, model load) is part of its wall time
            module.position.clock.started = started
        if trainer.is_global_zero and run.ckpt_path is not None:  # before the start evaluation: the earlier run's first
            carry_earlier_answers(run.ckpt_path, run_dir)
        # set before the start evaluation: each evaluation's answers go beside it (heldout_samples.jsonl); every
        # process answered the whole split, one writes
        module.history = MetricsHistory(run_dir / METRICS_FILE) if trainer.is_global_zero else None
        resume = run.ckpt_path or requeued_checkpoint(run_dir)
        # a resumed run's start is the one its first job measured: answering and judging the held-out split again
        # on the untrained weights takes minutes on a real model (31 of them under a model judge on 2 cores)
        start = start_of_resumed(resume)
        if start is None:
            trainer.validate(module, datamodule=datamodule, verbose=False)
            start = dict(module.heldout_means)
        module.heldout_start = start
        record_heldout(module.history, 0, start)
        guard.phase = "training"
        if resume is not None and run.ckpt_path is None and trainer.is_global_zero:
            print(f"rlkit: SLURM requeued this job: resuming from {resume}", file=sys.stderr)
        try:
            trainer.fit(module, datamodule=datamodule, ckpt_path=resume)
        except RlkitError as exc:  # e.g. an engine that stopped answering: say where the run can go on from
            raise with_resume_hint(exc, run_dir) from None
        except Exception as exc:  # a library's write on a full disk (a logger's file): the same one line
            full = storage_error(exc, str(run_dir))
            if full is None:
                raise
            raise with_resume_hint(full, run_dir) from None
        except SIGTERMException:
            # Lightning's own SIGTERM handler ends the loop after the step, as StopOnInterrupt does after saving
            # its checkpoint there: the run finishes as after a Ctrl-C (rlkit.core.interrupt)
            if not guard.requested:
                raise
            stop.stopped_between_steps(trainer)
        guard.phase = "finishing"
        monitors = module.monitors.summary() if module.monitors is not None else {}  # writes monitors.json
        replicas = check_replicas_agree(module.policy, module.device)
        end = {key: float("nan") for key in start}  # not evaluated: JSON null, "—" in tables
        # after a Ctrl-C the held-out evaluation (minutes on a real model) runs only where asked
        if guard.requested and not run.eval_on_interrupt and trainer.is_global_zero:
            print("rlkit: interrupt: the end-of-run held-out evaluation is skipped (eval_on_interrupt=true runs it)",
                  file=sys.stderr)
        if not guard.requested or run.eval_on_interrupt:
            stop.stops_evaluation = not guard.requested  # a Ctrl-C from now on stops it; one before asked for it
            try:
                trainer.validate(module, datamodule=datamodule, verbose=False)
            except EndEvaluationStopped:  # a Ctrl-C during it: the policy and the summary come next
                pass
            else:
                end = dict(module.heldout_means)
                record_heldout(module.history, trainer.global_step, end)
        if trainer.is_global_zero and not guard.requested:  # after a Ctrl-C: `rlkit report RUN` builds it later
            end_of_run_report(run_dir, logger)
    finally:
        finish_logger_on(run_dir, logger, failing=sys.exc_info()[1] is not None)
        close_judge = getattr(validated.plugins.get("judge"), "close", None)
        if callable(close_judge):  # a model judge's engine stops with the run, not with the process (multirun)
            close_judge()
        if module is not None:
            module.generator.close()
            close = getattr(validated.plugins.get("environment"), "close", None)
            if callable(close):
                close()
    final_dir = run_dir / "policy"
    if trainer.is_global_zero:  # every process holds the same weights; one writes them
        # written beside policy/ and renamed: a full disk leaves no half-saved policy where `rlkit eval` would read it
        try:
            with atomic_directory(final_dir) as folder:
                save_policy(module.policy, module.tokenizer, folder, validated.model.lora.save)
        except RlkitError as exc:  # a full disk: every step is in the last checkpoint, which writes it again
            raise with_resume_hint(exc, run_dir) from None
    trainer.strategy.barrier("rlkit-policy-saved")
    return {"start": start, "end": end, "policy_dir": str(final_dir), "steps": trainer.global_step,
            "diagnostics": module.diagnostics, "global_zero": trainer.is_global_zero, "replicas": replicas,
            "monitors": monitors, "alerts": module.monitors.alerts if module.monitors is not None else [],
            "judge_spend": judge_spend(validated.plugins.get("judge")),
            # the invocations before this one, as the checkpoint it resumed from kept them (0 and 1 when fresh)
            "earlier_wall_time_s": module.position.clock.earlier_s,
            "invocations": module.position.clock.invocations,
            "signal": module.signal_watch.summary_lines(), "caveats": caveats,  # whole run: held-out scoring included
            "interrupted": ({"step": stop.saved_at, "checkpoint": str(stop.checkpoint), "exit_code": guard.exit_code}
                            if stop.saved_at is not None else
                            {"step": trainer.global_step, "checkpoint": None, "exit_code": guard.exit_code}
                            if guard.requested else None)}


def diagnostics_table(diagnostics: Any, dimensions: list[str]) -> Any:
    """Per-dimension training diagnostics: over the run, and over its last steps."""
    from rich.table import Table

    table = Table(title=f"training diagnostics (run mean · last {diagnostics.tail} steps)")
    for column in ("dimension", "mean", "saturated groups", "unscored", "unique/group", "weight"):
        table.add_column(column, justify="left" if column == "dimension" else "right")
    for name in dimensions:
        key = f"rewards/{name}"
        table.add_row(name, *(f"{diagnostics.mean(k):.3f} · {diagnostics.last(k):.3f}" for k in
                              (f"{key}/mean", f"{key}/saturated_groups", f"{key}/unscored",
                               f"{key}/unique_per_group", f"weights/{name}")))
    return table


def print_summary(summary: dict[str, Any], validated: CheckedConfig) -> None:
    import math

    from rich.console import Console
    from rich.table import Table

    rubric = validated.rubric if "heldout_judge" in validated.plugins else validated.scored_rubric
    yardstick = validated.heldout_yardstick()
    caveats = summary.get("caveats") or {}
    on_training_prompts = "heldout_is_training" in caveats
    split = "training prompts (no held-out split)" if on_training_prompts else "held-out"
    notes = [yardstick] if yardstick else []
    if "no_warm_start" in caveats:
        notes.append("the embedded policy without a warm start")
    table = Table(title=f"{split}, rubric {rubric.name} v{rubric.version} ({rubric.short_hash}), "
                        f"{summary['steps']} steps" + "".join(f"\n({note})" for note in notes), min_width=64)
    for column in ("dimension", "start", "end", "change"):
        table.add_column(column, justify="left" if column == "dimension" else "right")
    for key in [*rubric.dimension_names, "reward"]:
        a, b = summary["start"][key], summary["end"][key]
        table.add_row(key, f"{a:.3f}", *((f"{b:.3f}", f"{b - a:+.3f}") if math.isfinite(b) else ("—", "—")))
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    console.print(table)
    diagnostics = summary.get("diagnostics")
    if diagnostics is not None and diagnostics.counts:
        console.print(diagnostics_table(diagnostics, validated.scored_rubric.dimension_names))
        parts = [f"dimension conflict rate {diagnostics.mean('dimension_conflict_rate'):.3f}"]
        if diagnostics.counts.get("advantages/frac_zero_groups"):
            parts += [f"zero-advantage groups {diagnostics.mean('advantages/frac_zero_groups'):.3f}",
                      f"distinct advantages per group {diagnostics.mean('advantages/distinct_per_group'):.2f}"]
        if diagnostics.counts.get("pairs/used"):
            parts += [f"pairs per step {diagnostics.mean('pairs/used'):.1f}",
                      f"dropped by gap {diagnostics.mean('pairs/dropped_by_gap'):.3f}",
                      f"implicit-reward accuracy {diagnostics.mean('rewards/accuracies'):.3f}"]
        console.print(" · ".join(parts) + " (means over the run)")
        agreement = {key.rsplit("/", 1)[1]: diagnostics.mean(key) for key in diagnostics.counts
                     if key.startswith("judge/agreement/")}
        if agreement:  # an ensemble's members: 1 - their mean absolute difference, in units of each range
            console.print("judge members' agreement per dimension: "
                          + ", ".join(f"{name} {value:.2f}" for name, value in agreement.items())
                          + " (means over the run; low: the members score that dimension differently)")
    for line in summary_lines(summary.get("monitors") or {}, summary.get("alerts") or []):
        console.print(line)
    if summary.get("judge_spend") is not None:
        console.print(spend_line(summary["judge_spend"]) + " (whole run, held-out scoring included)")
    if summary.get("replicas", 1) > 1:
        console.print(f"{summary['replicas']} processes hold the same parameters after training")
    for line in summary.get("signal") or []:  # said last, beside the figure it qualifies
        console.print(f"warning: {line}", markup=False)
    which = f" ({validated.plugin_names['heldout_aggregator']} yardstick)" if yardstick else ""
    final = summary["end"]["reward"]
    console.print(f"final {'training-prompt' if on_training_prompts else 'held-out'} mean normalised reward{which}: "
                  + (f"{final:.4f}" if math.isfinite(final) else
                     "not evaluated (interrupted; eval_on_interrupt=true evaluates it, `rlkit eval` the policy)"))
    console.print(f"policy saved to {summary['policy_dir']}")
