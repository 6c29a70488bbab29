from __future__ import annotations

from pathlib import Path

import pytest

from rlkit.registry import Registry, create_plugin_manager

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


@pytest.fixture(scope="session")
def registry() -> Registry:
    """Built-ins plus installed entry points (the example plugin among them)."""
    return Registry(create_plugin_manager())


@pytest.fixture(autouse=True)
def _clear_hydra():
    yield
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()
