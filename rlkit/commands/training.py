"""Commands that train: ``fit`` (the policy), ``train-grm`` (a generative reward model) and ``train-rm`` (a
Bradley-Terry reward model), as Hydra apps."""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.commands.common import RELAUNCHED_COMMAND, run_hydra, run_registry

if TYPE_CHECKING:
    from rlkit.config.compose import HydraArgs


class CheckedConfigs:
    """The configs ``rlkit fit`` validated before Hydra started, handed to the jobs Hydra runs in this process: a job
    takes the one whose config is its own, plugins built, and builds nothing again. Pickled for a launcher's other
    process (submitit), it travels empty: a job there validates its own config."""

    def __init__(self, validated: Sequence[Any] = ()) -> None:
        self._validated = list(validated)

    def __getstate__(self) -> dict[str, Any]:
        return {"_validated": []}  # live plugins stay in the process that built them

    def take(self, cfg: Any) -> Any:
        """The validated config composed as ``cfg`` (the job's own, whose ``hydra`` node Hydra has taken out), now
        carrying ``cfg``; None when there is none. Each is taken once: two jobs never share a plugin."""
        from dataclasses import replace

        for index, validated in enumerate(self._validated):
            if _without_hydra(validated.cfg) == _without_hydra(cfg):
                return replace(self._validated.pop(index), cfg=cfg)
        return None


def _without_hydra(cfg: Any) -> Any:
    from omegaconf import OmegaConf

    container = OmegaConf.to_container(cfg, resolve=False)
    container.pop("hydra", None)
    return container


def _fit_job(cfg, run_dir: Path, checked: CheckedConfigs | None = None) -> float:
    import time

    from rlkit.config import check_config
    from rlkit.runs.sweep import write_job_summary
    from rlkit.train.fit import fit, print_summary

    started = time.monotonic()

    # The config `rlkit fit` validated before Hydra started, plugins built once; a relaunched rank, a job of a
    # launcher's other process (which carries no registry and builds one where it runs) or a job nobody checked
    # validates its own.
    validated = (checked.take(cfg) if checked is not None else None) or check_config(cfg, run_registry())
    summary = fit(validated, run_dir, started)
    if summary["global_zero"]:
        print_summary(summary, validated)
        write_job_summary(run_dir, summary, time.monotonic() - started)  # a sweep's summary table reads it
    if summary.get("interrupted"):
        from rlkit.core.interrupt import RunInterrupted

        raise RunInterrupted(interrupted_line(summary["interrupted"], run_dir), summary["interrupted"]["exit_code"])
    return summary["end"]["reward"]


def interrupted_line(interrupted: dict, run_dir: Path) -> str:
    """Where a Ctrl-C'd run stopped and the command that resumes it (this job's overrides, ``ckpt_path`` added)."""
    import shlex

    from hydra.core.hydra_config import HydraConfig

    step, checkpoint = interrupted["step"], interrupted["checkpoint"]
    # the signal's exit status (rlkit.core.interrupt: 128 + the signal): a preemption, said as such; SLURM's notices
    # (SIGUSR1, submitit's SIGUSR2) also requeue the job (rlkit.train.interrupt.requeue_at_exit)
    what = {143: "terminated (SIGTERM)", 138: "preempted (SLURM's SIGUSR1; the job is requeued)",
            140: "preempted (SLURM's SIGUSR2; the job is requeued)"}.get(interrupted.get("exit_code"), "interrupted")
    if checkpoint is None:  # after the last step: only the report was left out
        return (f"{what} after training ({step} steps): policy in {run_dir / 'policy'} and summary written, the "
                f"run report skipped (rlkit report {run_dir} builds it)")
    try:
        overrides = [o for o in HydraConfig.get().overrides.task if not o.lstrip("+").startswith("ckpt_path=")]
    except ValueError:  # not inside a Hydra job
        overrides = []
    command = shlex.join(["rlkit", "fit", *overrides, f"ckpt_path={checkpoint}"])
    return (f"{what} after step {step}; run folder {run_dir}, trained policy in {run_dir / 'policy'}; "
            f"resume with: {command}")


def cmd_fit(overrides: Sequence[str]) -> int:
    from rlkit.config import check_config
    from rlkit.config.compose import PRIMARY_CONFIG, compose, parse_hydra_args

    relaunched = os.environ.get(RELAUNCHED_COMMAND) == "fit"
    # The command line is parsed once, here: a flag Hydra does not know is one line before anything starts.
    args = parse_hydra_args(overrides)
    checked_here = not relaunched and not args.shows_only  # another rank's was checked; --cfg and --info train nothing
    checked: list[Any] = []
    declared: frozenset[str] = frozenset()
    if checked_here and args.multirun:
        checked, declared = validate_sweep(args)  # every job's config, before the first one trains
    elif checked_here:
        # Fail with one line before Hydra sets up a run directory or anything heavy is built (about a second).
        registry = run_registry()
        composed = compose(registry, args)
        validated, declared = check_config(composed.cfg, registry), composed.declared
        if validated.run.audit.require:  # fit() checks again: a sweep's jobs and programmatic calls come there
            from rlkit.evaluation.audit_report import judge_config, require_passed_audit

            require_passed_audit(validated.rubric, judge_config(validated.cfg))  # fit() says which it accepted
        checked = [validated]
    job = functools.partial(_fit_job, checked=CheckedConfigs(checked))
    return run_hydra("fit", PRIMARY_CONFIG, args, job, declared)


