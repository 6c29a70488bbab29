"""Checking a ``ckpt_path`` before a run starts: it exists, it is whole (every entry's CRC), it is a Lightning
checkpoint of an ``rlkit fit`` run, and it was trained with this rubric and a model of this shape. The metadata is read
memory-mapped; the CRC check streams the file once (about a second per GB) without unpickling anything."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

from rlkit.config.schemas import ModelConfig
from rlkit.core.errors import ConfigError
from rlkit.core.rubric import Rubric

WHERE = "ckpt_path"


def read_checkpoint_metadata(path: Path, *, verify: bool = False) -> dict[str, Any]:
    """A Lightning checkpoint's top-level entries, tensors memory-mapped (not read); one-line errors otherwise.
    ``verify``: check every entry's CRC first (``verify_checkpoint``), for a checkpoint a run will load."""
    import torch

    if not path.exists():
        raise ConfigError(f"no such file: {path}", WHERE)
    if path.is_dir():
        raise ConfigError(f"{path} is a folder; pass the checkpoint file, e.g. {path / 'last.ckpt'}", WHERE)
    if verify:
        verify_checkpoint(path)
    try:
        # mmap: tensor storages stay on disk, so a multi-GB checkpoint is checked without reading its weights
        checkpoint = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile,
            AttributeError, ModuleNotFoundError) as exc:
        reason = " ".join(str(exc).split()).split(". ")[0][:200] or type(exc).__name__
        raise ConfigError(f"{path} is not a readable checkpoint (corrupt or truncated?): {reason}", WHERE) from None
    if not isinstance(checkpoint, dict) or "pytorch-lightning_version" not in checkpoint:
        raise ConfigError(f"{path} is not a Lightning checkpoint (no 'pytorch-lightning_version' entry)", WHERE)
    return checkpoint


def verify_checkpoint(path: Path, key: str = WHERE) -> None:
    """Raise one line naming ``path`` when it is truncated or any entry fails its CRC, offering the newest whole
    checkpoint in the same folder as ``key=<file>``. torch.load checks neither: a flipped byte in a tensor loads
    as a wrong weight, so the zip archive's own CRC-32s (written by torch.save) are what tells."""
    problem = _damage(path)
    if problem is not None:
        good = whole_checkpoint_beside(path)
        offer = f"; the newest whole checkpoint beside it: {key}={good}" if good is not None else \
            "; no whole checkpoint beside it (checkpoint_keep_last keeps earlier ones)"
        raise ConfigError(f"{path} {problem}{offer}", key)


def whole_checkpoint_beside(path: Path) -> Path | None:
    """The most recently written ``*.ckpt`` in ``path``'s folder, other than ``path``, that passes the CRC check."""
    try:
        siblings = [p for p in path.parent.glob("*.ckpt") if p.is_file() and p.resolve() != path.resolve()]
        siblings.sort(key=lambda p: p.stat().st_mtime, reverse=True)
    except OSError:
        return None
    return next((p for p in siblings if _damage(p) is None), None)


def _damage(path: Path) -> str | None:
    """What is wrong with ``path`` as a torch zip archive, or None when every entry's CRC matches."""
    try:
        if not zipfile.is_zipfile(path):  # the central directory sits at the end: a cut file has none
            return "is not a readable checkpoint (truncated or corrupt: no zip central directory at its end)"
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()  # reads every entry and compares its CRC-32
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        reason = " ".join(str(exc).split())[:160] or type(exc).__name__
        return f"is not a readable checkpoint (truncated or corrupt: {reason})"
    if bad is not None:
        return f"is corrupt: its entry {bad} fails its CRC check (the file changed after it was written)"
    return None


def check_checkpoint(path: Path, rubric: Rubric, model: ModelConfig) -> dict[str, Any]:
    """The checkpoint's rlkit metadata, after checking it is whole and belongs to a run this config can resume."""
    checkpoint = read_checkpoint_metadata(path, verify=True)
    state = checkpoint.get("rlkit")
    if not isinstance(state, dict):
        raise ConfigError(f"{path} is a Lightning checkpoint but not of an `rlkit fit` run (no 'rlkit' entry); "
                          "a GRM checkpoint resumes with `rlkit train-grm ckpt_path=...`", WHERE)
    saved = state.get("rubric") or {}
    if saved.get("hash") and saved["hash"] != rubric.content_hash:
        raise ConfigError(f"the checkpoint was trained with rubric {saved.get('name')} v{saved.get('version')} (hash "
                          f"{saved['hash'][:12]}), this run uses {rubric.name} v{rubric.version} ({rubric.short_hash})",
                          WHERE)
    recorded = state.get("model")
    if isinstance(recorded, dict):
        expected = configured_fingerprint(model)
        differ = [k for k, v in expected.items() if v is not None and recorded.get(k) is not None and recorded[k] != v]
        if differ:
            shown = ", ".join(f"{k} {recorded[k]!r} there, {expected[k]!r} here" for k in differ)
            raise ConfigError(f"the checkpoint's model does not match model.* of this run: {shown}", WHERE)
    return state


def configured_fingerprint(model: ModelConfig) -> dict[str, Any]:
    """What the configured policy's fingerprint will be, from its config alone."""
    from rlkit.lm.model_config import model_fingerprint, read_model_config, tiny_policy_fingerprint
    from rlkit.lm.models import TinyPolicySpec, locate_model

    if model.name_or_path is None:
        return tiny_policy_fingerprint(TinyPolicySpec(), model.lora.r)
    path = locate_model(model.name_or_path)
    return model_fingerprint(read_model_config(path, "model.name_or_path"), model.lora.r)
