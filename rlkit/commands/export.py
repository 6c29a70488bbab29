"""``rlkit export RUN_DIR|POLICY [--format gguf|hf] [--type f32|f16|q8_0] [--out FILE] [--adapter [--base FILE]]``:
the trained policy as one GGUF file for llama.cpp (a LoRA adapter merged into its base first), a LoRA run's adapter
alone as a GGUF LoRA for llama.cpp's ``--lora``, or a standalone Hugging Face folder. The inverse of
``rlkit model import``."""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from rlkit.core.errors import ConfigError

USAGE = """rlkit export RUN_DIR|POLICY [--format gguf|hf] [--type f32|f16|q8_0] [--out FILE] [--adapter [--base FILE]]

  Writes a run's trained policy (RUN_DIR/policy, or a policy folder named directly: a Hugging Face model folder or a
  LoRA adapter folder) as one GGUF file that llama.cpp, llama-server, ollama and LM Studio load, with its tokenizer
  and chat template. A LoRA adapter is merged into the base model it was trained on first (cached). Architectures:
  llama (SmolLM2, Llama) and qwen2 (Qwen2, Qwen2.5).

  --format  gguf (default) or hf: a standalone Hugging Face folder (the merge of a LoRA run, for transformers/vLLM)
  --type    the GGUF's matrices: f32 (default; exact), f16, or q8_0 (8-bit blocks, about a quarter of f32's size;
            norms and biases stay f32 as llama.cpp's own conversion keeps them)
  --out     the file (or folder for hf) to write; default beside the policy folder: <policy>-<type>.gguf. An existing
            folder gets the default name inside it. Prints the path written.
  --adapter a LoRA run's adapter alone, unmerged, as a GGUF LoRA (a few MB; default <policy>-lora-<type>.gguf) that
            llama.cpp applies on top of its base model's GGUF: llama-server -m <base>.gguf --lora <file>
  --base    with --adapter: the base model's GGUF. Written from the base model the run trained on when the file does
            not exist; checked to hold that model's weights when it does (the GGUF the base was imported from, or
            another export of it), so the adapter never lands on a model it was not trained on.

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
    parser.add_argument("--adapter", action="store_true")
    parser.add_argument("--base", type=Path)
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
    if options.base is not None and not options.adapter:
        return _fail("--base: names the base GGUF of an adapter export; add --adapter (a merged export needs none)")
    if options.adapter and options.format != "gguf":
        return _fail("--adapter: writes a GGUF LoRA; a Hugging Face adapter is the run's policy/ folder itself")
    policy = policy_folder(Path(options.source).expanduser(), options.source)
    if options.adapter:
        return _export_adapter(policy, options.source, kind, options.out, options.base)
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


def _export_adapter(policy: Path, where: str, kind: str, out: Path | None, base_gguf: Path | None) -> int:
    """``--adapter``: the LoRA adapter in ``policy`` as a GGUF LoRA, and its base's GGUF written or checked."""
    from rlkit.config.outputs import check_writable
    from rlkit.lm.adapters import adapter_base, is_adapter_folder
    from rlkit.lm.gguf import GGUF_SUFFIX
    from rlkit.lm.gguf_export import check_architecture, export_gguf
    from rlkit.lm.gguf_lora import check_base, export_gguf_lora
    from rlkit.lm.locate import locate_model

    if not is_adapter_folder(policy):
        raise ConfigError("the policy is a whole model, not a LoRA adapter (the run trained without "
                          "model.lora, or saved it with model.lora.save=merged); export it without --adapter", where)
    default_name = f"{policy.name}-lora-{kind}{GGUF_SUFFIX}"
    out = out if out is not None else policy.parent / default_name
    if out.is_dir():
        out = out / default_name
    check_writable(out, "--out")
    base_ref = adapter_base(policy.resolve(), where)
    try:
        base = locate_model(base_ref)
    except ConfigError as exc:
        raise ConfigError(f"the adapter's base model {base_ref} cannot be found ({exc.message}); the GGUF LoRA "
                          "needs its configuration", where) from None
    check_architecture(base, where)  # before anything is written
    if base_gguf is not None:
        base_gguf = base_gguf.expanduser()
        if base_gguf.resolve() == out.resolve():
            raise ConfigError("names the file --out writes the adapter to; the base is another file", "--base")
        if base_gguf.exists():
            how = check_base(base_gguf, base, "--base")
        else:
            check_writable(base_gguf, "--base")
    # the adapter is written aside and put in place after the base, so a failed base export leaves neither
    pending = out.parent / f".{out.name}.pending"
    try:
        written = export_gguf_lora(policy, base, pending, kind, where)
        if base_gguf is not None and not base_gguf.exists():
            done = export_gguf(base, base_gguf, kind, where="--base")
            how = f"written ({done.architecture}, {kind}, {done.bytes / 2**20:.1f} MiB)"
        os.replace(pending, out)
    finally:
        pending.unlink(missing_ok=True)
    print(f"rlkit: wrote {out} (a {written.architecture} LoRA: rank {written.rank}, alpha {written.alpha:g}, "
          f"{written.tensors} tensors, {kind}, {written.bytes / 2**20:.2f} MiB) for the base {base}", file=sys.stderr)
    if base_gguf is None:
        print(f"rlkit: its base as a GGUF: rlkit export {base} --out <base>.gguf (or add --base FILE here; the GGUF "
              f"the base was imported from serves too); then: llama-server -m <base>.gguf --lora {out}",
              file=sys.stderr)
    else:
        print(f"rlkit: the base {base_gguf}: {how}; serve them with: llama-server -m {base_gguf} --lora {out}",
              file=sys.stderr)
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
