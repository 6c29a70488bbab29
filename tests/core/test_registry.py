from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass

import pluggy
import pydantic
import pytest

from rlkit import ConfigError, PluginError, hookimpl
from rlkit.core.registry import KINDS, Registry, create_plugin_manager


class _Stub:
    """A plugin that has whatever its kind declares (the registry checks declarations when it builds one)."""

    def score(self, rollout, rubric):
        raise NotImplementedError

    def aggregate(self, batch):
        raise NotImplementedError


def _factory(params):
    return _Stub()


class _JudgePlugin:
    def __init__(self, name: str):
        self.name = name

    @hookimpl
    def rlkit_register_judges(self, register):
        register(self.name, _factory)


def test_builtins_are_registered_for_every_kind(registry):
    assert "rule" in registry.names("judge")
    assert "weighted_sum" in registry.names("aggregator")
    assert "grpo" in registry.names("advantage_estimator")
    assert "constant" in registry.names("weight_scheduler")
    assert registry.get("judge", "rule").provider == "rlkit"


def test_entry_point_plugin_is_discovered_with_its_distribution(registry):
    entry = registry.get("judge", "anchor_overlap")
    assert entry.provider == "rlkit-example-plugin"


def test_entry_points_can_be_skipped():
    assert "anchor_overlap" not in Registry(create_plugin_manager(entry_points=False)).names("judge")


def test_duplicate_name_within_a_kind_names_both_providers():
    pm = create_plugin_manager(entry_points=False, extra=[_JudgePlugin("rule")])
    with pytest.raises(PluginError) as err:
        Registry(pm)
    assert "duplicate judge name 'rule'" in str(err.value)
    assert "rlkit" in str(err.value) and "_JudgePlugin" in str(err.value)


def test_same_name_in_two_kinds_is_fine():
    class Both:
        @hookimpl
        def rlkit_register_aggregators(self, register):
            register("third_party_front", _factory)

        @hookimpl
        def rlkit_register_preference_constructors(self, register):
            register("third_party_front", _factory)

    reg = Registry(create_plugin_manager(entry_points=False, extra=[Both()]))
    assert "third_party_front" in reg.names("aggregator") and "third_party_front" in reg.names("preference_constructor")


def test_unknown_name_lists_what_exists(registry):
    with pytest.raises(PluginError) as err:
        registry.get("judge", "nope")
    msg = str(err.value)
    assert msg.startswith("unknown judge 'nope'; available judges:")
    assert "rule (rlkit)" in msg and "anchor_overlap (rlkit-example-plugin)" in msg


def test_misspelled_hook_fails_at_start_up():
    class Typo:
        @hookimpl
        def rlkit_register_judgez(self, register):
            pass

    with pytest.raises(pluggy.PluginValidationError):
        create_plugin_manager(entry_points=False, extra=[Typo()])


def test_opt_in_arguments_hook_without_register_is_allowed():
    class NoArgs:
        @hookimpl
        def rlkit_register_judges(self):
            pass

    Registry(create_plugin_manager(entry_points=False, extra=[NoArgs()]))


def test_kinds_match_hookspecs():
    from rlkit.core import hookspecs

    for kind in KINDS:
        assert hasattr(hookspecs, kind.hook), kind.hook


@dataclass
class _DCParams:
    alpha: float = 0.5
    mode: str = "a"


class _PydParams(pydantic.BaseModel):
    alpha: float = 0.5


@pytest.mark.parametrize("schema", [_DCParams, _PydParams])
def test_params_bound_against_schema(schema):
    class Factory(_Stub):
        Params = schema

        def __init__(self, params):
            self.params = params

    class P:
        @hookimpl
        def rlkit_register_aggregators(self, register):
            register("thing", Factory)

    reg = Registry(create_plugin_manager(entry_points=False, extra=[P()]))
    built = reg.create("aggregator", "thing", {"alpha": "0.25"}, where="aggregator.params (x.yaml)")
    assert built.params.alpha == 0.25
    with pytest.raises(ConfigError) as err:
        reg.create("aggregator", "thing", {"alpah": 1}, where="aggregator.params (x.yaml)")
    assert "unknown key 'alpah'" in str(err.value) and "x.yaml" in str(err.value)
    assert "valid keys: alpha" in str(err.value)
    with pytest.raises(ConfigError, match="alpha"):
        reg.create("aggregator", "thing", {"alpha": "lots"}, where="aggregator.params (x.yaml)")


def test_plugin_without_params_rejects_params():
    class P:
        @hookimpl
        def rlkit_register_aggregators(self, register):
            register("bare", _factory)

    reg = Registry(create_plugin_manager(entry_points=False, extra=[P()]))
    reg.create("aggregator", "bare")
    with pytest.raises(ConfigError, match="takes no params"):
        reg.create("aggregator", "bare", {"x": 1})


def test_register_rejects_non_callable_and_empty_name():
    class Bad:
        @hookimpl
        def rlkit_register_judges(self, register):
            register("x", 42)

    with pytest.raises(PluginError, match="non-callable"):
        Registry(create_plugin_manager(entry_points=False, extra=[Bad()]))


def test_every_builtin_plugin_package_ships_in_the_wheel():
    import pkgutil
    from pathlib import Path

    import rlkit_plugins

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    declared = set(tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
                   ["tool"]["setuptools"]["packages"])
    found = {info.name for info in pkgutil.walk_packages(rlkit_plugins.__path__, "rlkit_plugins.") if info.ispkg}
    assert found <= declared, f"add {sorted(found - declared)} to [tool.setuptools] packages"


def test_building_the_registry_and_the_door_import_no_heavy_library():
    """`rlkit plugins` and `rlkit validate` answer in well under a second because building the registry (every
    plugin module, through the door) imports neither torch nor Lightning nor transformers: they load when a plugin
    first computes something."""
    code = ("import sys; from rlkit.core.registry import load_registry; load_registry(); import rlkit.plugin; "
            "print(*sorted(m for m in ('torch', 'lightning', 'transformers', 'numpy') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.split()
    assert loaded == []
