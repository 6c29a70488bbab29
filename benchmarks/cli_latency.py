"""How long the command line takes to answer: `rlkit --help`, `rlkit plugins`, `rlkit fit --help` and `rlkit validate`
on the default config, each a fresh process (medians of --repeats), and the top entries of Python's import profile
(`-X importtime`) of building the registry, which every command waits for.

    python benchmarks/cli_latency.py --repeats 3

Targets (issue "A command line that behaves like a Hydra app"): --help and plugins under 0.5 s, validate under 3 s.
Timed as an installed rlkit runs: with compiled bytecode (PYTHONDONTWRITEBYTECODE, set on some CI machines, is
dropped, and one untimed run of each command writes the .pyc files first); without it every command also compiles
each module it imports, about 0.15 s more for `rlkit plugins`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

COMMANDS = {
    "rlkit --help": ["--help"],
    "rlkit plugins": ["plugins"],
    "rlkit fit --help": ["fit", "--help"],
    "rlkit validate": ["validate"],
}


ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def timed(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "rlkit", *args], check=True, capture_output=True, env=ENV)
    return time.perf_counter() - started


def import_profile(top: int) -> list[tuple[float, str]]:
    """(cumulative seconds, module) of the slowest top-level imports while building the registry."""
    code = "from rlkit.core.registry import load_registry; load_registry()"
    err = subprocess.run([sys.executable, "-X", "importtime", "-c", code], check=True, capture_output=True,
                         text=True, env=ENV).stderr
    rows = []
    for line in err.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = (part.strip() for part in line.split(":", 1)[1].split("|"))
        if cumulative.isdigit() and not name.startswith(" "):
            rows.append((int(cumulative) / 1e6, name.strip()))
    return sorted(rows, reverse=True)[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--top", type=int, default=8)
    options = parser.parse_args()
    print(f"{'command':<20} {'median s':>9} {'min s':>7}")
    for label, args in COMMANDS.items():
        timed(args)  # writes the bytecode
        times = [timed(args) for _ in range(options.repeats)]
        print(f"{label:<20} {statistics.median(times):>9.2f} {min(times):>7.2f}")
    print("\nslowest imports while building the registry (cumulative s):")
    for seconds, name in import_profile(options.top):
        print(f"  {seconds:6.2f}  {name}")


if __name__ == "__main__":
    main()
