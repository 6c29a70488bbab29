"""The kinds table (rlkit/core/kinds.py) is the one place a kind is declared: everything else it names exists, the
scaffold is derived from it, and the docs' kind tables are what it generates."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

import rlkit.plugin
import rlkit.testing
from rlkit.commands.scaffold import SCAFFOLD_KINDS, templates_root
from rlkit.core import hookspecs
from rlkit.core.kind_docs import END, GENERATED, START, main, with_tables
from rlkit.core.kinds import KINDS
from rlkit.core.protocols import protocol_members
from rlkit.core.registry import builtin_plugin_modules

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.key)
def test_every_thing_a_kind_names_exists(kind):
    assert hasattr(hookspecs, kind.hook)
    assert (REPO / "plugins" / "rlkit_plugins" / kind.folder).is_dir()
    contract = getattr(rlkit.testing, kind.contract)
    # the suite's tests ask for the kind's fixture by name (what a generated plugin's tests provide)
    tests = [m for name, m in inspect.getmembers(contract, inspect.isfunction) if name.startswith("test_")]
    assert any(kind.fixture in inspect.signature(t).parameters for t in tests), kind.contract
    if kind.selected_by is None:
        assert (REPO / "conf" / kind.group).is_dir(), f"no conf/{kind.group}/"
    if kind.scaffold:
        assert (templates_root() / "kinds" / kind.scaffold / "module.py.jinja").is_file()
    assert kind.declares == tuple(m.name for m in protocol_members(kind.protocol) if m.required)
    assert all(m.doc for m in protocol_members(kind.protocol)), "every member has a docstring"
    assert getattr(rlkit.plugin, kind.protocol.__name__) is kind.protocol, "exported through the door"


def test_kinds_are_unique_in_every_name():
    for field in ("key", "hook", "group", "label", "protocol", "folder", "contract"):
        values = [getattr(k, field) for k in KINDS]
        assert len(set(values)) == len(values), field
    hooks = {name for name in vars(hookspecs) if name.startswith("rlkit_register_")}
    assert hooks == {k.hook for k in KINDS}, "a registration hook with no kind, or a kind with no hook"


def test_the_scaffold_is_derived_from_the_kinds():
    assert set(SCAFFOLD_KINDS) == {k.scaffold for k in KINDS if k.scaffold}
    assert {p.name for p in (templates_root() / "kinds").iterdir() if p.is_dir()} == set(SCAFFOLD_KINDS)
    for name, spec in SCAFFOLD_KINDS.items():
        assert spec.kind.scaffold == name and spec.contract == spec.kind.contract


def test_each_builtin_registers_the_kind_of_its_folder():
    by_folder = {k.folder: k for k in KINDS}
    for module_name in builtin_plugin_modules():
        hooks = {n for n in vars(importlib.import_module(module_name)) if n.startswith("rlkit_register_")}
        folder = module_name.split(".")[1]
        assert hooks <= {by_folder[folder].hook}, f"{module_name} registers {hooks} from {folder}/"


@pytest.mark.parametrize("page", sorted(GENERATED))
def test_the_docs_kind_tables_are_generated(page):
    text = (REPO / "docs" / page).read_text(encoding="utf-8")
    assert text.count(START) == 1 and text.count(END) == 1
    assert with_tables(page, text) == text, f"docs/{page} is out of date: python -m rlkit.core.kind_docs --write"


def test_the_tables_have_one_row_per_kind():
    concepts = GENERATED["concepts.md"]().splitlines()
    assert len([r for r in concepts if r.startswith("| `")]) == len(KINDS)
    api = GENERATED["plugin-api.md"]()
    for kind in KINDS:
        row = next(r for r in api.splitlines() if f"| `{kind.hook}` |" in r)
        assert all(f"`{m.name}`" in row for m in protocol_members(kind.protocol)), kind.key
        assert f"#### `{kind.setting}`: `{kind.protocol.__name__}`" in api


def test_check_reports_a_stale_table_and_write_fixes_it(tmp_path, capsys):
    for page in GENERATED:
        (tmp_path / page).write_text(f"# {page}\n\n{START}\nold\n{END}\nafter\n", encoding="utf-8")
    assert main(["--check"], tmp_path) == 1
    assert "out of date: docs/concepts.md, docs/plugin-api.md" in capsys.readouterr().out
    assert main(["--write"], tmp_path) == 0
    assert main(["--check"], tmp_path) == 0
    text = (tmp_path / "concepts.md").read_text(encoding="utf-8")
    assert "\nold\n" not in text and text.endswith(f"{END}\nafter\n") and "`rlkit_register_judges`" in text
    with pytest.raises(ValueError, match="no <!-- kinds:start -->"):
        with_tables("concepts.md", "no markers")
    assert main(["--wrong"]) == 2
