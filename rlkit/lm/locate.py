"""Where a model reference resolves: a local folder, a GGUF file (imported once), a LoRA adapter folder (merged
once), a ``pkg://``/``parts://`` file, or a hub id already in the local Hugging Face cache; never the network.

It sits above the builders it dispatches to (:mod:`rlkit.lm.gguf`, :mod:`rlkit.lm.adapters`,
:mod:`rlkit.lm.joined_files`), which reach the cache through :mod:`rlkit.lm.model_cache` and never come back here.
"""

from __future__ import annotations

from pathlib import Path

from rlkit.core.errors import ConfigError, no_such
from rlkit.core.package_files import PACKAGE_SCHEME
from rlkit.lm.adapters import adapter_base, is_adapter_folder, merged_adapter
from rlkit.lm.gguf import import_gguf, is_gguf
from rlkit.lm.joined_files import is_parts_ref, model_file


def check_model_directory(name_or_path: str | Path) -> Path:
    """The path of a local Hugging Face model directory, or a ConfigError naming model.name_or_path."""
    where = f"model.name_or_path ({name_or_path})"
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise ConfigError(no_such(path, "model directory", directory=True), where)
    if not (path / "config.json").is_file():
        raise ConfigError("not a Hugging Face model directory (no config.json)", where)
    check_weights_files(path, where)
    return path


def check_weights_files(path: Path, where: str) -> None:
    """Every weights file of a model folder whole, read from headers alone (milliseconds, nothing loaded): a
    ``.safetensors`` file at least as long as its header says its tensors reach, a ``.bin`` a zip archive (torch's
    format since 1.6). A copy cut short otherwise fails only when training starts, as a library traceback."""
    import json
    import struct
    import zipfile

    for file in sorted(path.glob("*.safetensors")):
        size = file.stat().st_size
        with file.open("rb") as fh:
            head = fh.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            raw = fh.read(length) if length is not None and length <= size - 8 else b""
        try:
            header = json.loads(raw) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            header = None
        if not isinstance(header, dict):
            raise ConfigError(f"{file.name} is corrupt or truncated: its safetensors header cannot be read "
                              f"({size} bytes)", where)
        ends = [entry["data_offsets"][1] for name, entry in header.items()
                if name != "__metadata__" and isinstance(entry, dict) and len(entry.get("data_offsets") or []) == 2]
        needed = 8 + length + max(ends, default=0)
        if size < needed:
            raise ConfigError(f"{file.name} is truncated: {size} bytes, its header describes {needed} (copy it "
                              "again)", where)
    for file in sorted(path.glob("*.bin")):
        if file.name.startswith(("pytorch_model", "model")) and not zipfile.is_zipfile(file):
            raise ConfigError(f"{file.name} is corrupt or truncated: not the zip archive torch saves", where)


def _looks_like_path(ref: str) -> bool:
    return ref.startswith(("/", "./", "../", "~")) or Path(ref).expanduser().exists()


def locate_model(name_or_path: str | Path) -> Path:
    """A local model directory, a GGUF file imported on first use (:func:`rlkit.lm.gguf.import_gguf`), or a hub id's
    snapshot in the local Hugging Face cache; never the network. ``pkg://module/file`` names a file inside an
    installed package, ``parts://`` one joined from parts that packages hold (:mod:`rlkit.lm.joined_files`)."""
    ref = str(name_or_path)
    if ref.startswith(PACKAGE_SCHEME) or is_parts_ref(ref):
        ref = str(model_file(ref))
    if is_gguf(ref):
        return import_gguf(ref, where=f"model.name_or_path ({ref})")
    if _looks_like_path(ref):
        if is_adapter_folder(ref):  # a LoRA run's policy/ (model.lora.save=adapter): its merge, built once
            return adapter_merge(ref, where=f"model.name_or_path ({ref})")
        return check_model_directory(ref)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(ref, local_files_only=True)
    except HFValidationError:
        raise ConfigError("no such model directory, and not a valid hub id", f"model.name_or_path ({ref})") from None
    except (LocalEntryNotFoundError, FileNotFoundError):
        from huggingface_hub.constants import HF_HUB_CACHE

        raise ConfigError(f"no such directory, and hub id {ref!r} is not in the local Hugging Face cache "
                          f"({HF_HUB_CACHE}); rlkit never downloads at run time: fetch it beforehand "
                          f"(`hf download {ref}`) or pass a directory", "model.name_or_path") from None
    return check_model_directory(folder)


def adapter_merge(folder: str | Path, where: str) -> Path:
    """The cached merge of LoRA adapter ``folder`` into its base model, the base itself any reference
    :func:`locate_model` reads; errors name ``where``."""
    base_ref = adapter_base(Path(folder).expanduser().resolve(), where)
    try:
        base = locate_model(base_ref)
    except ConfigError as exc:
        raise ConfigError(f"a LoRA adapter whose base model {base_ref} cannot be loaded ({exc.message}); save runs "
                          "with model.lora.save=merged to keep a folder that stands alone", where) from None
    return merged_adapter(folder, base)
