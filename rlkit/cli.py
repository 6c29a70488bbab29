"""The ``rlkit`` command: parses the command word and hands the rest, Hydra overrides, to ``rlkit.commands``."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Sequence

from rlkit.commands.common import RELAUNCHED_COMMAND
from rlkit.core.errors import RlkitError, error_lines

USAGE = """rlkit <command> [--debug] [key=value ...]

commands:
  plugins     list every registered plugin by kind, with the distribution that provides it
  config-reference  every config key with its type, default and rule, then every plugin's params (Markdown)
  validate    compose the config and check every part (plugins, params, rubric, data, model path)
  score       score prompt/completion records (data.path=...) with the configured judge
  calibrate   agreement of the configured judge with human labels (calibrate.labels=...), per dimension and step
              window; `rlkit calibrate sample <run dir> n=300`: a stratified set of a run's samples to label
  label       label and rank a labelling file in the terminal: `rlkit label <run dir>/labelling/step_0000050.jsonl`;
              in a browser, for the people who label (several at once): `rlkit label serve <file>`
  compare     a blind side-by-side comparison of two runs' held-out answers, for people, in a browser:
              `rlkit compare RUN` (its end against its start), `rlkit compare RUN_A RUN_B`; `rlkit compare report FILE`
  eval        golden-set evaluation of a checkpoint (eval.checkpoint=..., eval.prompts=...), per dimension
  fit         train the policy with the configured judge, aggregator and estimator (-m for sweeps)
  sft         supervised warm start on the records' demonstrations (rlkit fit objective=sft)
  report      (re)build a run's report: `rlkit report outputs/<date>/<time>` (plots + report.md); several runs:
              their golden-set results side by side, `rlkit report RUN_A RUN_B`
  doctor      triage a finished or interrupted run: `rlkit doctor outputs/<date>/<time>` (reward signal, judge
              health, reference leaks, policy; exit 1 on an error finding)
  train-grm   train a generative reward model on preference pairs or rankings (grm.data.train=...)
  train-rm    train a Bradley-Terry reward model (a scalar head on a causal LM) on preference pairs
              (rm.data.train=...), for judge=reward_model
  readiness   is a ranking reward (GRM) worth it yet: the ranking note's six conditions with their evidence, a
              verdict and the next step (exit 0 ready, 1 calibrate more, 3 baseline first)
  serve       serve the configured judge as an HTTP reward API (serve.port=..., Ctrl-C stops it)
  data        data tools: pairs (rankings -> preference pairs), prepare (PII, de-dup, mix), from-labels (labels
              and rankings -> GRM training data and pairs, split by prompt); `rlkit data` for help
  rubric      rubric versions: `rlkit rubric diff old.yaml new.yaml`, `rlkit rubric hash rubric.yaml`; anchors and
              negative examples missing: `rlkit rubric lint rubric.yaml`;
              per-prompt rubrics from references: `rlkit rubric generate data.path=... judge=llm generate.output=DIR`;
              before training, can it be gamed: `rlkit rubric audit audit.records=FILE [--fail-under 0.7]`;
              a run saturated it: `rlkit rubric tighten RUN_DIR` proposes a harder version, diffed and audited
  model       `rlkit model import FILE.gguf [--out DIR]`: a GGUF checkpoint as a Hugging Face folder (cached);
              `rlkit model path REF`: the local file a pkg:// or parts:// reference names
  export      the trained policy as one GGUF file for llama.cpp / ollama: `rlkit export <run dir> [--type q8_0]`
              (a LoRA adapter merged into its base); `--format hf`: a standalone Hugging Face folder
  new         scaffold a plugin package: `rlkit new plugin NAME --kind judge` (rlkit new for help)

