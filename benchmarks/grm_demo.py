"""The GRM demonstration: train a tiny generative reward model on CPU, check it on fresh data, serve it, and
train a policy against it over HTTP.

1. ``rlkit train-grm`` on synthetic arithmetic preferences whose true order is the shipped rubric's (rule judge +
   weighted sum; ``rlkit/grm_data.py``), the tiny GRM built locally; wall time and peak RSS.
2. Two fresh test sets of sums training never showed (operands 21-60, training's are 0-20), scored by the saved
   GRM: the training mix, and near misses only (the correct sum against numbers close to it, the comparisons a
   policy's late training turns on); pairwise accuracy and length-controlled accuracy (the mean of the
   chosen-shorter and chosen-longer strata).
3. ``rlkit serve judge=grm`` on loopback, one ``/v1/reward`` request shown.
4. ``rlkit fit judge=reward_api`` against that server; the held-out yardstick (rule judge on the rubric) before
   and after.

Targets (issue 7): training under 15 minutes, ≥ 80% held-out pairwise accuracy, ≥ 70% length-controlled.

Usage::

    python benchmarks/grm_demo.py [--records 3000] [--epochs 3] [--fit-steps 40] [--out /tmp/grm-demo]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rlkit", *args], env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"rlkit {args[0]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return time.perf_counter() - start, proc.stdout


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=3000, help="synthetic training records (ranked groups)")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--test-records", type=int, default=600)
    parser.add_argument("--fit-steps", type=int, default=40)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="grm-demo-"))
    env = {**os.environ, "WANDB_SILENT": "true", "RLKIT_CACHE": os.environ.get("RLKIT_CACHE", str(out / "cache"))}

    # 1. train
    run = out / "train"
    seconds, stdout = _run(["train-grm", "logger=csv", f"hydra.run.dir={run}", f"grm.data.synthetic_records="
                            f"{args.records}", f"grm.epochs={args.epochs}"], env)
    peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    info = json.loads((run / "grm" / "grm.json").read_text())
    m = info["metrics"]
    print(f"train-grm: {info['train_examples']} training pairs, {info['steps']} steps, {seconds / 60:.1f} min, "
          f"peak RSS {peak_mb:.0f} MB")
    print(f"  held-out split ({info['val_pairs']} pairs): accuracy {m['accuracy']:.3f}, length-controlled "
          f"{m['length_controlled_accuracy']:.3f} (chosen shorter {m['accuracy/chosen_shorter']:.3f}, chosen longer "
          f"{m['accuracy/chosen_longer']:.3f})")

    # 2. fresh test set
    from rlkit.core.registry import load_registry
    from rlkit.data.pairs import listwise_to_pairs, read_preference_records
    from rlkit.grm.data import SyntheticRanker, synthetic_preferences
    from rlkit.grm.metrics import PairOutcome, pair_accuracy
    from rlkit.grm.model import GenerativeRewardModel, read_grm_format

    grm = GenerativeRewardModel.load(run / "grm", fmt=read_grm_format(run / "grm"))
    train_prompts = {json.loads(line)["prompt"] for line in (run / "data" / "synthetic_preferences.jsonl").open()}
    registry = load_registry()
    ranker = SyntheticRanker(registry.create("judge", "rule"), registry.create("aggregator", "weighted_sum"),
                             registry.create("weight_scheduler", "constant"))  # as conf/train_grm.yaml ranks
    # operands 21-60: sums training (operands 0-20) never showed, so the model must compare, not remember
    for label, near_miss in (("fresh test set", 0.5), ("near misses only", 1.0)):
        test_file = out / f"test-{near_miss}.jsonl"
        rows = synthetic_preferences(args.test_records, ranker, seed=9_999, operands=(21, 60), near_miss=near_miss)
        test_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
        records, _ = read_preference_records(test_file)
        assert not {r.prompt for r in records} & train_prompts
        pairs = listwise_to_pairs(records).pairs
        q = grm.prefer_first([(p.prompt, p.chosen, p.rejected, p.reference) for p in pairs], 256)
        t = pair_accuracy([PairOutcome(float(x), len(p.chosen), len(p.rejected), p.domain)
                           for x, p in zip(q.tolist(), pairs, strict=True)])
        print(f"{label}, unseen sums ({len(pairs)} pairs): accuracy {t['accuracy']:.3f}, length-controlled "
              f"{t['length_controlled_accuracy']:.3f} (chosen shorter {t['accuracy/chosen_shorter']:.3f} of "
              f"{int(t['pairs/chosen_shorter'])}, chosen longer {t['accuracy/chosen_longer']:.3f} of "
              f"{int(t['pairs/chosen_longer'])})")

    # 3. serve it
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "rlkit", "serve", "judge=grm",
                               f"judge.params.model={run / 'grm'}", f"serve.port={port}"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(f"{base}/health", timeout=1)
                break
            except OSError:
                time.sleep(0.5)
        answer = _post(f"{base}/v1/reward", {"prompt": "3+4=", "responses": ["7", "12", "the answer is 7", "7777"],
                                             "fields": {"reference": "7"}})
        shown = ", ".join(f"{r['index']}: reward {r['reward']:.2f} rank {r['rank']}" for r in answer["results"])
        print(f"rlkit serve judge=grm: 3+4= → ['7', '12', 'the answer is 7', '7777'] → {shown}")

        # 4. a policy trained against the served GRM
        fit_run = out / "fit"
        seconds, stdout = _run(["fit", "model=tiny_random", "judge=reward_api", f"judge.params.base_url={base}",
                                "logger=csv", f"trainer.max_steps={args.fit_steps}", f"hydra.run.dir={fit_run}"], env)
        print(f"rlkit fit judge=reward_api ({args.fit_steps} steps, {seconds / 60:.1f} min):")
        print("\n".join("  " + line for line in stdout.splitlines() if line.strip())[-3000:])
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"outputs under {out}")


if __name__ == "__main__":
    main()
