"""Throughput of the default training loop: samples/s, tokens/s, peak RSS and where a step's time goes.

Each configuration runs `rlkit fit` in its own Python process (so peak RSS is its own) and reads the
per-step timings the module logs. Usage:

    python benchmarks/step_throughput.py [--steps 30] [--warmup 5] [-- extra overrides ...]

e.g. `python benchmarks/step_throughput.py -- model.lora.r=8` or `-- max_completion_length=64`.
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

_CHILD = """
import json, resource, sys
from rlkit.cli import main
code = main(json.loads(sys.argv[1]))
print("PEAK_RSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
sys.exit(code)
"""
_PHASES = ("generation", "judge", "logprob", "optim")

def measure(overrides: list[str], steps: int, warmup: int, root: Path, child: str = _CHILD) -> dict[str, Any]:
    """One `rlkit fit` in its own process. ``child`` is the code it runs (it prints ``PEAK_RSS_KB``); its
    whole stdout comes back as ``stdout``, for a child that reports more."""
    run_dir = root / "run"
    # model=tiny_random: the figures recorded here were measured from random weights
    args = ["fit", "logger=csv", "model=tiny_random", f"trainer.max_steps={steps}", "log_samples.every=0",
            f"hydra.run.dir={run_dir}", *overrides]
    done = subprocess.run([sys.executable, "-c", child, json.dumps(args)], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"rlkit fit failed:\n{done.stderr[-3000:]}")
    peak_kb = next(int(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("PEAK_RSS_KB"))
    (metrics,) = run_dir.glob("csv/version_0/metrics.csv")
    with metrics.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("time/step")][warmup:]
    if not rows:
        raise SystemExit(f"no steps left after {warmup} warm-up steps; raise --steps")
    step = statistics.median(float(r["time/step"]) for r in rows)
    # completions per step: batch_size × num_generations, read back from the composed config
    cfg = (run_dir / ".hydra" / "config.yaml").read_text()

    composed = yaml.safe_load(cfg)
    samples = composed["batch_size"] * composed["num_generations"]
    tokens = statistics.median(float(r["completion_length"]) for r in rows) * samples
    out = {"step_s": step, "samples_per_s": samples / step, "tokens_per_s": tokens / step,
           "peak_rss_mb": peak_kb / 1024, "samples_per_step": samples, "stdout": done.stdout}
    for phase in _PHASES:
        out[phase] = statistics.median(float(r[f"time/{phase}"]) for r in rows)
    return out

def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("overrides", nargs="*", help="extra `rlkit fit` overrides (after --)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        r = measure(args.overrides, args.steps, args.warmup, Path(tmp))
    label = " ".join(args.overrides) or "default"
    print(f"config: {label}; {args.steps} steps, median over the last {args.steps - args.warmup}")
    print(f"  samples/step      {r['samples_per_step']:.0f}")
    print(f"  s/step (median)   {r['step_s']:.3f}")
    print(f"  samples/s         {r['samples_per_s']:.1f}")
    print(f"  tokens/s          {r['tokens_per_s']:.1f}  (generated completion tokens)")
    print(f"  peak RSS          {r['peak_rss_mb']:.0f} MB")
    total = sum(r[p] for p in _PHASES)
    for phase in _PHASES:
        print(f"  {phase:<17} {r[phase]:.3f} s  ({100 * r[phase] / total:4.1f}%)")
    return 0

if __name__ == "__main__":
    sys.exit(main())
