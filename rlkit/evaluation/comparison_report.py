"""What a blind comparison found (``rlkit compare report``): how often people preferred A's answer to B's.

Each answer (left, right, tie) is turned back into A, B or tie with the comparison's key. Per labeller, every item
they answered counts once. For everyone together each item counts once too, by its labellers' majority: the answer
most of them gave, a tie when two answers are equally common (so one labeller's A and another's B make a tie), so an
item three people judged weighs no more than one judged once.

* **A's win rate**: A's wins over the items not tied, with the 95% **Wilson score interval** (Wilson 1927, "Probable
  inference, the law of succession, and statistical inference", JASA 22:209–212; recommended over the normal
  approximation for small n by Brown, Cai & DasGupta 2001, "Interval estimation for a binomial proportion",
  Statistical Science 16:101–133). An interval that leaves 0.5 out says one side is preferred;
* **tie share**: ties over the items answered (skips are not answers);
* **left chosen**: of the answers that were not ties, the share that chose the left one; far from 0.5 the labellers
  lean on position rather than content (each item's left side is random, so it should not matter);
* **agreement** between two labellers over the items both answered: the share where they gave the same answer and
  Cohen's κ with quadratic weights on the scale B < tie < A (:func:`rlkit.evaluation.calibration.
  quadratic_weighted_kappa`, the judge calibration's κ).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import combinations
from pathlib import Path
from typing import Any

from rlkit.core.atomic import atomic_write_text
from rlkit.evaluation.blind_comparison import OVERALL

# the 97.5th percentile of the standard normal distribution: the half-width of a two-sided 95% interval in sds
Z95 = 1.959964
SCALE = {"B": 0, "tie": 1, "A": 2}  # the ordinal scale of an answer, for κ


def wilson_interval(wins: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion ``wins / n``; (NaN, NaN) when ``n`` is 0."""
    if n == 0:
        return math.nan, math.nan
    p = wins / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Tally:
    """Answers on some items: A's wins, B's wins, ties."""

    a: int = 0
    b: int = 0
    ties: int = 0

    @classmethod
    def of(cls, verdicts: Sequence[str]) -> Tally:
        counts = Counter(verdicts)
        return cls(counts["A"], counts["B"], counts["tie"])

    @property
    def n(self) -> int:
        return self.a + self.b + self.ties

    @property
    def win_rate(self) -> float:
        return self.a / (self.a + self.b) if self.a + self.b else math.nan

    @property
    def interval(self) -> tuple[float, float]:
        return wilson_interval(self.a, self.a + self.b)

    @property
    def tie_share(self) -> float:
        return self.ties / self.n if self.n else math.nan

    def as_dict(self) -> dict[str, Any]:
        low, high = self.interval
        return {"n": self.n, "a_wins": self.a, "b_wins": self.b, "ties": self.ties,
                "a_win_rate": _number(self.win_rate), "interval": [_number(low), _number(high)],
                "tie_share": _number(self.tie_share)}


def _number(x: float) -> float | None:
    return None if math.isnan(x) else round(x, 4)


def verdicts(lines: Sequence[dict[str, Any]], key: dict[str, Any], what: str = OVERALL) -> dict[str, dict[str, str]]:
    """``{labeller: {item: "A" | "B" | "tie"}}`` on ``what``; skips left out."""
    out: dict[str, dict[str, str]] = {}
    for line in lines:
        a_left = key["a_left"][line["item"]]
        for labeller, answers in (line.get("preferences") or {}).items():
            choice = answers.get(what)
            if choice is None:
                continue
            side = "tie" if choice == "tie" else "A" if (choice == "left") == a_left else "B"
            out.setdefault(labeller, {})[line["item"]] = side
    return out


def majority(by_labeller: dict[str, dict[str, str]]) -> dict[str, str]:
    """Each item's most common answer among its labellers; a tie when two answers are equally common."""
    per_item: dict[str, list[str]] = {}
    for given in by_labeller.values():
        for item, side in given.items():
            per_item.setdefault(item, []).append(side)
    out = {}
    for item, sides in per_item.items():
        (first, count), *rest = Counter(sides).most_common()
        out[item] = "tie" if rest and rest[0][1] == count else first
    return out


