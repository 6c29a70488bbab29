"""How well does the offline tiny ranking judge order groups? Builds it for each group size (timed, in a
fresh cache unless --cache is given), then ranks held-out default-task groups with the real ``ranking``
judge (hf backend, shuffled repetitions, parser, rank rewards) and compares with the levels it was taught
(2 the sum, 1 another number first, 0 no number first):

* Kendall tau-b between each group's rewards and its levels (mean over groups whose levels differ);
* the share of groups whose best-rewarded completion has the top level;
* parse-failure rate and the judge's own agreement between repetitions.

Usage::

    python benchmarks/tiny_ranking_judge.py [--sizes 4 8] [--groups 200]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

from rlkit_plugins.judges.rule import RuleJudge

RULE_TEACHER = RuleJudge(RuleJudge.Params())  # what the offline judges distil


def evaluate(size: int, groups: int, cache: Path) -> dict[str, float]:
    import os

    from scipy.stats import kendalltau

    from rlkit.core.registry import load_registry
    from rlkit.core.types import Rollout
    from rlkit.judging.tiny_judge import build_tiny_judge, ranking_records, ranking_spec, shipped_rubric

    spec = ranking_spec(size)
    start = time.perf_counter()
    build_tiny_judge(spec, cache_dir=cache, teacher=RULE_TEACHER)
    build_s = time.perf_counter() - start
    held_out = ranking_records(dataclasses.replace(spec, examples=groups, seed=10_000 + size), RULE_TEACHER)
    os.environ["RLKIT_CACHE"] = str(cache)
    judge = load_registry().create("judge", "ranking", {})
    rollout = Rollout(records=[{"prompt": r["prompt"], "reference": r["reference"]} for r in held_out],
                      completions=[r["completions"] for r in held_out])
    start = time.perf_counter()
    scores = judge.score(rollout, shipped_rubric("arithmetic"))[..., 0]
    judge_s = time.perf_counter() - start
    taus, top = [], []
    for r, row in zip(held_out, scores.tolist(), strict=True):
        if len(set(r["levels"])) < 2 or any(v != v for v in row):
            continue
        taus.append(kendalltau(row, r["levels"]).statistic)
        best = max(range(size), key=lambda i: row[i])
        top.append(r["levels"][best] == max(r["levels"]))
    m = judge.metrics()
    return {"build_s": build_s, "tau": statistics.mean(taus), "top": statistics.mean(top),
            "parse_fail": m["judge/parse_failure_rate"], "agreement": m.get("judge/rank_agreement", float("nan")),
            "ms_per_group": 1000 * judge_s / len(held_out)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", type=int, nargs="+", default=[4, 8])
    parser.add_argument("--groups", type=int, default=200)
    parser.add_argument("--cache", type=Path, default=None, help="reuse built judges from this folder")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        cache = args.cache or Path(tmp)
        print(f"{'group size':>10}{'build s':>9}{'tau':>7}{'top ok':>8}{'parse fail':>11}{'agreement':>10}"
              f"{'ms/group':>9}", flush=True)
        for size in args.sizes:
            r = evaluate(size, args.groups, cache)
            print(f"{size:>10}{r['build_s']:>9.0f}{r['tau']:>7.3f}{r['top']:>8.1%}{r['parse_fail']:>11.1%}"
                  f"{r['agreement']:>10.3f}{r['ms_per_group']:>9.1f}", flush=True)


if __name__ == "__main__":
    main()
