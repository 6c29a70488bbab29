"""The test server as a process of its own: its command line (``python -m rlkit.testing.openai_server``) and
:func:`server_process`, which starts one on a free port for a test or a benchmark."""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlkit.testing.openai_server.server import OpenAICompatibleServer


@contextmanager
def server_process(model: str | Path | None = None, *, timeout: float = 120.0, reference: str | Path | None = None,
                   threads: int | None = None) -> Iterator[tuple[str, Any]]:
    """``python -m rlkit.testing.openai_server`` in a process of its own on a free port (the caller's environment,
    thread pinning included, or ``threads`` torch threads): yields its base URL and the ``subprocess.Popen`` once it
    serves, and stops it after. ``reference``: a model directory it also serves, frozen, as ``reference``."""
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "rlkit.testing.openai_server", "--port", "0"]
    if model is not None:
        command += ["--model", str(model)]
    if reference is not None:
        command += ["--reference-model", str(reference)]
    env = dict(os.environ)
    if threads is not None:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    try:
        deadline = time.monotonic() + timeout
        line = ""
        while " at http://" not in line:  # main() prints "serving ... at <url>" once it listens
            line = server.stdout.readline()
            if not line or time.monotonic() > deadline:
                raise RuntimeError(f"the test server did not start (exit code {server.poll()})")
        yield line.rsplit(" at ", 1)[1].strip(), server
    finally:
        server.terminate()
        server.wait(timeout=30)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Serve a local causal LM over OpenAI's completions APIs.")
    parser.add_argument("--model", default=None, help="model directory or cached hub id (default: the tiny policy)")
    parser.add_argument("--model-name", default="default", help="the name clients send as 'model'")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--api-key", default=None, help="require 'Authorization: Bearer <key>'")
    parser.add_argument("--batch-window", type=float, default=0.005,
                        help="seconds to gather concurrent token completions into one decode")
    parser.add_argument("--reference-model", default=None,
                        help="a model directory served, frozen, beside the model (weight updates leave it alone)")
    parser.add_argument("--reference-name", default="reference", help="the name clients send to use it")
    parser.add_argument("--no-runtime-lora", action="store_true",
                        help="no /v1/load_lora_adapter route (as vLLM without VLLM_ALLOW_RUNTIME_LORA_UPDATING)")
    args = parser.parse_args(argv)
    server = OpenAICompatibleServer(args.model, model_name=args.model_name, host=args.host, port=args.port,
                                    dtype=args.dtype, api_key=args.api_key, batch_window_s=args.batch_window,
                                    reference=args.reference_model, reference_name=args.reference_name,
                                    runtime_lora=not args.no_runtime_lora).start()
    print(f"serving {args.model or 'the embedded tiny policy'} as {args.model_name!r} at {server.url}", flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0

