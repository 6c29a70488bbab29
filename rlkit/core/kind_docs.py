"""The kind tables of ``docs/concepts.md`` and ``docs/plugin-api.md``, generated from :data:`rlkit.core.kinds.KINDS`
and the kinds' protocols, so they cannot drift from the code.

``python -m rlkit.core.kind_docs --write`` rewrites what lies between ``<!-- kinds:start -->`` and
``<!-- kinds:end -->`` in each page; ``--check`` exits 1 when one is out of date (``tests/core/test_kinds.py`` does
the same).
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlkit.core.kinds import KINDS, PluginKind
from rlkit.core.protocols import protocol_members

START, END = "<!-- kinds:start -->", "<!-- kinds:end -->"


def _names(names: tuple[str, ...] | list[str]) -> str:
    return ", ".join(f"`{n}`" for n in names) or "—"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _setting(kind: PluginKind) -> str:
    """The one name users type for the kind: its config group, or the setting that selects it."""
    return f"`{kind.setting}`" + (" (a list)" if kind.listed else "")


def concepts_table() -> str:
    """``docs/concepts.md``'s table: one row per kind, what selects it and what a plugin of it must have."""
    rows = ["| config group | kind | hook | must have | more |", "|---|---|---|---|---|"]
    for kind in KINDS:
        required = [m.signature for m in protocol_members(kind.protocol) if m.required]
        page = f"[{kind.page.removesuffix('.md').replace('-', ' ').capitalize()}]({kind.page})" if kind.page else "—"
        rows.append(f"| {_setting(kind)} | {kind.label[:-1]} | `{kind.hook}` | "
                    f"{_cell(', '.join(f'`{s}`' for s in required))} | {page} |")
    return "\n".join(rows)


def plugin_api_tables() -> str:
    """``docs/plugin-api.md``'s tables: one row per kind, then every member of each kind's protocol."""
    out = ["| config group | kind | hook | protocol | contract suite | `rlkit new plugin --kind` | built-ins | "
           "must have | may have |", "|---|---|---|---|---|---|---|---|---|"]
    for kind in KINDS:
        members = protocol_members(kind.protocol)
        optional = [m.name for m in members if not m.required]
        out.append(f"| {_setting(kind)} | {kind.label[:-1]} | `{kind.hook}` | `{kind.protocol.__name__}` | "
                   f"`{kind.contract}` | {f'`{kind.scaffold}`' if kind.scaffold else '—'} | "
                   f"`plugins/rlkit_plugins/{kind.folder}/` | {_names(kind.declares)} | {_names(optional)} |")
    for kind in KINDS:
        out += ["", f"#### `{kind.setting}`: `{kind.protocol.__name__}`", "",
                f"{kind.protocol.__doc__.strip().splitlines()[0]}", "",
                "| member | when absent | what it is |", "|---|---|---|"]
        for m in protocol_members(kind.protocol):
            out.append(f"| `{_cell(m.signature)}` | {_cell(m.absent) if m.absent else '**required**'} | "
                       f"{_cell(m.doc)} |")
    return "\n".join(out)


GENERATED = {"concepts.md": concepts_table, "plugin-api.md": plugin_api_tables}


def with_tables(page: str, text: str) -> str:
    """``text`` (the page ``page`` of ``docs/``) with its generated block replaced by what :data:`KINDS` gives."""
    head, start, rest = text.partition(START)
    _, end, tail = rest.partition(END)
    if not start or not end:
        raise ValueError(f"docs/{page} has no {START} ... {END} block")
    return f"{head}{START}\n{GENERATED[page]()}\n{END}{tail}"


def main(argv: list[str], docs: Path | None = None) -> int:
    """``--write``: regenerate the kind tables in ``docs/``; ``--check``: exit 1 when one is out of date."""
    docs = docs or Path(__file__).resolve().parents[2] / "docs"  # a source checkout: the docs are not installed
    if argv not in (["--write"], ["--check"]):
        print("usage: python -m rlkit.core.kind_docs --write|--check", file=sys.stderr)
        return 2
    stale = []
    for page in GENERATED:
        path = docs / page
        text = path.read_text(encoding="utf-8")
        wanted = with_tables(page, text)
        if wanted != text:
            stale.append(page)
            if argv == ["--write"]:
                path.write_text(wanted, encoding="utf-8")
    verb = "rewrote" if argv == ["--write"] else "out of date:"
    print(f"{verb} {', '.join(f'docs/{p}' for p in stale)}" if stale else "the kind tables are up to date")
    return 1 if stale and argv == ["--check"] else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
