"""Peak memory of the realistic ~14M-parameter policy (benchmarks/vs_trl.py's `small`): full fine-tuning with a
frozen reference copy vs LoRA with the reference = adapters off, each with and without gradient checkpointing.
Each configuration runs `rlkit fit` in its own process (benchmarks/step_throughput.py's measure).

Then the peak of each phase (phase_memory.py: held-out validation, generation, judging, reference log-probs,
policy forward, backward, optimiser step, checkpoint save, ...), exact per phase, so the table says where a
configuration's peak is set. RSS is what glibc holds, freed memory included; for the live tensors' peak run with
``MALLOC_MMAP_THRESHOLD_=65536`` (large blocks then go back to the system when freed; the children inherit it).

Usage::

    python benchmarks/memory.py [--steps 6] [--warmup 2] [-- extra rlkit fit overrides, e.g. optim.length_buckets=1]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from step_throughput import measure  # noqa: E402
from vs_trl import SIZES, policy_path  # noqa: E402

_CHILD = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
import phase_memory
tracker = phase_memory.install()
from rlkit.cli import main
code = main(json.loads(sys.argv[1]))
report = tracker.report()
print("PHASES", json.dumps(report))
# the counter getrusage reads is reset at every phase boundary: the run's peak is the highest phase's
print("PEAK_RSS_KB", round(max(report["peak_mb"].values()) * 1024))
sys.exit(code)
"""
CONFIGS = {
    "full + frozen reference": ["model.reference=frozen"],
    "full + frozen, checkpointing": ["model.reference=frozen", "model.gradient_checkpointing=true"],
    "LoRA r=16 + adapter_off": ["model.lora.r=16", "model.reference=adapter_off"],
    "LoRA r=16 + adapter_off, checkpointing": ["model.lora.r=16", "model.reference=adapter_off",
                                               "model.gradient_checkpointing=true"],
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("overrides", nargs="*", help="extra `rlkit fit` overrides (after --), for every configuration")
    args = parser.parse_args()
    shape = SIZES["small"]
    common = [f"model.name_or_path={policy_path('small')}", f"batch_size={shape['prompts']}",
              f"num_generations={shape['group']}", f"max_completion_length={shape['tokens']}",
              f"++generator.params.generation_kwargs={{min_new_tokens:{shape['tokens']}}}", "optim.lr=1e-5",
              "checkpoint_every=100000"]
    print(f"small policy, {shape['prompts']} prompts x {shape['group']} completions x {shape['tokens']} tokens, "
          f"{args.steps} steps (median s/step after {args.warmup})" + "".join(f"; {o}" for o in args.overrides))
    print(f"{'configuration':42} {'peak RSS MB':>12} {'s/step':>8}")
    phases: dict[str, dict[str, Any]] = {}
    for label, overrides in CONFIGS.items():
        with tempfile.TemporaryDirectory() as tmp:
            r = measure([*common, *overrides, *args.overrides], args.steps, args.warmup, Path(tmp), child=_CHILD)
        print(f"{label:42} {r['peak_rss_mb']:12.0f} {r['step_s']:8.2f}", flush=True)
        line = next(x for x in r["stdout"].splitlines() if x.startswith("PHASES "))
        phases[label] = json.loads(line.split(maxsplit=1)[1])
    print_phase_table(phases)
    return 0


def print_phase_table(phases: dict[str, dict[str, Any]]) -> None:
    """Per phase (rows) and configuration (columns, numbered as above): peak RSS MB, and in brackets how far the
    phase took RSS above what was resident when it began; * marks the phase that set the configuration's peak."""
    from phase_memory import PHASE_ORDER

    seen = {n for p in phases.values() for n in p["peak_mb"]}
    names = [n for n in PHASE_ORDER if n in seen] + sorted(seen - set(PHASE_ORDER))
    print("\npeak RSS MB per phase (+ its rise over the RSS it began with; * the phase that set the peak)")
    print(f"{'phase':24}" + "".join(f"{i:>16}" for i in range(1, len(phases) + 1)))
    for name in names:
        cells = []
        for p in phases.values():
            if name not in p["peak_mb"]:
                cells.append("-".rjust(16))
                continue
            mark = "*" if p["peak_set_by"] == name else " "
            cells.append(f"{p['peak_mb'][name]:.0f} (+{p['rise_mb'][name]:.0f}){mark}".rjust(16))
        print(f"{name:24}" + "".join(cells))


if __name__ == "__main__":
    sys.exit(main())
