"""Does a run that samples from an inference server, one step ahead (``generator.params.max_lag=1``), learn as the
synchronous run does? Runs the default task (`benchmarks/default_learning.py`'s runs) over seeds with three samplers:

* ``hf``: the policy samples itself (the default);
* ``server0``: ``generator=openai_server`` against ``python -m rlkit.testing.openai_server`` in its own process,
  weights synced from disk after every step, synchronous;
* ``server1``: the same with ``max_lag=1``: each step trains on rollouts sampled by the previous step's weights,
  corrected by truncated importance sampling against the engine's log-probs.

Prints each run's held-out correctness (greedy, before and after training) and training reward, then the start/end
table and the median change per sampler. With ``--corrections``, ``server1`` runs once per engine-mismatch
correction (``is_correction``) and a second table gives each one's mean ``rollout/mismatch_kl``, masked and clipped
token shares and held-out change. Usage::

    python benchmarks/async_learning.py [--seeds 1 2 3] [--steps 60] [--samplers hf server0 server1] [-- overrides]
    python benchmarks/async_learning.py --samplers server1 --corrections none token-truncate token-mask \
        sequence-mask geometric-mask
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import math
import statistics
import sys
import tempfile
from pathlib import Path

from rlkit.testing.openai_server import server_process

sys.path.insert(0, str(Path(__file__).parent))
from default_learning import Run, run, table  # noqa: E402 - a sibling script, not a package

SAMPLERS = {"hf": None, "server0": 0, "server1": 1}  # sampler -> max_lag of the server generator (None: no server)
IS = "is_correction."
CORRECTIONS = {
    "none": ["is_correction=null"],
    "token-truncate": [],  # the default: TRL's truncated token-level ratio, cap 2
    # IcePop's two-sided token mask, [0.5, 2]
    "token-mask": [f"{IS}mode=mask", f"{IS}low=0.5", f"{IS}cap=2.0"],
    # TRL's default vllm_importance_sampling_mode: sequence_mask with C = 3
    "sequence-mask": [f"{IS}level=sequence", f"{IS}mode=mask", f"{IS}cap=3.0"],
    # the geometric mean of a completion's ratios, masked outside [0.5, 2] (SkyRL's first recommendation)
    "geometric-mask": [f"{IS}level=geometric", f"{IS}mode=mask", f"{IS}low=0.5", f"{IS}cap=2.0"],
}
CORRECTION_METRICS = ("rollout/mismatch_kl", "rollout/is_masked_frac", "rollout/is_clipped_frac",
                      "rollout/is_ratio_mean")


def run_with(sampler: str, seed: int, steps: int, root: Path, overrides: list[str]) -> Run:
    max_lag = SAMPLERS[sampler]
    if max_lag is None:
        result = run(seed, steps, None, root / sampler, overrides)
        return dataclasses.replace(result, label=sampler)
    # The server starts from the embedded random-init policy; the generator's first sync gives it the run's own
    # (warm-started) weights before anything is sampled.
    with server_process() as (url, _):
        result = run(seed, steps, None, root / sampler, [
            "generator=openai_server", f"generator.params.base_url={url}", f"generator.params.max_lag={max_lag}",
            *overrides])
    return dataclasses.replace(result, label=sampler)


def mean_metrics(run_dir: Path, names: tuple[str, ...]) -> dict[str, float]:
    """Each metric's mean over the run's steps (from its metrics.csv); NaN where it was never logged."""
    (metrics,) = run_dir.glob("**/csv/version_0/metrics.csv")
    with metrics.open() as fh:
        rows = list(csv.DictReader(fh))
    return {name: statistics.mean(values) if (values := [float(r[name]) for r in rows if r.get(name)]) else math.nan
            for name in names}


def correction_runs(corrections: list[str], seeds: list[int], steps: int, root: Path, overrides: list[str],
                    ) -> list[tuple[str, Run, dict[str, float]]]:
    out = []
    for seed in seeds:
        for name in corrections:
            folder = root / f"server1-{name}-seed{seed}"
            result = run_with("server1", seed, steps, folder, [*CORRECTIONS[name], *overrides])
            out.append((name, dataclasses.replace(result, label=f"server1 {name}"),
                        mean_metrics(folder, CORRECTION_METRICS)))
    return out


def correction_table(rows: list[tuple[str, Run, dict[str, float]]], corrections: list[str]) -> str:
    lines = ["| correction (max_lag 1) | held-out correctness change (median; per seed) | mismatch KL | masked | "
             "clipped | mean weight |", "|---|---|--:|--:|--:|--:|"]
    for name in corrections:
        mine = [(r, m) for n, r, m in rows if n == name]
        per_seed = ", ".join(f"{r.held_change:+.3f}" for r, _ in mine)
        cells = [statistics.median(m[k] for _, m in mine) for k in CORRECTION_METRICS]
        lines.append(f"| {name} | {statistics.median(r.held_change for r, _ in mine):+.3f} ({per_seed}) | "
                     f"{cells[0]:.2e} | {cells[1]:.4f} | {cells[2]:.4f} | {cells[3]:.4f} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("--corrections", nargs="*", default=[], choices=list(CORRECTIONS),
                        help="server1 once per is_correction setting (instead of the samplers)")
    parser.add_argument("overrides", nargs="*", help="extra `rlkit fit` overrides")
    args = parser.parse_args()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.corrections:
            rows = correction_runs(args.corrections, args.seeds, args.steps, Path(tmp), args.overrides)
            print()
            print(correction_table(rows, args.corrections))
            return 0
        for seed in args.seeds:  # samplers alternate within a seed, so a slow spell of the machine hits all three
            runs += [run_with(s, seed, args.steps, Path(tmp), args.overrides) for s in args.samplers]
    print()
    print(table(sorted(runs, key=lambda r: (args.samplers.index(r.label), r.seed))))
    print()
    for sampler in args.samplers:
        mine = [r for r in runs if r.label == sampler]
        print(f"{sampler:>8}: median held-out correctness change {statistics.median(r.held_change for r in mine):+.3f}"
              f", training reward gain {statistics.median(r.reward_last - r.reward_first for r in mine):+.3f}, "
              f"median wall time {statistics.median(r.seconds for r in mine):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
