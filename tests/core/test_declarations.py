"""Every declaration a plugin's kind asks for is checked when the plugin is built: a third-party objective written
from the docs that missed one failed `rlkit fit` in a traceback at the step that read it; now `rlkit validate` says
which, in one line. (Every built-in is built through the same check by the contract suites in
tests/plugins/test_contracts.py.)"""

from __future__ import annotations

import pytest

from rlkit.cli import main
from rlkit.core import registry as registry_module
from rlkit.core.errors import PluginError
from rlkit.core.registry import Registry, create_plugin_manager
from rlkit.plugin import hookimpl


class _Reinforce:
    """A REINFORCE-with-baseline objective as a plugin author first wrote it: no mask_truncated_completions."""

    signal = "advantages"
    num_iterations = 1
    needs_old_logprobs = False
    reference_use = None

    def __init__(self, params: object = None) -> None:
        pass

    def loss(self, inputs):
        return -(inputs.advantages.unsqueeze(1) * inputs.logp * inputs.mask).sum() / inputs.num_tokens, {}


class _Pairs(_Reinforce):
    signal = "pairs"
    mask_truncated_completions = False


class _Shout(_Reinforce):
    signal = "rewards"
    mask_truncated_completions = False


class _ThirdParty:
    @hookimpl
    def rlkit_register_objectives(self, register):
        register("reinforce", _Reinforce)
        register("pairs_without_targets", _Pairs)
        register("shout", _Shout)


@pytest.fixture
def with_third_party(monkeypatch):
    def load_registry():
        return Registry(create_plugin_manager(entry_points=False, extra=[_ThirdParty()]))

    monkeypatch.setattr(registry_module, "load_registry", load_registry)
    return load_registry()


@pytest.mark.parametrize(("name", "expected"), [
    ("reinforce", "objective 'reinforce' (from "),
    ("reinforce", "does not declare mask_truncated_completions, which every objective must have"),
    ("pairs_without_targets", "does not declare pair_targets"),
    ("shout", "declares signal 'rewards'; it must be one of advantages, pairs, demonstrations"),
])
def test_a_missing_declaration_fails_validate_in_one_line(with_third_party, capsys, tmp_path, name, expected):
    (tmp_path / "objective").mkdir()
    (tmp_path / "objective" / f"{name}.yaml").write_text(f"name: {name}\n")  # the plugin's one YAML
    assert main(["validate", "--config-dir", str(tmp_path), f"objective={name}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith("rlkit: error: ") and "Traceback" not in err
    assert expected in err and "rlkit_register_objectives contract" in err
    if "does not declare" in expected:  # it names the protocol that lists every member, with its contract
        assert "(rlkit.plugin.ObjectiveProtocol)" in err


def test_the_error_is_a_plugin_error_naming_the_contract(with_third_party):
    with pytest.raises(PluginError) as caught:
        with_third_party.create("objective", "reinforce", {})
    assert caught.value.where == "the rlkit_register_objectives contract: docs/plugin-api.md"


def test_the_plugin_api_page_lists_every_kinds_declarations_and_every_objective_input():
    import dataclasses
    from pathlib import Path

    from rlkit.core.objective import CompletionLossInputs, PairLossInputs
    from rlkit.core.registry import KINDS

    page = (Path(__file__).resolve().parents[2] / "docs" / "plugin-api.md").read_text()
    for kind in KINDS:
        row = next(line for line in page.splitlines() if line.startswith("| `") and f"| `{kind.hook}` |" in line)
        assert all(f"`{name}`" in row for name in kind.declares), kind.key
    for cls in (CompletionLossInputs, PairLossInputs):
        for field in dataclasses.fields(cls):
            assert f"`{field.name}`" in page, f"{cls.__name__}.{field.name}"
