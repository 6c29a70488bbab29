"""Does a run that samples from an inference server, one step ahead (``generator.params.max_lag=1``), learn as the
synchronous run does? Runs the default task (`benchmarks/default_learning.py`'s runs) over seeds with three samplers:

* ``hf``: the policy samples itself (the default);
* ``server0``: ``generator=openai_server`` against ``python -m rlkit.testing.openai_server`` in its own process,
  weights synced from disk after every step, synchronous;
* ``server1``: the same with ``max_lag=1``: each step trains on rollouts sampled by the previous step's weights,
  corrected by truncated importance sampling against the engine's log-probs.

Prints each run's held-out correctness (greedy, before and after training) and training reward, then the start/end
table and the median change per sampler. Usage::

    python benchmarks/async_learning.py [--seeds 1 2 3] [--steps 60] [--samplers hf server0 server1] [-- overrides]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
from pathlib import Path

from rlkit.testing.openai_server import server_process

sys.path.insert(0, str(Path(__file__).parent))
from default_learning import Run, run, table  # noqa: E402 - a sibling script, not a package

SAMPLERS = {"hf": None, "server0": 0, "server1": 1}  # sampler -> max_lag of the server generator (None: no server)


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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=list(SAMPLERS))
    parser.add_argument("overrides", nargs="*", help="extra `rlkit fit` overrides")
    args = parser.parse_args()
    runs: list[Run] = []
    with tempfile.TemporaryDirectory() as tmp:
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
