"""The generative reward model (GRM): a causal LM that judges *which response is better* and is read by the
probability of a label token, never by parsing free text.

Pairwise: the model reads ``templates/grm/pairwise.jinja`` (question, optional reference, responses A and B)
and rlkit takes the softmax of its next-token logits over the two label tokens, P(A better). Every pair is
asked in both orders and the two answers averaged, so a position bias cancels:
``q(i, j) = (P_A(i, j) + 1 - P_A(j, i)) / 2``. A response's reward within a group is its mean ``q`` against the
others (a soft win rate in [0, 1]).

Listwise: ``templates/grm/listwise.jinja`` shows a whole group labelled A, B, C...; the label-token logits are
Plackett-Luce utilities u, trained to put the labels in rank order. A GRM trained so is asked so when it scores: the
group is shown in its order and reversed, and under Plackett-Luce response i comes before j with probability
``σ(u_i - u_j)`` (Luce's choice axiom: the pair's marginal is the two-item model). Averaged over the two orders, that
is the listwise ``q(i, j)``, and a response's reward is again its mean ``q`` against the others. For a pair it is the
pairwise formula above, read from the listwise question. Two forward passes per group instead of G·(G-1).

The prompt inside every question is :func:`rlkit.data.prompts.reward_prompt`'s rendering, in training and in judging.

Label tokens: ``" A"`` encodes to one token in most subword vocabularies; in a character-level one it is
``" "`` then ``"A"``. Whatever the labels share before their last token is appended to every question, and the
last token is the label, so both kinds of tokenizer read the same question.
"""

from __future__ import annotations

import json
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlkit.core.errors import ConfigError
from rlkit.core.templates import render_file, template_hash
from rlkit.data.prompts import reward_prompt
from rlkit.lm.placement import Placement, input_device

Prompt = str | Sequence[dict[str, str]]  # a record's prompt: text or chat messages


def left_padded(rows: Sequence[Sequence[int]], pad_id: int) -> dict[str, torch.Tensor]:
    """Token-id rows as one left-padded batch, with positions that skip the padding: every row's last token sits in
    the last column, where a GRM reads its next-token logits and a reward model its hidden state."""
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        input_ids[i, width - len(r):] = torch.tensor(list(r), dtype=torch.long)
        attention[i, width - len(r):] = 1
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    return {"input_ids": input_ids, "attention_mask": attention, "position_ids": positions}


PAIRWISE_TEMPLATE = "grm/pairwise.jinja"
LISTWISE_TEMPLATE = "grm/listwise.jinja"
LABELS = tuple(string.ascii_uppercase)
OBJECTIVES = ("pairwise", "listwise")  # the question a GRM was trained on, and is asked when it scores


GRM_INFO = "grm.json"  # written beside a trained GRM: its objective, prompt format and metrics


@dataclass(frozen=True)
class GrmFormat:
    """How questions are put to the model: the templates, and how much of each response it reads."""

    pairwise_template: str = PAIRWISE_TEMPLATE
    listwise_template: str = LISTWISE_TEMPLATE
    max_response_chars: int = 256  # longer responses are cut, so a question's length stays bounded

    def identity(self) -> dict[str, Any]:
        """What determines a question's text: part of a GRM judge's identity."""
        return {"pairwise": template_hash(self.pairwise_template), "listwise": template_hash(self.listwise_template),
                "max_response_chars": self.max_response_chars}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit]


def label_token_ids(tokenizer: Any, count: int) -> tuple[list[int], list[int]]:
    """The tokens every question ends with, and one token id per label (``count`` labels)."""
    if count > len(LABELS):
        raise ConfigError(f"a GRM question has at most {len(LABELS)} labelled responses, got {count}")
    encoded = [tokenizer(f" {label}", add_special_tokens=False)["input_ids"] for label in LABELS[:count]]
    prefix = encoded[0][:-1]
    if any(ids[:-1] != prefix for ids in encoded) or len({ids[-1] for ids in encoded}) != count:
        raise ConfigError("this tokenizer does not encode ' A', ' B', ... as a shared prefix plus one distinct "
                          "token each; the GRM reads its answer from one label token", "grm.model.name_or_path")
    return prefix, [ids[-1] for ids in encoded]


