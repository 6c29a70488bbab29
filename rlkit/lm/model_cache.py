"""The rlkit cache: where built and imported models go (``$RLKIT_CACHE``) and how a folder is built there whole.

Every builder (the tiny policy, a GGUF import, an adapter's merge, a warm start, a file joined from parts) writes
through :func:`build_cached`, so none imports another to reach the cache.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

_SAVED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")

# Where warm starts (rlkit.lm.warm_start) go when set, instead of beside their base in the rlkit cache: many caches
# (each test's own, say) can then share the one that took a while to train, while what builds in a second stays in each.
WARM_START_CACHE_ENV = "RLKIT_WARM_START_CACHE"


def default_cache_dir() -> Path:
    """``$RLKIT_CACHE`` if set, else ``~/.cache/rlkit``."""
    return Path(os.environ.get("RLKIT_CACHE") or Path.home() / ".cache" / "rlkit").expanduser()


def _is_complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in _SAVED_FILES)


def build_cached(target: Path, write: Callable[[Path], None],
                 is_complete: Callable[[Path], bool] = _is_complete) -> Path:
    """``target`` if it holds a complete save (``is_complete``), else ``write(folder)`` into a fresh folder beside
    it, renamed into place: a killed build never leaves a half-written folder, and concurrent builds both succeed."""
    from transformers.utils import logging as hf_logging

    if is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    os.chmod(tmp, 0o755)  # mkdtemp's 0700 would keep a shared cache's folders from its other users
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a shard bar for a sub-megabyte file is noise
    try:
        write(tmp)
        if target.exists() and not is_complete(target):
            shutil.rmtree(target)  # left by something other than this function, which only renames whole folders
        try:
            os.replace(tmp, target)
        except OSError:
            if not is_complete(target):  # else a concurrent build won the rename; its folder is as good
                raise
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        shutil.rmtree(tmp, ignore_errors=True)
    return target
