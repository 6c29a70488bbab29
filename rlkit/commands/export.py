"""``rlkit export RUN_DIR|POLICY [--format gguf|hf] [--type f32|f16|q8_0] [--out FILE]``: the trained policy as one
GGUF file for llama.cpp (a LoRA adapter merged into its base first), or as a standalone Hugging Face folder. The
inverse of ``rlkit model import``."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rlkit.core.errors import ConfigError

USAGE = """rlkit export RUN_DIR|POLICY [--format gguf|hf] [--type f32|f16|q8_0] [--out FILE]

  Writes a run's trained policy (RUN_DIR/policy, or a policy folder named directly: a Hugging Face model folder or a
  LoRA adapter folder) as one GGUF file that llama.cpp, llama-server, ollama and LM Studio load, with its tokenizer
  and chat template. A LoRA adapter is merged into the base model it was trained on first (cached). Architectures:
  llama (SmolLM2, Llama) and qwen2 (Qwen2, Qwen2.5).

  --format  gguf (default) or hf: a standalone Hugging Face folder (the merge of a LoRA run, for transformers/vLLM)
  --type    the GGUF's matrices: f32 (default; exact), f16, or q8_0 (8-bit blocks, about a quarter of f32's size;
            norms and biases stay f32 as llama.cpp's own conversion keeps them)
  --out     the file (or folder for hf) to write; default beside the policy folder: <policy>-<type>.gguf. An existing
            folder gets the default name inside it. Prints the path written.

  then: llama-server -m <file>   (or ollama: a Modelfile with FROM <file>; see docs/real-models.md)"""

FORMATS = ("gguf", "hf")


def _fail(message: str) -> int:
    print(f"rlkit: error: {message}", file=sys.stderr)
    return 2


def cmd_export(args: Sequence[str]) -> int:
    """The ``rlkit export`` command."""
    parser = argparse.ArgumentParser(prog="rlkit export", usage=USAGE, add_help=False)
    parser.add_argument("source", nargs="?")
    parser.add_argument("--format", default="gguf")
    parser.add_argument("--type", default=None)
    parser.add_argument("--out", type=Path)
    parser.add_argument("-h", "--help", action="store_true")
    options, unknown = parser.parse_known_args(list(args))
    if options.help:
        print(USAGE)
        return 0
    if unknown or not options.source:
        problem = f"unexpected {' '.join(unknown)!r}; " if unknown else ""
        return _fail(f"{problem}usage: {USAGE.splitlines()[0]}")
    from rlkit.lm.gguf_export import EXPORT_TYPES

    if options.format not in FORMATS:
        return _fail(f"--format: unknown format {options.format!r}; expected one of {', '.join(FORMATS)}")
    if options.type is not None and options.format != "gguf":
        return _fail("--type: applies to --format gguf only (an hf folder keeps the policy's own dtype)")
    kind = options.type or "f32"
    if kind not in EXPORT_TYPES:
        return _fail(f"--type: unknown type {kind!r}; llama.cpp types written here: {', '.join(EXPORT_TYPES)}")
    policy = policy_folder(Path(options.source).expanduser(), options.source)
    from rlkit.config.outputs import check_writable
    from rlkit.lm.gguf_export import default_export_name

    default_name = default_export_name(policy, kind) if options.format == "gguf" else f"{policy.name}-hf"
    out = options.out if options.out is not None else policy.parent / default_name
    if options.format == "gguf" and out.is_dir():
        out = out / default_name
    if options.format == "hf":
        check_writable(out, "--out", folder=True)
        if out.exists() and any(out.iterdir()):
            raise ConfigError(f"{out} already exists and is not empty; choose another --out or remove it", "--out")
    else:
        check_writable(out, "--out")
    folder = model_folder(policy, options.source)
    if options.format == "hf":
        _copy_folder(folder, out)
        print(f"rlkit: wrote the policy as a Hugging Face folder: {out}", file=sys.stderr)
    else:
        from rlkit.lm.gguf_export import export_gguf

        written = export_gguf(folder, out, kind, where=options.source)
        print(f"rlkit: wrote {written.path} ({written.architecture}, {kind}, {written.tensors} tensors, "
              f"{written.bytes / 2**20:.1f} MiB); serve it with: llama-server -m {written.path}", file=sys.stderr)
    print(out)
    return 0


def policy_folder(path: Path, where: str) -> Path:
    """The policy folder ``path`` names: a run folder's ``policy/``, or a model or LoRA adapter folder itself."""
    from rlkit.core.errors import no_such
    from rlkit.lm.adapters import is_adapter_folder

    if not path.exists():
        raise ConfigError(no_such(path, "run or policy folder", directory=True), where)
    if path.is_file():
        if path.suffix == ".ckpt":
            raise ConfigError("a Lightning checkpoint does not name the base model its weights go into; export the "
                              "run folder (its policy/ is written when the run ends; `rlkit fit ckpt_path=...` "
                              "finishes an interrupted run)", where)
        raise ConfigError("not a run folder nor a policy folder (a file)", where)
    for candidate in (path / "policy", path):
        if (candidate / "config.json").is_file() or is_adapter_folder(candidate):
            return candidate
    checkpoints = sorted((path / "checkpoints").glob("*.ckpt")) if (path / "checkpoints").is_dir() else []
    hint = (f"; it has checkpoints only (interrupted?): `rlkit fit ckpt_path={checkpoints[-1]}` finishes the run "
            "and writes policy/") if checkpoints else ""
    raise ConfigError(f"holds no trained policy (no policy/ folder with a model or a LoRA adapter){hint}", where)


def model_folder(policy: Path, where: str) -> Path:
    """A Hugging Face model folder for the policy: itself, or a LoRA adapter's merge into its base (cached)."""
    from rlkit.lm.adapters import is_adapter_folder
    from rlkit.lm.locate import adapter_merge

    return adapter_merge(policy, where) if is_adapter_folder(policy) else policy


def _copy_folder(folder: Path, out: Path) -> None:
    """``folder``'s files into ``out``, built beside it and renamed whole (rlkit's cache markers left out)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for item in folder.iterdir():
            if item.is_file() and not item.name.startswith((".rlkit", "rlkit_")):
                shutil.copy2(item, tmp / item.name)
        os.chmod(tmp, 0o755)
        if out.exists():
            out.rmdir()  # checked empty above
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
