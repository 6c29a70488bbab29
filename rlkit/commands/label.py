"""``rlkit label <file>``: label a labelling file in the terminal, one dimension at a time.

Shows the prompt, the reference (when the line has one), the completion, then each dimension's description and
anchors, and asks for a level. Every answer is saved at once (the whole file rewritten atomically), so the file is
the state: run the command again to go on where you stopped. ``s`` skips a dimension (left null, not asked again),
``q`` quits. The judge's scores in the file are never shown: they would anchor the labeller on the judge.

Each answer is saved under the file's lock, re-reading the file first (``rlkit.evaluation.labelling_answers``), so
a page of ``rlkit label serve`` labelling the same file meanwhile loses nothing. Groups to rank are left to the page.
``rlkit label serve <file>``: the same file in a browser page (``rlkit.serve.labelling_page``).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.prompt import Prompt
from rich.table import Table
from rich.text import Text

from rlkit.core.errors import ConfigError

USAGE = ("usage: rlkit label <labelling file> (written by monitors=[label_sample] or `rlkit calibrate sample`); "
         "in a browser: rlkit label serve <labelling file> [port=8400] [api_key_env=NAME]")


def _levels(dim: dict[str, Any]) -> list[str]:
    low, high = dim["range"]
    return [str(v) for v in range(int(low), int(high) + 1)]


def _show_dimension(console: Console, dim: dict[str, Any]) -> None:
    table = Table(title=f"{dim['name']}: {dim.get('description') or ''}".rstrip(": "), show_header=True,
                  title_justify="left")
    table.add_column("level", justify="right")
    table.add_column("anchor")
    anchors = dim.get("anchors") or {}
    for level in _levels(dim):
        text = next((t for k, t in anchors.items() if float(k) == float(level)), "")
        table.add_row(level, Text(text))
    console.print(table)


def label_file(path: Path, console: Console) -> int:
    """Ask for every pending level of the file; 0 when done or quit (the file holds every answer given)."""
    from rlkit.evaluation.labelling import is_group, pending, read_labelling
    from rlkit.evaluation.labelling_answers import apply_label, line_key, save_answer

    lines = read_labelling(path)
    total = len(lines)
    for number, line in enumerate(lines, start=1):
        todo = pending(line)
        if not todo:
            continue
        console.rule(f"line {number} of {total} — step {line.get('step', '?')}")
        console.print(Panel(Text(str(line.get("prompt", ""))), title="prompt", title_align="left"))
        if line.get("reference") is not None:
            console.print(Panel(Text(str(line["reference"])), title="reference", title_align="left"))
        console.print(Panel(Text(line["completion"]), title="completion", title_align="left"))
        for dim in todo:
            if dim["name"] not in {d["name"] for d in pending(line)}:
                continue  # answered on the page since this line was shown
            _show_dimension(console, dim)
            levels = _levels(dim)
            answer = Prompt.ask(f"{dim['name']} level ({levels[0]}–{levels[-1]}; s skip, q quit)",
                                choices=[*levels, "s", "q"], show_choices=False, console=console)
            if answer == "q":
                console.print(f"saved; run `rlkit label {path}` to go on")
                return 0
            level = None if answer == "s" else int(answer)
            # after every answer (a closed terminal loses nothing), into the file as it is now (a page may write too)
            line = save_answer(path, number, line_key(line),
                               lambda fresh, name=dim["name"], level=level: apply_label(fresh, name, level, None))
    done = sum(1 for line in lines if not is_group(line))
    groups = len(lines) - done
    console.print(f"all {done} lines labelled in {path}; agreement with the judge: "
                  f"rlkit calibrate calibrate.labels={path}")
    if groups:
        console.print(f"{groups} groups to rank: rlkit label serve {path}")
    return 0


def cmd_label(args: Sequence[str]) -> int:
    if args and args[0] == "serve":
        from rlkit.serve.labelling_page import cmd_label_serve

        return cmd_label_serve(args[1:])
    if len(args) != 1 or "=" in args[0]:
        raise ConfigError(USAGE, "rlkit label")
    console = Console(highlight=False)
    try:
        return label_file(Path(args[0]), console)
    except (KeyboardInterrupt, EOFError):
        print(f"\nstopped; every answer so far is saved in {args[0]}", file=sys.stderr)
        return 130
