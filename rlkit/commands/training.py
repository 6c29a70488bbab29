"""Commands that train: ``fit`` (the policy) and ``train-grm`` (a generative reward model), as Hydra apps."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from rlkit.commands.common import RELAUNCHED_COMMAND, run_hydra, run_registry, validated_config


def _fit_job(cfg, run_dir: Path) -> float:
    import time

    from rlkit.config import validate_config
    from rlkit.runs.sweep import write_job_summary
    from rlkit.train.fit import fit, print_summary

    started = time.monotonic()

    # A launcher that runs jobs in other processes (submitit) pickles this function: it carries no registry
    # and builds one where it runs.
    validated = validate_config(cfg, run_registry())
    summary = fit(validated, run_dir)
    if summary["global_zero"]:
        print_summary(summary, validated)
        write_job_summary(run_dir, summary, time.monotonic() - started)  # a sweep's summary table reads it
    return summary["end"]["reward"]


def cmd_fit(overrides: Sequence[str]) -> int:
    relaunched = os.environ.get(RELAUNCHED_COMMAND) == "fit"
    if not relaunched and not any(o in ("-m", "--multirun") for o in overrides):
        # Fail in milliseconds with one line, before Hydra sets up a run directory.
        validated = validated_config(overrides)
        if validated.run.audit.require:  # fit() checks again: a sweep's jobs and programmatic calls come there
            from rlkit.evaluation.audit_report import judge_config, require_passed_audit

            require_passed_audit(validated.rubric, judge_config(validated.cfg))  # fit() says which it accepted
    return run_hydra("fit", "fit", overrides, _fit_job)


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
    if not any(o in ("-m", "--multirun") for o in overrides):
        from rlkit.config import compose_config
        from rlkit.grm.training import check_grm_config

        # Fail in milliseconds with one line, before Hydra sets up a run directory.
        registry = run_registry()
        check_grm_config(compose_config(registry, list(overrides), config_name="train_grm"), registry)
    return run_hydra("train-grm", "train_grm", overrides, _train_grm_job)


