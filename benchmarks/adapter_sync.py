"""What a weight sync costs the ``openai_server`` generator, full weights against the LoRA adapter alone (issue 51).

One LoRA policy (rlkit's own ``model.lora`` defaults: every linear layer, r=16, alpha 32) and a test server
(``rlkit.testing.openai_server``, in this process) serving the same base. Each route syncs ``--steps`` times, each
after a change to the adapter's weights, and prints the generator's own ``time/sync`` (saving, then the server's
load) and ``sync/bytes`` per step, as a run logs them::

    python benchmarks/adapter_sync.py                                  # the tiny policy
    python benchmarks/adapter_sync.py --model ~/.cache/rlkit/gguf-<hash>-v1 --steps 3   # SmolLM2-135M, imported

``full`` saves the policy merged into its base (a copy) with its tokenizer and the server copies the tensors in
place (SGLang's ``/update_weights_from_disk``); ``adapter`` saves the adapter and the server loads it by name
(vLLM's ``/v1/load_lora_adapter``). The figures are in ``docs/scale-out.md``.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch


def _change(model: torch.nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.01 * torch.randn(p.shape, generator=gen))


def main() -> None:
    from rlkit.config.schemas import LoraConfig
    from rlkit.core.registry import Registry, create_plugin_manager
    from rlkit.lm.models import apply_lora, build_tiny_policy, load_policy
    from rlkit.testing.openai_server import OpenAICompatibleServer

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="a model folder (default: the tiny policy)")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rank", type=int, default=16)
    args = parser.parse_args()
    path = args.model or build_tiny_policy()
    model, tokenizer = load_policy(path)
    policy = apply_lora(model, LoraConfig(r=args.rank))
    registry = Registry(create_plugin_manager())
    print(f"model {path}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f}M parameters, adapter "
          f"{sum(p.numel() for p in policy.parameters() if p.requires_grad) / 1e6:.2f}M (r={args.rank})")
    with OpenAICompatibleServer(path) as server:
        for route in ("full", "adapter"):
            with tempfile.TemporaryDirectory(prefix="rlkit-sync-bench-") as folder:
                generator = registry.create("generator", "openai_server", {
                    "base_url": server.url, "sync": route, "sync_dir": folder})
                generator.setup(policy, tokenizer)
                generator.metrics()
                seconds, sizes = [], []
                for step in range(args.steps):
                    _change(policy, step)
                    started = time.perf_counter()
                    generator.sync_weights(policy)
                    wall = time.perf_counter() - started
                    metrics = generator.metrics()
                    seconds.append(metrics["time/sync"])
                    sizes.append(metrics["sync/bytes"])
                    print(f"  {route:8s} step {step + 1}: time/sync {metrics['time/sync']:.3f} s (the loop waited "
                          f"{wall:.3f} s), sync/bytes {metrics['sync/bytes'] / 1e6:.2f} MB", flush=True)
                generator.close()
            print(f"{route:8s} median time/sync {statistics.median(seconds):.3f} s, "
                  f"sync/bytes {statistics.median(sizes) / 1e6:.2f} MB per step")


if __name__ == "__main__":
    main()
