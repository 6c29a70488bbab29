"""A timeline of the trainer and the inference server on one clock, for ``vs_trl.py``'s server and llama.cpp sides.

Runs ``vs_trl.py``'s sides (by default ``server1`` and ``server0`` on SmolLM2-135M, 1 torch thread in the trainer and
1 in the server, and the built-in sampler at 2 threads for comparison) with ``RLKIT_TIMELINE`` set, so the trainer
and the server process (``rlkit.testing.openai_server``) append their spans of work to one file
(:mod:`rlkit.core.timeline`), then draws the steady-state steps as a Gantt chart and prints, per process, each
phase's seconds a step and the share of the wall time it was busy.

Where the spans come from:

* the server (``rlkit.testing.openai_server``): ``decode`` (the batched KV-cache loop), ``score reference``
  (``prompt_logprobs`` under the frozen reference), ``update weights from disk`` (a sync's load), ``gather burst``
  (the lead request sleeping ``batch_window_s`` for the rest of the burst: idle), and per request ``read request``,
  ``build answer``, ``send answer``;
* the trainer's update (``rlkit.train.updates``): ``log-prob passes`` (reference / old policy, no grad),
  ``policy forward``, ``policy backward`` (loss and backward), ``optimizer step`` (norm, clip, AdamW), ``weight
  sync`` (the generator's ``sync_weights``), ``reference wait`` (``model.reference=engine``);
* the rest of the step, from this script (:func:`trace_trainer_phases`, installed in ``vs_trl.py``'s child when
  ``RLKIT_TIMELINE`` is set): ``step`` (``training_step``), ``generation`` (``rollout``: requesting and reading the
  step's completions), ``judge`` (``score``: judging and aggregation), and inside them the generator's
  ``wait: rollout answers`` (reading the engine's answers), ``wait: server loads weights`` (a load request until
  it is answered) and ``save weights`` (``save_pretrained`` of the version the server will load).

For the llama.cpp sides (``llama0``, ``llama1``, ``llama0q8``, ``llama1q8``: ``generator=llama_cpp``) the engine is
llama.cpp's C++ server in a child process, which writes no spans; the trainer's side of it is traced instead:
``wait: rollout answers`` (the generator's ``PendingBatch.collect``), ``save weights`` (writing the policy as a GGUF
file) and ``wait: server loads weights`` (the engine started or reloaded on a new file), and the engine's own work is
read from ``/proc``: the cores its process used, sampled with the machine's load (the "engine process" lane, darker
is busier; its mean is printed). The sampled cores are also given for the server sides' engine process.

The trainer counts as busy inside a step except while it waits on the server (the three ``wait`` spans); the server
as busy inside any span except ``gather burst``. Each phase's ``cpu`` is the CPU seconds its process spent in it over
its wall seconds: under 100% on one thread, the phase waited (for I/O, or for a core another process held). The
machine is shared, so the script also samples ``/proc/stat`` twice a second and reports the cores that processes
other than the side's trainer and server used meanwhile, and the hypervisor's steal (the "other processes" lane:
darker is busier).

Usage::

    python benchmarks/server_timeline.py [--size smollm2] [--sides server1 server0 rlkit llama1 ...] [--steps 6]
                                         [--warmup 2]
                                         [--show 3] [--server-split 1+1] [--threads 2] [--tuning full|lora]
                                         [--out benchmarks/server_timeline_smollm2.png] [--keep-traces DIR]
"""

from __future__ import annotations

import argparse
import functools
import os
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rlkit.core.timeline import ENV, read_spans, record, span  # noqa: E402

