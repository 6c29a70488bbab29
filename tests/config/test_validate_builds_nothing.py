"""``rlkit validate`` checks without building anything heavy (no weights loaded, no engine started, no port bound),
and ``rlkit fit`` parses its command line once and builds the run's parts once per job (the issue's "build apart from
check"). Counted on real code: Python's audit events, Hydra's own argument parser and composer, and a plugin that
counts its builds."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from rlkit.cli import main
from rlkit.core.registry import Registry, create_plugin_manager, hookimpl

# In a process of its own: audit hooks cannot be removed, and which modules are loaded says nothing in a test process
# that other tests have loaded them into. transformers.modeling_utils is what loading any model imports (AutoConfig,
# which reads config.json, does not).
_PROBE = """
import json, sys
spawned, bound = [], []

def watch(event, args):
    if event == "subprocess.Popen":
        spawned.append(str(args[0]))
    elif event == "socket.bind":
        bound.append(repr(args[1]))

sys.addaudithook(watch)
from rlkit.cli import main

code = main(sys.argv[1:])
loaded = sorted(m for m in ("transformers.modeling_utils", "xllamacpp", "lightning")
                if m in sys.modules)
print(json.dumps({"code": code, "spawned": spawned, "bound": bound, "loaded": loaded}))
"""


def test_validate_loads_no_weights_starts_no_engine_and_binds_no_port(tmp_path):
    from safetensors.numpy import save_file

    model = tmp_path / "policy"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "num_hidden_layers": 2,
        "intermediate_size": 128, "vocab_size": 1000, "num_attention_heads": 4, "num_key_value_heads": 4}))
    save_file({"model.embed_tokens.weight": np.zeros((1000, 64), dtype=np.float32)}, str(model / "model.safetensors"))
    # judge=llm asks a llama.cpp engine rlkit starts on a port of its own (the session's tiny GGUF): validate must
    # check that it could start, and not start it
    done = subprocess.run([sys.executable, "-c", _PROBE, "validate", "judge=llm", f"model.name_or_path={model}",
                           "model.lora.r=8", "optim.lr=1e-5"], capture_output=True, text=True, timeout=300)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["code"] == 0, done.stderr
    assert report == {"code": 0, "spawned": [], "bound": [], "loaded": []}


def test_a_missing_model_is_one_line_beside_the_other_mistakes(capsys, tmp_path):
    code = main(["validate", f"model.name_or_path={tmp_path / 'no_model'}", "batch_size=0", "judge.name=nope"])
    lines = [x for x in capsys.readouterr().err.splitlines() if x.startswith("rlkit: error:")]
    assert code == 2 and len(lines) == 3, lines
    assert "batch_size: must be >= 1" in lines[0] and "unknown judge 'nope'" in lines[1]
    assert f"model.name_or_path ({tmp_path / 'no_model'}): no such model directory" in lines[2]


class _CountedWeights:
    """``weights=constant`` registered again as ``counted``, counting how often it is built."""

    def __init__(self) -> None:
        self.constant = Registry(create_plugin_manager(entry_points=False)).get("weight_scheduler", "constant")
        self.built = 0

    @hookimpl
    def rlkit_register_weight_schedulers(self, register):
        def build(params):
            self.built += 1
            return self.constant.factory(params)

        build.Params = self.constant.schema
        register("counted", build)


@pytest.fixture
def counted(monkeypatch):
    """The run's registry with the counting plugin, and counters on Hydra's own argument parser (rlkit's parses: Hydra's
    main took its own reference at import) and compose API (rlkit's compositions: Hydra's main composes its job's
    config, twice, through its internals)."""
    import hydra
    import hydra._internal.utils as hydra_utils

    import rlkit.core.registry as registry_module

    plugin, calls = _CountedWeights(), {"parses": 0, "compositions": 0}
    monkeypatch.setattr(registry_module, "load_registry",
                        lambda: Registry(create_plugin_manager(extra=[plugin])))
    parser, compose = hydra_utils.get_args_parser, hydra.compose

    def counted_parser(*args, **kwargs):
        calls["parses"] += 1
        return parser(*args, **kwargs)

    def counted_compose(*args, **kwargs):
        calls["compositions"] += 1
        return compose(*args, **kwargs)

    monkeypatch.setattr(hydra_utils, "get_args_parser", counted_parser)
    monkeypatch.setattr(hydra, "compose", counted_compose)
    return plugin, calls


def test_validate_parses_composes_and_builds_once(counted, capsys):
    plugin, calls = counted
    assert main(["validate", "weights.name=counted"]) == 0
    assert "weight_scheduler: counted" in capsys.readouterr().out
    assert (plugin.built, calls["parses"], calls["compositions"]) == (1, 1, 1)


def test_fit_parses_once_and_builds_its_parts_once(counted, tmp_path, capsys):
    plugin, calls = counted
    code = main(["fit", "weights.name=counted", "trainer.max_steps=1", "batch_size=2", "num_generations=2",
                 "logger=none", "model.warm_start.steps=0", f"hydra.run.dir={tmp_path / 'run'}"])
    assert code == 0, capsys.readouterr().err
    # one parse of the command line, one composition to check it before Hydra makes a run folder (Hydra's main then
    # composes its job's config itself); the job trains with the parts the check built
    assert (plugin.built, calls["parses"], calls["compositions"]) == (1, 1, 1)
