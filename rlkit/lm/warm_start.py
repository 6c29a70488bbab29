"""A supervised warm start for the embedded tiny policy: a policy that can already do the task sometimes, so a
reward has room to teach (every RL recipe starts from one: SFT, then RL).

The random-init policy is trained on demonstrations (prompt → reference) with the masked token NLL of
``objective=sft`` in a plain torch loop, then saved with ``save_pretrained`` into the cache beside it (or under
``$RLKIT_WARM_START_CACHE``) and loaded back by path like any checkpoint. The folder's name hashes the base policy,
the demonstrations and the settings, so a run trains it once and later runs reuse it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rlkit.data.records import disjoint_task_records
from rlkit.lm.conversation import apply_chat_format
from rlkit.lm.logprobs import masked_nll
from rlkit.lm.models import WARM_START_CACHE_ENV, build_cached, load_policy, resolve_policy_path
from rlkit.lm.sampling import demonstration_batch, sequence_log_probs


def warm_start_cache_dir(base: Path) -> Path:
    """``$RLKIT_WARM_START_CACHE`` if set, else the folder holding the base policy (the rlkit cache)."""
    home = os.environ.get(WARM_START_CACHE_ENV)
    return Path(home).expanduser() if home else base.parent


def warm_start_key(base: Path, records: Sequence[dict[str, Any]], settings: dict[str, Any]) -> str:
    """Short hash of what the warm-started policy depends on: the base folder's name (itself a hash of the tiny
    policy's spec), every demonstration and the training settings."""
    # a record's tools are rendered into its prompt; listed only where present, so older keys stay as they were
    key = {"base": base.name, "settings": settings,
           "records": sorted(json.dumps([r["prompt"], r.get("completion", r.get("reference"))]
                                        + ([r["tools"]] if r.get("tools") else [])) for r in records)}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def train_on_demonstrations(policy: Any, tokenizer: Any, records: Sequence[dict[str, Any]], *, steps: int,
                            batch_size: int, lr: float, seed: int, max_new_tokens: int) -> list[float]:
    """``steps`` AdamW steps on batches drawn (with replacement, seeded) from ``records``; the per-step losses. The
    caller's random state is left as it was: a run must draw the same numbers whether the warm start was cached."""
    draw = random.Random(seed)
    optimiser = torch.optim.AdamW(policy.parameters(), lr=lr)
    policy.train()
    losses = []
    threads = torch.get_num_threads()
    # One thread: the tiny policy's matrices are too small to share, and on a 2-core machine busy with other work 60
    # steps took 3.9 s on one thread and 4.8 to 84 s on two. It also keeps the weights from depending on the core
    # count (through the order of summation), which the cache key does not hold.
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)  # dropout, if the model has any
            for _ in range(steps):
                batch = demonstration_batch(tokenizer, [draw.choice(records) for _ in range(batch_size)],
                                            max_new_tokens)
                mask = batch.completion_mask.float()
                loss = masked_nll(sequence_log_probs(policy, batch), mask, float(mask.sum()))
                optimiser.zero_grad()
                loss.backward()
                optimiser.step()
                losses.append(float(loss.detach()))
    finally:
        torch.set_num_threads(threads)
    policy.eval()
    return losses


def warm_start_policy(base: Path, records: Sequence[dict[str, Any]], *, steps: int, batch_size: int, lr: float,
                      seed: int, max_new_tokens: int,
                      chat_format: tuple[str | None, dict[str, Any] | None] = (None, None)) -> Path:
    """The base policy trained ``steps`` steps on ``records``' demonstrations, saved in :func:`warm_start_cache_dir`
    (built once, atomically, and reused); ``steps=0`` is the base itself. ``chat_format`` (a chat template and a
    response template) is set on the tokenizer first: the demonstrations are rendered with it, and it is saved."""
    if steps == 0:
        return base
    settings: dict[str, Any] = {"steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed,
                                "max_new_tokens": max_new_tokens}
    if chat_format != (None, None):  # older cache folders keep their names
        settings["chat_format"] = list(chat_format)
    target = warm_start_cache_dir(base) / f"{base.name}-warm-{warm_start_key(base, records, settings)}"

    def write(folder: Path) -> None:
        # loading may draw random numbers too (weights initialised before the checkpoint's overwrite them)
        with torch.random.fork_rng(devices=[]), torch.enable_grad():
            policy, tokenizer = load_policy(base)
            apply_chat_format(tokenizer, *chat_format)
            losses = train_on_demonstrations(policy, tokenizer, records, steps=steps, batch_size=batch_size, lr=lr,
                                             seed=seed, max_new_tokens=max_new_tokens)
        policy.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / "warm_start.json").write_text(json.dumps({**settings, "demonstrations": len(records),
                                                            "first_loss": losses[0], "last_loss": losses[-1]}))

    return build_cached(target, write)


# Draws of the synthetic task a warm start samples from (before the run's held-out prompts are removed).
WARM_START_POOL = 4096


def starting_policy(model: Any, data: Any, heldout: Sequence[dict[str, Any]], *, max_new_tokens: int,
                    chat_format: tuple[str | None, dict[str, Any] | None] = (None, None)) -> Path:
    """The folder a run's policy starts from: ``model.name_or_path`` (or the embedded tiny policy), warm-started when
    ``model.warm_start.steps`` asks for it on draws of ``data``'s synthetic task without any ``heldout`` prompt (the
    task's distribution, as SFT before RL learns from), so a held-out table measures prompts it never saw. ``fit``
    and ``rlkit eval`` both start here, so an evaluation without a checkpoint sees the policy a run would train."""
    path = resolve_policy_path(model.name_or_path)
    warm = model.warm_start
    if not warm.steps:
        return path
    demonstrations = disjoint_task_records(data.task, WARM_START_POOL, warm.seed + 1_000_003, heldout, data.chat,
                                           data.instruction)
    return warm_start_policy(path, demonstrations, steps=warm.steps, batch_size=warm.batch_size, lr=warm.lr,
                             seed=warm.seed, max_new_tokens=max_new_tokens, chat_format=chat_format)
