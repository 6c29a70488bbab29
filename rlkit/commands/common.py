"""What every command shares: the run's registry (built once per process), the console, validation, Hydra."""

from __future__ import annotations

import functools
import math
import os
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.core.errors import RlkitError, error_lines

if TYPE_CHECKING:
    from rich.console import Console

    from rlkit.config.checks.outcome import CheckedConfig
    from rlkit.config.compose import HydraArgs


@functools.cache
def run_registry() -> Any:
    """The registry of this process's runs: built-ins plus every installed ``rlkit`` entry point, collected once.
    Every command, and every job of a multirun, reads plugins from it; nothing else builds one."""
    from rlkit.core.registry import load_registry

    return load_registry()


def rich_console() -> Console:
    from rich.console import Console  # a table's library: `rlkit --help` and `rlkit plugins` answer without it

    # Outside a terminal rich assumes 80 columns and truncates plugin names; logs can be wider.
    return Console(highlight=False, width=None if sys.stdout.isatty() else 120)


def compose_and_check(overrides: Sequence[str] | HydraArgs, *, need_completions: bool = False,
                      read_data: bool = True) -> CheckedConfig:
    """Compose ``conf/config.yaml`` with ``overrides`` (a command line, or the ``HydraArgs`` a command parsed already)
    and check every part against the run's registry (``rlkit.config.check_config``)."""
    from rlkit.config import check_config, compose_config

    registry = run_registry()
    cfg = compose_config(registry, overrides)
    return check_config(cfg, registry, need_completions=need_completions, read_data=read_data)


def fmt(x: float) -> str:
    return "—" if math.isnan(x) else f"{x:.3f}"


# Set for the processes Lightning starts for the other ranks of a DDP run: they re-run this program with the
# first process's Hydra arguments (no command word), and read the command from here.
RELAUNCHED_COMMAND = "RLKIT_RELAUNCHED_COMMAND"


def run_hydra(command: str, config_name: str, args: HydraArgs, body, declared: Collection[str] = ()) -> int:
    """Run ``body(cfg, run_dir) -> float`` as a Hydra app on ``config_name`` (run dirs, multirun, sweepers); an
    rlkit error inside a job is one line and its exit code. The float is what a sweeper optimises. ``args`` is the
    command line as the command parsed it (once); ``declared``, the keys its composition had to add (``++key=``)."""
    import hydra

    from rlkit.config import register_run_defaults, search_path_override
    from rlkit.config.compose import compose, refuse_shadowed_options, with_declared_keys

    register_run_defaults()  # conf/config.yaml composes the run's defaults from Hydra's ConfigStore
    relaunched = os.environ.get(RELAUNCHED_COMMAND) == command

    @hydra.main(config_path="pkg://rlkit.conf", config_name=config_name, version_base="1.3")
    def task(cfg) -> float:
        from hydra.core.hydra_config import HydraConfig

        from rlkit.core.interrupt import EXIT_CODE, RunInterrupted

        try:
            return body(cfg, Path(HydraConfig.get().runtime.output_dir))
        except RlkitError as exc:
            if os.environ.get("HYDRA_FULL_ERROR") == "1":
                raise
            print("\n".join(f"rlkit: error: {line}" for line in error_lines(exc)), file=sys.stderr)
            sys.exit(exc.exit_code)
        except (RunInterrupted, KeyboardInterrupt) as exc:  # Ctrl-C or SIGTERM: one line, never a traceback
            print(f"rlkit: {exc or 'interrupted'}", file=sys.stderr, flush=True)
            sys.exit(getattr(exc, "exit_code", EXIT_CODE))

    argv = sys.argv
    # Hydra's parser takes its flags (-m, --cfg job, -cd DIR, ...) with their values before the overrides; the search
    # path joins a user's own hydra.searchpath to the plugins' (a relaunched rank has it already).
    refuse_shadowed_options(args)  # -cd stays Hydra's flag: its folder is checked here
    if "--cfg" in args.flags and not relaunched:
        # nothing was validated (--cfg prints, runs nothing), and Hydra answers a config it cannot compose (a YAML
        # of a -cd folder that does not parse) with a traceback: composed here first, a failure is one line
        declared = compose(run_registry(), args, config_name=config_name).declared
    search = [] if relaunched else search_path_override(run_registry(), args.searchpath)
    # argv[0] stays this program: Lightning's DDP launcher starts the other ranks with it and these arguments.
    # keys validation composed as `++key=` (declared by a schema, absent from the YAML) go to Hydra the same way
    sys.argv = [argv[0], *args.flags, *search, *with_declared_keys(args.overrides, declared)]
    previous = os.environ.get(RELAUNCHED_COMMAND)
    os.environ[RELAUNCHED_COMMAND] = command
    try:
        task()
    finally:
        sys.argv = argv
        if previous is None:
            os.environ.pop(RELAUNCHED_COMMAND, None)
    return 0
