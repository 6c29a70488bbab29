"""The offline tiny judge: a small causal LM trained on CPU, on first use, to score the default task's
rubric in the compact JSON format, distilled from the rule judge's scores.

It is a real model answering real prompts, so ``judge=llm`` runs the whole LLM path (template,
generation, parsing, caching, failure policy) on a fresh machine with no download. It is cached like the
tiny policy (``$RLKIT_CACHE/tiny-judge-<hash>``, or under ``$RLKIT_TINY_JUDGE_CACHE`` where several caches share
it; built beside and renamed into place, one process building while others wait) and loaded back by path. Its
accuracy is whatever a few minutes of CPU training give: ``rlkit calibrate judge=llm`` says.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from rlkit.lm.models import (
    TINY_JUDGE_CACHE_ENV,
    TinyPolicySpec,
    build_cached,
    build_model,
    build_tokenizer,
    default_cache_dir,
)

COMPACT_TEMPLATE = "judge/rubric_scores_compact.jinja"
RANKING_COMPACT_TEMPLATE = "judge/rank_group_compact.jinja"
_FORMAT = 5  # bump when the recipe (data, training, chat template) changes
# The judge answers the rendered prompt as it is: its chat template passes message contents through, so
# any backend that applies the tokenizer's chat template (hf, the OpenAI-compatible server) asks it exactly
# what it was trained on.
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


@dataclass(frozen=True)
class TinyJudgeSpec:
    hidden_size: int = 96
    intermediate_size: int = 192
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 256
    tie_word_embeddings: bool = False
    # Comparing the answer with the reference is an equality of neighbouring characters (the compact template's C:
    # line), which this model learns only with a first layer that sees a short window and weights initialised
    # wider than transformers' 0.02: with full attention over the whole prompt and the default init it stayed at
    # 0.70-0.81 agreement with the rule judge on correctness after 400-1200 steps, and a toy of the bare comparison
    # behind 50-120 characters at chance; with both, the toy learnt it exactly in 400 steps. This recipe (with the
    # near and digit misses, the digits' loss weight, 1000 steps at 2e-3) agreed with the rule judge on 99.7% of
    # 300 fresh answers' correctness and on the issue's four sums; 600 steps at 4e-3 gave 0.85-0.98 and missed
    # some of the sums (one-off experiments, 2026-12-03). 1000 steps proved not enough on another CPU: on an AMD EPYC
    # (2026-12-07) seed 0 called 12+5=17 wrong, and seeds 0 and 1 agreed on 98.7% and 89.3% of 300 hard answers (half
    # right, half near or digit misses); at 1600 steps seeds 0-3 each got the four sums right and agreed on 98.7-99.3%
    # of them: the float kernels differ by CPU, and the extra steps take the recipe off the edge they tip over.
    initializer_range: float | None = 0.1
    sliding_window: int | None = 8  # the first layer's attention window; None: full attention in every layer
    near_misses: float = 0.4  # scores: the share of answers drawn from near_miss_answer
    digit_misses: float = 0.1  # scores: the share drawn from digit_miss_answer
    value_weight: float = 5.0  # the loss weight of the answer's digits (its scores) against its other tokens
    steps: int = 1600
    batch_size: int = 32
    lr: float = 2e-3
    examples: int = 4000
    seed: int = 0
    rubric: str = "arithmetic"
    task: str = "scores"  # scores: one completion -> JSON scores; ranking: a group -> an order of its labels
    group_size: int = 8  # ranking: the judge ranks groups of exactly this many completions


# The ranking judge reads a whole group and answers a level per label. It is trained for one group size:
# in fixed-width lines each label's candidate then sits at one fixed distance back from where the answer
# names it, which 600 steps teach (Kendall tau ~0.9 against the taught levels on groups of 8), while a mix
# of sizes 2-8 in the same steps reached 0.05-0.35, and labels in variable-width lines ~0.0-0.2 even with a
# curriculum from lone answers up (one-off experiments, 2026-11-29; benchmarks/tiny_ranking_judge.py
# measures the adopted recipe through the ranking judge).
RANKING_SPEC = TinyJudgeSpec(task="ranking", max_position_embeddings=512, num_hidden_layers=3, steps=600, lr=3e-3,
                             tie_word_embeddings=True, initializer_range=None, sliding_window=None, value_weight=1.0)


def ranking_spec(group_size: int) -> TinyJudgeSpec:
    """The offline tiny ranking judge's recipe for groups of ``group_size`` completions."""
    return replace(RANKING_SPEC, group_size=group_size)


