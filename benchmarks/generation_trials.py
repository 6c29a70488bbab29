"""Does rlkit's own decoding loop, a static KV cache, or a static cache with a ``torch.compile``d forward make
rlkit's sampling faster than ``generate``?

Each trial samples 8 prompts × 8 completions with rlkit's ``hf`` generator (one batched, left-padded pass with
the KV cache, as ``rlkit fit`` does), EOS suppressed with ``min_new_tokens`` so every completion has exactly the
asked number of tokens. The variants differ only in ``generator.params``:

- ``generate``: the model's ``generate`` with transformers' default ``DynamicCache`` (``decode_loop=false``);
- ``loop``: rlkit's KV-cache decoding loop, the same ``DynamicCache`` (rlkit's default);
- ``static``: ``cache_implementation="static"`` (a pre-allocated cache of prompt + new tokens);
- ``static+compile``: the same, plus a ``CompileConfig`` that lets transformers ``torch.compile`` the decoding
  forward. transformers compiles only on accelerators unless the config's ``_compile_all_devices`` is set (its
  own "often not optimal, but useful for testing" switch); ``mode="default"`` because the default
  ``reduce-overhead`` means CUDA graphs.

Per policy size and completion length, every variant runs twice to warm up, on two prompt batches (the compiled
variant compiles there, and recompiles once if a shape changed: the two calls less twice the variant's median are
reported as compile time), then the variants are timed alternately (generate, loop, static, compiled, generate,
...) on a new prompt batch each round (prompt widths vary as in training), and medians are reported. A greedy
batch checks that the variants produce the same tokens.

Usage::

    python benchmarks/generation_trials.py [--sizes tiny small] [--tokens 16 64] [--repeats 5] [--threads 1]
        [--variants loop static static+compile] [--warm-cache]

Compile times are cold by default: each size and length compiles into a fresh temporary inductor cache
(``TORCHINDUCTOR_CACHE_DIR``), removed afterwards.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_trl import SIZES  # noqa: E402  (the tiny and the ~14M "small" policy shapes of the TRL comparison)

PROMPTS, GROUP = 8, 8


def variants(tokens: int) -> dict[str, dict[str, Any]]:
    """``HFGenerator.Params`` of each variant for completions of exactly ``tokens`` tokens."""
    from transformers import CompileConfig

    compile_config = CompileConfig(mode="default", fullgraph=False)
    compile_config._compile_all_devices = True  # transformers compiles on CPU only when asked this way
    fixed = {"min_new_tokens": tokens}
    return {"generate": {"generation_kwargs": fixed, "decode_loop": False},
            "loop": {"generation_kwargs": fixed},
            "static": {"generation_kwargs": {**fixed, "cache_implementation": "static"}},
            "static+compile": {"generation_kwargs": {**fixed, "cache_implementation": "static",
                                                     "compile_config": compile_config}}}


def sample(policy: Any, tokenizer: Any, records: list[dict[str, Any]], tokens: int, params: dict[str, Any],
           greedy: bool = False) -> tuple[float, torch.Tensor]:
    """Seconds for one ``HFGenerator.generate`` call of ``PROMPTS`` × ``GROUP`` completions, and their ids."""
    from rlkit.lm.sampling import GenerationRequest
    from rlkit_plugins.generators.hf import HFGenerator

    generator = HFGenerator(HFGenerator.Params(**params))
    request = GenerationRequest(records, 1 if greedy else GROUP, tokens, 1.0, greedy)
    start = time.perf_counter()
    out = generator.generate(policy, tokenizer, request)
    seconds = time.perf_counter() - start
    assert out.completion_ids.shape[1] == tokens and bool(out.completion_mask.all()), "EOS was not suppressed"
    return seconds, out.completion_ids


def trial(size: str, tokens: int, repeats: int, cold: bool, only: list[str] | None = None) -> list[dict[str, Any]]:
    """Warm-up (compile) and alternating timed rounds of every variant for one policy size and length."""
    torch._dynamo.reset()  # each (size, length) compiles afresh, as a new run would
    if not cold:
        return timed_variants(size, tokens, repeats, only)
    # an empty on-disk inductor cache, as on a new machine (torch reads the variable at each compile)
    saved = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = folder = tempfile.mkdtemp(prefix="rlkit-inductor-")
    try:
        return timed_variants(size, tokens, repeats, only)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        if saved is None:
            os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
        else:
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = saved


def timed_variants(size: str, tokens: int, repeats: int, only: list[str] | None = None) -> list[dict[str, Any]]:
    """The warm-ups, alternating rounds and greedy check of :func:`trial`."""
    from rlkit.data.records import arithmetic_task
    from rlkit.lm.models import TinyPolicySpec, build_tiny_policy, load_policy

    policy, tokenizer = load_policy(build_tiny_policy(TinyPolicySpec(**SIZES[size]["spec"])))
    policy.train()  # as in training: the generator switches to eval and back
    records = arithmetic_task(PROMPTS * (repeats + 3), seed=1)
    batches = [records[i * PROMPTS:(i + 1) * PROMPTS] for i in range(repeats + 3)]
    kinds = {name: params for name, params in variants(tokens).items() if not only or name in only}
    # two warm-up calls on different prompts: a compiled forward recompiles once for shapes that changed
    warm = {name: [sample(policy, tokenizer, batches[i], tokens, kw)[0] for i in (0, 1)] for name, kw in kinds.items()}
    times: dict[str, list[float]] = {name: [] for name in kinds}
    for rnd in range(repeats):
        for name, kw in kinds.items():
            times[name].append(sample(policy, tokenizer, batches[rnd + 2], tokens, kw)[0])
        print(f"  {size} {tokens} round {rnd}: " + ", ".join(f"{n} {t[-1]:.3f}" for n, t in times.items()),
              file=sys.stderr, flush=True)
    # after the timed rounds: a batch of another size may make the compiled forward recompile
    greedy = {name: sample(policy, tokenizer, batches[0], tokens, kw, greedy=True)[1] for name, kw in kinds.items()}
    base = statistics.median(times["generate"])
    rows = []
    for name in kinds:
        med = statistics.median(times[name])
        rows.append({"size": size, "tokens": tokens, "variant": name, "median": med, "min": min(times[name]),
                     "max": max(times[name]), "first": warm[name][0], "compile": max(sum(warm[name]) - 2 * med, 0.0),
                     "speedup": base / med, "same_greedy": bool(torch.equal(greedy[name], greedy["generate"]))})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["tiny", "small"])
    parser.add_argument("--tokens", nargs="+", type=int, default=[16, 64])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variants", nargs="+", choices=["generate", "loop", "static", "static+compile"],
                        help="only these (generate is always timed: the others are compared with it)")
    parser.add_argument("--warm-cache", action="store_true",
                        help="keep torch's on-disk inductor cache (compile time then is a warm start's)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    import transformers

    print(f"torch {torch.__version__}, transformers {transformers.__version__}, threads {args.threads}; "
          f"{PROMPTS} prompts × {GROUP} completions, medians of {args.repeats} alternating rounds")
    print("| policy | new tokens | variant | s/generate (median) | min–max | vs generate | first call "
          "| compile (2 warm-ups − 2 medians) | greedy tokens = generate |")
    print("|---|--:|---|--:|--:|--:|--:|--:|---|")
    for size in args.sizes:
        for tokens in args.tokens:
            only = sorted({"generate", *args.variants}) if args.variants else None
            for r in trial(size, tokens, args.repeats, cold=not args.warm_cache, only=only):
                print(f"| {r['size']} | {r['tokens']} | {r['variant']} | {r['median']:.3f} | "
                      f"{r['min']:.3f}–{r['max']:.3f} | {r['speedup']:.2f}× | {r['first']:.2f} | "
                      f"{r['compile']:.2f} | {'yes' if r['same_greedy'] else 'NO'} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
