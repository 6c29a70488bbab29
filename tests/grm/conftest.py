"""What every GRM and reward-model test shares: one model cache per module (a model built once is reused by that
module's tests) and each test in its own folder, with W&B quiet."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rlkit-cache")


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch, cache):
    monkeypatch.setenv("RLKIT_CACHE", str(cache))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.chdir(tmp_path)