def default_task_answer(a: int, b: int, rng: random.Random, alphabet: str) -> str:
    """One answer to ``a+b=`` of the kinds a policy on the default task gives: right, off by a little, in words,
    repeated, empty or random characters."""
    s = a + b
    kind = rng.random()
    if kind < 0.22:
        return rng.choice([str(s), str(s), f" {s}", f"{s}.", f"{s} ok", f"{s}\n"])
    if kind < 0.40:
        return str(s + rng.choice([-3, -2, -1, 1, 2, 3, 10]))
    if kind < 0.50:
        return rng.choice([f"the answer is {s}", f"it is {s}", f"{a} plus {b} is {s}", "I think so", "= " + str(s)])
    if kind < 0.60:
        token = rng.choice([str(s), str(rng.randint(0, 40)), "ab", "x"])
        return " ".join([token] * rng.randint(2, 5)) if rng.random() < 0.5 else token[0] * rng.randint(4, 9)
    if kind < 0.65:
        return ""
    n = rng.randint(1, 16)
    if rng.random() < 0.3:  # an untrained policy's greedy answer is often one character over and over
        return rng.choice(alphabet) * n
    return "".join(rng.choice(alphabet) for _ in range(n))


def near_miss_answer(a: int, b: int, rng: random.Random) -> str:
    """An answer that starts with a number, right or close to it: the comparisons a policy's late training turns
    on, and the rarest in :func:`default_task_answer`'s mix."""
    s = a + b
    if rng.random() < 0.4:
        return rng.choice([str(s), f"{s}.", f" {s}", f"{s} ok"])
    wrong = rng.choice([s + d for d in (-10, -3, -2, -1, 1, 2, 3, 10, 11)] + [int(str(s)[::-1]), s * 10 + s % 10])
    return rng.choice([str(wrong), f"{wrong}.", f"{wrong} ok"])


def digit_miss_answer(a: int, b: int, rng: random.Random) -> str:
    """A wrong answer that shares digits with the sum: cut short (2 for 21), one digit more (72 or 17 for 7),
    digits swapped (81 for 18): the comparisons a judge shown the reference gets wrong first."""
    s = str(a + b)
    wrong = [s[:-1], s + str(rng.randint(0, 9)), str(rng.randint(1, 9)) + s, s[::-1]]
    return rng.choice([w for w in wrong if w and w != s] or [str(a + b + 1)])


def shipped_rubric(name: str) -> Any:
    """A rubric shipped under ``conf/rubric_files/`` (the tiny judge learns the default task's)."""
    import importlib.resources

    from rlkit.core.rubric import load_rubric

    return load_rubric(Path(str(importlib.resources.files("rlkit.conf"))) / "rubric_files" / f"{name}.yaml")


def distillation_records(spec: TinyJudgeSpec, teacher: Any) -> list[dict[str, Any]]:
    """Prompt/completion pairs of the default task, scored by ``teacher`` (a judge: the offline judges distil the
    rule judge) on the shipped rubric."""
    import torch

    from rlkit.core.types import Rollout

    rubric = shipped_rubric(spec.rubric)
    rng = random.Random(spec.seed)
    alphabet = "".join(c for c in TinyPolicySpec().alphabet if c != "\n")
    records = []
    for _ in range(spec.examples):
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        # a share of near misses: without them "not the sum" is learnt from far-off numbers only
        draw = rng.random()
        completion = (near_miss_answer(a, b, rng) if draw < spec.near_misses
                      else digit_miss_answer(a, b, rng) if draw < spec.near_misses + spec.digit_misses
                      else default_task_answer(a, b, rng, alphabet))
        records.append({"prompt": f"{a}+{b}=", "reference": str(a + b), "completion": completion})
    rollout = Rollout(records=records, completions=[[r["completion"]] for r in records])
    raw = teacher.score(rollout, rubric)[:, 0]
    out = []
    for record, row in zip(records, raw, strict=True):
        if torch.isnan(row).any():
            continue
        scores = {d.name: int(v) for d, v in zip(rubric.dimensions, row.tolist(), strict=True)}
        out.append({**record, "answer": json.dumps(scores, separators=(",", ":"))})
    return out


def render_compact(rubric: Any, prompt: str, completion: str, reference: str | None = None) -> str:
    from rlkit.core.templates import render_template

    return render_template(COMPACT_TEMPLATE, rubric=rubric, prompt=prompt, completion=completion, reference=reference)


def group_labels(n: int) -> list[str]:
    """A, B, C, ... for the answers of a group shown together (Z, then AA, AB, ... past 26)."""
    out = []
    for i in range(n):
        label, i = "", i + 1
        while i:
            i, r = divmod(i - 1, 26)
            label = chr(ord("A") + r) + label
        out.append(label)
    return out


