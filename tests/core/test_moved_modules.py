"""Modules that moved answer an import of their old name with their new home, not "No module named"."""

from __future__ import annotations

import importlib

import pytest

import rlkit


@pytest.mark.parametrize("old", sorted(rlkit.MOVED_MODULES))
def test_an_old_module_name_says_where_it_went(old):
    with pytest.raises(ModuleNotFoundError, match=rf"{old} moved: import rlkit\.") as caught:
        importlib.import_module(old)
    assert caught.value.name == old
    new_home = rlkit.MOVED_MODULES[old].split()[0]
    importlib.import_module(new_home)  # the home it names exists


def test_other_missing_modules_keep_python_s_own_error():
    with pytest.raises(ModuleNotFoundError, match="No module named 'rlkit.no_such_module'"):
        importlib.import_module("rlkit.no_such_module")
