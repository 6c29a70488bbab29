"""Do model judges train the default task? Runs `rlkit fit` once per judge configuration and reports, per run:

* the judge's per-step figures from the CSV log: seconds of judging per step and backend latency per
  request (medians over steps), response-cache hit rate and parse-failure rate (mean and worst step);
* a yardstick independent of the judge: the rule judge's weighted reward on the shipped rubric for
  completions sampled from the initial and the trained policy on held-out prompts (a ranking judge's own
  reward is a place within the group, whose mean does not move, so the training log cannot show learning).

Usage::

    python benchmarks/judge_learning.py [--steps 60] [--seed 1] [--only ranking] [--override torch_threads=1]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

CONFIGS = {
    "llm": ["judge=llm"],
    "hybrid": ["judge=hybrid"],
    "ensemble+lexicographic": ["judge=ensemble", "aggregator=lexicographic"],
    "ranking+rank": ["judge=ranking", "advantage=rank"],
}


def yardstick(policy_dir: Path | None, seed: int, prompts: int = 64, samples: int = 4) -> float:
    """Mean rule-judged weighted reward of `samples` completions per held-out prompt."""
    import torch

    from rlkit.core.registry import load_registry
    from rlkit.core.types import Rollout
    from rlkit.data.records import arithmetic_task
    from rlkit.judging.tiny_judge import shipped_rubric
    from rlkit.lm.models import build_tiny_policy, load_policy
    from rlkit.lm.sampling import GenerationRequest
    from rlkit.reward.pipeline import aggregate_rewards

    torch.manual_seed(seed)
    model, tokenizer = load_policy(policy_dir or build_tiny_policy())
    records = arithmetic_task(prompts, seed=10_000 + seed)  # prompts the run did not train on
    registry = load_registry()
    sampled = registry.create("generator", "hf").generate(model, tokenizer, GenerationRequest(records, samples, 16))
    rubric = shipped_rubric("arithmetic")
    raw = registry.create("judge", "rule").score(Rollout(records=records, completions=sampled.texts), rubric)
    batch = aggregate_rewards(raw, rubric, registry.create("weight_scheduler", "constant"),
                              registry.create("aggregator", "weighted_sum"))
    return float(batch.rewards.nan_to_num(0.0).mean())


def run(name: str, overrides: list[str], steps: int, seed: int, root: Path,
        extra: tuple[str, ...] = ()) -> dict[str, float]:
    run_dir = root / name
    # model=tiny_random: the figures recorded here were measured from random weights
    cmd = ["rlkit", "fit", "logger=csv", "model=tiny_random", f"seed={seed}", f"trainer.max_steps={steps}",
           f"hydra.run.dir={run_dir}", *overrides, *extra]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode:
        print(done.stdout[-2000:], done.stderr[-4000:], sep="\n")
        raise SystemExit(f"{name}: rlkit fit failed")
    (metrics,) = run_dir.glob("csv/version_0/metrics.csv")
    with metrics.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("reward/mean")]

    def col(key: str) -> list[float]:
        return [float(r[key]) for r in rows if r.get(key) not in (None, "")]

    failures = col("judge/parse_failure_rate")
    # medians: the first step of a run on a fresh cache also trains the offline tiny judge
    return {"judge_s_per_step": statistics.median(col("time/judge")),
            "latency_ms": 1000 * statistics.median(col("judge/latency_mean")),
            "cache_hit": statistics.mean(col("judge/cache_hit_rate")),
            "parse_fail_mean": statistics.mean(failures), "parse_fail_max": max(failures),
            "after": yardstick(run_dir / "policy", seed)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", nargs="*", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--override", nargs="*", default=[], help="extra overrides for every run")
    args = parser.parse_args()
    threads = next((o.split("=", 1)[1] for o in args.override if o.startswith("torch_threads=")), None)
    if threads not in (None, "null"):
        import torch

        torch.set_num_threads(int(threads))  # the yardstick's sampling too
    before = yardstick(None, args.seed)
    print(f"rule-judged held-out reward of the initial policy: {before:.3f}", flush=True)
    print(f"{'config':<24}{'judge s/step':>13}{'latency ms':>11}{'cache hit':>10}{'parse fail':>11}"
          f"{'worst':>7}{'reward before → after':>24}", flush=True)
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only:
            r = run(name, CONFIGS[name], args.steps, args.seed, Path(tmp), tuple(args.override))
            ok &= r["parse_fail_mean"] < 0.1 and r["after"] > before
            print(f"{name:<24}{r['judge_s_per_step']:>13.2f}{r['latency_ms']:>11.1f}{r['cache_hit']:>10.1%}"
                  f"{r['parse_fail_mean']:>11.2%}{r['parse_fail_max']:>7.1%}"
                  f"{before:>15.3f} → {r['after']:.3f}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
