"""A judge or GRM too big for one device: accelerate plans the device map (``device_map``, ``max_memory``,
``offload_folder``), modules beyond ``max_memory`` are offloaded to disk, and the answers stay the same. Tested on
the CPU with a tiny model saved locally and a ``max_memory`` smaller than it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from rlkit import ConfigError
from rlkit.cli import main
from rlkit.core.registry import load_registry
from rlkit.core.types import Rollout
from rlkit.lm.models import build_tiny_policy
from rlkit.lm.placement import plan_placement
from rlkit_plugins.backends.hf import HFBackend
from rlkit_plugins.judges.grm import GrmJudge

# The prompt is the last message's text, so each chat gets its own answer (see tests/plugins/test_judge_backends.py).
LAST_TEXT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
CHATS = [[{"role": "user", "content": "What is 2+2?"}], [{"role": "user", "content": "abc 7"}],
         [{"role": "system", "content": "You grade."}, {"role": "user", "content": "Rate it: ok"}]]
WHERE = "judge.params.backend.params"


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # the machine is shared: more threads only fight
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    """The tiny policy with a chat template, and a GRM format its 128 positions can read."""
    from transformers import AutoTokenizer

    folder = tmp_path_factory.mktemp("models") / "tiny"
    shutil.copytree(build_tiny_policy(cache_dir=tmp_path_factory.mktemp("cache")), folder)
    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    tokenizer.chat_template = LAST_TEXT_TEMPLATE
    tokenizer.save_pretrained(folder)
    (folder / "grm.json").write_text(json.dumps({"format": {
        "pairwise_template": "grm/pairwise_compact.jinja", "listwise_template": "grm/listwise_compact.jinja",
        "max_response_chars": 16}}))
    return folder


@pytest.fixture(scope="module")
def small_cap(model_dir) -> dict[str, str]:
    """A CPU budget of 60% of the weights: some modules must go to disk."""
    size = (model_dir / "model.safetensors").stat().st_size
    return {"cpu": f"{int(size * 0.6) // 1000}KB"}


def _placed(model: object) -> dict[str, object]:
    return dict(getattr(model, "hf_device_map", None) or {})


def test_hf_backend_offloads_to_disk_and_answers_the_same(model_dir, small_cap, tmp_path):
    whole = HFBackend(HFBackend.Params(model=str(model_dir), max_new_tokens=8, batch_size=2))
    offloaded = HFBackend(HFBackend.Params(model=str(model_dir), max_new_tokens=8, batch_size=2, device_map="auto",
                                           max_memory=small_cap, offload_folder=str(tmp_path / "offload")))
    try:
        expected = [c.text for c in whole.complete(CHATS)]
        got = [c.text for c in offloaded.complete(CHATS)]
        assert _placed(whole._model) == {}, "device_map null loads the model whole, as before"
        placed = _placed(offloaded._model)
        assert "disk" in placed.values() and "cpu" in placed.values(), placed
    finally:
        whole.close()
        offloaded.close()
    assert len(set(expected)) > 1 and got == expected  # greedy answers do not depend on where the weights live


def test_grm_judge_offloads_to_disk_and_scores_the_same(model_dir, small_cap, tmp_path):
    rollout = Rollout(records=[{"prompt": "1+1=", "reference": "2"}, {"prompt": "3+4="}],
                      completions=[["2", "3", "11"], ["7", "x", "34"]])
    rubric = None  # the GRM judge reads only the rollout
    whole = GrmJudge(GrmJudge.Params(model=str(model_dir), batch_size=4))
    offloaded = GrmJudge(GrmJudge.Params(model=str(model_dir), batch_size=4, device_map="auto",
                                         max_memory=small_cap, offload_folder=str(tmp_path / "offload")))
    whole_judgement, offloaded_judgement = whole.assess(rollout, rubric), offloaded.assess(rollout, rubric)
    expected, got = whole_judgement.scores, offloaded_judgement.scores
    placed = _placed(offloaded._grm.model)
    assert "disk" in placed.values(), placed
    assert torch.allclose(got, expected, atol=1e-6, rtol=0), (got, expected)
    assert torch.allclose(offloaded_judgement.confidence, whole_judgement.confidence, atol=1e-6, rtol=0)


def test_a_written_device_map_is_used_as_given(model_dir, tmp_path):
    mapping = {"model.embed_tokens": "cpu", "lm_head": "cpu", "model.layers": "disk", "model.norm": "cpu",
               "model.rotary_emb": "cpu"}
    backend = HFBackend(HFBackend.Params(model=str(model_dir), max_new_tokens=4, device_map=mapping,
                                         offload_folder=str(tmp_path / "offload")))
    try:
        assert backend.complete(CHATS[:1])[0].text is not None
        assert _placed(backend._model) == mapping
    finally:
        backend.close()


@pytest.mark.parametrize(("params", "key", "words"), [
    ({"device_map": "auto", "max_memory": {"cpu": "lots"}}, "max_memory", "'lots' is not a size"),
    ({"device_map": "auto", "max_memory": {"cpu": -5}}, "max_memory", "-5 is not a size"),
    ({"device_map": "auto", "max_memory": {"gpu": "1GB"}}, "max_memory", "unknown device 'gpu'"),
    ({"device_map": "auto", "max_memory": {99: "1GB"}}, "max_memory", "GPU 99 is not available"),
    ({"device_map": "auto", "max_memory": {}}, "max_memory", "must be a mapping of devices to sizes"),
    ({"max_memory": {"cpu": "1GB"}}, "max_memory", "only with a device_map"),
    ({"offload_folder": "/tmp/x"}, "offload_folder", "only with a device_map"),
    ({"device_map": "cpu", "max_memory": {"cpu": "1GB"}}, "max_memory", "planned map only"),
    ({"device_map": "everywhere"}, "device_map", "must be auto"),
    ({"device_map": "cuda:99"}, "device_map", "GPU 99 is not available"),
    ({"device_map": {"model": "cpu"}}, "device_map", "lm_head.weight"),
    ({"device_map": {"model": "cpu", "lm_head": "cpu", "nope": "cpu"}}, "device_map", "no module 'nope'"),
    ({"device_map": {"model": "disk", "lm_head": "cpu"}}, "offload_folder", "puts modules on disk"),
])
def test_an_ill_formed_placement_is_a_one_line_config_error(model_dir, params, key, words):
    with pytest.raises(ConfigError) as info:
        load_registry().create("judge_backend", "hf", {"model": str(model_dir), **params}, where=WHERE)
    assert info.value.where == f"{WHERE}.{key}" and words in info.value.message, str(info.value)
    assert "\n" not in str(info.value)


def test_a_model_that_cannot_fit_fails_when_built_not_when_loaded(model_dir):
    size = (model_dir / "model.safetensors").stat().st_size
    with pytest.raises(ConfigError) as info:
        HFBackend(HFBackend.Params(model=str(model_dir), device_map="auto", max_memory={"cpu": size // 3}))
    assert info.value.where == f"{WHERE}.max_memory"
    assert "does not fit" in info.value.message and "offload_folder" in info.value.message
    with pytest.raises(ConfigError, match=r"^judge\.params\.max_memory: .*does not fit"):
        GrmJudge(GrmJudge.Params(model=str(model_dir), device_map="auto", max_memory={"cpu": "1KB"}))
    with pytest.raises(ConfigError, match=r"^judge\.params\.device: device_map places the model"):
        GrmJudge(GrmJudge.Params(model=str(model_dir), device="cuda", device_map="auto"))


def test_validate_names_the_key_in_one_line(model_dir, capsys):
    code = main(["validate", "judge=llm", "judge.params.backend.name=hf",
                 f"++judge.params.backend.params={{model: '{model_dir}', device_map: auto, max_memory: {{cpu: 1KB}}}}"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("rlkit: error: judge.params.backend.params.max_memory: the model"), lines[0]


def test_null_placement_plans_nothing(model_dir):
    assert plan_placement(model_dir, where=WHERE) is None
    assert plan_placement(model_dir, device_map="cpu", where=WHERE).from_pretrained_kwargs() == {"device_map": "cpu"}
