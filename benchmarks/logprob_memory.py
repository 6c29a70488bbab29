"""What the chunked log-softmax saves on a real vocabulary: peak RSS of `rlkit fit` on SmolLM2-135M-Instruct (49,152
tokens) with the log-prob passes as they are (``selective_log_softmax``: the chosen token's logit minus the
logsumexp, a chunk of rows at a time, as TRL's ``selective_log_softmax``) against the same passes over all rows at
once (the chunk bound lifted, so each pass holds its whole ``[rows, tokens, vocabulary]`` float32 temporaries, as a
plain ``log_softmax(logits).gather(...)`` would). Both project to the vocabulary only at completion positions
(``logits_to_keep``). Each run in its own process, full fine-tuning with a frozen reference (three log-prob passes a
step), fp32, 4 prompts × 4 completions × 32 tokens. Usage::

    python benchmarks/logprob_memory.py [--steps 3] [--size smollm2]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from vs_trl import SIZES, policy_path  # noqa: E402

_CHILD = """
import json, sys
import rlkit.lm.logprobs as logprobs
if sys.argv[2] == "unchunked":
    logprobs.LOG_SOFTMAX_CHUNK_ELEMENTS = 1 << 62
from rlkit.cli import main
sys.exit(main(json.loads(sys.argv[1])))
"""


def run(mode: str, size: str, steps: int, root: Path) -> tuple[float, float]:
    shape = SIZES[size]
    args = ["fit", "logger=none", "log_samples.every=0", "checkpoint_every=100000", f"trainer.max_steps={steps}",
            f"model.name_or_path={policy_path(size)}", f"batch_size={shape['prompts']}",
            f"num_generations={shape['group']}", f"max_completion_length={shape['tokens']}",
            f"data.num_prompts={shape['prompts'] * (steps + 2)}", "optim.lr=1e-5", "objective.params.beta=0.04",
            f"++generator.params.generation_kwargs={{min_new_tokens:{shape['tokens']}}}",
            f"hydra.run.dir={root / mode}"]
    started = time.monotonic()
    proc = subprocess.run(["/usr/bin/time", "-f", "peak-rss-kb %M", sys.executable, "-c", _CHILD, json.dumps(args),
                           mode], capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"{mode} failed:\n{proc.stderr[-3000:]}")
    rss = next(int(line.split()[1]) for line in proc.stderr.splitlines() if line.startswith("peak-rss-kb"))
    return rss / 1024, time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--size", default="smollm2", choices=list(SIZES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("chunked", "unchunked"):
            rss, seconds = run(mode, args.size, args.steps, Path(tmp))
            print(f"{args.size} {mode:9}  peak RSS {rss:6.0f} MB  wall {seconds:5.0f} s ({args.steps} steps)",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