def left_chosen(lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Of every labeller's overall answers that were not ties, how many chose the left answer."""
    chosen = [answers.get(OVERALL) for line in lines for answers in (line.get("preferences") or {}).values()]
    decided = [c for c in chosen if c in ("left", "right")]
    left = sum(c == "left" for c in decided)
    return {"left": left, "n": len(decided), "share": _number(left / len(decided) if decided else math.nan)}


def agreement(by_labeller: dict[str, dict[str, str]]) -> list[dict[str, Any]]:
    """One row per pair of labellers with an item in common: n, the share answered alike, κ (quadratic weights)."""
    from rlkit.evaluation.agreement_stats import quadratic_weighted_kappa

    rows = []
    for first, second in combinations(sorted(by_labeller), 2):
        both = [item for item in by_labeller[first] if item in by_labeller[second]]
        if not both:
            continue
        x = [SCALE[by_labeller[first][i]] for i in both]
        y = [SCALE[by_labeller[second][i]] for i in both]
        same = sum(p == q for p, q in zip(x, y, strict=True)) / len(both)
        rows.append({"labellers": [first, second], "n": len(both), "same": round(same, 4),
                     "kappa": _number(quadratic_weighted_kappa(x, y, 0, 2))})
    return rows


def comparison_report(lines: Sequence[dict[str, Any]], key: dict[str, Any]) -> dict[str, Any]:
    """The report's numbers (the JSON written beside the file)."""
    overall = verdicts(lines, key)
    dimensions = list(dict.fromkeys(d for line in lines for d in line.get("dimensions", [])))
    answered = majority(overall)
    return {"A": key["A"], "B": key["B"], "items": len(lines), "answered": len(answered),
            "identical_left_out": key.get("identical", 0), "interval": "95% Wilson score interval on A's wins over "
            "the items not tied (Wilson 1927)",
            "overall": Tally.of(list(answered.values())).as_dict(),
            "labellers": {name: Tally.of(list(given.values())).as_dict() for name, given in sorted(overall.items())},
            "dimensions": {name: Tally.of(list(majority(verdicts(lines, key, name)).values())).as_dict()
                           for name in dimensions},
            "left_chosen": left_chosen(lines), "agreement": agreement(overall)}


def report_path(path: str | Path) -> Path:
    """The report beside comparison file ``path``: ``<stem>.report.json``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.report.json")


def write_report(path: str | Path, report: dict[str, Any]) -> Path:
    return atomic_write_text(report_path(path), json.dumps(report, indent=2, ensure_ascii=False) + "\n")


def _rate(row: dict[str, Any]) -> str:
    if row["a_win_rate"] is None:
        return "—"
    low, high = row["interval"]
    return f"{row['a_win_rate']:.2f} [{low:.2f}–{high:.2f}]"


def report_table(report: dict[str, Any]) -> Any:
    """The report as a rich table: everyone (majority per item), each labeller, each dimension."""
    from rich.table import Table

    table = Table(title="blind comparison: A against B", title_justify="left")
    for column in ("who", "n", "A better", "B better", "ties", "A win rate [95% CI]", "tie share"):
        table.add_column(column, justify="left" if column == "who" else "right", no_wrap=True)

    def add(who: str, row: dict[str, Any]) -> None:
        ties = "—" if row["tie_share"] is None else f"{row['tie_share']:.2f}"
        table.add_row(who, str(row["n"]), str(row["a_wins"]), str(row["b_wins"]), str(row["ties"]), _rate(row), ties)

    add("everyone", report["overall"])
    if len(report["labellers"]) > 1:
        for name, row in report["labellers"].items():
            add(f"  {name}", row)
    for name, row in report["dimensions"].items():
        add(f"on {name}", row)
    return table


def report_lines(report: dict[str, Any]) -> list[str]:
    """The lines printed under the table: what was left out, position bias, agreement."""
    out = [f"A: {report['A']}", f"B: {report['B']}",
           f"{report['answered']} of {report['items']} items answered; everyone: each item once, by its labellers' "
           f"majority; {report['interval']}"]
    if report["identical_left_out"]:
        out.append(f"{report['identical_left_out']} prompts answered word for word alike were left out (ties)")
    left = report["left_chosen"]
    if left["n"]:
        out.append(f"left answer chosen in {left['left']} of {left['n']} non-tied answers ({left['share']:.2f}; "
                   "each item's left side is random, far from 0.5 means position bias)")
    for row in report["agreement"]:
        kappa = "—" if row["kappa"] is None else f"{row['kappa']:.2f}"
        out.append(f"agreement {row['labellers'][0]} – {row['labellers'][1]}: {row['same']:.2f} alike over "
                   f"{row['n']} items, κ {kappa} (quadratic, B < tie < A)")
    return out
