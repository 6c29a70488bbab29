"""`rlkit export --adapter`: a LoRA run's adapter alone as a GGUF LoRA that llama.cpp applies on top of its base GGUF
and then answers as the trained policy does; a base GGUF that does not hold the adapter's base weights refused; every
bad input one line, exit 2, nothing written."""

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
gguf = pytest.importorskip("gguf")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")

PROMPTS = ["What is 3 + 4?", "The quick brown fox", "Please add the numbers 10 and 20.", "Is it true?",
           "a b c d", "Think step by step.", "How many apples are there?", "0 1 2 3 (1 + 2) ="]


def _lora_run(base: Path, run: Path, seed: int, **lora) -> Path:
    """A run folder whose policy/ is a random, nonzero LoRA adapter (B is not zero-initialised) on ``base``, on
    every linear layer as rlkit's LoRA runs have it (target_modules all-linear)."""
    model = transformers.AutoModelForCausalLM.from_pretrained(base)
    torch.manual_seed(seed)
    adapted = peft.get_peft_model(model, peft.LoraConfig(r=4, lora_alpha=8, target_modules="all-linear",
                                                         init_lora_weights=False, **lora))
    adapted.save_pretrained(run / "policy")
    transformers.AutoTokenizer.from_pretrained(base).save_pretrained(run / "policy")
    return run


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> dict[str, Path]:
    """A tiny llama model (its original GGUF and its Hugging Face folder) and two LoRA runs on it: plain, and rsLoRA
    (peft scales it by alpha/sqrt(r), llama.cpp by alpha/r: the export must fold the difference in)."""
    root = tmp_path_factory.mktemp("lora-export")
    source = write_tiny_gguf(root / "tiny.gguf", architecture="llama")
    return {"root": root, "gguf": root / "tiny.gguf", "base": source,
            "run": _lora_run(source, root / "run", seed=0), "rslora": _lora_run(source, root / "rs", seed=1,
                                                                                use_rslora=True)}


