"""How fast a judge scores, in completions per second.

The rule judge (the default): a 5-dimension rubric (the shipped arithmetic rubric plus a keyword dimension), unique
200-character completions, in batches as the loop sends them; the goal is 50,000 completions/s::

    python benchmarks/judge_throughput.py [--completions 50000] [--group 8] [--repeats 3]

A real model judge (``--engine``): the ``llm`` judge on the ``llama_cpp`` backend (the best judge installed, a
llama.cpp engine rlkit starts) scoring SmolLM2's real replies to the chat sums (``conf/calibration/
chat_arithmetic_labels.jsonl``) on the ``chat_arithmetic`` rubric, for each number of engine slots and with the
engine's prompt cache on and off. For each setting: rlkit's path (``judge.score`` on a fresh response cache: render,
ask concurrently up to the slots, parse) against the limit, the same chats sent straight to the same warm engine by
as many threads as it has slots; and the share of prompt tokens the engine's cache served::

    python benchmarks/judge_throughput.py --engine [--completions 16] [--slots 1 2] [--repeats 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import sys
import time


def unique_completions(n: int, length: int = 200, seed: int = 0) -> list[str]:
    """``n`` distinct texts of ``length`` characters: a number first in half of them, words after."""
    rng = random.Random(seed)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(5000)]
    out = []
    for i in range(n):
        head = f"{rng.randint(0, 200)} " if i % 2 else ""
        text = head + f"#{i} " + " ".join(rng.choices(words, k=60))
        out.append(text[:length].ljust(length, "."))
    return out


def engine_throughput(args: argparse.Namespace) -> int:
    """The --engine table (see the module doc)."""
    import json
    import urllib.request
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path

    from rlkit.core.registry import load_registry
    from rlkit.core.types import Rollout
    from rlkit.judging.cache import ResponseCache
    from rlkit.judging.tiny_judge import shipped_rubric

    labels = Path(__file__).resolve().parents[1] / "conf" / "calibration" / "chat_arithmetic_labels.jsonl"
    rows = [json.loads(line) for line in labels.read_text().splitlines() if line.strip()][:args.completions]
    rubric = shipped_rubric("chat_arithmetic")
    rollout = Rollout(records=[{"prompt": r["prompt"], "reference": r["reference"]} for r in rows],
                      completions=[[r["completion"]] for r in rows])
    registry = load_registry()
    print(f"llm judge on llama_cpp, rubric chat_arithmetic ({len(rubric.dimensions)} dimensions), {len(rows)} "
          f"SmolLM2 replies, {args.threads} engine threads, {args.repeats} repeat(s); completions/s")
    print("| slots | prompt cache | rlkit (judge.score) | engine driven directly | rlkit / direct | prompt tokens "
          "from cache | s per completion |")
    print("|---|---|---|---|---|---|---|")
    for slots in args.slots:
        for cache in (True, False):
            # the settings benchmarks/README.md's figures were measured with (then the defaults): the direct path
            # below asks for no log-probs, so rlkit's must not either for the two to compare
            judge = registry.create("judge", "llm", {"scoring": "sampled", "show_reference": False, "backend": {
                "name": "llama_cpp", "params": {"slots": slots, "threads": args.threads, "prompt_cache": cache}}})
            judge.check_rubric(rubric)
            backend = judge.backend.get()
            sent: list[tuple[list, dict | None]] = []
            complete = backend.complete

            def recording(chats, schema=None, level_probs=False, complete=complete, sent=sent):
                sent.extend((chat, schema) for chat in chats)
                return complete(chats, schema=schema, level_probs=level_probs)

            backend.complete = recording
            try:
                judge.score(Rollout(records=rollout.records[:1], completions=rollout.completions[:1]), rubric)
                ours, direct, cached_share = [], [], []
                for _ in range(args.repeats):
                    judge.cache = ResponseCache()  # every completion asked again, none answered from rlkit's cache
                    before = judge.spend()
                    start = time.perf_counter()
                    judge.score(rollout, rubric)
                    ours.append(len(rows) / (time.perf_counter() - start))
                    spent = judge.spend() - before
                    cached_share.append(spent.tokens_cached / max(spent.tokens_in, 1))
                    asked = sent[-len(rows):]
                    url = f"{backend.server.url}/v1/chat/completions"

                    def post(item, url=url, max_tokens=backend.params.max_tokens, cache=cache):
                        chat, schema = item
                        body = {"model": "judge", "messages": chat, "max_tokens": max_tokens,
                                "temperature": 0.0, "cache_prompt": cache}
                        if schema is not None:
                            body["response_format"] = {"type": "json_schema", "json_schema": {
                                "name": "rubric_scores", "schema": schema, "strict": True}}
                        request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                                         headers={"Content-Type": "application/json"})
                        with urllib.request.urlopen(request, timeout=600) as reply:
                            return json.loads(reply.read())

                    start = time.perf_counter()
                    with ThreadPoolExecutor(slots) as pool:
                        list(pool.map(post, asked))
                    direct.append(len(rows) / (time.perf_counter() - start))
            finally:
                backend.complete = complete
                backend.close()
            a, b = statistics.median(ours), statistics.median(direct)
            print(f"| {slots} | {'on' if cache else 'off'} | {a:.3f} | {b:.3f} | {a / b:.0%} | "
                  f"{statistics.median(cached_share):.0%} | {1 / a:.1f} |", flush=True)
    return 0


def main() -> int:
    from rlkit.core.registry import load_registry
    from rlkit.core.rubric import rubric_from_dict
    from rlkit.core.types import Rollout
    from rlkit.data.records import arithmetic_task
    from rlkit.judging.tiny_judge import shipped_rubric

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--completions", type=int, default=50_000)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engine", action="store_true", help="the llm judge on a llama.cpp engine (module doc)")
    parser.add_argument("--slots", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    if args.engine:
        if args.completions == 50_000:
            args.completions = 16
        return engine_throughput(args)

    base = shipped_rubric("arithmetic")
    spec = base.model_dump(mode="json", exclude_none=True) if hasattr(base, "model_dump") else None
    if spec is None:
        raise SystemExit("the rubric model cannot be dumped")
    spec["dimensions"].append({"name": "politeness", "type": "binary", "weight": 0.5,
                               "anchors": {0: {"text": "curt"}, 1: {"text": "polite"}},
                               "checks": [{"type": "keywords", "any": ["please", "thanks", "kindly"]}]})
    rubric = rubric_from_dict(spec, source="<throughput rubric>")
    judge = load_registry().create("judge", "rule")
    texts = unique_completions(args.completions)
    prompts = args.completions // args.group
    records = arithmetic_task(prompts, seed=0)
    rollout = Rollout(records=records, completions=[texts[i * args.group:(i + 1) * args.group]
                                                    for i in range(prompts)])
    n = prompts * args.group
    judge.score(Rollout(records=records[:2], completions=rollout.completions[:2]), rubric)  # plan built once
    rates, cpu_rates = [], []
    for _ in range(args.repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        scores = judge.score(rollout, rubric)
        rates.append(n / (time.perf_counter() - start))
        cpu_rates.append(n / max(time.process_time() - cpu_start, 1e-9))
    assert scores.shape == (prompts, args.group, len(rubric.dimensions))
    # Per CPU-second too: on a shared machine the wall-clock rate mostly measures the other work.
    print(f"rule judge, {len(rubric.dimensions)} dimensions ({', '.join(rubric.dimension_names)}), {n} unique "
          f"{len(texts[0])}-character completions in groups of {args.group}: median {statistics.median(rates):,.0f} "
          f"completions/s (runs: {', '.join(f'{r:,.0f}' for r in rates)}); per CPU-second: median "
          f"{statistics.median(cpu_rates):,.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
