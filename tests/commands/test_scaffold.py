"""`rlkit new plugin`: every kind renders a package whose own tests (rlkit's contract suites) pass; a generated
judge installs, registers through its entry point and trains with `rlkit fit`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.commands.scaffold import SCAFFOLD_KINDS, available_kinds, render_plugin
from rlkit.core.errors import ConfigError


def _run_generated_tests_in_process(root: Path, package: str) -> int:
    """pytest on the generated tests, in this process (importing torch again would cost seconds)."""
    sys.path.insert(0, str(root))
    try:
        return pytest.main(["-q", "-p", "no:cacheprovider", "--rootdir", str(root), str(root / "tests")])
    finally:
        sys.path.remove(str(root))
        for module in [m for m in sys.modules if m == package or m.startswith(f"{package}.") or
                       m.startswith("test_")]:
            del sys.modules[module]


def test_scaffold_covers_every_pluggable_kind():
    import rlkit.testing

    kinds = {"judge", "aggregator", "advantage", "preference", "weights", "monitor", "objective", "sampler",
             "environment", "generator", "probe"}
    assert set(SCAFFOLD_KINDS) == kinds
    # a kind is generated wherever its contract suite exists (and so, with its templates, its tests can pass)
    expected = {kind for kind in kinds if hasattr(rlkit.testing, SCAFFOLD_KINDS[kind].contract)}
    assert set(available_kinds()) == expected


@pytest.mark.parametrize("kind", sorted(available_kinds()))
def test_generated_plugin_passes_its_contract_suite(tmp_path, kind):
    from rlkit.core.registry import KINDS_BY_KEY

    name = f"demo_{kind}"
    files = render_plugin(name, kind, tmp_path / "plugin")
    root = tmp_path / "plugin"
    registry_kind = KINDS_BY_KEY[SCAFFOLD_KINDS[kind].key]
    group = registry_kind.group
    package_files = {"pyproject.toml", "README.md", f"rlkit_{name}/__init__.py", f"tests/test_{name}.py"}
    # a kind no config group selects (a probe, named in audit.probes) has no YAML to ship
    config = {f"rlkit_{name}/conf/__init__.py", f"rlkit_{name}/conf/{group}/{name}.yaml"}
    assert {f.relative_to(root).as_posix() for f in files} == (
        package_files if registry_kind.selected_by else package_files | config)
    pyproject = (root / "pyproject.toml").read_text()
    assert f'[project.entry-points.rlkit]\n{name} = "rlkit_{name}"' in pyproject
    module = (root / f"rlkit_{name}/__init__.py").read_text()
    # the README points at the protocol listing every member rlkit reads from a plugin of the kind
    import rlkit.plugin

    protocol = registry_kind.protocol.__name__
    assert f"`rlkit.plugin.{protocol}`" in (root / "README.md").read_text()
    assert getattr(rlkit.plugin, protocol) is registry_kind.protocol
    if registry_kind.selected_by:
        assert not (root / f"rlkit_{name}/conf").exists()
        assert "package-data" not in pyproject and "conf/" not in (root / "README.md").read_text()
        assert "def rlkit_config_search_path" not in module
    else:
        assert (root / f"rlkit_{name}/conf/{group}/{name}.yaml").read_text().count(f"name: {name}\n") == 1
        assert "def rlkit_config_search_path" in module
    assert _run_generated_tests_in_process(root, f"rlkit_{name}") == 0


@pytest.mark.parametrize(("args", "message"), [
    (("Bad-Name", "judge"), "NAME must be a lower-case Python identifier"),
    (("class", "judge"), "NAME must be a lower-case Python identifier"),
    (("fine", "critic"), "unknown kind 'critic'; kinds: judge, aggregator"),
])
def test_bad_input_is_one_clear_error(tmp_path, args, message):
    with pytest.raises(ConfigError, match=message):
        render_plugin(args[0], args[1], tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_refuses_a_folder_that_holds_files(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not an empty folder"):
        render_plugin("fine", "judge", tmp_path)


def test_cli_new_plugin(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["new", "plugin", "tidy", "--kind", "aggregator"]) == 0
    out = capsys.readouterr().out
    assert "rlkit-tidy" in out and "rlkit validate aggregator=tidy" in out
    assert (tmp_path / "rlkit-tidy" / "rlkit_tidy" / "conf" / "aggregator" / "tidy.yaml").is_file()
    assert main(["new", "plugin", "tidy", "--kind", "aggregator"]) == 2  # the folder exists now: a config error
    assert "not an empty folder" in capsys.readouterr().err
    assert main(["new", "plugin", "x"]) == 2  # no --kind
    assert "usage: rlkit new plugin NAME --kind" in capsys.readouterr().err


def test_cli_new_plugin_probe_is_selected_by_audit_probes(tmp_path, capsys):
    assert main(["new", "plugin", "aside", "--kind", "probe", "--dir", str(tmp_path / "aside")]) == 0
    out = capsys.readouterr().out
    assert "wrote 4 files" in out and "rlkit rubric audit audit.records=FILE.jsonl audit.probes=[aside]" in out
    assert "rlkit validate" not in out  # validate does not look probes up: the audit is how to try one
    readme = (tmp_path / "aside" / "README.md").read_text()
    assert "audit.probes=[aside]" in readme and "rlkit validate" not in readme


@pytest.mark.slow
def test_generated_judge_installs_registers_and_trains(tmp_path):
    root = tmp_path / "rlkit-short"
    render_plugin("short", "judge", root)
    # installed into a folder of its own, put on PYTHONPATH for the subprocesses: the venv other tests use is
    # left as it was, and a wheel build checks the package data (the YAML) really ships
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                    "--target", str(site), str(root)], check=True, capture_output=True, timeout=300)
    assert (site / "rlkit_short" / "conf" / "judge" / "short.yaml").is_file()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
           "RLKIT_CACHE": str(tmp_path / "cache"), "WANDB_SILENT": "true"}
    tests = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                              str(root / "tests")], cwd=root, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)
    fit = subprocess.run([sys.executable, "-m", "rlkit", "fit", "judge=short", "trainer.max_steps=2", "batch_size=2",
                          "num_generations=2", "logger=none", "log_samples.every=0",
                          f"hydra.run.dir={tmp_path / 'run'}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    out, _ = tests.communicate(timeout=600)
    assert tests.returncode == 0, out[-3000:]
    assert "skipped" not in out, out[-3000:]  # the registration test ran: the entry point was found
    assert fit.returncode == 0, fit.stderr[-3000:]
    assert "final held-out mean normalised reward" in fit.stdout
    assert (tmp_path / "run" / "policy" / "config.json").is_file()
