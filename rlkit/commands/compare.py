"""``rlkit compare RUN_A [RUN_B]``: a blind side-by-side comparison of two runs' answers, for people.

Each side is a run's held-out answers (``RUN``: after training, ``RUN@start``: before it; ``rlkit fit`` writes every
evaluation's to ``<run dir>/heldout_samples.jsonl``) or a JSONL file of ``{prompt, completion}`` lines. One run
alone compares its final policy with its start. The answers are paired by prompt, each pair's left and right drawn
at random (``seed=``), written to a comparison file with its key beside it (``rlkit.evaluation.blind_comparison``),
and served as a page for several labellers (``rlkit.serve.comparison_page``) until Ctrl-C; then the report. Running
the same command again goes on with the same file and its answers.

``rlkit compare serve FILE``: the page of a comparison file already built. ``rlkit compare report FILE``: A's win
rate with its 95% interval, per labeller and dimension, and the labellers' agreement
(``rlkit.evaluation.comparison_report``), printed and written to ``<stem>.report.json``.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError, DataError

USAGE = ("usage: rlkit compare RUN_A [RUN_B] [out=FILE] [seed=0] [dimensions=NAME,...] [port=8400] "
         "[api_key_env=NAME] [serve=true] (a run is RUN, RUN@start or RUN@end, or an answers JSONL); "
         "rlkit compare serve FILE [port=8400] [api_key_env=NAME]; rlkit compare report FILE")
COMMAND = "rlkit compare"
BUILD_OPTIONS = ("out", "seed", "dimensions", "port", "api_key_env", "serve")
SERVE_OPTIONS = ("port", "api_key_env")
SHOWN_PROMPTS = 3  # prompts named in a "left out" line


def _parse(args: Sequence[str], allowed: Sequence[str], command: str) -> tuple[list[str], dict[str, str]]:
    positional = [a for a in args if "=" not in a]
    options = dict(a.split("=", 1) for a in args if "=" in a)
    for key in options:
        if key not in allowed:
            raise ConfigError(f"unknown option; {USAGE}", f"{command} {key}")
    for key in ("seed", "port"):
        if key in options and not options[key].isdigit():
            raise ConfigError(f"must be a whole number >= 0, got {options[key]!r}", f"{command} {key}")
    if int(options.get("port", 0)) > 65535:
        raise ConfigError("must be at most 65535", f"{command} port")
    if options.get("serve", "true") not in ("true", "false"):
        raise ConfigError(f"true or false, got {options['serve']!r}", f"{command} serve")
    return positional, options


def _slug(side: Any, other: Any) -> str:
    if side.when is None:
        return side.path.stem
    if other.when is not None and side.path.resolve() == other.path.resolve():
        return side.when
    return "_".join([*side.path.resolve().parts[-2:], side.when])


def default_out(a: Any, b: Any) -> Path:
    """``<run A>/comparisons/<A>_vs_<B>.jsonl`` (beside an answers file for a file): ``end_vs_start`` for one run."""
    folder = a.path if a.when is not None else a.path.parent
    return folder / "comparisons" / f"{_slug(a, b)}_vs_{_slug(b, a)}.jsonl"


def _dimensions(option: str | None, a_rows: Sequence[dict[str, Any]], a: Any) -> list[str]:
    from rlkit.evaluation.blind_comparison import OVERALL, dimension_names

    if not option:
        return []
    names = [n.strip() for n in option.split(",") if n.strip()]
    known = dimension_names(a_rows)
    unknown = [n for n in names if n == OVERALL or (known and n not in known)]
    if unknown or len(set(names)) != len(names):
        what = f"the run's dimensions are {', '.join(known)}" if known else "names, each once"
        raise ConfigError(f"{', '.join(unknown) or 'a name twice'}: {what}", f"{COMMAND} dimensions")
    return names


def _left_out(pairing: Any, a: Any, b: Any) -> None:
    for side, prompts in ((a, pairing.only_a), (b, pairing.only_b)):
        if prompts:
            shown = ", ".join(repr(p) for p in prompts[:SHOWN_PROMPTS]) + (", ..." if len(prompts) > SHOWN_PROMPTS
                                                                           else "")
            print(f"rlkit: warning: {len(prompts)} prompts only {side.spec} answered, left out: {shown}",
                  file=sys.stderr)
    if pairing.repeated:
        print(f"rlkit: warning: {pairing.repeated} prompts answered more than once, differently, on one side: the "
              "first answer kept", file=sys.stderr)


def build(a_spec: str, b_spec: str | None, options: dict[str, str]) -> tuple[Path, Any]:
    """The comparison file (written, or the same one found from an earlier start) and its pairing."""
    from rlkit.evaluation.blind_comparison import pair_answers, parse_side, read_comparison, read_side, write_comparison

    a = parse_side(a_spec)
    if b_spec is None:
        if a.when is None or "@" in a_spec:
            raise ConfigError(f"one run alone compares its end with its start (rlkit compare RUN); name two sides "
                              f"otherwise. {USAGE}", COMMAND)
        b = parse_side(f"{a_spec}@start")
    else:
        b = parse_side(b_spec)
    a_rows, b_rows = read_side(a), read_side(b)
    pairing = pair_answers(a, a_rows, b, b_rows, int(options.get("seed", 0)),
                           _dimensions(options.get("dimensions"), a_rows, a))
    out = Path(options["out"]) if options.get("out") else default_out(a, b)
    _left_out(pairing, a, b)
    if out.exists():
        shown = [(line["item"], line["left"], line["right"]) for line in read_comparison(out)]
        if shown != [(line["item"], line["left"], line["right"]) for line in pairing.lines]:
            raise DataError("holds another comparison (other answers, seed or dimensions); pick another out= or "
                            "remove it", str(out))
        return out, pairing
    try:
        write_comparison(out, pairing)
    except OSError as exc:
        raise ConfigError(f"cannot create {out} ({exc.strerror or exc})", f"{COMMAND} out") from None
    return out, pairing


def report(path: Path, *, required: bool = True) -> int:
    """Print and write the report of comparison file ``path``; with nothing answered, an error (or, after serving,
    one line)."""
    from rich.console import Console

    from rlkit.evaluation.blind_comparison import read_comparison, read_key
    from rlkit.evaluation.comparison_report import comparison_report, report_lines, report_table, write_report

    lines = read_comparison(path)
    result = comparison_report(lines, read_key(path, lines))
    if not result["answered"]:
        if required:
            raise DataError(f"nothing answered yet: open its page (rlkit compare serve {path})", str(path))
        print(f"no answers yet in {path}; the report once there are: rlkit compare report {path}")
        return 0
    console = Console(highlight=False)
    console.print(report_table(result))
    for line in report_lines(result):
        console.print(line, markup=False, soft_wrap=True)
    written = write_report(path, result)
    console.print(f"report written to {written}", markup=False, soft_wrap=True)
    return 0


def _bind(options: dict[str, str]) -> Any:
    """The page's listening socket, bound before anything is read or built: a port in use is one line at once."""
    from rlkit.serve.labelling_page import DEFAULT_PORT, bind_loopback

    return bind_loopback(int(options.get("port", DEFAULT_PORT)), COMMAND)


