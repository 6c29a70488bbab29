"""The embedded tiny policy: built locally, cached atomically, loaded by path like any checkpoint."""

from __future__ import annotations

import copy
import json
import math
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlkit import ConfigError
from rlkit.lm import models
from rlkit.lm.models import TinyPolicySpec, build_tiny_policy, build_tokenizer, load_policy, resolve_policy_path


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_policy(TinyPolicySpec(), tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def policy(built: Path):
    return load_policy(built)


def test_build_writes_a_complete_hf_folder_and_nothing_else(built: Path) -> None:
    names = {p.name for p in built.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names
    assert built.name.startswith("tiny-policy-")
    # The temp build folder was renamed into place, not left beside it.
    assert [p.name for p in built.parent.iterdir()] == [built.name]


def test_second_build_reuses_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = build_tiny_policy(TinyPolicySpec(), tmp_path)
    (first / "sentinel").write_text("kept")
    mtime = (first / "model.safetensors").stat().st_mtime_ns

    def no_rebuild(*args, **kwargs):
        raise AssertionError("a complete cached folder must not be rebuilt")

    monkeypatch.setattr(models, "build_model", no_rebuild)
    second = build_tiny_policy(TinyPolicySpec(), tmp_path)
    assert second == first
    assert (second / "sentinel").read_text() == "kept"
    assert (second / "model.safetensors").stat().st_mtime_ns == mtime


def test_incomplete_folder_is_rebuilt(tmp_path: Path) -> None:
    first = build_tiny_policy(TinyPolicySpec(), tmp_path)
    (first / "model.safetensors").unlink()  # as if a non-atomic writer had been killed
    assert build_tiny_policy(TinyPolicySpec(), tmp_path) == first
    assert (first / "model.safetensors").is_file()


def test_different_spec_gives_different_folder(tmp_path: Path) -> None:
    a = build_tiny_policy(TinyPolicySpec(), tmp_path)
    b = build_tiny_policy(TinyPolicySpec(seed=1), tmp_path)
    c = build_tiny_policy(TinyPolicySpec(num_hidden_layers=1), tmp_path)
    assert len({a, b, c}) == 3
    assert not torch.equal(load_file(a / "model.safetensors")["model.embed_tokens.weight"],
                           load_file(b / "model.safetensors")["model.embed_tokens.weight"])


def test_same_spec_in_two_cache_dirs_gives_identical_weights(tmp_path: Path) -> None:
    # Different global RNG states before each build: the spec's seed alone must fix the weights.
    torch.manual_seed(1)
    a = load_file(build_tiny_policy(TinyPolicySpec(), tmp_path / "one") / "model.safetensors")
    torch.manual_seed(2)
    b = load_file(build_tiny_policy(TinyPolicySpec(), tmp_path / "two") / "model.safetensors")
    assert a.keys() == b.keys()
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_default_cache_dir_comes_from_rlkit_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "env-cache"))
    assert build_tiny_policy(TinyPolicySpec()).parent == tmp_path / "env-cache"


def test_loaded_policy_is_tiny_and_pads_left(policy) -> None:
    model, tok = policy
    assert sum(p.numel() for p in model.parameters()) < 200_000
    assert model.dtype == torch.float32
    assert tok.padding_side == "left"
    assert tok.pad_token_id is not None and tok.eos_token_id is not None
    assert tok.pad_token_id != tok.eos_token_id
    # Every token id the tokenizer can produce has an embedding row.
    assert len(tok) <= model.config.vocab_size


@pytest.mark.parametrize("text", ["12+7=19", "Answer: 42", "a  b\n(c) - 3 = x?"])
def test_tokenizer_round_trips(policy, text: str) -> None:
    _, tok = policy
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text)  # one token per character
    assert tok.decode(ids) == text


def test_build_leaves_the_global_rng_alone(tmp_path: Path) -> None:
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    build_tiny_policy(TinyPolicySpec(seed=5), tmp_path)
    assert torch.equal(torch.rand(3), expected)


def test_built_tokenizer_round_trips_before_saving() -> None:
    # The saved tokenizer loads as Qwen2Tokenizer; this covers the tokenizers-backend object itself.
    tok = build_tokenizer(TinyPolicySpec())
    text = "Answer: 12+7=19\n"
    ids = tok(text)["input_ids"]
    assert len(ids) == len(text) and tok.decode(ids) == text
    assert tok.padding_side == "left" and tok.pad_token_id != tok.eos_token_id


