"""``rlkit data from-labels FILE... [--out DIR]``: labelling files and a ranking judge's scored files as GRM training
data and preference pairs, split by prompt (:mod:`rlkit.evaluation.label_training_data`)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError

USAGE = """rlkit data from-labels FILE... [--out DIR] [--heldout-fraction 0.1] [--seed 0] [--combine majority|mean]
        [--min-agreement 0.5] [--disagreement drop|weight] [--rank-by DIMENSION]

  FILE: labelling files (`rlkit label`, the labelling page, `rlkit calibrate sample`: per-dimension levels and
  group rankings, one labeller or several) and `rlkit score ... score.output=FILE` files of a ranking judge
  (a rank per completion within its record). Writes into DIR (default: <first FILE's name>.grm-data beside it):
    train.jsonl, heldout.jsonl              listwise {prompt, responses: [{text, rank}]}: rlkit train-grm's data
    train.pairs.jsonl, heldout.pairs.jsonl  pairwise {prompt, chosen, rejected}: rlkit data pairs' (TRL's) format
    report.json                             what was read and what was dropped, and why (also printed)
  --combine        several labellers: majority (default; a level most gave, pairs ordered as most order them) or
                   mean (the mean level; the mean place)
  --min-agreement  below this share of labellers agreeing with the consensus an answer is a disagreement (0.5)
  --disagreement   drop (default: nothing in rlkit reads a weight) or weight (kept, its agreement as "weight")
  --rank-by        completion lines are ranked by one dimension's level instead of the mean of all (scaled to 0-1)
  --heldout-fraction, --seed  prompts held out by a seeded hash of the prompt: no prompt on both sides"""

OPTIONS = ("--out", "--heldout-fraction", "--seed", "--combine", "--min-agreement", "--disagreement", "--rank-by")


def _number(value: str, option: str, *, whole: bool = False, low: float = 0.0, below_one: bool = False,
            at_most_one: bool = False) -> Any:
    try:
        x = int(value) if whole else float(value)
    except ValueError:
        x = math.nan
    ok = not math.isnan(x) and x >= low and (not below_one or x < 1) and (not at_most_one or x <= 1)
    if not ok:
        what = "a whole number >= 0" if whole else "a number in [0, 1)" if below_one else "a number in [0, 1]"
        raise ConfigError(f"must be {what}, got {value!r}", f"rlkit data from-labels {option}")
    return x


def _choice(value: str, option: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ConfigError(f"one of {', '.join(choices)}, got {value!r}", f"rlkit data from-labels {option}")
    return value


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        # argparse would print its usage and exit: one rlkit line instead (an option without its value)
        raise ConfigError(f"{message}; usage: {USAGE.splitlines()[0]}", "rlkit data from-labels")


def parse_args(args: Sequence[str]) -> tuple[list[Path], Path, Any] | None:
    """(files, output folder, options); None for ``--help``. A bad argument is a ``ConfigError`` naming it."""
    from rlkit.evaluation.label_training_data import LabelOptions

    parser = _Parser(prog="rlkit data from-labels", usage=USAGE, add_help=False, allow_abbrev=False)
    parser.add_argument("files", nargs="*")
    for option in OPTIONS:
        parser.add_argument(option)
    parser.add_argument("-h", "--help", action="store_true")
    parsed, unknown = parser.parse_known_intermixed_args(list(args))
    if parsed.help:
        return None
    if unknown or not parsed.files:
        problem = f"unexpected {' '.join(unknown)!r}; " if unknown else "give at least one labelling file; "
        raise ConfigError(f"{problem}usage: {USAGE.splitlines()[0]}", "rlkit data from-labels")
    files = [Path(f).expanduser() for f in parsed.files]
    options = LabelOptions(
        combine=_choice(parsed.combine or "majority", "--combine", ("majority", "mean")),  # type: ignore[arg-type]
        min_agreement=_number(parsed.min_agreement or "0.5", "--min-agreement", at_most_one=True),
        disagreement=_choice(parsed.disagreement or "drop", "--disagreement", ("drop", "weight")),  # type: ignore
        rank_by=parsed.rank_by or None,
        heldout_fraction=_number(parsed.heldout_fraction or "0.1", "--heldout-fraction", below_one=True),
        seed=_number(parsed.seed or "0", "--seed", whole=True))
    first = files[0]
    out = Path(parsed.out).expanduser() if parsed.out else first.with_name(
        f"{first.name.removesuffix('.jsonl')}.grm-data")
    return files, out, options


def _check_rank_by(inputs: Sequence[tuple[Path, str, list[dict[str, Any]]]], rank_by: str | None) -> None:
    if rank_by is None:
        return
    names = {d["name"] for _, kind, lines in inputs if kind == "labelling" for line in lines
             for d in line["dimensions"]}
    if rank_by not in names:
        raise ConfigError(f"no labelling line has a dimension {rank_by!r}; they have: "
                          f"{', '.join(sorted(names)) or 'none (no labelling file given)'}",
                          "rlkit data from-labels --rank-by")


def _table(report: dict[str, Any], title: str) -> Any:
    from rich.table import Table

    table = Table(title=title)
    table.add_column("")
    table.add_column("count", justify="right")
    for what, n in report["read"].items():
        table.add_row(f"read: {what}", str(n))
    for what, n in report["labels"].items():
        table.add_row(f"labels: {what}", str(n))
    for what, n in report["down_weighted"].items():
        table.add_row(f"down-weighted {what} (labellers disagree)", str(n))
    for unit, reasons in report["dropped"].items():
        for reason, n in reasons.items():
            table.add_row(f"dropped {unit}: {reason}", str(n))
    for split in ("train", "heldout"):
        c = report[split]
        table.add_row(f"{split}", f"{c['prompts']} prompts, {c['groups']} groups, {c['completions']} completions, "
                                  f"{c['pairs']} pairs")
    return table


def cmd_data_from_labels(args: Sequence[str]) -> int:
    """The ``rlkit data from-labels`` command."""
    from rlkit.commands.common import rich_console
    from rlkit.config.outputs import check_writable
    from rlkit.core.errors import DataError
    from rlkit.evaluation.label_training_data import read_inputs, training_data, write_outputs

    parsed = parse_args(args)
    if parsed is None:
        print(USAGE)
        return 0
    files, out, options = parsed
    check_writable(out, "--out", folder=True)
    inputs = read_inputs(files)  # every line checked: a bad one stops here, before anything is written
    _check_rank_by(inputs, options.rank_by)
    data = training_data(inputs, options)
    console = rich_console()
    console.print(_table(data.report, f"{', '.join(str(f) for f in files)} -> {out}"))
    if not data.train and not data.heldout:
        raise DataError("no group left that orders two completions (the table says why); nothing written",
                        ", ".join(str(f) for f in files))
    paths = write_outputs(out, data)
    if not data.heldout:
        console.print("no prompt held out (too few prompts, or --heldout-fraction 0): heldout.jsonl is empty; leave "
                      "grm.data.val unset", markup=False)
    console.print(f"wrote {paths['train']}, {paths['heldout']}, their pairs and {paths['report']}", markup=False,
                  soft_wrap=True)
    val = f" grm.data.val={paths['heldout']}" if data.heldout else ""
    console.print(f"train a GRM on it: rlkit train-grm grm.data.train={paths['train']}{val}", markup=False,
                  soft_wrap=True)
    return 0