def answer_level(scores: dict[str, float]) -> int:
    """The level the tiny ranking judge learns for one answer on the default rubric, following its two
    top priorities: 2 the correct sum, 1 a number first but not the sum, 0 no number first."""
    return 2 if scores["correctness"] == 1 else 1 if scores["format"] == 1 else 0


def label_levels(labels: list[str], levels: list[int]) -> str:
    """What the tiny ranking judge is taught to answer: each label's level, in label order (``A:2 B:0 C:1``),
    which the ranking parser reads as the order A > C > B (its per-label-score form). A chain such as
    ``A>C>B`` needs a sort that a model this small does not learn in a few CPU minutes; judging one labelled
    candidate at a time it does."""
    return " ".join(f"{label}:{level}" for label, level in zip(labels, levels, strict=True))


def render_ranking_compact(rubric: Any, prompt: str, completions: list[str], reference: str | None = None) -> str:
    from rlkit.core.templates import render_template

    labels = group_labels(len(completions))
    candidates = [{"label": lab, "text": text} for lab, text in zip(labels, completions, strict=True)]
    return render_template(RANKING_COMPACT_TEMPLATE, rubric=rubric, prompt=prompt, candidates=candidates,
                           labels=labels, reference=reference)


def ranking_records(spec: TinyJudgeSpec, teacher: Any) -> list[dict[str, Any]]:
    """Groups of default-task completions to one prompt each, each completion given its level
    (:func:`answer_level`) from ``teacher``'s scores on the shipped rubric."""
    import torch

    from rlkit.core.types import Rollout

    rubric = shipped_rubric(spec.rubric)
    rng = random.Random(spec.seed)
    alphabet = "".join(c for c in TinyPolicySpec().alphabet if c != "\n")
    out = []
    for _ in range(spec.examples):
        a, b = rng.randint(0, 20), rng.randint(0, 20)
        record = {"prompt": f"{a}+{b}=", "reference": str(a + b)}
        group = [default_task_answer(a, b, rng, alphabet) for _ in range(spec.group_size)]
        raw = teacher.score(Rollout(records=[record], completions=[group]), rubric)[0]
        if torch.isnan(raw).any():
            continue
        levels = [answer_level(dict(zip(rubric.dimension_names, row.tolist(), strict=True))) for row in raw]
        out.append({**record, "completions": group, "levels": levels,
                    "answer": label_levels(group_labels(len(group)), levels)})
    return out


def _training_texts(spec: TinyJudgeSpec, rubric: Any, teacher: Any) -> list[tuple[str, str]]:
    """(prompt the judge is asked, answer it should give) for the spec's task."""
    if spec.task == "ranking":
        return [(render_ranking_compact(rubric, r["prompt"], r["completions"], r["reference"]), r["answer"])
                for r in ranking_records(spec, teacher)]
    return [(render_compact(rubric, r["prompt"], r["completion"], r["reference"]), r["answer"])
            for r in distillation_records(spec, teacher)]


def tiny_judge_hash(spec: TinyJudgeSpec, teacher: Any) -> str:
    from importlib.metadata import version

    from rlkit.core.templates import template_hash

    template = RANKING_COMPACT_TEMPLATE if spec.task == "ranking" else COMPACT_TEMPLATE
    key = {"spec": asdict(spec), "format": _FORMAT, "template": template_hash(template),
           "teacher": f"{type(teacher).__module__}.{type(teacher).__qualname__}",
           "transformers": version("transformers").split(".")[0]}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def train_tiny_judge(spec: TinyJudgeSpec, out_dir: Path, teacher: Any, log: Any = print) -> dict[str, float]:
    """Train the judge and save it (model + tokenizer) with ``save_pretrained`` into ``out_dir``.

    Gradients are switched on here: the first judge call of a run, which builds the judge, is often the
    held-out evaluation, and Lightning runs that under ``torch.inference_mode``."""
    import torch

    with torch.inference_mode(False), torch.enable_grad():
        return _train(spec, out_dir, teacher, log)