def test_batched_sampling_is_left_padded_and_seeded(policy) -> None:
    model, tok = policy
    batch = tok(["1+1=", "12+70="], return_tensors="pt", padding=True)
    assert batch["input_ids"][0, 0] == tok.pad_token_id and batch["attention_mask"][0, 0] == 0
    prompt_len = batch["input_ids"].shape[1]

    def sample() -> torch.Tensor:
        torch.manual_seed(123)
        return model.generate(**batch, max_new_tokens=5, do_sample=True)

    out = sample()
    assert out.shape[0] == 2 and prompt_len < out.shape[1] <= prompt_len + 5
    assert torch.equal(out[:, :prompt_len], batch["input_ids"])
    assert torch.equal(sample(), out)


def test_load_fixes_right_padding_and_missing_pad(built: Path, tmp_path: Path) -> None:
    # A checkpoint saved for training (right padding, no pad token), as many real ones are.
    ckpt = tmp_path / "ckpt"
    shutil.copytree(built, ckpt)
    cfg = json.loads((ckpt / "tokenizer_config.json").read_text())
    cfg.update(padding_side="right", pad_token=None)
    (ckpt / "tokenizer_config.json").write_text(json.dumps(cfg))
    _, tok = load_policy(ckpt)
    assert tok.padding_side == "left"
    assert tok.pad_token_id == tok.eos_token_id is not None


def test_load_missing_path_raises_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ConfigError, match=r"model\.name_or_path .*no such model directory") as err:
        load_policy(missing)
    assert err.value.where == f"model.name_or_path ({missing})"


def test_load_rejects_uncached_hub_ids_and_bad_dtype(built: Path, tmp_path: Path, monkeypatch) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    with pytest.raises(ConfigError, match="never downloads"):
        load_policy("Qwen/Qwen2.5-0.5B")  # never a hub download
    with pytest.raises(ConfigError, match="no config.json"):
        load_policy(tmp_path)
    with pytest.raises(ConfigError, match="model.dtype"):
        load_policy(built, dtype="float33")


def test_resolve_policy_path(tmp_path: Path) -> None:
    assert resolve_policy_path(None, TinyPolicySpec(), tmp_path) == build_tiny_policy(TinyPolicySpec(), tmp_path)
    with pytest.raises(ConfigError, match="no such model directory"):
        resolve_policy_path("/some/model")


def _fake_hub_cache(cache: Path, repo_id: str, model_dir: Path) -> Path:
    """The layout huggingface_hub writes: models--org--name/{snapshots/<rev>/..., refs/main}."""
    revision = "0123456789abcdef0123456789abcdef01234567"
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    shutil.copytree(model_dir, repo / "snapshots" / revision)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(revision)
    return repo / "snapshots" / revision


