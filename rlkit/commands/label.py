"""``rlkit label <file> [labeller=NAME] [seed=0]``: label a labelling file in the terminal, each completion one
dimension at a time, each group of completions ranked.

A completion line: shows the prompt, the reference (when the line has one), the completion, then each dimension's
description and anchors, and asks for a level. ``s`` skips a dimension (not asked again), ``q`` quits.

A group line (a ranking task): shows the prompt, the reference and the dimensions to rank by, then the group's
completions numbered 1, 2, 3, ... in the order the labelling page shows this labeller (shuffled per labeller and
group, with the page's ``seed=``: :func:`rlkit.serve.labelling_page.page_item`), and asks for an order, best first,
``=`` joining a tie: ``2 1=3 4`` puts 2 first, 1 and 3 tied second, 4 last. An order that is not one (a number
missing, twice or not shown) is asked again with one line saying why. ``s`` skips the group, ``q`` quits.

Every answer is saved at once, under the file's lock, re-reading the file first
(:func:`rlkit.evaluation.labelling_answers.save_answer`), so a page of ``rlkit label serve`` labelling the same file
meanwhile loses nothing and the file is the state: run the command again to go on where you stopped. A ranking is
saved as the page saves it (``rankings``: {labeller: order}) under ``labeller=`` (default: the login name), so one
labeller can rank some groups here and the rest on the page. Levels are saved as they always were, the anonymous
answer every labeller shares, unless ``labeller=`` is given: then under that name, as the page does, and what that
labeller answered is not asked again. The judge's scores in the file are never shown: they would anchor the labeller
on the judge.

``rlkit label serve <file>``: the same file in a browser page (``rlkit.serve.labelling_page``).
"""

from __future__ import annotations

import re
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

USAGE = ("usage: rlkit label <labelling file> [labeller=NAME] [seed=0] (written by monitors=[label_sample] or `rlkit "
         "calibrate sample`); in a browser: rlkit label serve <labelling file> [port=8400] [api_key_env=NAME]")


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


def _show_task(console: Console, number: int, total: int, line: dict[str, Any], what: str) -> None:
    console.rule(f"line {number} of {total} — step {line.get('step', '?')}{what}")
    console.print(Panel(Text(str(line.get("prompt", ""))), title="prompt", title_align="left"))
    if line.get("reference") is not None:
        console.print(Panel(Text(str(line["reference"])), title="reference", title_align="left"))


def _example(n: int) -> str:
    return "2 1" if n == 2 else " ".join(["2", "1=3", *(str(k) for k in range(4, n + 1))])


def parse_order(text: str, n: int) -> list[list[int]] | str:
    """The order typed for ``n`` shown completions (numbers 1..n, best first, ``=`` joining a tie), as tiers of
    0-based shown positions; or one line saying why it is not an order."""
    from rlkit.evaluation.labelling import tiers_problem

    how = f"give each of 1–{n} once, best first, `=` joining a tie (e.g. {_example(n)})"
    words = re.sub(r"\s*=\s*", "=", text.strip()).replace(">", " ").split()
    try:
        tiers = [[int(part) - 1 for part in word.split("=")] for word in words]
    except ValueError:
        return f"{how}: only numbers, spaces and `=`, got {text.strip()!r}"
    if tiers_problem(tiers, n) is None:
        return tiers
    given = [i + 1 for tier in tiers for i in tier]
    why = [f"{k} is not shown" for k in sorted({k for k in given if not 1 <= k <= n})]
    why += [f"{k} twice" for k in sorted({k for k in given if 1 <= k <= n and given.count(k) > 1})]
    missing = [str(k) for k in range(1, n + 1) if k not in given]
    why += [f"{', '.join(missing)} missing"] if missing else []
    return f"{how}: {'; '.join(why)}"


def _rank(console: Console, path: Path, number: int, total: int, line: dict[str, Any], labeller: str,
          seed: int) -> bool:
    """Ask for the group's order and save it (a skip saved as null); False when the labeller quits."""
    from rlkit.evaluation.labelling_answers import apply_ranking, line_key, save_answer
    from rlkit.serve.labelling_page import page_item

    shown = page_item(number, line, labeller, seed)["shown"]  # the page's order for this labeller, not the file's
    n = len(shown)
    _show_task(console, number, total, line, f" — rank {n} completions")
    criteria = Table(title="rank by", title_justify="left", show_header=False)
    for dim in line["dimensions"]:
        criteria.add_row(dim["name"], Text(dim.get("description") or ""))
    console.print(criteria)
    for place, index in enumerate(shown, start=1):
        console.print(Panel(Text(line["completions"][index]), title=str(place), title_align="left"))
    while True:
        answer = Prompt.ask(f"order of 1–{n}, best first, = joins a tie (e.g. {_example(n)}; s skip, q quit)",
                            console=console).strip()
        if answer == "q":
            return False
        if answer == "s":
            tiers = None
            break
        order = parse_order(answer, n)
        if isinstance(order, str):
            console.print(Text(order, style="red"))
            continue
        tiers = [[shown[i] for i in tier] for tier in order]  # back to indices into the line's completions
        break
    save_answer(path, number, line_key(line), lambda fresh: apply_ranking(fresh, tiers, labeller))
    return True