def _train(spec: TinyJudgeSpec, out_dir: Path, teacher: Any, log: Any) -> dict[str, float]:
    import torch


    rubric = shipped_rubric(spec.rubric)
    tokenizer = build_tokenizer(TinyPolicySpec())
    tokenizer.chat_template = CHAT_TEMPLATE
    eos = tokenizer.eos_token_id
    encoded = []
    for question, answer in _training_texts(spec, rubric, teacher):
        chat = [{"role": "user", "content": question}]
        rendered = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
        prompt_ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
        answer_ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [eos]
        encoded.append((prompt_ids, answer_ids))
    model = build_model(spec, tokenizer)  # the tiny policy's architecture code, at the judge's size
    # the answer's digits are its scores or levels; the rest is fixed JSON or labels, learnt in a few steps
    digit_ids = torch.tensor([tokenizer.convert_tokens_to_ids(c) for c in "0123456789"])
    threads = torch.get_num_threads()
    # One thread: on a 2-core machine shared with anything else, two torch threads run several times slower.
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(spec.seed)
        opt = torch.optim.AdamW(model.parameters(), lr=spec.lr, weight_decay=0.0)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=spec.lr, total_steps=spec.steps, pct_start=0.1)
        model.train()
        start = time.perf_counter()
        for step in range(spec.steps):
            idx = torch.randint(len(encoded), (spec.batch_size,), generator=gen).tolist()
            seqs = [encoded[i][0] + encoded[i][1] for i in idx]
            width = max(len(s) for s in seqs)
            input_ids = torch.full((len(seqs), width), tokenizer.pad_token_id)
            labels = torch.full((len(seqs), width), -100)
            attention = torch.zeros((len(seqs), width), dtype=torch.long)
            for row, i in enumerate(idx):
                p, a = encoded[i]
                input_ids[row, :len(p) + len(a)] = torch.tensor(p + a)
                labels[row, len(p):len(p) + len(a)] = torch.tensor(a)  # learn the answer, not the prompt
                attention[row, :len(p) + len(a)] = 1
            logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1]
            targets = labels[:, 1:]
            per_token = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1),
                                                          ignore_index=-100, reduction="none").view_as(targets)
            weights = (targets != -100).float() * torch.where(torch.isin(targets, digit_ids), spec.value_weight, 1.0)
            loss = (per_token * weights).sum() / weights.sum()
            opt.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if step % 100 == 0 or step == spec.steps - 1:
                log(f"rlkit: training the offline tiny {spec.task} judge: step {step + 1}/{spec.steps}, "
                    f"loss {loss.item():.3f}, {time.perf_counter() - start:.0f} s")
    finally:
        torch.set_num_threads(threads)
    model.eval()
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
    return {"loss": loss.detach().item(), "seconds": time.perf_counter() - start}


def build_tiny_judge(spec: TinyJudgeSpec | None = None, cache_dir: Path | str | None = None, *, teacher: Any) -> Path:
    """The cached tiny judge folder, trained first if absent (atomic: built beside it, renamed into place) on
    ``teacher``'s scores (a judge object; the offline judges pass the rule judge). It lives in ``cache_dir``, else
    ``$RLKIT_TINY_JUDGE_CACHE``, else the rlkit cache."""
    spec = spec or TinyJudgeSpec()
    root = Path(cache_dir or os.environ.get(TINY_JUDGE_CACHE_ENV) or default_cache_dir()).expanduser()
    return build_cached(root / f"tiny-judge-{tiny_judge_hash(spec, teacher)}",
                        lambda folder: train_tiny_judge(spec, folder, teacher))


# What the offline judges know: the default task's sums, operands 0 to 20 (distillation_records, ranking_records).
# Outside it they are not judges: on sums of 0-99 the scores judge called 84% of right answers wrong, on 0-999 all
# of them, while it agreed with the rule judge on 99% in range (100 sums each, 2026-12-03).
_DEFAULT_SUM = re.compile(r"^\s*(\d+)\s*\+\s*(\d+)\s*=\s*$")
TINY_JUDGE_OPERANDS = 20


def tiny_judge_caveats(records: Sequence[dict[str, Any]], rubric: Any, judge: str) -> list[str]:
    """Why the offline tiny judge's scores on ``records`` under ``rubric`` may mean little, as warning lines: a rubric
    other than the one it was distilled on, or records outside the default task's sums (``judge``: how to name it)."""
    fix = ("point judge.params.backend at a model (judge.params.backend=qwen_coder, or a served one: "
           "docs/judges.md)")
    lines = []
    if rubric.name != TinyJudgeSpec().rubric:
        lines.append(f"{judge}: its backend is the offline tiny judge, distilled on the {TinyJudgeSpec().rubric} "
                     f"rubric, not {rubric.name}: its scores are not a judgement of this rubric; {fix}")
    outside = []
    for i, record in enumerate(records, 1):
        match = _DEFAULT_SUM.match(record.get("prompt")) if isinstance(record.get("prompt"), str) else None
        if match is None or max(int(match.group(1)), int(match.group(2))) > TINY_JUDGE_OPERANDS:
            outside.append(i)
    if outside:
        first = records[outside[0] - 1].get("prompt")
        shown = first if isinstance(first, str) else "a chat"
        lines.append(f"{judge}: its backend is the offline tiny judge, which knows only the default task (sums of 0 "
                     f"to {TINY_JUDGE_OPERANDS}); {len(outside)} of {len(records)} records are outside it (first: "
                     f"record {outside[0]}, {shown[:40]!r}), where it calls most right answers wrong; {fix}")
    return lines