def test_hub_id_loads_from_the_local_hf_cache_only(tmp_path: Path, monkeypatch) -> None:
    import huggingface_hub.constants

    cache = tmp_path / "hub"
    snapshot = _fake_hub_cache(cache, "rlkit-test/tiny", build_tiny_policy(TinyPolicySpec(), tmp_path / "built"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    assert resolve_policy_path("rlkit-test/tiny") == snapshot
    model, tokenizer = load_policy("rlkit-test/tiny")
    assert model.config.vocab_size == len(tokenizer)
    with pytest.raises(ConfigError, match=r"hub id 'rlkit-test/absent' is not in the local Hugging Face cache"):
        load_policy("rlkit-test/absent")


def test_chat_prompts_use_the_tokenizer_chat_template(policy) -> None:
    from rlkit.lm.sampling import GenerationRequest, render_prompt
    from rlkit_plugins.generators.hf import HFGenerator

    _, tokenizer = policy
    messages = [{"role": "system", "content": "add"}, {"role": "user", "content": "2+2="}]
    assert render_prompt(messages, tokenizer) == "system: add\nuser: 2+2="  # no template: plain text
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}<assistant>{% endif %}")
    assert render_prompt(messages, tokenizer) == "<system>add\n<user>2+2=\n<assistant>"
    request = GenerationRequest([{"prompt": messages}, {"prompt": "1+1="}], 2, 4)
    sampled = HFGenerator(HFGenerator.Params()).generate(policy[0], tokenizer, request)
    assert len(sampled.texts) == 2 and all(len(t) == 2 for t in sampled.texts)


def test_adamw_is_fused_unless_a_mixed_precision_run_clips_gradients():
    from rlkit.lm.models import make_adamw

    params = [torch.nn.Parameter(torch.randn(3, 2))]
    assert make_adamw(params, lr=1e-3, weight_decay=0.0).defaults["fused"]
    assert make_adamw(params, lr=1e-3, weight_decay=0.0, precision="bf16-mixed").defaults["fused"]
    # Lightning's mixed-precision plugins refuse to clip for an optimiser that unscales gradients itself
    assert not make_adamw(params, lr=1e-3, weight_decay=0.0, precision="bf16-mixed",
                          clips_gradients=True).defaults["fused"]
    assert not make_adamw([torch.nn.Parameter(torch.zeros(2, dtype=torch.float64).to("meta"))], lr=1e-3,
                          weight_decay=0.0).defaults["fused"]


# Two completions: token ratios r = π_old / π_engine of (2, 1) and (0.25, 4, 1), one padding position each (ratio 9
# there, never read). Sequence products 2 and 1; geometric means sqrt(2) and 1.
_OLD = torch.log(torch.tensor([[0.5, 0.5, 0.9, 0.9], [0.1, 0.8, 0.5, 0.9]]))
_ENGINE = torch.log(torch.tensor([[0.25, 0.5, 0.1, 0.1], [0.4, 0.2, 0.5, 0.1]]))
_MASK = torch.tensor([[1.0, 1.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0]])
_S2 = 2 ** 0.5


@pytest.mark.parametrize(("level", "mode", "cap", "low", "weights", "clipped", "masked"), [
    ("token", "truncate", 1.5, 0.0, [[1.5, 1.0, 0, 0], [0.25, 1.5, 1.0, 0]], 2, 0),
    ("token", "mask", 3.0, 0.5, [[2.0, 1.0, 0, 0], [0.0, 0.0, 1.0, 0]], 0, 2),      # IcePop: 0.25 and 4 out
    ("sequence", "truncate", 1.5, 0.0, [[1.5, 1.5, 0, 0], [1.0, 1.0, 1.0, 0]], 2, 0),
    ("sequence", "mask", 1.5, 0.0, [[0.0, 0.0, 0, 0], [1.0, 1.0, 1.0, 0]], 0, 2),   # the whole first completion
    ("geometric", "truncate", 1.2, 0.0, [[1.2, 1.2, 0, 0], [1.0, 1.0, 1.0, 0]], 2, 0),
    ("geometric", "mask", 3.0, 1.2, [[_S2, _S2, 0, 0], [0.0, 0.0, 0.0, 0]], 0, 3),
])
def test_importance_correction_each_level_and_mode_by_hand(level, mode, cap, low, weights, clipped, masked):
    from rlkit.lm.logprobs import ImportanceCorrection, importance_correction

    got, sums = importance_correction(_OLD, _ENGINE, _MASK, ImportanceCorrection(level, mode, cap, low))
    assert torch.allclose(got, torch.tensor(weights, dtype=torch.float32), atol=1e-6)
    assert float(sums["clipped"]) == clipped and float(sums["masked"]) == masked
    uncorrected = {"token": 2 + 1 + 0.25 + 4 + 1, "sequence": 2 * 2 + 3 * 1, "geometric": 2 * _S2 + 3 * 1}[level]
    assert float(sums["ratio"]) == pytest.approx(uncorrected, rel=1e-5)
    # KL(engine || old) from the engine's samples, k3 per token: r - 1 - log r (0 where the two agree)
    k3 = sum(r - 1 - math.log(r) for r in (2, 1, 0.25, 4, 1))
    assert float(sums["mismatch_kl"]) == pytest.approx(k3, rel=1e-5)


def test_a_sequence_ratio_past_exp_20_is_bounded_not_infinite():
    from rlkit.lm.logprobs import ImportanceCorrection, importance_correction

    old, engine = torch.zeros(1, 30), torch.full((1, 30), -1.0)  # product e^30
    weights, sums = importance_correction(old, engine, torch.ones(1, 30), ImportanceCorrection("sequence", "mask"))
    assert torch.isfinite(sums["ratio"]) and weights.abs().sum() == 0 and float(sums["masked"]) == 30
