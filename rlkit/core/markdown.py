"""The two things every markdown report here writes into a table cell: text that cannot break the table, and a
number at a fixed precision with a dash where there is none."""

from __future__ import annotations

import math
from typing import Any


def md_cell(text: Any) -> str:
    """``text`` as one table cell: a ``|`` escaped, a newline folded to a space."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def md_number(x: float | None, digits: int = 3) -> str:
    """``x`` to ``digits`` places; ``—`` for None or NaN (not measured, not zero)."""
    return "—" if x is None or math.isnan(x) else f"{x:.{digits}f}"