def _export(capsys, *argv: str | Path) -> tuple[Path, str]:
    assert main(["export", *map(str, argv)]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    return Path(captured.out.strip().splitlines()[-1]), captured.err


def _policy(run: Path):
    base = transformers.AutoModelForCausalLM.from_pretrained(json.loads(
        (run / "policy" / "adapter_config.json").read_text())["base_model_name_or_path"])
    return peft.PeftModel.from_pretrained(base, run / "policy").eval()


def _text(reader, key: str) -> str:
    field = reader.fields[key]
    return bytes(field.parts[field.data[0]]).decode()


def test_the_adapter_is_written_as_llama_cpp_s_conversion_writes_it(tiny, capsys):
    out, err = _export(capsys, tiny["run"], "--adapter", "--type", "q8_0")
    assert out == tiny["run"] / "policy-lora-q8_0.gguf" and "rlkit export" in err and "--lora" in err
    reader = gguf.GGUFReader(out)
    assert (_text(reader, "general.type"), _text(reader, "adapter.type")) == ("adapter", "lora")
    assert _text(reader, "general.architecture") == "llama" and reader.fields["adapter.lora.alpha"].parts[-1][0] == 8
    tensors = {t.name: t for t in reader.tensors}
    # 2 layers x 7 linear layers (q, k, v, o, gate, up, down), an A and a B each; no base tensor, no tokenizer
    assert len(tensors) == 28 and all(name.endswith((".weight.lora_a", ".weight.lora_b")) for name in tensors)
    a, b = tensors["blk.0.attn_q.weight.lora_a"], tensors["blk.0.attn_q.weight.lora_b"]
    # ggml's order (row length first): A is rank x hidden, B hidden x rank, as llama.cpp checks them on load
    assert (a.shape.tolist(), b.shape.tolist()) == ([64, 4], [4, 64])
    # A's rows are whole 32-value blocks, B's are 4 values long: f16, the conversion script's fallback
    assert (a.tensor_type.name, b.tensor_type.name) == ("Q8_0", "F16")
    assert "tokenizer.ggml.tokens" not in reader.fields


def _post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def test_llama_cpp_with_the_adapter_on_its_base_answers_as_the_policy_does(tiny, tmp_path, capsys):
    """llama.cpp itself (the judge-server extra's xllamacpp) loads the base GGUF the export wrote and three adapters
    (``--lora``); each request picks one by its scale. With the f32 adapter the greedy completions are the policy's
    token for token and the first token's top-5 log-probs agree within 1e-4: both sides compute in float32 (the
    KV cache too, flash attention off), llama.cpp as x·W + (x·A)·B·scale where peft adds the same product, so they
    differ by float32 rounding, measured under 5e-6; an unpermuted query/key B, a wrong scale (the rsLoRA fold is a
    factor of 2 here) or a missing tensor moves them by tenths or more. q8_0 rounds A to 8-bit blocks and B to f16:
    its log-probs moved by 0.02 at most (measured), its first token agrees. Each request is one of four: an adapter
    alone (f32, q8_0, rsLoRA) or none, the base, which must answer otherwise for the comparisons to mean anything."""
    xllamacpp = pytest.importorskip("xllamacpp", reason="llama.cpp's server is the judge-server extra")
    from rlkit.lm.llama_server import LlamaServerSettings

    base_gguf = tmp_path / "base.gguf"
    f32, err = _export(capsys, tiny["run"], "--adapter", "--base", base_gguf, "--out", tmp_path)
    assert f32 == tmp_path / "policy-lora-f32.gguf" and base_gguf.is_file() and "written" in err
    q8, _ = _export(capsys, tiny["run"], "--adapter", "--type", "q8_0", "--out", tmp_path / "q8.gguf",
                    "--base", base_gguf)  # the base exists now: checked, not rewritten
    rs, _ = _export(capsys, tiny["rslora"], "--adapter", "--out", tmp_path / "rs.gguf")
    adapters = [f32, q8, rs]
    params = LlamaServerSettings(model=str(base_gguf), slots=1, context=256, threads=1, prompt_cache=False,
                                 kv_cache="f32").to_params()
    params.lora_adapters = [xllamacpp.CommonAdapterLoraInfo(str(path), 1.0) for path in adapters]
    server = xllamacpp.Server(params)
    url = server.listening_address.rstrip("/")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tiny["base"])
    ends = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")}
    policies = {"run": _policy(tiny["run"]), "rslora": _policy(tiny["rslora"])}
    compared, base_moved = 0, 0.0
    try:
        for text in PROMPTS:
            ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                return_dict=False)
            for which, (run, tolerance) in enumerate([("run", 1e-4), ("run", 0.05), ("rslora", 1e-4), ("run", None)]):
                policy = policies[run]
                with torch.no_grad():
                    ours = policy.generate(torch.tensor([ids]), attention_mask=torch.ones_like(torch.tensor([ids])),
                                           max_new_tokens=12, do_sample=False)[0, len(ids):].tolist()
                lora = [{"id": i, "scale": 1.0 if i == which else 0.0} for i in range(len(adapters))]
                answer = _post(url, {"prompt": ids, "n_predict": 12, "temperature": 0, "cache_prompt": False,
                                     "return_tokens": True, "n_probs": 5, "lora": lora})
                first = answer["completion_probabilities"][0]
                # a token that ends inside a UTF-8 character has no entry of its own: llama-server reports the
                # probabilities of the token that completes the character in its place
                step = answer["tokens"].index(first["id"])
                with torch.no_grad():
                    want = torch.log_softmax(policy(torch.tensor([ids + answer["tokens"][:step]])).logits[0, -1]
                                             .double(), -1)
                error = max(abs(p["logprob"] - want[p["id"]].item()) for p in first["top_logprobs"])
                if tolerance is None:  # every adapter off: the base alone, which answers otherwise
                    base_moved = max(base_moved, error)
                    continue
                assert error < tolerance, (text, run, which, error)
                theirs = answer["tokens"]
                assert theirs[0] == ours[0], (text, which)
                if which != 1:  # f32: token for token, up to where llama.cpp stopped on an end token
                    assert theirs == ours[:len(theirs)] and (len(theirs) == 12 or theirs[-1] in ends), (text, which)
                    compared += len(theirs)
    finally:
        del server
    assert compared >= 2 * 4 * len(PROMPTS)  # most completions ran well past their first token
    assert base_moved > 0.5  # the adapter changes what the model says: the comparisons above test it


