from __future__ import annotations

from pathlib import Path

import pytest

from rlkit.core.registry import Registry, create_plugin_manager

REPO = Path(__file__).resolve().parents[1]
CONF = REPO / "conf"


@pytest.fixture(scope="session")
def registry() -> Registry:
    """Built-ins plus installed entry points (the example plugin among them)."""
    return Registry(create_plugin_manager())


@pytest.fixture(scope="session", autouse=True)
def _ctrl_c_as_in_a_terminal():
    """Tests send real Ctrl-Cs to the pytest process and to the servers it starts; a pytest started with SIGINT
    ignored (`pytest ... &` from a script) would pass that on to every child, and a server stopped by Ctrl-C would
    never stop. The session runs as from a terminal; the tests of an ignored Ctrl-C set it themselves."""
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    yield


@pytest.fixture(scope="session", autouse=True)
def _shared_warm_starts(tmp_path_factory):
    """One home for the session's warm starts (``$RLKIT_WARM_START_CACHE``), so the default policy's, trained once
    (~12 s), serves every test that runs ``fit`` in a cache of its own, subprocesses included (they inherit the
    environment). Tests of where a warm start goes or how it trains unset it."""
    from rlkit.lm.models import WARM_START_CACHE_ENV

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(WARM_START_CACHE_ENV, str(tmp_path_factory.mktemp("warm-starts")))
        yield


@pytest.fixture(scope="session", autouse=True)
def _shared_tiny_judges(tmp_path_factory):
    """One home for the offline tiny judges (``$RLKIT_TINY_JUDGE_CACHE``) across the session's xdist workers: each
    takes minutes of CPU to build, and any test that asks for one (the llm and ranking judges' own files, a fit that
    names ``backend: tiny``) finds it there, whatever its own cache; a worker asking during the build waits for it
    (the build's lock). Tests of where a build goes pass their folder."""
    import os

    from rlkit.lm.model_cache import TINY_JUDGE_CACHE_ENV

    base = tmp_path_factory.getbasetemp()
    home = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "tiny-judges"
    home.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(TINY_JUDGE_CACHE_ENV, str(home))
        yield home


@pytest.fixture(scope="session", autouse=True)
def _installed_judge_model(tmp_path_factory):
    """The judge model ``judge=llm`` asks by default, for every test: a tiny random GGUF written here
    (``$RLKIT_JUDGE_MODEL``), so a test does not depend on whether this machine has the 1.1 GB qwen-judge extra (CI
    does not). A test that needs a model judge's scores to mean something names ``backend: tiny`` or a served model;
    tests of what happens with no judge installed unset it."""
    from rlkit.lm.judge_models import JUDGE_MODEL_ENV
    from rlkit.testing.gguf_files import write_tiny_gguf

    path = tmp_path_factory.mktemp("judge-model") / "tiny-judge.gguf"
    write_tiny_gguf(path, architecture="llama")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(JUDGE_MODEL_ENV, str(path))
        yield path


@pytest.fixture(autouse=True)
def _clear_hydra():
    yield
    from hydra.core.global_hydra import GlobalHydra

    GlobalHydra.instance().clear()


@pytest.fixture(autouse=True)
def _fresh_run_registry():
    """Each test is its own process as far as the CLI is concerned: the run's registry is built anew, so a test
    that patches the plugin manager (extra plugins) sees them, and no other test does."""
    from rlkit.commands.common import run_registry

    run_registry.cache_clear()
    yield
    run_registry.cache_clear()


@pytest.fixture
def use_judge_cache(monkeypatch, tmp_path):
    """``use_judge_cache(cache)``: point rlkit at a session's cache of built offline judges, with W&B quiet,
    working in a fresh folder."""

    def use(cache: Path) -> Path:
        monkeypatch.setenv("RLKIT_CACHE", str(cache))
        monkeypatch.setenv("WANDB_SILENT", "true")
        monkeypatch.chdir(tmp_path)
        return cache

    return use
