"""What ``optim.length_buckets`` saves when completions have very different lengths.

A rollout of 8 prompts × 8 completions whose lengths follow a long-tailed distribution (log-normal, median
``--median`` tokens, capped at ``--max-len``: the capped ones are truncated, no EOS) goes through rlkit's own
``rlkit.train.updates.completion_update`` once per setting of ``length_buckets``: the reference log-prob pass (a frozen
copy, under ``no_grad``) and the policy's forward + backward + AdamW step. Only the Lightning plumbing around it
is replaced (``optimizers()`` hands back a plain AdamW, ``manual_backward`` is ``loss.backward()``), so the
sorting, bucketing and trimming timed are the module's. The settings are timed alternately (1, 2, 4, ..., 1, 2,
4, ...) in one process and medians reported, because this machine's load swings.

lr is 0, so the weights never move and every repeat does the same work; the loss and the gradient of each
setting are compared with those of ``length_buckets=1`` (any split must give the same update).

Usage::

    python benchmarks/length_buckets.py [--size small] [--buckets 1 2 4 8] [--equal-rows] [--repeats 5]
        [--max-len 128] [--median 16] [--sigma 1.0]

``--equal-rows`` also times the split rlkit used before (sorted rows cut into equal-row slices) against the
current one (cuts placed where they save the most padding).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from vs_trl import SIZES  # noqa: E402  (the tiny and the ~14M "small" policy shapes of the TRL comparison)


class _NoGenerator:
    """The module calls ``generator.sync_weights`` after each optimiser step; the policy samples itself."""

    def sync_weights(self, policy: Any) -> None:
        pass


class _TimedAdamW(torch.optim.AdamW):
    """AdamW that records how long its steps take, so the table can give forward + backward on its own."""

    step_seconds: float = 0.0

    def step(self, closure: Any = None) -> Any:
        start = time.perf_counter()
        out = super().step(closure)
        self.step_seconds += time.perf_counter() - start
        return out


def varied_lengths(n: int, median: float, sigma: float, max_len: int, seed: int) -> torch.Tensor:
    """``n`` completion lengths (EOS included) from a log-normal with this median, clipped to [1, max_len]."""
    g = torch.Generator().manual_seed(seed)
    raw = torch.exp(torch.randn(n, generator=g) * sigma) * median
    return raw.round().clamp(1, max_len).long()


def varied_rollout(tokenizer: Any, prompts: int, group: int, lengths: torch.Tensor, max_len: int,
                   seed: int) -> Any:
    """A ``SampledBatch`` as the ``hf`` generator would hand it over: left-padded prompts, random completion
    tokens, EOS at each row's chosen length (rows at ``max_len`` are truncated), built by rlkit's own
    ``assemble_sampled_batch`` so masks, truncation flags and texts follow the generator's rule."""
    from rlkit.data.records import arithmetic_task
    from rlkit.lm.sampling import assemble_sampled_batch, tokenize_prompts

    ids, mask = tokenize_prompts(tokenizer, arithmetic_task(prompts, seed=seed))
    ids, mask = ids.repeat_interleave(group, 0), mask.repeat_interleave(group, 0)
    g = torch.Generator().manual_seed(seed)
    specials = {tokenizer.eos_token_id, tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.unk_token_id}
    ordinary = torch.tensor([t for t in range(len(tokenizer)) if t not in specials])
    completion = ordinary[torch.randint(len(ordinary), (len(lengths), max_len), generator=g)]
    for row, length in enumerate(lengths.tolist()):
        if length < max_len:
            completion[row, length - 1] = tokenizer.eos_token_id
            completion[row, length:] = tokenizer.pad_token_id
    return assemble_sampled_batch(ids, mask, completion, tokenizer, group)


def bench_module(policy: Any, tokenizer: Any, loss_type: str, max_len: int, group: int) -> Any:
    """The ``UpdateContext`` a training step hands ``completion_update``, around ``policy`` with a frozen reference
    and a plain-torch optimiser port, so it runs without a Trainer; the caller sets ``settings.length_buckets``."""
    from rlkit.core.registry import load_registry
    from rlkit.lm.reference import FrozenCopyReference
    from rlkit.train.settings import RewardParts, TrainingSettings
    from rlkit.train.updates import OptimizerPort, UpdateContext

    objective = load_registry().create("objective", "policy_gradient", {"beta": 0.04, "loss_type": loss_type})
    settings = TrainingSettings(num_generations=group, max_completion_length=max_len, temperature=1.0,
                                lr=0.0, weight_decay=0.0, warmup_steps=0, gradient_clip_val=1.0)
    parts = RewardParts(judge=None, judge_name="none", aggregator=None, estimator=None, scheduler=None,
                        objective=objective)
    opt = _TimedAdamW(policy.parameters(), lr=0.0)  # lr 0: the weights stay put, every repeat is the same work
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    port = OptimizerPort(opt, sched, lambda loss: loss.backward(),
                         lambda o, value: torch.nn.utils.clip_grad_norm_(policy.parameters(), value))
    context = UpdateContext(policy, FrozenCopyReference(policy), _NoGenerator(), settings, parts, port,
                            torch.device("cpu"), 0)
    context.bench_opt = opt
    return context


def equal_row_buckets(lengths: torch.Tensor, num_buckets: int, *, width: int = 0,
                      max_rows: int | None = None) -> list[torch.Tensor]:
    """The split rlkit made before cutting where padding is least: rows sorted by length, cut into nearly equal
    slices (``micro_batches``)."""
    from rlkit.lm.sampling import micro_batches

    order = torch.argsort(lengths, stable=True)
    return [order[c] for c in micro_batches(len(order), num_buckets)]