Overrides are Hydra's: judge=rule rubric.path=/abs/rubric.yaml data.path=/abs/records.jsonl
Set --debug or HYDRA_FULL_ERROR=1 to see tracebacks."""



def cmd_rubric_tools(args: Sequence[str]) -> int:
    if list(args[-1:]) == ["--help"] and args[0] != "audit":  # `rubric audit --help` has its own (commands.help)
        from rlkit.commands.inspect import RUBRIC_USAGE

        print(RUBRIC_USAGE)
        return 0
    if args and args[0] == "audit":
        from rlkit.commands.rubric_audit import cmd_rubric_audit

        return cmd_rubric_audit(args[1:])
    if args and args[0] == "generate":
        from rlkit.commands.rubric_generate import cmd_rubric_generate

        return cmd_rubric_generate(args[1:])
    if args and args[0] == "tighten":
        from rlkit.commands.rubric_tighten import cmd_rubric_tighten

        return cmd_rubric_tighten(args[1:])
    from rlkit.commands.inspect import cmd_rubric

    return cmd_rubric(args)


# Each command's function as "module:name", imported only when that command runs: the config layer imports torch
# (1.7 s), which `rlkit --help` and a mistyped command word should not wait for.
COMMANDS = {"plugins": "rlkit.commands.inspect:cmd_plugins", "validate": "rlkit.commands.inspect:cmd_validate",
            "config-reference": "rlkit.commands.inspect:cmd_config_reference",
            "score": "rlkit.commands.judging:cmd_score", "calibrate": "rlkit.commands.judging:cmd_calibrate",
            "fit": "rlkit.commands.training:cmd_fit", "sft": "rlkit.commands.training:cmd_sft",
            "data": "rlkit.commands.data:cmd_data", "serve": "rlkit.commands.judging:cmd_serve",
            "train-grm": "rlkit.commands.training:cmd_train_grm",
            "train-rm": "rlkit.commands.training:cmd_train_rm", "eval": "rlkit.commands.judging:cmd_eval",
            "report": "rlkit.commands.inspect:cmd_report", "label": "rlkit.commands.label:cmd_label",
            "compare": "rlkit.commands.compare:cmd_compare",
            "rubric": "rlkit.cli:cmd_rubric_tools", "model": "rlkit.commands.model:cmd_model",
            "export": "rlkit.commands.export:cmd_export",
            "new": "rlkit.commands.scaffold:main", "doctor": "rlkit.commands.doctor:cmd_doctor",
            "readiness": "rlkit.commands.readiness:cmd_readiness"}


def command_function(name: str):
    """The function that runs command ``name`` (see :data:`COMMANDS`)."""
    import importlib

    module, attribute = COMMANDS[name].split(":")
    return getattr(importlib.import_module(module), attribute)


_SHOWN: set[str] = set()


def show_warning(message: Warning | str, category: type[Warning], filename: str, lineno: int,
                 file: object = None, line: str | None = None) -> None:
    """One line per warning on stderr, as errors are: rlkit's own say ``rlkit: warning:``; a library's keep its
    category and where it was raised, without Python's echo of the source line."""
    text = " ".join(str(message).split())
    ours = any(part in filename for part in ("/rlkit/", "/rlkit_plugins/", "\\rlkit\\", "\\rlkit_plugins\\"))
    if ours and issubclass(category, UserWarning):
        if text not in _SHOWN:  # a sweep checks each job before the first runs: a warning of each, said once
            _SHOWN.add(text)
            print(f"rlkit: warning: {text}", file=sys.stderr)
    else:
        print(f"warning: {category.__name__}: {text} ({os.path.basename(filename)}:{lineno})", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        return _guarded(argv)
    finally:
        if "rlkit.lm.llama_server" in sys.modules:  # only if a command started an engine: no import otherwise
            from rlkit.lm.llama_server import stop_engines

            stop_engines()


def _guarded(argv: Sequence[str] | None) -> int:
    from rlkit.core.interrupt import EXIT_CODE, InterruptGuard, RunInterrupted

    try:
        with InterruptGuard() as guard:  # Ctrl-C anywhere (composing a config, scoring, ...): one line, exit 130
            code = _main(argv)
        if guard.stopped:  # the Ctrl-C's exception was swallowed on the way (a __del__ ignores it): still say it
            raise RunInterrupted(guard.startup_message, guard.exit_code)
        return code
    except (RunInterrupted, KeyboardInterrupt) as exc:
        print(f"rlkit: {exc or 'interrupted'}", file=sys.stderr, flush=True)
        return getattr(exc, "exit_code", EXIT_CODE)
    except BrokenPipeError:
        # `rlkit plugins | head`: the reader has gone; say nothing more (Python's own recipe: stdout to devnull so
        # the interpreter's final flush does not raise again) and exit as a process killed by SIGPIPE would
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="rlkit", usage=USAGE, add_help=False)
    parser.add_argument("command", nargs="?")
    parser.add_argument("--debug", action="store_true")
    parser.add_argument("-h", "--help", action="store_true")
    args, overrides = parser.parse_known_args(list(sys.argv[1:] if argv is None else argv))
    if args.help and args.command is not None:
        from rlkit.commands.help import command_help

        first = overrides[0] if overrides and not overrides[0].startswith("-") else None
        tool = first if args.command == "rubric" or (args.command == "label" and first == "serve") else None
        text = command_help(f"{args.command} {tool}" if tool else args.command)
        if text is not None:
            print(text)
            return 0
        from rlkit.commands.help import SELF_HELPED

        if args.command in SELF_HELPED:
            args.help, overrides = False, [*overrides, "--help"]
    if args.help or args.command is None:
        print(USAGE)
        return 0 if args.help else 2
    command = args.command if args.command in COMMANDS else None
    relaunched = os.environ.get(RELAUNCHED_COMMAND)
    if command is None and relaunched in COMMANDS and os.environ.get("LOCAL_RANK", "0") != "0":
        # another rank of a multi-process run: every argument is an override of the first rank's command
        command, overrides = relaunched, [args.command, *overrides]
    if command is None:
        print(f"rlkit: error: unknown command {args.command!r}; commands: {', '.join(COMMANDS)}",
              file=sys.stderr)
        return 2
    debug = args.debug or os.environ.get("HYDRA_FULL_ERROR") == "1"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")
            warnings.showwarning = show_warning
            _SHOWN.clear()
            return command_function(command)(overrides)
    except RlkitError as exc:
        if debug:
            raise
        print("\n".join(f"rlkit: error: {line}" for line in error_lines(exc)), file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
