"""`rlkit export`: a policy written as one GGUF file that transformers' GGUF loader and llama.cpp itself read back as
the same model, its tokenizer and chat template included; and every bad input as one line, exit 2."""

from __future__ import annotations

import json
import shutil
import urllib.request
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.testing import one_error_line
from rlkit.testing.gguf_files import write_tiny_gguf

torch = pytest.importorskip("torch")
pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

PROMPTS = ["What is 3 + 4?", "The quick brown fox", "Please add the numbers 10 and 20.", "Is it true?",
           "a b c d", "Think step by step.", "How many apples are there?", "0 1 2 3 (1 + 2) ="]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory) -> Path:
    """A run folder whose policy/ is a tiny LlamaForCausalLM (the tiny policy is Qwen2-style: SmolLM2 is llama)
    with a byte-level BPE tokenizer whose merges follow llama-3's split, and a ChatML template."""
    root = tmp_path_factory.mktemp("export")
    source = write_tiny_gguf(root / "tiny.gguf", architecture="llama")
    run = root / "run"
    run.mkdir()
    shutil.copytree(source, run / "policy")
    return run


def _export(capsys, *argv: str) -> Path:
    assert main(["export", *map(str, argv)]) == 0, capsys.readouterr().err
    return Path(capsys.readouterr().out.strip().splitlines()[-1])


def _load(folder: Path, gguf_file: str | None = None):
    kwargs = {"gguf_file": gguf_file} if gguf_file else {}
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, **kwargs).eval()
    return model, transformers.AutoTokenizer.from_pretrained(folder, **kwargs)


def _chat_ids(tokenizer, text: str) -> list[int]:
    return tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                         return_dict=False)


def _logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


@pytest.fixture(scope="module")
def exported(tiny_llama, tmp_path_factory) -> dict[str, Path]:
    """The tiny policy exported as f32 and q8_0 (through the command, as a user would)."""
    out = tmp_path_factory.mktemp("gguf")
    files = {}
    for kind in ("f32", "q8_0"):
        assert main(["export", str(tiny_llama), "--type", kind, "--out", str(out)]) == 0
        files[kind] = out / f"policy-{kind}.gguf"
    return files


def test_f32_export_loads_back_as_the_same_model_tokenizer_and_template(tiny_llama, exported):
    policy, tokenizer = _load(tiny_llama / "policy")
    model, loaded_tokenizer = _load(exported["f32"].parent, exported["f32"].name)
    assert model.config.model_type == "llama" and not model.config.tie_word_embeddings
    for text in PROMPTS[:3]:
        ids = _chat_ids(tokenizer, text)
        assert _chat_ids(loaded_tokenizer, text) == ids  # the chat template and the merges travelled
        # float32 written, float32 read, the permutation undone: the very same weights
        assert torch.allclose(_logits(model, ids), _logits(policy, ids), atol=1e-5, rtol=0)
    assert loaded_tokenizer.eos_token == tokenizer.eos_token == "<|im_end|>"


def test_q8_0_export_is_close_and_a_quarter_of_the_size(tiny_llama, exported):
    """Q8_0 keeps each block of 32 weights as int8 times one f16 scale: a weight moves by at most scale/2, under
    0.4% of its block's largest weight (1/254), so over two layers the logits (of order 1 here) move by a few
    hundredths; measured 0.12 at most of logits up to 3.9, so a 0.3 bound with a 5% relative norm is loose enough
    for any seed yet fails a misplaced or unpermuted tensor (an error of order one)."""
    policy, tokenizer = _load(tiny_llama / "policy")
    model, _ = _load(exported["q8_0"].parent, exported["q8_0"].name)
    ids = _chat_ids(tokenizer, PROMPTS[0])
    got, want = _logits(model, ids), _logits(policy, ids)
    assert 0 < (got - want).abs().max() < 0.3
    assert (got - want).norm() / want.norm() < 0.05
    assert exported["q8_0"].stat().st_size < 0.4 * exported["f32"].stat().st_size