def test_a_given_base_gguf_must_hold_the_adapters_base_weights(tiny, tmp_path, capsys):
    # the model's original GGUF: read tensor by tensor and found equal to the base the adapter trained on
    _, err = _export(capsys, tiny["run"], "--adapter", "--out", tmp_path / "a.gguf", "--base", tiny["gguf"])
    assert "its 21 tensors hold the base's weights" in err
    # a base imported from that GGUF (rlkit model import) knows the file by its hash
    assert main(["model", "import", str(tiny["gguf"]), "--out", str(tmp_path / "imported")]) == 0
    capsys.readouterr()
    run = _lora_run(tmp_path / "imported", tmp_path / "on-import", seed=2)
    _, err = _export(capsys, run, "--adapter", "--out", tmp_path / "b.gguf", "--base", tiny["gguf"])
    assert "the file the base" in err and "was imported from" in err
    other = tmp_path / "other.gguf"
    write_tiny_gguf(other, architecture="llama", seed=1)  # the same shapes, other weights
    qwen = tmp_path / "qwen.gguf"
    write_tiny_gguf(qwen, architecture="qwen2")
    capsys.readouterr()
    cases = [(other, "other.gguf is not the base the adapter was trained on"),
             (qwen, "holds a 'qwen2' model; the adapter was trained on a 'llama' model"),
             (tmp_path / "a.gguf", "a.gguf is a GGUF adapter, not a model")]
    for base, expected in cases:
        line = one_error_line(main(["export", str(tiny["run"]), "--adapter", "--out", str(tmp_path / "c.gguf"),
                                    "--base", str(base)]), capsys.readouterr().err)
        assert line.startswith("rlkit: error: --base") and expected in line, line
    assert not (tmp_path / "c.gguf").exists()


def test_bad_input_is_one_line_and_writes_nothing(tiny, tmp_path, capsys):
    whole = tmp_path / "whole-run"
    shutil.copytree(tiny["base"], whole / "policy")
    dora = _lora_run(tiny["base"], tmp_path / "dora-run", seed=3, use_dora=True)
    afile = tmp_path / "afile"
    afile.write_text("x")
    run = tiny["run"]
    capsys.readouterr()
    cases = [
        ([whole, "--adapter"], "the policy is a whole model, not a LoRA adapter"),
        ([dora, "--adapter"], "DoRA (use_dora in adapter_config.json)"),
        ([run, "--adapter", "--type", "bf16"], "--type: unknown type 'bf16'"),
        ([run, "--adapter", "--format", "hf"], "--adapter: writes a GGUF LoRA"),
        ([run, "--base", tmp_path / "base.gguf"], "--base: names the base GGUF of an adapter export; add --adapter"),
        ([run, "--adapter", "--out", afile / "a.gguf"], "--out: cannot create"),
        ([run, "--adapter", "--out", tmp_path / "x.gguf", "--base", afile / "b.gguf"], "--base: cannot create"),
        ([run, "--adapter", "--out", tmp_path / "x.gguf", "--base", afile], "--base: not a GGUF file"),
    ]
    for argv, expected in cases:
        line = one_error_line(main(["export", *map(str, argv)]), capsys.readouterr().err)
        assert expected in line, line
    written = [p.name for folder in (tmp_path, whole, dora, run) for p in folder.glob("*.gguf")]
    assert written == [] or set(written) <= {"policy-lora-q8_0.gguf"}, written  # the first test's, in run/
    assert afile.read_text() == "x"