WAITS = {"wait: rollout answers", "wait: server loads weights", "reference wait"}
SERVER_IDLE = {"gather burst"}
# the command lines of the engine processes a side starts: the project's torch server, and llama.cpp's child
ENGINE_MARKERS = (b"rlkit.testing.openai_server", b"rlkit.lm.llama_server")
# lanes, top to bottom: (label, process, span names)
LANES = [
    ("trainer", "trainer", ["generation", "judge", "log-prob passes", "policy forward", "policy backward",
                            "optimizer step", "weight sync"]),
    ("trainer, inside\ngeneration / sync", "trainer", ["save weights", "wait: rollout answers",
                                                       "wait: server loads weights", "reference wait"]),
    ("server: model", "server", ["decode", "score reference", "update weights from disk", "gather burst"]),
    ("server: requests", "server", ["read request", "build answer", "send answer"]),
]
COLOURS = {
    "generation": "#9ecae1", "judge": "#fdae6b", "log-prob passes": "#a1d99b", "policy forward": "#41ab5d",
    "policy backward": "#006d2c", "optimizer step": "#756bb1", "weight sync": "#bcbddc", "save weights": "#54278f",
    "wait: rollout answers": "#deebf7", "wait: server loads weights": "#fee6ce", "reference wait": "#e5f5e0",
    "decode": "#e6550d", "score reference": "#fd8d3c", "update weights from disk": "#8c6d31",
    "gather burst": "#d9d9d9", "read request": "#969696", "build answer": "#636363", "send answer": "#252525",
}


# --- the trainer's phases that rlkit/train/module.py times (installed in vs_trl.py's child) --------------------


def _traced(cls: Any, method: str, name: str, step_field: bool = False) -> None:
    original = getattr(cls, method)
    if getattr(original, "_timeline", False):
        return

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        fields = {"step": int(self.global_step)} if step_field else {}
        with span("trainer", name, **fields):
            return original(self, *args, **kwargs)

    wrapper._timeline = True  # type: ignore[attr-defined]
    setattr(cls, method, wrapper)


def trace_trainer_phases() -> None:
    """Mark the step, its generation and its judging (timed in ``RubricRLModule.training_step`` for the CSV log's
    ``time/*`` columns, which have no trace of their own), and the generator's waits on the engine."""
    from rlkit.train.module import RubricRLModule
    from rlkit.train.step_rewards import RewardPipeline
    from rlkit_plugins.generators import llama_cpp
    from rlkit_plugins.generators.openai_server import OpenAIServerGenerator, PendingBatch

    _traced(RubricRLModule, "training_step", "step", step_field=True)
    _traced(RubricRLModule, "rollout", "generation")
    _traced(RewardPipeline, "judge", "judge")
    _traced(PendingBatch, "collect", "wait: rollout answers")
    _traced(OpenAIServerGenerator, "_send", "wait: server loads weights")
    _traced(OpenAIServerGenerator, "_save", "save weights")
    # llama.cpp: its engine (re)loads inside _engine when a new file is due, which is otherwise a lookup
    _traced(llama_cpp.PendingBatch, "collect", "wait: rollout answers")
    _traced(llama_cpp.LlamaCppGenerator, "_engine", "wait: server loads weights")
    _traced(llama_cpp.LlamaCppGenerator, "_write", "save weights")


# --- what else the machine was doing ------------------------------------------------------------------------------


