"""llama.cpp's OpenAI-compatible server on a GGUF file, run by rlkit as a child process it starts, watches and stops.

The server is the one the ``xllamacpp`` wheel builds in (llama.cpp's ``llama-server``, nothing compiled here: the
``judge-server`` extra). It runs in a child Python process rather than in rlkit's own, for three reasons: a crash of
the engine (an abort inside llama.cpp) must not take the run with it, its threads must not compete with the training
loop's Python for the GIL, and a process can be restarted.

The child (``python -m rlkit.lm.llama_server '<json settings>'``) binds port 0 on 127.0.0.1, so the system picks a
free port and no two runs collide, prints ``{"url": ...}`` as its first stdout line, and then blocks reading its
stdin. The parent holds the other end of that pipe: when rlkit closes it (:meth:`LlamaServer.stop`), or when rlkit's
process ends in any way, SIGKILL included, the child reads end-of-file and exits, so no engine outlives the command.

:class:`LlamaServer` is the parent's handle: :meth:`ensure_running` starts the engine and waits until ``GET /health``
answers 200 (the model is loaded), restarts an engine that has died, once in the handle's life, and after that raises
:class:`~rlkit.core.errors.EngineError`, one line with the engine's last log lines.
"""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import weakref
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rlkit.core.errors import EngineError

READY_POLL_S = 0.1
STOP_WAIT_S = 10.0
_RUNNING: weakref.WeakSet[LlamaServer] = weakref.WeakSet()  # every engine started in this process and not stopped


def stop_engines() -> int:
    """Stop every engine this process started that is still running; how many. ``rlkit``'s entry point calls it when a
    command ends, so an engine never outlives the command that started it, whoever forgot to close its judge."""
    running = list(_RUNNING)
    for server in running:
        server.stop()
    return len(running)


@dataclass(frozen=True)
class LlamaServerSettings:
    """What the child is started with. ``context`` is each slot's context; llama.cpp splits ``n_ctx`` between the
    slots, so the server gets ``context * slots``."""

    model: str
    slots: int = 2
    context: int = 4096
    threads: int = 2
    alias: str = "judge"
    prompt_cache: bool = True
    """Reuse the KV of a slot's previous prompt for the part a new prompt shares with it (llama.cpp's
    ``cache_prompt``), and keep recent prompts' KV in host memory (``--cache-ram``, ``prompt_cache_mib``)."""
    prompt_cache_mib: int = 1024
    kv_cache: str = "f16"
    """The KV cache's type (llama.cpp's ``--cache-type-k/-v``): f16, llama.cpp's default, or f32 (flash attention
    off too), which a sampler whose log-probs must match the trainer's float32 ones needs."""
    poll: int = 50
    """llama.cpp's ``--poll`` (its default, 50): how long an idle compute thread busy-waits for the next graph. Kept
    at llama.cpp's default and set by ``benchmarks/engine_poll.py`` only: the wheel is an OpenMP build, where
    llama.cpp never reads it (its poll loop is under ``#ifndef GGML_USE_OPENMP`` in ggml-cpu.c); 0 changed nothing
    there (benchmarks/README.md, "Engine threads that wait")."""
    omp_wait_policy: str | None = "PASSIVE"
    """The engine's ``OMP_WAIT_POLICY`` (None: whatever the environment says), unless the environment sets one: the
    user's word wins. The wheel's OpenMP (libgomp) makes a thread that waits at a barrier spin 300,000 rounds first
    (libgomp manual, GOMP_SPINCOUNT), and llama.cpp meets a barrier at every operation of every token; beside a
    trainer on the same cores those spins take the cores the other threads need. ``PASSIVE`` sleeps at once: a batch
    of 16 completions beside a 2-thread torch loop took 11 s against >= 88 s
    (``benchmarks/engine_poll.py``, benchmarks/README.md "Engine threads that wait")."""

    def to_params(self):  # type: ignore[no-untyped-def]
        """The ``xllamacpp.CommonParams`` these settings describe (in the child: the wheel is imported there only)."""
        import xllamacpp

        params = xllamacpp.CommonParams()
        params.model.path = self.model
        params.model_alias = self.alias
        params.n_parallel = self.slots
        params.n_ctx = self.context * self.slots
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = self.threads
        params.cpuparams.poll = params.cpuparams_batch.poll = self.poll
        params.cont_batching = True  # the slots' requests decode in one batch (continuous batching)
        params.cache_prompt = self.prompt_cache
        params.cache_ram_mib = self.prompt_cache_mib if self.prompt_cache else 0
        kv = xllamacpp.ggml_type.GGML_TYPE_F32 if self.kv_cache == "f32" else xllamacpp.ggml_type.GGML_TYPE_F16
        params.cache_type_k = params.cache_type_v = kv
        if self.kv_cache == "f32":  # with flash attention on, log-probs moved by up to 1.5e-4 (tiny policy, f32
            # weights and cache) against 5e-7 without: its CPU path does not keep float32 throughout
            params.flash_attn_type = xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
        params.port, params.verbosity = 0, 0
        return params


