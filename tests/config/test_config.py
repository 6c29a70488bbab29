"""Every option of every config group composes and validates; plugin params bind to their schemas."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from rlkit import ConfigError, PluginError
from rlkit.config import check_config, compose_config, config_source
from rlkit.config.compose import _search_roots
from rlkit.core.errors import RubricError
from rlkit.core.registry import KINDS_BY_GROUP, Registry, create_plugin_manager
from rlkit.core.rubric import load_rubric

CONF = Path(__file__).resolve().parents[2] / "conf"

NOT_GROUPS = {"rubric_files"}  # rubric files, loaded by tests/core/test_rubric.py


def _all_options() -> list[tuple[str, str]]:
    registry = Registry(create_plugin_manager())
    found = set()
    for root in _search_roots(registry):
        for yaml_file in root.rglob("*.yaml"):
            rel = yaml_file.relative_to(root)
            if len(rel.parts) == 1 or rel.parts[0] in NOT_GROUPS:
                continue  # the primary config
            found.add(("/".join(rel.parts[:-1]), yaml_file.stem))
    return sorted(found)


OPTIONS = _all_options()


def test_glob_finds_every_group():
    groups = {g for g, _ in OPTIONS}
    assert {"model", "data", "rubric", "judge", "aggregator", "advantage", "weights", "objective",
            "trainer", "logger", "experiment"} <= groups
    assert ("judge", "anchor_overlap") in OPTIONS, "plugin search paths are globbed too"


@pytest.fixture
def records_file(tmp_path: Path) -> Path:
    path = tmp_path / "prompts.jsonl"
    path.write_text(json.dumps({"prompt": "1+1=", "reference": "2"}) + "\n")
    return path


# Validating judge=reward_api asks its server what it judges: tests/serve/test_serve.py validates it against a live one.
# judge=grm names the folder rlkit train-grm saved: tests/grm/test_grm.py validates it with one it trained.
# judge=reward_model names the folder rlkit train-rm saved: tests/grm/test_reward_model.py validates it likewise.
NEEDS_SERVER = {("judge", "reward_api"), ("judge", "grm"), ("judge", "reward_model")}
DEFINITIONS = "pkg://rlkit.conf/tasks/learner_definitions.jsonl"
# A multi-turn environment renders its turns with a chat template, which the embedded policy's tokenizer lacks.
NEEDS_MORE = {("environment", "tools"): ["model.chat_template=pkg://rlkit.templates/chat/tiny_tools.jinja"],
              # its chat options shape the synthetic task, which a data file replaces
              ("experiment", "smollm2_arithmetic"): ["data.chat=false", "data.instruction=null"],
              # its rule checks read the records' `forms`, which the shipped prompts have (its model judge, llama_cpp,
              # takes the tiny GGUF that tests/conftest.py names as the installed judge model)
              ("rubric", "learner_definition"): [f"data.path={DEFINITIONS}"],
              ("experiment", "smollm2_definitions"): [f"data.path={DEFINITIONS}"]}

@pytest.mark.parametrize(("group", "option"), [o for o in OPTIONS if o not in NEEDS_SERVER],
                         ids=[f"{g}={o}" for g, o in OPTIONS if (g, o) not in NEEDS_SERVER])
def test_every_option_composes_and_validates(registry, group, option, records_file):
    if (group, option) == ("rubric", "per_record"):
        # each record names its own rubric, which validation loads: here one inline
        own = {"name": "own", "version": "1", "dimensions": [
            {"name": "sum", "type": "binary", "category": "essential", "checks": [{"type": "match"}]}]}
        records_file.write_text(json.dumps({"prompt": "1+1=", "reference": "2", "rubric": own}) + "\n")
    cfg = compose_config(registry, [f"{group}={option}", f"data.path={records_file}",
                                    *NEEDS_MORE.get((group, option), [])])
    if cfg.trainer.get("accelerator") == "gpu" and not torch.cuda.is_available():
        # trainer=fsdp asks for GPUs: validate refuses it on a machine without (tests/config/test_machine.py)
        with pytest.raises(ConfigError, match="no CUDA GPU"):
            check_config(cfg, registry)
        cfg = compose_config(registry, [f"{group}={option}", f"data.path={records_file}", "trainer.accelerator=cpu"])
    validated = check_config(cfg, registry)
    kind = KINDS_BY_GROUP.get(group)
    if kind is not None:
        node = cfg[group][option] if kind.many else cfg[group]  # a list group holds each under its name
        assert validated.plugin_names[kind.key] == node.name
        # the YAML's params bound against the plugin's schema
        entry = registry.get(kind.key, node.name)
        registry.validate_params(kind.key, node.name, OmegaConf.to_container(node.params), where=group)
        assert entry.name == option, "a plugin's YAML is named after the plugin"


def test_a_multi_turn_environment_without_a_chat_template_is_refused_before_the_run(registry):
    with pytest.raises(ConfigError, match="multi-turn environment needs a chat template") as caught:
        check_config(compose_config(registry, ["environment=tools"]), registry)
    assert caught.value.where == "model.chat_template"


def test_default_config_validates_without_data_file(registry):
    validated = check_config(compose_config(registry), registry)
    assert validated.records is None
    assert validated.rubric.name == "arithmetic"
    assert set(validated.plugin_names) == {"judge", "aggregator", "advantage_estimator", "weight_scheduler",
                                           "objective", "generator", "prompt_sampler", "environment"}


def test_trl_hyperparameter_names(registry):
    cfg = compose_config(registry)
    assert cfg.num_generations == 8 and cfg.max_completion_length > 0
    assert cfg.objective.params.beta == 0.04 and cfg.objective.params.epsilon == 0.2
    assert cfg.objective.params.num_iterations == 1 and cfg.objective.params.loss_type == "grpo"
    assert cfg.advantage.params.scale_rewards == "group"


def test_unknown_plugin_lists_registered(registry):
    with pytest.raises(PluginError, match=r"unknown judge 'nope'; available judges: .*rule \(rlkit\)"):
        compose_config(registry, ["judge=nope"])


def test_plugin_named_by_name_only_still_checked(registry):
    with pytest.raises(PluginError, match="unknown aggregator 'nope'"):
        check_config(compose_config(registry, ["aggregator.name=nope"]), registry)


def test_misspelled_param_names_key_and_file(registry):
    with pytest.raises(ConfigError) as err:
        check_config(compose_config(registry, ["+judge.params.case_sensitiv=true"]), registry)
    msg = str(err.value)
    assert "unknown key 'case_sensitiv'" in msg and "valid keys: case_sensitive" in msg
    assert str(CONF / "judge" / "rule.yaml") in msg


def test_bad_param_value_names_field(registry):
    with pytest.raises(ConfigError, match=r"advantage.params \(.*conf/advantage/grpo\.yaml\).*scale_rewards"):
        check_config(compose_config(registry, ["advantage.params.scale_rewards=sometimes"]), registry)


def test_a_declared_key_needs_no_plus_and_an_undeclared_one_is_named_at_once(registry):
    # a param the llm judge declares but its YAML leaves out, and a Lightning argument, set as a user types them
    cfg = compose_config(registry, ["judge=llm", "judge.params.backend.params.slots=4", "trainer.min_steps=1"])
    validated = check_config(cfg, registry)
    assert cfg.judge.params.backend.params.slots == 4 and validated.cfg.trainer.min_steps == 1
    with pytest.raises(ConfigError, match=r"judge.params.*unknown key 'nope' for judge 'rule'; valid keys"):
        check_config(compose_config(registry, ["judge.params.nope=1"]), registry)
    with pytest.raises(ConfigError, match=r"trainer.max_step: unknown key.*did you mean 'max_steps'\?"):
        check_config(compose_config(registry, ["trainer.max_step=3"]), registry)
    with pytest.raises(ConfigError, match=r"optim.learning_rate: unknown key; valid keys: lr, "):
        check_config(compose_config(registry, ["optim.learning_rate=1e-4"]), registry)
    # Hydra's own keys are Hydra's: rlkit does not check them, so it does not add them either
    with pytest.raises(ConfigError, match=r"cannot set 'hydra.nope'.*\+hydra.nope=.*\+\+hydra"):
        compose_config(registry, ["hydra.nope=1"])


def test_unknown_names_and_keys_say_what_was_meant(registry, tmp_path):
    with pytest.raises(PluginError, match=r"unknown judge 'rul'; available judges: .*; did you mean 'rule'\?"):
        compose_config(registry, ["judge=rul"])
    with pytest.raises(ConfigError, match=r"unknown key 'case_sensitiv'.*did you mean 'case_sensitive'\?"):
        check_config(compose_config(registry, ["+judge.params.case_sensitiv=true"]), registry)
    rubric = tmp_path / "rubric.yaml"
    shipped = (CONF / "rubric_files" / "arithmetic.yaml").read_text()
    rubric.write_text(shipped.replace("    weight: 1.0", "    wieght: 1.0"))
    with pytest.raises(RubricError, match=r"dimensions\[0\]\(format\).wieght: unknown key; valid keys: name, .*"
                                          r"did you mean 'weight'\?"):
        load_rubric(rubric)


def test_non_plugin_group_schema(registry):
    with pytest.raises(ConfigError, match=r"objective.params.*objective/policy_gradient.yaml.*beta"):
        check_config(compose_config(registry, ["objective.params.beta=-1"]), registry)
    with pytest.raises(ConfigError,
                       match=r"no option 'nope' in config group 'model'; available: smollm2, tiny, tiny_random"):
        compose_config(registry, ["model=nope"])


def test_missing_model_path(registry, tmp_path):
    with pytest.raises(ConfigError, match=r"model.name_or_path.*no such model directory"):
        check_config(compose_config(registry, [f"model.name_or_path={tmp_path}/absent"]), registry)
    with pytest.raises(ConfigError, match="no config.json"):
        check_config(compose_config(registry, [f"model.name_or_path={tmp_path}"]), registry)


def test_corrupt_or_truncated_weights_fail_validate_naming_the_file(registry, tmp_path):
    import struct

    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    header = json.dumps({"w": {"dtype": "F32", "shape": [64], "data_offsets": [0, 256]}}).encode()
    whole = struct.pack("<Q", len(header)) + header + b"\0" * 256
    (model / "model.safetensors").write_bytes(whole[:-100])  # a copy cut short
    with pytest.raises(ConfigError, match=r"model.name_or_path \(.*\): model.safetensors is truncated: "
                                          rf"{len(whole) - 100} bytes, its header describes {len(whole)}"):
        check_config(compose_config(registry, [f"model.name_or_path={model}"]), registry)
    (model / "model.safetensors").write_bytes(b"\x05\x00")
    with pytest.raises(ConfigError, match="model.safetensors is corrupt or truncated: its safetensors header"):
        check_config(compose_config(registry, [f"model.name_or_path={model}"]), registry)
    (model / "model.safetensors").unlink()
    (model / "pytorch_model.bin").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="pytorch_model.bin is corrupt or truncated: not the zip archive"):
        check_config(compose_config(registry, [f"model.name_or_path={model}"]), registry)


def test_config_source_names_plugin_yaml(registry):
    assert config_source(registry, "judge", "anchor_overlap").endswith("conf/judge/anchor_overlap.yaml")
    assert "rlkit_example_plugin" in config_source(registry, "judge", "anchor_overlap")


def test_experiment_preset_overrides_globals(registry):
    cfg = compose_config(registry, ["experiment=quick"])
    assert cfg.num_generations == 4 and cfg.trainer.max_steps == 5


@pytest.mark.parametrize(("overrides", "message"), [
    (["model.reference=none"], r"model.reference \(.*tiny.yaml\): model.reference=none leaves no reference"),
    (["model.reference=adapter_off"], "adapter_off needs LoRA adapters"),
    (["model.lora.save=both"], r"model.lora.save"),
    (["model.lora.r=-1"], r"model.lora.r"),
])
def test_reference_and_lora_settings_are_checked(registry, overrides, message):
    with pytest.raises(ConfigError, match=message):
        check_config(compose_config(registry, overrides), registry, read_data=False)


def test_reference_none_is_fine_without_kl(registry):
    check_config(compose_config(registry, ["model.reference=none", "objective.params.beta=0"]), registry)
    check_config(compose_config(registry, ["model.reference=adapter_off", "model.lora.r=8"]), registry)


def test_a_mapping_override_into_an_empty_mapping_needs_no_plus(registry):
    for override in ("weights.params.weights={correctness:3}", "++weights.params.weights={correctness:3}"):
        cfg = compose_config(registry, [override])
        assert check_config(cfg, registry).plugins["weight_scheduler"].params.weights == {"correctness": 3}


def test_gdpo_with_another_aggregator_warns_that_it_only_feeds_the_log(registry):
    with pytest.warns(UserWarning, match="aggregator=geometric only feeds the logged reward"):
        check_config(compose_config(registry, ["advantage=gdpo", "aggregator=geometric"]), registry)


def test_the_trainer_arguments_rlkit_checks_are_lightnings_own():
    """`trainer.*` keys are checked against a written-out list (importing Lightning to read its signature cost 5 s of
    every `rlkit validate`): it must stay the installed Lightning's."""
    import inspect

    import lightning as L

    from rlkit.config.schemas import TRAINER_ARGUMENTS

    assert set(TRAINER_ARGUMENTS) == set(inspect.signature(L.Trainer.__init__).parameters) - {"self"}