class GenerativeRewardModel:
    """Scores responses with a causal LM by its label-token probabilities (see the module doc)."""

    def __init__(self, model: Any, tokenizer: Any, fmt: GrmFormat | None = None, objective: str = "pairwise") -> None:
        if objective not in OBJECTIVES:
            raise ConfigError(f"a GRM objective is one of {', '.join(OBJECTIVES)}, got {objective!r}")
        self.model = model
        self.tokenizer = tokenizer
        self.format = fmt or GrmFormat()
        self.objective = objective  # the question scoring asks unless told otherwise
        self._prefix, self._labels = label_token_ids(tokenizer, len(LABELS))

    @classmethod
    def load(cls, path: str | Path, dtype: str = "float32", fmt: GrmFormat | None = None,
             placement: Placement | None = None, objective: str | None = None) -> GenerativeRewardModel:
        """Load a trained GRM (a Hugging Face causal LM directory) by path, in eval mode; ``placement``
        (:func:`rlkit.lm.placement.plan_placement`) spreads it over devices and disk. ``objective`` None: the one
        its ``grm.json`` records (:func:`read_grm_objective`)."""
        from rlkit.lm.models import load_policy

        objective = objective or read_grm_objective(path)
        model, tokenizer = load_policy(path, dtype, placement)
        model.eval()
        return cls(model, tokenizer, fmt, objective)

    # --- questions -------------------------------------------------------------------------------------

    def pairwise_question(self, prompt: Prompt, a: str, b: str, reference: str | None = None) -> str:
        """Which of ``a`` (label A) and ``b`` is better, for ``prompt`` (text or chat messages, rendered by
        :func:`~rlkit.data.prompts.reward_prompt`)."""
        f = self.format
        return render_file(f.pairwise_template, "grm.pairwise_template", prompt=reward_prompt(prompt),
                           reference=reference or "", a=_cut(a, f.max_response_chars), b=_cut(b, f.max_response_chars),
                           labels=LABELS[:2])

    def listwise_question(self, prompt: Prompt, responses: Sequence[str], reference: str | None = None) -> str:
        """Which of ``responses`` (labelled A, B, ... in this order) is best, for ``prompt`` (rendered as in
        :meth:`pairwise_question`)."""
        f = self.format
        if len(responses) > len(LABELS):
            raise ConfigError(f"a listwise GRM question shows at most {len(LABELS)} responses, got {len(responses)}")
        labels = LABELS[:len(responses)]
        items = [{"label": lab, "text": _cut(text, f.max_response_chars)}
                 for lab, text in zip(labels, responses, strict=True)]
        return render_file(f.listwise_template, "grm.listwise_template", prompt=reward_prompt(prompt),
                           reference=reference or "", responses=items, labels=labels)

    def label_id(self, index: int) -> int:
        return self._labels[index]

    # --- the forward pass ------------------------------------------------------------------------------

    def encode(self, questions: Sequence[str]) -> dict[str, torch.Tensor]:
        """Left-padded ids of the questions followed by the label prefix, with positions that skip the padding."""
        tok = self.tokenizer
        rows = [ids + self._prefix for ids in tok(list(questions), add_special_tokens=False)["input_ids"]]
        width = max(len(r) for r in rows)
        limit = getattr(getattr(self.model, "config", None), "max_position_embeddings", None)
        if isinstance(limit, int) and width > limit:
            raise ConfigError(f"a question of {width} tokens is longer than the model's {limit} positions; cut "
                              "responses shorter", "grm.max_response_chars")
        return left_padded(rows, tok.pad_token_id)

    def next_token_logits(self, questions: Sequence[str]) -> torch.Tensor:
        """``[N, vocab]`` logits of the token after each question (with gradients when the caller wants them)."""
        device = input_device(self.model)  # a dispatched model's first parameter may be on the meta device
        batch = {k: v.to(device) for k, v in self.encode(questions).items()}
        out = self.model(**batch, logits_to_keep=1)
        return out.logits[:, -1, :].float()

    def label_logits(self, questions: Sequence[str], count: int) -> torch.Tensor:
        """``[N, count]`` logits of the first ``count`` label tokens."""
        return self.next_token_logits(questions)[:, self._labels[:count]]

    # --- scoring ---------------------------------------------------------------------------------------

    def _objective(self, objective: str | None) -> str:
        chosen = objective or self.objective
        if chosen not in OBJECTIVES:
            raise ConfigError(f"a GRM objective is one of {', '.join(OBJECTIVES)}, got {chosen!r}")
        return chosen

    @torch.no_grad()
    def order_probs(self, items: Sequence[tuple[Prompt, str, str, str | None]],
                    batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
        """``([N], [N])``: P(label A) for each (prompt, a, b, reference) asked as (a, b), then as (b, a)."""
        questions = []
        for prompt, a, b, ref in items:
            questions += [self.pairwise_question(prompt, a, b, ref), self.pairwise_question(prompt, b, a, ref)]
        probs = []
        for start in range(0, len(questions), batch_size):
            logits = self.label_logits(questions[start:start + batch_size], 2)
            probs.append(torch.softmax(logits, dim=-1)[:, 0].cpu())
        p = torch.cat(probs) if probs else torch.zeros(0)
        return p[0::2], p[1::2]

    @torch.no_grad()
    def listwise_orders(self, items: Sequence[tuple[Prompt, Sequence[str], str | None]],
                        batch_size: int = 64) -> tuple[torch.Tensor, torch.Tensor]:
        """``([N, G, G], [N, G, G])``: P(response i before j) = σ(u_i - u_j) under Plackett-Luce, u the label logits
        of the listwise question of each (prompt, responses, reference), its G responses shown in their order, then
        reversed. Every item has the same G."""
        sizes = {len(responses) for _, responses, _ in items}
        if len(sizes) > 1:
            raise ValueError(f"listwise questions of one call show groups of one size, got sizes {sorted(sizes)}")
        g = sizes.pop() if sizes else 0
        questions = []
        for prompt, responses, ref in items:
            questions += [self.listwise_question(prompt, responses, ref),
                          self.listwise_question(prompt, list(responses)[::-1], ref)]
        parts = [self.label_logits(questions[start:start + batch_size], g).cpu()
                 for start in range(0, len(questions), batch_size)]
        u = torch.cat(parts) if parts else torch.zeros((0, g))  # [2N, G]: column k is the response labelled k
        shown, reversed_ = u[0::2], u[1::2].flip(-1)  # both as the utilities of the responses in their given order

        def before(x: torch.Tensor) -> torch.Tensor:
            return torch.sigmoid(x.unsqueeze(-1) - x.unsqueeze(-2))

        return before(shown), before(reversed_)

    def prefer_first(self, items: Sequence[tuple[Prompt, str, str, str | None]], batch_size: int = 64,
                     objective: str | None = None) -> torch.Tensor:
        """``[N]`` P(a better than b) for each (prompt, a, b, reference), asked in both orders and averaged, with the
        question of ``objective`` (None: the one the GRM was trained on)."""
        if self._objective(objective) == "listwise":
            if not items:
                return torch.zeros(0)
            shown, reversed_ = self.listwise_orders([(p, (a, b), ref) for p, a, b, ref in items], batch_size)
            return (shown[:, 0, 1] + reversed_[:, 0, 1]) / 2
        p_ab, p_ba = self.order_probs(items, batch_size)
        return (p_ab + 1 - p_ba) / 2

    def group_rewards(self, records: Sequence[dict[str, Any]], groups: Sequence[Sequence[str]],
                      batch_size: int = 64, with_consistency: bool = False, objective: str | None = None) -> Any:
        """``[B, G]`` soft win rates: each response's mean preference over the others of its group (NaN for a
        group of one, which has nothing to be compared with), asked with the question of ``objective`` (None: the
        one the GRM was trained on). With ``with_consistency``, also ``[B]``: one minus the mean gap between the two
        orders' answers over the group's pairs (1 = position never mattered)."""
        b, g = len(groups), len(groups[0]) if groups else 0
        if g < 2:
            wins, consistency = torch.full((b, g), float("nan")), torch.ones(b)
            return (wins, consistency) if with_consistency else wins
        refs = [record.get("reference") for record in records]
        prompts = [record.get("prompt", "") for record in records]
        if self._objective(objective) == "listwise":
            items = [(prompt, group, None if ref is None else str(ref))
                     for prompt, group, ref in zip(prompts, groups, refs, strict=True)]
            shown, reversed_ = self.listwise_orders(items, batch_size)
            others = ~torch.eye(g, dtype=torch.bool)
            wins = ((shown + reversed_) / 2 * others).sum(-1) / (g - 1)
            # |gap| is the same for (i, j) and (j, i): half the off-diagonal sum is the sum over the pairs
            gaps = ((shown - reversed_).abs() * others).sum((-2, -1)) / 2
            consistency = (1 - gaps / (g * (g - 1) / 2)).clamp(0, 1)
            return (wins, consistency) if with_consistency else wins
        pairs, where = [], []
        for bi, (prompt, group, ref) in enumerate(zip(prompts, groups, refs, strict=True)):
            for i in range(g):
                for j in range(i + 1, g):
                    pairs.append((prompt, group[i], group[j], None if ref is None else str(ref)))
                    where.append((bi, i, j))
        p_ab, p_ba = self.order_probs(pairs, batch_size)
        q = (p_ab + 1 - p_ba) / 2
        gap = (p_ab - (1 - p_ba)).abs()
        wins, gaps = torch.zeros((b, g)), torch.zeros(b)
        for (bi, i, j), p, d in zip(where, q.tolist(), gap.tolist(), strict=True):
            wins[bi, i] += p
            wins[bi, j] += 1 - p
            gaps[bi] += d
        wins = wins / (g - 1)
        consistency = (1 - gaps / (g * (g - 1) / 2)).clamp(0, 1)
        return (wins, consistency) if with_consistency else wins

    def questions_per_group(self, group_size: int, objective: str | None = None) -> int:
        """How many questions scoring a group of ``group_size`` asks: every pair in both orders, or the group shown
        in two orders."""
        if group_size < 2:
            return 0
        return 2 if self._objective(objective) == "listwise" else group_size * (group_size - 1)


def _grm_info(folder: str | Path) -> dict[str, Any] | None:
    path = Path(folder) / GRM_INFO
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ConfigError(f"unreadable {GRM_INFO} ({exc})", str(path)) from None
    if not isinstance(info, dict):
        raise ConfigError(f"unreadable {GRM_INFO} (not a JSON object)", str(path))
    return info


def read_grm_objective(folder: str | Path) -> str:
    """The objective the GRM in ``folder`` was trained with (its ``grm.json``); ``pairwise`` for a GRM without one."""
    info = _grm_info(folder)
    objective = "pairwise" if info is None else info.get("objective", "pairwise")
    if objective not in OBJECTIVES:
        raise ConfigError(f"unreadable {GRM_INFO} (objective {objective!r}, not one of {', '.join(OBJECTIVES)})",
                          str(Path(folder) / GRM_INFO))
    return str(objective)


def read_grm_format(folder: str | Path) -> GrmFormat:
    """How the GRM in ``folder`` was asked during training (its ``grm.json``); the default format otherwise."""
    path = Path(folder) / GRM_INFO
    if not path.is_file():
        return GrmFormat()
    try:
        fmt = json.loads(path.read_text(encoding="utf-8"))["format"]
        return GrmFormat(str(fmt["pairwise_template"]), str(fmt["listwise_template"]), int(fmt["max_response_chars"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise ConfigError(f"unreadable {GRM_INFO} ({exc})", str(path)) from None
