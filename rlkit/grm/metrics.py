"""Held-out accuracy of a generative reward model on preference pairs: overall, per domain, and controlled
for length (pairs whose chosen response is the shorter one apart from those where it is the longer one)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PairOutcome:
    """One held-out pair: the model's P(chosen better), the two lengths in characters, and its domain."""

    p_chosen: float
    chosen_chars: int
    rejected_chars: int
    domain: str | None = None


def _accuracy(ps: Sequence[float]) -> float:
    # a pair the model cannot separate (exactly 0.5) counts as half right, as a coin flip would
    return sum(1.0 if p > 0.5 else 0.5 if p == 0.5 else 0.0 for p in ps) / len(ps) if ps else float("nan")


def pair_accuracy(outcomes: Sequence[PairOutcome]) -> dict[str, float]:
    """``accuracy``; ``accuracy/chosen_shorter`` and ``accuracy/chosen_longer``; ``length_controlled_accuracy``,
    their mean (each stratum weighs the same, so a model that prefers the shorter answer cannot score by the
    labels' length bias alone; NaN when a stratum is empty); ``accuracy/domain/<d>``; and the counts."""
    ps = [o.p_chosen for o in outcomes]
    shorter = [o.p_chosen for o in outcomes if o.chosen_chars < o.rejected_chars]
    longer = [o.p_chosen for o in outcomes if o.chosen_chars > o.rejected_chars]
    out = {"accuracy": _accuracy(ps), "accuracy/chosen_shorter": _accuracy(shorter),
           "accuracy/chosen_longer": _accuracy(longer), "pairs": float(len(ps)),
           "pairs/chosen_shorter": float(len(shorter)), "pairs/chosen_longer": float(len(longer))}
    out["length_controlled_accuracy"] = (out["accuracy/chosen_shorter"] + out["accuracy/chosen_longer"]) / 2
    by_domain: dict[str, list[float]] = defaultdict(list)
    for o in outcomes:
        if o.domain is not None:
            by_domain[o.domain].append(o.p_chosen)
    for domain, values in sorted(by_domain.items()):
        out[f"accuracy/domain/{domain}"] = _accuracy(values)
    # how sure it is where it is right: a mean log-likelihood of the labels
    if ps:
        p = torch.tensor(ps).clamp(1e-6, 1 - 1e-6)
        out["nll"] = float(-p.log().mean())
    return out