def _pending(line: dict[str, Any], labeller: str | None) -> list[dict[str, Any]]:
    """The dimensions of a completion line still to ask: the anonymous answer's, or ``labeller``'s own."""
    from rlkit.evaluation.labelling import pending
    from rlkit.evaluation.labelling_answers import answered

    if labeller is None:
        return pending(line)
    given = answered(line, labeller)
    return [d for d in line["dimensions"] if d["name"] not in given]


def _label(console: Console, path: Path, number: int, total: int, line: dict[str, Any], labeller: str | None) -> bool:
    """Ask for each pending level of a completion line, saving each; False when the labeller quits."""
    from rlkit.evaluation.labelling_answers import apply_label, line_key, save_answer

    _show_task(console, number, total, line, "")
    console.print(Panel(Text(line["completion"]), title="completion", title_align="left"))
    for dim in _pending(line, labeller):
        if dim["name"] not in {d["name"] for d in _pending(line, labeller)}:
            continue  # answered on the page since this line was shown
        _show_dimension(console, dim)
        levels = _levels(dim)
        answer = Prompt.ask(f"{dim['name']} level ({levels[0]}–{levels[-1]}; s skip, q quit)",
                            choices=[*levels, "s", "q"], show_choices=False, console=console)
        if answer == "q":
            return False
        level = None if answer == "s" else int(answer)
        # after every answer (a closed terminal loses nothing), into the file as it is now (a page may write too)
        line = save_answer(path, number, line_key(line),
                           lambda fresh, name=dim["name"], level=level: apply_label(fresh, name, level, labeller))
    return True


def label_file(path: Path, console: Console, labeller: str | None = None, seed: int = 0) -> int:
    """Ask for every pending level and order of the file; 0 when done or quit (the file holds every answer given).
    ``labeller``: whose answers these are (levels without it: the anonymous answer; rankings: the login name)."""
    from rlkit.evaluation.labelling import is_group, read_labelling

    ranker = labeller or default_labeller()
    lines = read_labelling(path)
    total = len(lines)
    for number, line in enumerate(lines, start=1):
        if is_group(line):  # a skip is an answer too: the page's rule
            asked = ranker not in (line.get("rankings") or {})
            went_on = _rank(console, path, number, total, line, ranker, seed) if asked else True
        else:
            went_on = _label(console, path, number, total, line, labeller) if _pending(line, labeller) else True
        if not went_on:
            again = f" labeller={labeller}" if labeller else ""
            console.print(f"saved; run `rlkit label {path}{again}` to go on", markup=False, soft_wrap=True)
            return 0
    groups = sum(1 for line in lines if is_group(line))
    done = [f"all {total - groups} lines labelled"] if total > groups else []
    done += [f"all {groups} groups ranked (as {ranker})"] if groups else []
    # soft wrap: a command to copy stays on one line
    console.print(f"{' and '.join(done)} in {path}", markup=False, soft_wrap=True)
    if total > groups:
        console.print(f"agreement with the judge: rlkit calibrate calibrate.labels={path}", markup=False,
                      soft_wrap=True)
    if groups:
        console.print(f"a ranking judge against the rankings: rlkit calibrate judge=ranking calibrate.labels={path}",
                      markup=False, soft_wrap=True)
    return 0


def default_labeller() -> str:
    """The login name, as a labeller's name when ``labeller=`` is not given."""
    import getpass

    from rlkit.evaluation.labelling import LABELLER_NAME_LIMIT

    try:
        return getpass.getuser().strip()[:LABELLER_NAME_LIMIT] or "terminal"
    except (KeyError, OSError):  # no login name in the environment nor the password database
        return "terminal"


def _options(args: Sequence[str]) -> tuple[Path, str | None, int]:
    from rlkit.evaluation.labelling import LABELLER_NAME_LIMIT, file_and_options

    path, options = file_and_options(args, ("labeller", "seed"), ("seed",), "rlkit label", USAGE)
    labeller = options["labeller"].strip() if "labeller" in options else None
    if labeller is not None and not 1 <= len(labeller) <= LABELLER_NAME_LIMIT:
        raise ConfigError(f"a name of 1 to {LABELLER_NAME_LIMIT} characters, to tell labellers apart",
                          "rlkit label labeller")
    return path, labeller, int(options.get("seed", 0))


def cmd_label(args: Sequence[str]) -> int:
    if args and args[0] == "serve":
        from rlkit.serve.labelling_page import cmd_label_serve

        return cmd_label_serve(args[1:])
    path, labeller, seed = _options(args)
    console = Console(highlight=False)
    try:
        return label_file(path, console, labeller, seed)
    except (KeyboardInterrupt, EOFError):
        print(f"\nstopped; every answer so far is saved in {path}", file=sys.stderr)
        return 130