def _post(url: str, path: str, body: dict) -> dict:
    request = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def test_llama_cpp_answers_greedily_as_the_policy_does(tiny_llama, exported):
    """llama.cpp itself (the judge-server extra's xllamacpp) on the f32 export: its tokenizer gives the ids rlkit's
    gives for each chat prompt, and its greedy completions are rlkit's token for token."""
    pytest.importorskip("xllamacpp", reason="llama.cpp's server is the judge-server extra")
    from rlkit.lm.llama_server import LlamaServer, LlamaServerSettings

    policy, tokenizer = _load(tiny_llama / "policy")
    server = LlamaServer(LlamaServerSettings(model=str(exported["f32"]), slots=1, context=256, threads=1,
                                             prompt_cache=False), where="test")
    try:
        url = server.ensure_running()
        ends, compared = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")}, 0
        for text in PROMPTS:
            prompt = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                   tokenize=False)
            ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            assert _post(url, "/tokenize", {"content": prompt, "add_special": True, "parse_special": True})[
                "tokens"] == ids
            with torch.no_grad():
                ours = policy.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                       max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
            theirs = _post(url, "/completion", {"prompt": ids, "n_predict": 12, "temperature": 0,
                                                "cache_prompt": False, "return_tokens": True})["tokens"]
            # llama.cpp also ends a completion on "<|endoftext|>" (its end-of-generation set takes that token by its
            # text), where transformers goes on to its eos: equal up to and including where llama.cpp stopped
            assert theirs == ours[:len(theirs)], text
            assert len(theirs) == 12 or theirs[-1] in ends, text
            compared += len(theirs)
        assert compared >= 4 * len(PROMPTS)  # most completions ran well past their first token
    finally:
        server.stop()


def test_hf_format_writes_a_standalone_folder(tiny_llama, tmp_path, capsys):
    out = _export(capsys, tiny_llama, "--format", "hf", "--out", tmp_path / "hf")
    assert out == tmp_path / "hf" and (out / "config.json").is_file() and (out / "tokenizer.json").is_file()
    model, tokenizer = _load(out)
    policy, _ = _load(tiny_llama / "policy")
    ids = _chat_ids(tokenizer, PROMPTS[0])
    assert torch.equal(_logits(model, ids), _logits(policy, ids))


def test_a_lora_policy_is_merged_before_export(tiny_llama, tmp_path, capsys, monkeypatch):
    """A LoRA run saves its adapter alone; the export is the merge, not the base."""
    peft = pytest.importorskip("peft")
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    base, tokenizer = _load(tiny_llama / "policy")
    lora = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                     init_lora_weights=False))
    run = tmp_path / "lora-run"
    lora.save_pretrained(run / "policy")
    tokenizer.save_pretrained(run / "policy")
    ids = _chat_ids(tokenizer, PROMPTS[0])
    want = _logits(lora, ids)
    out = _export(capsys, run, "--out", tmp_path / "lora.gguf")
    model, _ = _load(out.parent, out.name)
    got = _logits(model, ids)
    assert torch.allclose(got, want, atol=1e-4)
    with lora.disable_adapter():
        assert not torch.allclose(got, _logits(lora, ids), atol=1e-3)  # the adapter changed something


def test_bad_input_is_one_line_and_writes_nothing(tiny_llama, tmp_path, capsys):
    empty_run = tmp_path / "empty-run"
    (empty_run / "checkpoints").mkdir(parents=True)
    (empty_run / "checkpoints" / "last.ckpt").write_bytes(b"x")
    gpt2 = tmp_path / "gpt2-run"
    shutil.copytree(tiny_llama / "policy", gpt2 / "policy")
    config = json.loads((gpt2 / "policy" / "config.json").read_text())
    (gpt2 / "policy" / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = [
        ([empty_run], "holds no trained policy", "rlkit fit ckpt_path="),
        ([tmp_path / "missing"], "no such run or policy folder", None),
        ([empty_run / "checkpoints" / "last.ckpt"], "a Lightning checkpoint", None),
        ([gpt2], "'gpt2' model; GGUF export supports llama, qwen2", None),
        ([tiny_llama, "--out", afile / "m.gguf"], "--out: cannot create", None),
        ([tiny_llama, "--type", "q4_k"], "--type: unknown type 'q4_k'", "f32, f16, q8_0"),
        ([tiny_llama, "--format", "onnx"], "--format: unknown format", None),
    ]
    for argv, expected, also in cases:
        line = one_error_line(main(["export", *map(str, argv)]), capsys.readouterr().err)
        assert expected in line and (also is None or also in line), line
    assert afile.read_text() == "x" and not list(gpt2.glob("*.gguf")) and not list(tiny_llama.glob("*.gguf"))
