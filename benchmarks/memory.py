"""Peak memory of the realistic ~14M-parameter policy (benchmarks/vs_trl.py's `small`): full fine-tuning with a
frozen reference copy vs LoRA with the reference = adapters off, each with and without gradient checkpointing.
Each configuration runs `rlkit fit` in its own process (benchmarks/step_throughput.py's measure).

Usage::

    python benchmarks/memory.py [--steps 6] [--warmup 2]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from step_throughput import measure  # noqa: E402
from vs_trl import SIZES, policy_path  # noqa: E402

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
    args = parser.parse_args()
    shape = SIZES["small"]
    common = [f"model.name_or_path={policy_path('small')}", f"batch_size={shape['prompts']}",
              f"num_generations={shape['group']}", f"max_completion_length={shape['tokens']}",
              f"++generator.params.generation_kwargs={{min_new_tokens:{shape['tokens']}}}", "optim.lr=1e-5",
              "checkpoint_every=100000"]
    print(f"small policy, {shape['prompts']} prompts x {shape['group']} completions x {shape['tokens']} tokens, "
          f"{args.steps} steps (median s/step after {args.warmup})")
    print(f"{'configuration':42} {'peak RSS MB':>12} {'s/step':>8}")
    for label, overrides in CONFIGS.items():
        with tempfile.TemporaryDirectory() as tmp:
            r = measure([*common, *overrides], args.steps, args.warmup, Path(tmp))
        print(f"{label:42} {r['peak_rss_mb']:12.0f} {r['step_s']:8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