def sweep_jobs(overrides: Sequence[str] | HydraArgs) -> list[list[str]]:
    """The command line of each job a basic-sweeper multirun runs: the cartesian product of the sweeps
    (``a=1,2 b=x,y`` is four jobs), in Hydra's order, after the flags (``-m`` left out) and the user's search path."""
    from rlkit.config.compose import HydraArgs, parse_hydra_args

    args = overrides if isinstance(overrides, HydraArgs) else parse_hydra_args(overrides)
    flags = [f for f in args.flags if f not in ("--multirun", "-m")]
    search = [f"hydra.searchpath=[{','.join(repr(p) for p in args.searchpath)}]"] if args.searchpath else []
    return [[*flags, *search, *job] for job in _job_overrides(args)]


def _job_overrides(args: HydraArgs) -> list[list[str]]:
    """Each job's overrides: the product of the sweeps. A sweep it cannot list (an ``interval`` for an optimising
    sweeper) keeps its first form, so the rest is still checked."""
    import itertools

    from hydra.core.override_parser.overrides_parser import OverridesParser

    from rlkit.core.errors import ConfigError

    try:
        parsed = OverridesParser.create().parse_overrides(args.overrides)
    except Exception as exc:  # Hydra's OverrideParseException: its own first line
        raise ConfigError(str(exc).splitlines()[0], "command line") from None
    choices = []
    for override in parsed:
        if override.is_sweep_override():
            key = override.get_key_element()
            try:
                choices.append([f"{key}={value}" for value in override.sweep_string_iterator()])
            except Exception:
                choices.append([override.input_line])
        else:
            choices.append([override.input_line])
    return [list(job) for job in itertools.product(*choices)]


def validate_sweep(overrides: Sequence[str] | HydraArgs) -> tuple[list[Any], frozenset[str]]:
    """Compose and validate every job of a sweep before the first one runs; the first bad job is told, one line per
    mistake naming the job and its own overrides (a value of the sweep, a group option), exit 2. Returns each job's
    validated config and the keys their composition added (``++key=``), for Hydra's own composition of the jobs."""
    from dataclasses import replace

    from rlkit.config import check_config
    from rlkit.config.compose import HydraArgs, compose, parse_hydra_args
    from rlkit.core.errors import ConfigError, ConfigErrors, RlkitError, error_lines

    registry = run_registry()
    args = overrides if isinstance(overrides, HydraArgs) else parse_hydra_args(overrides)
    jobs = _job_overrides(args)
    base = set.intersection(*(set(job) for job in jobs)) if len(jobs) > 1 else set()
    checked, declared = [], set()
    for number, job in enumerate(jobs):
        try:
            # the command line was parsed once: a job is its flags and search path with its own overrides
            composed = compose(registry, replace(args, overrides=job, multirun=False))
            checked.append(check_config(composed.cfg, registry))
        except RlkitError as exc:
            own = " ".join(o for o in job if o not in base) or " ".join(job)
            told = [ConfigError(f"job {number} of {len(jobs)} ({own}): {line}") for line in error_lines(exc)]
            raise (told[0] if len(told) == 1 else ConfigErrors(told)) from None
        declared |= composed.declared
    return checked, frozenset(declared)


def cmd_sft(overrides: Sequence[str]) -> int:
    """``rlkit sft``: ``rlkit fit objective=sft``, supervised fine-tuning on the records' demonstrations, with the
    same checkpoints, resume, LoRA, loggers and held-out table; its ``policy/`` folder is a warm start for
    ``rlkit fit model.name_or_path=<run dir>/policy``."""
    return cmd_fit(["objective=sft", *overrides])


def _train_grm_job(cfg, run_dir: Path) -> float:
    from rlkit.grm.training import print_grm_summary, train_grm

    summary = train_grm(cfg, run_dir, run_registry())
    print_grm_summary(summary)
    return summary["end"]["accuracy"]


def cmd_train_grm(overrides: Sequence[str]) -> int:
    from rlkit.grm.training import check_grm_config

    return _train_preference_model("train-grm", "train_grm", check_grm_config, _train_grm_job, overrides)


def _train_rm_job(cfg, run_dir: Path) -> float:
    from rlkit.grm.rm_training import print_rm_summary, train_rm

    summary = train_rm(cfg, run_dir, run_registry())
    print_rm_summary(summary)
    return summary["end"]["accuracy"]


def cmd_train_rm(overrides: Sequence[str]) -> int:
    """``rlkit train-rm``: a Bradley-Terry reward model (conf/train_rm.yaml), for ``judge=reward_model``."""
    from rlkit.grm.rm_training import check_rm_config

    return _train_preference_model("train-rm", "train_rm", check_rm_config, _train_rm_job, overrides)


def _train_preference_model(command: str, config_name: str, check: Any, job: Any, overrides: Sequence[str]) -> int:
    from rlkit.config.compose import compose, parse_hydra_args

    args = parse_hydra_args(overrides)  # once, for the check here and for Hydra's job
    declared: frozenset[str] = frozenset()
    if not args.multirun and not args.shows_only:
        # Fail with one line before Hydra sets up a run directory or anything heavy is built (about a second).
        registry = run_registry()
        composed = compose(registry, args, config_name=config_name)
        check(composed.cfg, registry)
        declared = composed.declared
    return run_hydra(command, config_name, args, job, declared)