def serve(path: Path, options: dict[str, str], sock: Any = None) -> int:
    """The page of ``path`` until Ctrl-C; the URL to open (with its token) is the first line printed."""
    from rlkit.evaluation.blind_comparison import read_comparison
    from rlkit.serve.comparison_page import create_compare_app
    from rlkit.serve.labelling_page import HOST, page_token, serve_until_stopped

    sock = sock if sock is not None else _bind(options)
    lines = read_comparison(path)
    app = create_compare_app(path, page_token(options, COMMAND))
    bound = sock.getsockname()[1]
    print(f"blind comparison page for {path} ({len(lines)} prompts): "
          f"open http://{HOST}:{bound}/#token={app.state.token}", flush=True)
    print(f"from another machine: ssh -N -L {bound}:127.0.0.1:{bound} <this host>, then open the same URL there; "
          "Ctrl-C stops (every answer is already saved) and prints the report", flush=True)
    serve_until_stopped(app, sock)
    return report(path, required=False)


def cmd_compare(args: Sequence[str]) -> int:
    if args and args[0] in ("serve", "report"):
        tool = f"{COMMAND} {args[0]}"
        files, options = _parse(args[1:], SERVE_OPTIONS if args[0] == "serve" else (), tool)
        if len(files) != 1:
            raise ConfigError(USAGE, tool)
        return serve(Path(files[0]), options) if args[0] == "serve" else report(Path(files[0]))
    sides, options = _parse(args, BUILD_OPTIONS, COMMAND)
    if not 1 <= len(sides) <= 2:
        raise ConfigError(USAGE, COMMAND)
    sock = _bind(options) if options.get("serve", "true") == "true" else None  # before the runs are read
    out, pairing = build(sides[0], sides[1] if len(sides) == 2 else None, options)
    key = pairing.key
    print(f"{len(pairing.lines)} prompts to compare blind (A: {key['A']}, B: {key['B']}"
          + (f"; {pairing.identical} answered alike, left out" if pairing.identical else "")
          + f") in {out}; which run wrote which answer is in its key, not for the labellers", flush=True)
    if options.get("serve", "true") == "false":
        print(f"the page: rlkit compare serve {out}", flush=True)
        return 0
    return serve(out, options, sock)
