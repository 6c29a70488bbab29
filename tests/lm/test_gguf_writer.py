"""rlkit.testing.gguf_files writes GGUF files that transformers' own GGUF loader reads back as the source model and
tokenizer: the same logits, the same token ids, the same chat template."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from rlkit.testing.gguf_files import truncate_file, write_tiny_gguf

torch = pytest.importorskip("torch")
pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

ARCHITECTURES = ["llama", "qwen2"]
TOKEN_IDS = [[5, 100, 200, 300, 17, 42, 7, 2]]
TEXT = "What is 3 + 4?"
CHAT = [{"role": "user", "content": TEXT}]


def _load_gguf(gguf: Path):
    model = transformers.AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer = transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    return model.eval(), tokenizer


def _load_source(source: Path):
    model = transformers.AutoModelForCausalLM.from_pretrained(source)
    tokenizer = transformers.AutoTokenizer.from_pretrained(source)
    return model.eval(), tokenizer


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor(TOKEN_IDS)).logits


def _chat_ids(tokenizer) -> list[int]:
    rendered = tokenizer.apply_chat_template(CHAT, add_generation_prompt=True, tokenize=True)
    return list(rendered["input_ids"] if isinstance(rendered, dict | transformers.BatchEncoding) else rendered)


@pytest.fixture(params=ARCHITECTURES)
def architecture(request) -> str:
    return request.param


@pytest.fixture
def written(tmp_path: Path, architecture: str) -> tuple[Path, Path]:
    gguf = tmp_path / f"tiny-{architecture}.gguf"
    source = write_tiny_gguf(gguf, architecture=architecture)
    return gguf, source


def test_files_are_where_the_docstring_says(written: tuple[Path, Path], architecture: str) -> None:
    gguf, source = written
    assert gguf.is_file() and gguf.read_bytes()[:4] == b"GGUF"
    assert source == gguf.parent / f"tiny-{architecture}-source"
    assert (source / "config.json").is_file() and (source / "tokenizer.json").is_file()


def test_transformers_loads_the_architecture(written: tuple[Path, Path], architecture: str) -> None:
    gguf, source = written
    model, _ = _load_gguf(gguf)
    reference, _ = _load_source(source)
    assert model.config.model_type == architecture
    for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads"):
        assert getattr(model.config, key) == getattr(reference.config, key), key
    assert model.config.tie_word_embeddings == reference.config.tie_word_embeddings
    assert model.config.eos_token_id == reference.config.eos_token_id


def test_logits_match_the_source_model(written: tuple[Path, Path]) -> None:
    gguf, source = written
    model, _ = _load_gguf(gguf)
    reference, _ = _load_source(source)
    expected, actual = _logits(reference), _logits(model)
    assert expected.abs().max() > 0.5  # logits of order one, so a misplaced weight would show
    assert torch.allclose(actual, expected, atol=1e-4), (actual - expected).abs().max()


def test_tokenizer_encodes_like_the_source(written: tuple[Path, Path]) -> None:
    gguf, source = written
    _, tokenizer = _load_gguf(gguf)
    _, reference = _load_source(source)
    ids = tokenizer(TEXT)["input_ids"]
    assert ids == reference(TEXT)["input_ids"]
    assert len(ids) < len(TEXT)  # merges were applied, not only bytes
    assert tokenizer.decode(ids) == TEXT
    assert tokenizer.eos_token == reference.eos_token == "<|im_end|>"
    assert tokenizer.pad_token == reference.pad_token


def test_chat_template_survives(written: tuple[Path, Path]) -> None:
    gguf, source = written
    _, tokenizer = _load_gguf(gguf)
    _, reference = _load_source(source)
    assert tokenizer.chat_template and tokenizer.chat_template == reference.chat_template
    ids = _chat_ids(tokenizer)
    assert ids == _chat_ids(reference)
    im_start = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert ids.count(im_start) == 2 and ids.count(tokenizer.eos_token_id) == 1  # kept whole, not cut into bytes


def test_q8_0_loads_close_to_the_source(tmp_path: Path, architecture: str) -> None:
    gguf = tmp_path / "tiny-q8.gguf"
    source = write_tiny_gguf(gguf, architecture=architecture, quantization="Q8_0")
    write_tiny_gguf(tmp_path / "tiny-f32.gguf", architecture=architecture)
    assert gguf.stat().st_size < 0.5 * (tmp_path / "tiny-f32.gguf").stat().st_size
    model, _ = _load_gguf(gguf)
    reference, _ = _load_source(source)
    expected, actual = _logits(reference), _logits(model)
    assert not torch.equal(actual, expected)
    assert torch.allclose(actual, expected, atol=0.25), (actual - expected).abs().max()


def test_same_seed_same_file_and_the_callers_rng_untouched(tmp_path: Path) -> None:
    torch.manual_seed(1234)
    expected = torch.rand(3)
    torch.manual_seed(1234)
    write_tiny_gguf(tmp_path / "a" / "tiny.gguf", seed=7)
    assert torch.equal(torch.rand(3), expected)
    write_tiny_gguf(tmp_path / "b" / "tiny.gguf", seed=7)
    write_tiny_gguf(tmp_path / "c" / "tiny.gguf", seed=8)
    a, b, c = ((tmp_path / name / "tiny.gguf").read_bytes() for name in "abc")
    assert a == b and a != c


def test_truncated_copy_does_not_load(tmp_path: Path) -> None:
    gguf = tmp_path / "tiny.gguf"
    write_tiny_gguf(gguf)
    truncated = truncate_file(gguf)
    assert truncated == tmp_path / "tiny.truncated.gguf"
    data = gguf.read_bytes()
    assert truncated.read_bytes() == data[: len(data) // 2]
    with pytest.raises((ValueError, struct.error)):
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=truncated.name)


def test_rejects_what_it_cannot_write(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="architecture"):
        write_tiny_gguf(tmp_path / "x.gguf", architecture="gpt2")
    with pytest.raises(ValueError, match="quantization"):
        write_tiny_gguf(tmp_path / "x.gguf", quantization="Q4_K")
    with pytest.raises(ValueError, match="keep_fraction"):
        truncate_file(tmp_path / "x.gguf", keep_fraction=1.0)