def one_update(module: Any, sampled: Any, advantages: torch.Tensor, buckets: int, split: str) -> dict[str, Any]:
    """Time ``completion_update`` at ``buckets`` with the ``split`` rule: the reference pass (start to the
    module's ``logprob_at``) and the policy's forward + backward (the rest, less the AdamW step, timed apart)."""
    import rlkit.train.updates
    from rlkit.lm.sampling import length_buckets

    module.settings.length_buckets = buckets
    rlkit.train.updates.length_buckets = length_buckets if split == "least-padding" else equal_row_buckets
    opt = module.bench_opt
    opt.step_seconds = 0.0
    try:
        start = time.perf_counter()
        loss, metrics, logprob_at = rlkit.train.updates.completion_update(module, module.parts.objective, sampled,
                                                                          advantages)
        end = time.perf_counter()
    finally:
        rlkit.train.updates.length_buckets = length_buckets
    grad = torch.cat([p.grad.reshape(-1) for p in module.policy.parameters() if p.grad is not None]).clone()
    return {"reference": logprob_at - start, "policy": end - logprob_at - opt.step_seconds,
            "optim": opt.step_seconds, "total": end - start, "loss": float(loss),
            "grad_norm": float(metrics["grad_norm"]), "grad": grad}


def padded_tokens(lengths: torch.Tensor, prompt_width: int, buckets: int, split: str) -> int:
    """Token positions the passes run over: each bucket as wide as the prompt plus its longest completion."""
    from rlkit.lm.sampling import length_buckets

    rule = length_buckets if split == "least-padding" else equal_row_buckets
    return sum(len(rows) * (prompt_width + int(lengths[rows].max()))
               for rows in rule(lengths, buckets, width=prompt_width))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=sorted(SIZES), default="small")
    parser.add_argument("--buckets", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--equal-rows", action="store_true",
                        help="also time the former equal-row split at every bucket count above 1")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds after one warm-up round")
    parser.add_argument("--max-len", type=int, default=128, help="max_completion_length (the cap)")
    parser.add_argument("--median", type=float, default=16.0, help="median completion length")
    parser.add_argument("--sigma", type=float, default=1.0, help="log-normal sigma (spread of the lengths; 0: equal)")
    parser.add_argument("--loss-type", default="grpo", choices=["grpo", "dr_grpo", "dapo", "bnpo"])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    from rlkit.lm.models import TinyPolicySpec, build_tiny_policy, load_policy

    shape = SIZES[args.size]
    policy, tokenizer = load_policy(build_tiny_policy(TinyPolicySpec(**shape["spec"])))
    policy.train()
    prompts, group = shape["prompts"], shape["group"]
    lengths = varied_lengths(prompts * group, args.median, args.sigma, args.max_len, args.seed)
    sampled = varied_rollout(tokenizer, prompts, group, lengths, args.max_len, args.seed)
    assert torch.equal(sampled.completion_token_counts, lengths)
    advantages = torch.randn(prompts * group, generator=torch.Generator().manual_seed(args.seed))
    module = bench_module(policy, tokenizer, args.loss_type, args.max_len, group)
    configs = [(b, "least-padding") for b in args.buckets]
    if args.equal_rows:
        configs += [(b, "equal-rows") for b in args.buckets if b > 1]

    n_params = sum(p.numel() for p in policy.parameters())
    width = sampled.prompt_length
    print(f"policy {args.size} ({n_params / 1e6:.1f}M parameters), {prompts} prompts × {group} completions, "
          f"loss_type {args.loss_type}, beta 0.04, threads {args.threads}")
    q = torch.quantile(lengths.float(), torch.tensor([0.5, 0.9]))
    print(f"completion lengths: mean {lengths.float().mean():.1f}, median {q[0]:.0f}, p90 {q[1]:.0f}, "
          f"max {int(lengths.max())}, truncated at {args.max_len}: {int((lengths == args.max_len).sum())}; "
          f"prompt width {width}")
    real = int(lengths.sum()) + len(lengths) * width
    positions = {c: padded_tokens(lengths, width, *c) for c in configs}

    runs: dict[tuple[int, str], list[dict[str, Any]]] = {c: [] for c in configs}
    for rnd in range(args.repeats + 1):  # round 0 warms up (allocator, first-call overheads) and is dropped
        for c in configs:
            out = one_update(module, sampled, advantages, *c)
            if rnd:
                runs[c].append(out)
            print(f"  round {rnd} buckets {c[0]} {c[1]}: reference {out['reference']:.3f} s, "
                  f"policy {out['policy']:.3f} s", file=sys.stderr, flush=True)

    base = runs[configs[0]][0]
    first_total = statistics.median(r["total"] for r in runs[configs[0]])
    print(f"\nmedians of {args.repeats} alternating rounds (seconds); token positions per pass over the "
          f"{real} unpadded; loss and gradient against the first row")
    print("| length_buckets | split | token positions | reference log-probs | policy fwd+bwd | AdamW step "
          "| policy_update | speed-up | loss | max grad diff / max grad |")
    print("|--:|---|--:|--:|--:|--:|--:|--:|--:|--:|")
    for c in configs:
        med = {k: statistics.median(r[k] for r in runs[c]) for k in ("reference", "policy", "optim", "total")}
        last = runs[c][-1]
        rel = float((last["grad"] - base["grad"]).abs().max() / base["grad"].abs().max())
        split = "—" if c[0] == 1 else c[1]
        print(f"| {c[0]} | {split} | {positions[c]} ({positions[c] / real:.2f}×) | {med['reference']:.3f} | "
              f"{med['policy']:.3f} | {med['optim']:.3f} | {med['total']:.3f} | {first_total / med['total']:.2f}× | "
              f"{last['loss']:.6f} | {rel:.1e} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