def _child_main(argv: list[str]) -> int:
    """The child: start the server, say where it listens, serve until stdin closes. Each line the parent writes
    meanwhile is a new settings object: the server is replaced by one on those settings (a new model file: the next
    weights of a policy being trained), in this process, so a reload costs the model's load and no Python start."""
    settings = LlamaServerSettings(**json.loads(argv[0]))
    import xllamacpp

    while True:
        try:
            server = xllamacpp.Server(settings.to_params())
        except Exception as exc:  # llama.cpp's reason is on stderr, which the parent keeps
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}), flush=True)
            return 1
        print(json.dumps({"url": server.listening_address.rstrip("/")}), flush=True)
        line = sys.stdin.readline()  # until the parent sends new settings, closes the pipe or dies
        del server
        if not line:
            return 0
        settings = LlamaServerSettings(**json.loads(line))


class LlamaServer:
    """One llama.cpp engine rlkit started (see the module doc). ``where`` leads every error: the config key that
    chose the engine."""

    def __init__(self, settings: LlamaServerSettings, where: str, ready_timeout: float = 300.0) -> None:
        self.settings = settings
        self.where = where
        self.ready_timeout = ready_timeout
        self.restarts = 0
        self.url: str | None = None
        self._process: subprocess.Popen[str] | None = None
        self._log: Path | None = None
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _stop_process, None)

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def ensure_running(self) -> str:
        """The base URL of a live engine: one that has died since it started is restarted, once in this handle's
        life; a second death is an :class:`EngineError`."""
        with self._lock:
            return self._ensure_running()

    def _ensure_running(self) -> str:
        """:meth:`ensure_running`, the lock held."""
        if self._process is not None and not self.running:
            code = self._process.returncode
            if self.restarts >= 1:
                raise EngineError(f"the llama.cpp engine on {Path(self.settings.model).name} stopped again "
                                  f"(exit {code}) after one restart; {self._tail()}", self.where)
            self.restarts += 1
            import warnings

            warnings.warn(f"{self.where}: the llama.cpp engine stopped (exit {code}); restarting it once",
                          UserWarning, stacklevel=2)
            self._start()
        elif self._process is None:
            self._start()
        assert self.url is not None
        return self.url

    def reload(self, **changes: Any) -> str:
        """Serve with ``changes`` to the settings (``model``: another GGUF file, ``slots``), in the running child
        when there is one (no new process), else by starting it; the new base URL (the port changes). Not a
        restart: a child that has died is restarted as :meth:`ensure_running` does, once in the handle's life."""
        with self._lock:
            self.settings = replace(self.settings, **changes)
            if not self.running:
                return self._ensure_running()
            assert self._process is not None and self._process.stdin is not None
            try:
                self._process.stdin.write(json.dumps(asdict(self.settings)) + "\n")
                self._process.stdin.flush()
            except OSError:  # died as the line went out: ensure_running notices and restarts it, once
                pass
            first = self._first_line()
            if "url" not in first:
                if self.running:  # alive but not serving: that is no engine
                    self._stop()
                    raise EngineError(f"the llama.cpp engine could not load {self.settings.model} "
                                      f"({first.get('error') or 'no answer'}); {self._tail()}", self.where)
                self._process.wait()
                return self._ensure_running()
            self.url = str(first["url"])
            self._wait_healthy()
            return self.url

    def _start(self) -> None:
        self._stop()
        fd, log = tempfile.mkstemp(prefix="rlkit-llama-server.", suffix=".log")
        self._log = Path(log)
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if self.settings.omp_wait_policy and "OMP_WAIT_POLICY" not in os.environ:
            env["OMP_WAIT_POLICY"] = self.settings.omp_wait_policy  # read once, as libgomp loads in the child
        with os.fdopen(fd, "w") as stderr:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "rlkit.lm.llama_server", json.dumps(asdict(self.settings))],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env,
                start_new_session=True)  # a Ctrl-C in the terminal reaches rlkit, which stops the engine in order
        self._finalizer.detach()
        self._finalizer = weakref.finalize(self, _stop_process, self._process)
        atexit.register(self._finalizer)
        _RUNNING.add(self)
        first = self._first_line()
        if "url" not in first:
            self._stop()
            reason = first.get("error") or "it exited before listening"
            raise EngineError(f"the llama.cpp engine could not start on {self.settings.model} ({reason}); "
                              f"{self._tail()}", self.where)
        self.url = str(first["url"])
        self._wait_healthy()

    def _first_line(self) -> dict[str, str]:
        assert self._process is not None and self._process.stdout is not None
        line: list[str] = []
        reader = threading.Thread(target=lambda: line.append(self._process.stdout.readline()), daemon=True)
        reader.start()
        reader.join(self.ready_timeout)
        if not line or not line[0].strip():
            return {}
        try:
            return json.loads(line[0])
        except ValueError:
            return {"error": line[0].strip()[:200]}

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.ready_timeout
        while True:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if not self.running or time.monotonic() > deadline:
                why = "it exited" if not self.running else f"no healthy answer within {self.ready_timeout:g} s"
                self._stop()
                raise EngineError(f"the llama.cpp engine did not become ready ({why}); {self._tail()}", self.where)
            time.sleep(READY_POLL_S)

    def _tail(self, lines: int = 3) -> str:
        """The engine's last error lines, for a one-line message."""
        try:
            text = self._log.read_text(errors="replace") if self._log is not None else ""
        except OSError:
            text = ""
        kept = [line.strip() for line in text.splitlines() if line.strip()]
        errors = [line for line in kept if " E " in line or "error" in line.lower()] or kept
        return "engine log: " + (" | ".join(errors[-lines:]) if errors else "(empty)")

    def stop(self) -> None:
        """Stop the engine (closing its stdin; terminating it if it does not exit) and wait for it."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        _RUNNING.discard(self)
        if self._process is not None:
            _stop_process(self._process)
            self._process = None
        self.url = None
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None

    def crash_for_test(self) -> None:
        """Kill the engine as a crash would (SIGKILL), leaving the handle to notice it: what the restart tests do."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()


def _stop_process(process: subprocess.Popen[str] | None) -> None:
    if process is None:
        return
    if process.poll() is None:
        try:
            if process.stdin is not None:
                process.stdin.close()
            process.wait(STOP_WAIT_S)
        except (OSError, subprocess.TimeoutExpired):
            process.terminate()
            try:
                process.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    for pipe in (process.stdin, process.stdout):
        if pipe is not None and not pipe.closed:
            pipe.close()


if __name__ == "__main__":
    sys.exit(_child_main(sys.argv[1:]))
