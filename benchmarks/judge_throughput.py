"""How fast the rule judge scores: completions per second on a 5-dimension rubric (the shipped arithmetic
rubric plus a keyword dimension), with unique 200-character completions, in batches as the loop sends them.

Usage::

    python benchmarks/judge_throughput.py [--completions 50000] [--group 8] [--repeats 3]

The goal is 50,000 completions/s.
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import sys
import time


def unique_completions(n: int, length: int = 200, seed: int = 0) -> list[str]:
    """``n`` distinct texts of ``length`` characters: a number first in half of them, words after."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(5000)]
    out = []
    for i in range(n):
        head = f"{rng.randint(0, 200)} " if i % 2 else ""
        text = head + f"#{i} " + " ".join(rng.choices(words, k=60))
        out.append(text[:length].ljust(length, "."))
    return out


def main() -> int:
    from rlkit.core.registry import load_registry
    from rlkit.core.rubric import rubric_from_dict
    from rlkit.core.types import Rollout
    from rlkit.data.records import arithmetic_task
    from rlkit.judging.tiny_judge import shipped_rubric

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--completions", type=int, default=50_000)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    base = shipped_rubric("arithmetic")
    spec = base.model_dump(mode="json", exclude_none=True) if hasattr(base, "model_dump") else None
    if spec is None:
        raise SystemExit("the rubric model cannot be dumped")
    spec["dimensions"].append({"name": "politeness", "type": "binary", "weight": 0.5,
                               "anchors": {0: {"text": "curt"}, 1: {"text": "polite"}},
                               "checks": [{"type": "keywords", "any": ["please", "thanks", "kindly"]}]})
    rubric = rubric_from_dict(spec, source="<throughput rubric>")
    judge = load_registry().create("judge", "rule")
    texts = unique_completions(args.completions)
    prompts = args.completions // args.group
    records = arithmetic_task(prompts, seed=0)
    rollout = Rollout(records=records, completions=[texts[i * args.group:(i + 1) * args.group]
                                                    for i in range(prompts)])
    n = prompts * args.group
    judge.score(Rollout(records=records[:2], completions=rollout.completions[:2]), rubric)  # plan built once
    rates, cpu_rates = [], []
    for _ in range(args.repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        scores = judge.score(rollout, rubric)
        rates.append(n / (time.perf_counter() - start))
        cpu_rates.append(n / max(time.process_time() - cpu_start, 1e-9))
    assert scores.shape == (prompts, args.group, len(rubric.dimensions))
    # Per CPU-second too: on a shared machine the wall-clock rate mostly measures the other work.
    print(f"rule judge, {len(rubric.dimensions)} dimensions ({', '.join(rubric.dimension_names)}), {n} unique "
          f"{len(texts[0])}-character completions in groups of {args.group}: median {statistics.median(rates):,.0f} "
          f"completions/s (runs: {', '.join(f'{r:,.0f}' for r in rates)}); per CPU-second: median "
          f"{statistics.median(cpu_rates):,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
