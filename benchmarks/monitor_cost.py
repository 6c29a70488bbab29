"""What the diagnosing monitors cost a training step: the default run (the embedded tiny policy, the rule judge) with
no monitor, then with each of ``gold_judge``, ``self_internalisation`` and ``triage`` measuring every step, and all
three at their defaults; the median of ``time/iteration`` (a whole step: Lightning's loop, the step, the monitors)
over the steps after the first few. Then the live triage's own check (``rlkit.runs.triage.triage``) on synthetic
histories of growing length, which is what grows with a run.

    python benchmarks/monitor_cost.py [--steps 40] [--skip 5]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = {
    "no monitor": ["monitors=[]"],
    "gold_judge every step": ["monitors=[gold_judge]", "monitors.gold_judge.params.every=1"],
    "self_internalisation every step": ["monitors=[self_internalisation]",
                                        "monitors.self_internalisation.params.every=1"],
    "triage every step": ["monitors=[triage]", "monitors.triage.params.every=1"],
    "all three, defaults (10 / 5 / 5)": ["monitors=[gold_judge,self_internalisation,triage]"],
}


def step_seconds(overrides: list[str], steps: int, skip: int, out: Path) -> float:
    subprocess.run([sys.executable, "-m", "rlkit", "fit", f"trainer.max_steps={steps}", "logger=csv",
                    "torch_threads=1", f"hydra.run.dir={out}", *overrides], check=True, capture_output=True)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    times = [r["metrics"]["time/iteration"] for r in rows if "time/iteration" in r["metrics"] and r["step"] > skip]
    return statistics.median(times)


def triage_seconds(length: int, repeats: int = 5) -> float:
    """One call of the doctor's triage on a synthetic ``length``-step history of the metrics a default run logs."""
    from rlkit.runs.triage import triage

    rng = random.Random(0)
    history = [(s, {"reward/mean": 0.5 + 0.1 * rng.random(), "reward/std": 0.2 + 0.02 * rng.random(),
                    "reward/min": 0.1 * rng.random(), "reward/max": 0.9 + 0.1 * rng.random(),
                    "advantages/frac_zero_groups": 0.2 * rng.random(), "advantages/std": 0.9 + 0.1 * rng.random(),
                    "kl": 0.01 * s / length, "entropy": 1.0 - 0.1 * rng.random(),
                    "completion_length": 10 + rng.random()}) for s in range(length)]
    started = time.perf_counter()
    for _ in range(repeats):
        triage(history)
    return (time.perf_counter() - started) / repeats


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--skip", type=int, default=5, help="steps left out of the median (warm-up)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = None
        print("| monitors | s/step (median) | vs none |\n|---|--:|--:|")
        for name, overrides in RUNS.items():
            seconds = step_seconds(overrides, args.steps, args.skip, Path(tmp) / re.sub(r"\W+", "_", name))
            base = seconds if base is None else base
            print(f"| {name} | {seconds:.3f} | {seconds - base:+.3f} |", flush=True)
    print("\n| history length | one triage check (ms) |\n|--:|--:|")
    for length in (50, 200, 500, 1000):
        print(f"| {length} | {1000 * triage_seconds(length):.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