class MachineLoad(threading.Thread):
    """Every ``every`` seconds, the machine's busy cores (``/proc/stat``: user, nice, system, irq, softirq), the
    hypervisor's steal, the cores this benchmark's own processes used (this one and its descendants: the side and
    the server it starts) and of those the engine process's (``ENGINE_MARKERS``), written to the trace as
    ``machine`` spans."""

    def __init__(self, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.every, self._stop_event = every, threading.Event()
        self._hz = os.sysconf("SC_CLK_TCK")
        self._engines: dict[int, bool] = {}  # pid -> whether it is an engine process (a pid's command line is fixed)

    def _is_engine(self, pid: int) -> bool:
        if pid not in self._engines:
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except OSError:
                return False
            self._engines[pid] = any(marker in cmdline for marker in ENGINE_MARKERS)
        return self._engines[pid]

    @staticmethod
    def _ours() -> dict[int, int]:
        """CPU jiffies (user + system) of this process and every descendant, by pid."""
        stats: dict[int, tuple[int, int]] = {}  # pid -> (parent, jiffies)
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                stats[int(entry)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
        ours, frontier = {os.getpid()}, [os.getpid()]
        children: dict[int, list[int]] = defaultdict(list)
        for pid, (parent, _) in stats.items():
            children[parent].append(pid)
        while frontier:
            for child in children[frontier.pop()]:
                ours.add(child)
                frontier.append(child)
        return {pid: stats[pid][1] for pid in ours if pid in stats}

    def _sample(self) -> tuple[float, int, int, dict[int, int]]:
        cpu = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        busy = cpu[0] + cpu[1] + cpu[2] + cpu[5] + cpu[6]
        return time.time(), busy, cpu[7] if len(cpu) > 7 else 0, self._ours()

    def run(self) -> None:
        prev = self._sample()
        while not self._stop_event.wait(self.every):
            cur = self._sample()
            dt = (cur[0] - prev[0]) * self._hz
            used = {pid: j - prev[3][pid] for pid, j in cur[3].items() if pid in prev[3]}
            engine = sum(j for pid, j in used.items() if self._is_engine(pid))
            record("machine", "cpu", prev[0], cur[0], busy=(cur[1] - prev[1]) / dt, steal=(cur[2] - prev[2]) / dt,
                   ours=sum(used.values()) / dt, engine=engine / dt)
            prev = cur

    def stop(self) -> None:
        self._stop_event.set()
        self.join()


# --- reading a trace ---------------------------------------------------------------------------------------------


def union(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[list[float]] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(a, b) for a, b in merged]


def length(intervals: list[tuple[float, float]]) -> float:
    return sum(b - a for a, b in union(intervals))


def clip(intervals: list[tuple[float, float]], lo: float, hi: float) -> list[tuple[float, float]]:
    return [(max(a, lo), min(b, hi)) for a, b in intervals if b > lo and a < hi]


def subtract(intervals: list[tuple[float, float]], holes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out = []
    holes = union(holes)
    for a, b in union(intervals):
        at = a
        for h0, h1 in holes:
            if h1 <= at or h0 >= b:
                continue
            if h0 > at:
                out.append((at, h0))
            at = max(at, h1)
        if at < b:
            out.append((at, b))
    return out


def step_count(spans: list[dict[str, Any]]) -> int:
    return sum(s["proc"] == "trainer" and s["name"] == "step" for s in spans)


def window(spans: list[dict[str, Any]], first: int, show: int) -> tuple[float, float, list[float]]:
    """``show`` steps from step ``first`` (training steps counted from 0): from its start to the start of the step
    after the last (that step's end if there is none), and the steps' starts."""
    steps = sorted(s["start"] for s in spans if s["proc"] == "trainer" and s["name"] == "step")
    ends = sorted(s["end"] for s in spans if s["proc"] == "trainer" and s["name"] == "step")
    if len(steps) < first + 1:
        raise SystemExit(f"the trace holds {len(steps)} steps; raise --steps above --warmup")
    shown = steps[first:first + show]
    hi = steps[first + show] if len(steps) > first + show else ends[min(first + show, len(ends)) - 1]
    return shown[0], hi, shown


def summarise(spans: list[dict[str, Any]], lo: float, hi: float, n_steps: int) -> dict[str, Any]:
    """Per process and phase, seconds a step inside the window; each process's busy share; both at once."""
    by_name: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for s in spans:
        by_name[(s["proc"], s["name"])].append((s["start"], s["end"]))
    phases = {key: length(clip(v, lo, hi)) / n_steps for key, v in by_name.items()
              if clip(v, lo, hi) and key[0] != "machine"}
    # CPU seconds over wall seconds, of the spans that start in the window
    cpu, wall_in = defaultdict(float), defaultdict(float)
    for s in spans:
        if "cpu" in s and lo <= s["start"] < hi:
            cpu[(s["proc"], s["name"])] += s["cpu"]
            wall_in[(s["proc"], s["name"])] += s["end"] - s["start"]
    cpu_share = {key: cpu[key] / wall_in[key] for key in cpu if wall_in[key] > 0}
    samples = [s for s in spans if s["proc"] == "machine" and s["end"] > lo and s["start"] < hi]
    weights = [min(s["end"], hi) - max(s["start"], lo) for s in samples]

    def mean(field: str) -> float | None:
        if not samples or any(field not in s for s in samples):  # traces kept before a field was sampled lack it
            return None
        return sum(w * s[field] for w, s in zip(weights, samples, strict=True)) / sum(weights)
    # the two reads are half a second apart, so an idle machine can come out a hair below zero
    others = None if not samples else max(0.0, mean("busy") - mean("ours"))
    trainer_steps = clip(by_name[("trainer", "step")], lo, hi)
    trainer_waits = clip([iv for name in WAITS for iv in by_name.get(("trainer", name), [])], lo, hi)
    trainer_busy = subtract(trainer_steps, trainer_waits)
    server_busy = union(clip([iv for (proc, name), v in by_name.items() if proc == "server"
                              and name not in SERVER_IDLE for iv in v], lo, hi))
    both = subtract(trainer_busy, subtract([(lo, hi)], server_busy))
    wall = hi - lo
    return {"wall": wall, "per_step": wall / n_steps, "phases": phases,
            "trainer_busy": length(trainer_busy) / wall, "server_busy": length(server_busy) / wall,
            "both_busy": length(both) / wall, "has_server": bool(server_busy), "cpu_share": cpu_share,
            "others": others, "steal": mean("steal"), "ours": mean("ours"), "engine": mean("engine")}


def print_summary(side: str, result: dict[str, Any] | None, summary: dict[str, Any]) -> None:
    median = f"vs_trl median {result['step_s']:.2f} s/step; " if result else ""
    print(f"\n{side}: {median}window {summary['wall']:.2f} s over "
          f"{summary['wall'] / summary['per_step']:.0f} steps ({summary['per_step']:.2f} s a step)")
    print(f"  trainer busy {100 * summary['trainer_busy']:.0f}% of the wall time"
          + (f", server busy {100 * summary['server_busy']:.0f}%, both at once {100 * summary['both_busy']:.0f}%"
             if summary["has_server"] else ""))
    if summary["others"] is not None:
        engine = f" (its engine process {summary['engine']:.2f})" if summary["engine"] else ""
        print(f"  cores used meanwhile: this side's processes {summary['ours']:.2f}{engine}, other processes "
              f"{summary['others']:.2f}, hypervisor steal {summary['steal']:.2f} (of {os.cpu_count()})")
    shares = summary["cpu_share"]
    for proc in ("trainer", "server"):
        rows = sorted(((name, s) for (p, name), s in summary["phases"].items() if p == proc), key=lambda r: -r[1])
        if rows:
            print(f"  {proc}, s a step (cpu/wall): " + ", ".join(
                f"{name} {s:.2f}" + (f" ({100 * shares[(proc, name)]:.0f}%)" if (proc, name) in shares and s >= 0.05
                                     else "") for name, s in rows))


def draw(panels: list[tuple[str, list[dict[str, Any]], float, float, list[float], dict[str, Any]]],
         out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    height = 2.4 * len(panels) + 1.5  # inches: the panels, then the title and the legend's 3 rows
    fig, axes = plt.subplots(len(panels), 1, figsize=(13, height), squeeze=False)
    used: dict[str, str] = {}
    longest = max(hi - lo for _, _, lo, hi, _, _ in panels)
    for ax, (label, spans, lo, hi, starts, summary) in zip(axes[:, 0], panels, strict=True):
        present = {(s["proc"], s["name"]) for s in spans}
        lanes = [lane for lane in LANES if any((lane[1], name) in present for name in lane[2])]
        for row, (_, proc, names) in enumerate(lanes):
            y = len(lanes) - 1 - row
            for name in names:
                bars = [(a - lo, b - a) for a, b in clip([(s["start"], s["end"]) for s in spans
                                                          if s["proc"] == proc and s["name"] == name], lo, hi)]
                if bars:
                    ax.broken_barh(bars, (y - 0.38, 0.76), facecolors=COLOURS.get(name, "#cccccc"),
                                   edgecolor="black" if name in WAITS | SERVER_IDLE else "none", linewidth=0.3,
                                   hatch="//" if name in WAITS | SERVER_IDLE else None)
                    used[name] = COLOURS.get(name, "#cccccc")
        samples = [s for s in spans if s["proc"] == "machine" and s["end"] > lo and s["start"] < hi]
        # an engine that writes no spans (llama.cpp) is drawn from its sampled cores, in a lane under the others
        engine_lane = bool(summary["engine"]) and not summary["has_server"]
        if samples:  # the bottom lanes: how many cores other processes (and the engine) used, 0 white to all black
            cores = os.cpu_count() or 1
            for s in samples:
                a, b = max(s["start"], lo), min(s["end"], hi)
                share = min(max((s["busy"] - s["ours"]) / cores, 0.0), 1.0)
                ax.broken_barh([(a - lo, b - a)], (-1 - 0.3, 0.6), facecolors=plt.cm.Greys(share), edgecolor="none")
                if engine_lane:
                    share = min(max(s.get("engine", 0.0) / cores, 0.0), 1.0)
                    ax.broken_barh([(a - lo, b - a)], (-2 - 0.3, 0.6), facecolors=plt.cm.Oranges(share),
                                   edgecolor="none")
        for start in starts:
            ax.axvline(start - lo, color="black", linestyle="--", linewidth=0.8)
        labels = [lane[0] for lane in reversed(lanes)]
        ticks = list(range(len(lanes)))
        if samples:
            ticks, labels = [-1, *ticks], ["other processes\n(black: all cores)", *labels]
        if samples and engine_lane:
            ticks, labels = [-2, *ticks], ["engine process\n(dark: all cores)", *labels]
        ax.set_yticks(ticks)
        ax.set_yticklabels(labels, fontsize=8)
        ax.set_xlim(0, longest)
        busy = f"trainer busy {100 * summary['trainer_busy']:.0f}%"
        if summary["has_server"]:
            busy += (f", server busy {100 * summary['server_busy']:.0f}%, both at once "
                     f"{100 * summary['both_busy']:.0f}%")
        if engine_lane:
            busy += f", engine {summary['engine']:.1f} cores"
        if summary["others"] is not None:
            busy += f"; other processes {summary['others']:.1f} cores"
        ax.set_title(f"{label}: {summary['per_step']:.2f} s a step; {busy}", fontsize=9, loc="left")
    axes[-1, 0].set_xlabel("seconds from the first shown step's start (dashed: a step starts)")
    handles = [Patch(facecolor=c, edgecolor="black" if n in WAITS | SERVER_IDLE else "none",
                     hatch="//" if n in WAITS | SERVER_IDLE else None, label=n) for n, c in used.items()]
    fig.legend(handles=handles, loc="lower center", ncol=6, fontsize=7, frameon=False)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0.9 / height, 1, 1 - 0.35 / height))
    fig.savefig(out, dpi=110)
    print(f"\nwrote {out}")


SIDE_LABELS = {"server1": "server1 (max_lag 1)", "server0": "server0 (max_lag 0)",
               "server1r": "server1r (max_lag 1, reference on the server)", "rlkit": "rlkit (built-in sampler)",
               "llama0": "llama0 (llama.cpp, f32, max_lag 0)", "llama1": "llama1 (llama.cpp, f32, max_lag 1)",
               "llama0q8": "llama0q8 (llama.cpp, q8_0, max_lag 0)", "llama1q8": "llama1q8 (llama.cpp, q8_0, max_lag 1)"}


def main() -> int:
    import vs_trl

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="smollm2", choices=list(vs_trl.SIZES))
    parser.add_argument("--sides", nargs="+", default=["server1", "server0", "rlkit"],
                        choices=list(vs_trl.RLKIT_SIDES))
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--show", type=int, default=3, help="steady-state steps drawn and summed")
    parser.add_argument("--quietest", action="store_true",
                        help="of the steps after the warm-up, show the --show consecutive ones during which other "
                             "processes used the fewest cores (default: the first after the warm-up)")
    parser.add_argument("--server-split", default="1+1", metavar="T+S",
                        help="threads of the server and llama.cpp sides: T in the trainer, S in the engine")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the built-in sampler's side")
    parser.add_argument("--tuning", default="full", choices=["full", "lora"],
                        help="full fine-tuning or LoRA (r 16), as vs_trl.py's --tuning")
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "server_timeline_smollm2.png"))
    parser.add_argument("--keep-traces", default=None, metavar="DIR", help="copy each side's JSONL trace here")
    parser.add_argument("--from-traces", default=None, metavar="DIR",
                        help="measure nothing: draw the traces --keep-traces kept in DIR (sides measured apart, when "
                             "the shared machine was quiet, in one figure)")
    args = parser.parse_args()
    split = tuple(int(n) for n in args.server_split.split("+"))
    if len(split) != 2:
        raise SystemExit("--server-split takes T+S, e.g. 1+1")
    panels = []
    with tempfile.TemporaryDirectory() as tmp:
        for side in args.sides:
            trace = Path(tmp) / f"{side}.jsonl"
            if args.from_traces:
                shutil.copy(Path(args.from_traces) / f"{args.size}_{side}.jsonl", trace)
                result = None
            else:
                result = run_side(side, args, split, trace)
            spans = read_spans(trace)
            if args.keep_traces and not args.from_traces:
                Path(args.keep_traces).mkdir(parents=True, exist_ok=True)
                shutil.copy(trace, Path(args.keep_traces) / f"{args.size}_{side}.jsonl")
            first = args.warmup
            if args.quietest:
                candidates = range(args.warmup, max(args.warmup, step_count(spans) - args.show) + 1)
                first = min(candidates, key=lambda at: summarise(spans, *window(spans, at, args.show)[:2],
                                                                 args.show)["others"] or 0.0)
            lo, hi, starts = window(spans, first, args.show)
            summary = summarise(spans, lo, hi, len(starts))
            steps = f"steps {first}-{first + len(starts) - 1} of {step_count(spans)}"
            print_summary(f"{side} ({steps})", result, summary)
            threads = f"{split[0]} + {split[1]} threads" if side in vs_trl.ENGINE_SIDES else f"{args.threads} threads"
            panels.append((f"{SIDE_LABELS.get(side, side)}, {threads}, {steps}", spans, lo, hi, starts, summary))
    draw(panels, Path(args.out), f"{args.size}, fp32, {args.tuning} fine-tuning: the trainer and engine processes "
                                 "on one clock")
    return 0


def run_side(side: str, args: argparse.Namespace, split: tuple[int, ...], trace: Path) -> dict[str, Any]:
    """One of vs_trl.py's sides with the trace on (and the machine's load sampled into it); its vs_trl result."""
    import vs_trl

    os.environ[ENV] = str(trace)  # measure() hands its environment to the side and on to the server
    load = MachineLoad()
    load.start()
    try:
        return vs_trl.measure(side, args.size, "fp32", args.steps, args.warmup, args.threads, split, args.tuning)
    finally:
        load.stop()
        del os.environ[ENV]


if __name__ == "__main__":
    sys.exit(main())
