"""Length/format bias correction of judge scores: regress each dimension's scores on a few surface
features of the completion over a rolling window, and remove the fitted part.

Judges, model judges above all, tend to reward longer and more heavily formatted answers whatever the
rubric says. A policy trained on those scores learns to pad. This correction estimates, per dimension,
how much of the score moves with the features, and takes that part out of each score.

Conventions:

* **Features** (``FEATURES``, picked by name): ``length`` (completion tokens when the rollout carries
  ``completion_token_counts``, characters otherwise), ``newlines``, ``markdown`` (list, heading and
  code-fence lines plus ``**bold**`` spans) and ``digits_share`` (digits / characters).
* **Window**: the last ``window`` completions (rows), each with its features and its raw judge scores
  (each dimension in its own rubric range, NaN = not scored). A training call adds its batch first.
* **Fit**, per corrected dimension with at least ``min_samples`` scored rows in the window: the features
  are standardised over those rows (a constant feature gets coefficient 0) and the centred score is
  regressed on them by ridge least squares, ``(ZᵀZ/n + ridge·I) β = Zᵀ(y − ȳ)/n``. So ``β`` is in the
  dimension's own score units per standard deviation of the feature, and ``ridge`` is relative to the
  features' correlation matrix (it only matters when two features move together, e.g. length and
  newlines). ``R²`` is ``1 − SS_res/SS_tot`` of that fit on the window, 0 for constant scores.
* **Correction** of a batch: ``y − Σ_k β_k (x_k − x̄_k) / σ_k`` with ``x̄`` the feature means over the
  batch's scored rows of that dimension and ``σ`` the window's standard deviations. Centring on the
  batch keeps each dimension's batch mean (only the ordering inside the batch changes), so the logged
  reward stays the judge's level and a policy that lengthens its answers over time is not penalised for
  the drift itself, only for scores that track length within a batch. The result is clamped to the
  dimension's ``[low, high]`` (which can move the mean slightly); NaN stays NaN. A binary dimension
  comes out fractional (0.93 rather than 1): fine for weighted sums and range checks, which is why
  gates and the dimensions other dimensions' conditions read are never corrected (their thresholds
  compare exact levels).
* Until a dimension has ``min_samples`` scored rows, its scores pass unchanged and its coefficients
  read 0.

A dimension that is *meant* to depend on length (a brevity dimension) must be left out of
``dimensions``: the correction would remove exactly what it measures. Any genuine correlation between
quality and length is removed too; the logged coefficients and R² show how much is being taken out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import torch

from rlkit.core.rubric import Rubric
from rlkit.core.types import Rollout

# Lines that open a list item, a heading or a code fence (up to three spaces of indent, as in CommonMark).
_MARKDOWN_LINE = re.compile(r"^ {0,3}(?:[-*+][ \t]|\d{1,9}[.)][ \t]|#{1,6}[ \t]|```|~~~)", re.MULTILINE)
_BOLD = re.compile(r"\*\*[^*\n]+\*\*")


def _length(text: str, tokens: int | None) -> float:
    return float(tokens) if tokens is not None else float(len(text))


def _newlines(text: str, tokens: int | None) -> float:
    return float(text.count("\n"))


def _markdown(text: str, tokens: int | None) -> float:
    return float(len(_MARKDOWN_LINE.findall(text)) + len(_BOLD.findall(text)))


def _digits_share(text: str, tokens: int | None) -> float:
    return sum(c.isdigit() for c in text) / len(text) if text else 0.0


FEATURES: dict[str, Callable[[str, int | None], float]] = {
    "length": _length,
    "newlines": _newlines,
    "markdown": _markdown,
    "digits_share": _digits_share,
}
DEFAULT_FEATURES = ("length", "newlines", "markdown")


def completion_features(rollout: Rollout, names: Sequence[str]) -> torch.Tensor:
    """The named features of every completion, ``float64 [B, G, F]``."""
    unknown = [n for n in names if n not in FEATURES]
    if unknown:
        raise ValueError(f"unknown feature {unknown[0]!r}; available: {', '.join(FEATURES)}")
    counts = rollout.completion_token_counts
    out = torch.zeros(rollout.num_prompts, rollout.group_size, len(names), dtype=torch.float64)
    for b, group in enumerate(rollout.completions):
        for g, text in enumerate(group):
            tokens = int(counts[b, g]) if counts is not None else None
            for f, name in enumerate(names):
                out[b, g, f] = FEATURES[name](text, tokens)
    return out


def threshold_dimensions(rubric: Rubric) -> list[str]:
    """Dimensions compared against an exact level: gates, and those another dimension's condition reads."""
    read = {d.condition.dimension for d in rubric.dimensions if d.condition is not None}
    return [d.name for d in rubric.dimensions if d.gate is not None or d.name in read]


def default_dimensions(rubric: Rubric) -> list[str]:
    """What ``dimensions: null`` corrects: every dimension except the threshold ones."""
    skip = set(threshold_dimensions(rubric))
    return [d.name for d in rubric.dimensions if d.name not in skip]


class LengthFormatDebias:
    """Removes the part of judge scores that a rolling ridge regression explains by completion features.

    ``scores`` passed to :meth:`correct` are ``[B, G, D]`` raw judge scores in rubric dimension order;
    only the dimensions at ``dimensions`` (indices) are corrected. State lives in tensors, so
    :meth:`state_dict` loads under ``torch.load(weights_only=True)``.
    """

    def __init__(self, features: Sequence[str], dimensions: Sequence[int], low: Sequence[float],
                 high: Sequence[float], window: int = 512, min_samples: int = 64, ridge: float = 1e-3) -> None:
        unknown = [n for n in features if n not in FEATURES]
        if unknown or not features:
            raise ValueError(f"features must be a non-empty subset of {', '.join(FEATURES)}, got {list(features)}")
        if len(low) != len(high) or any(not 0 <= i < len(low) for i in dimensions):
            raise ValueError(f"dimensions {list(dimensions)} must index the {len(low)} ranges")
        if window < 1 or not 2 <= min_samples <= window or ridge < 0:
            raise ValueError(f"need window >= 1, 2 <= min_samples <= window and ridge >= 0, got "
                             f"window={window}, min_samples={min_samples}, ridge={ridge}")
        self.features = list(features)
        self.dimensions = sorted(set(dimensions))
        self.low = torch.tensor(low, dtype=torch.float64)
        self.high = torch.tensor(high, dtype=torch.float64)
        self.window, self.min_samples, self.ridge = window, min_samples, ridge
        d, f = len(low), len(self.features)
        self._x = torch.zeros(0, f, dtype=torch.float64)   # window features [N, F]
        self._y = torch.zeros(0, d, dtype=torch.float64)   # window raw scores [N, D]
        self.coefficients = torch.zeros(d, f, dtype=torch.float64)  # β, score units per feature SD
        self.scale = torch.ones(d, f, dtype=torch.float64)          # the window's feature SDs
        self.r2 = torch.zeros(d, dtype=torch.float64)
        self.fitted = torch.zeros(d, dtype=torch.bool)

    @classmethod
    def for_rubric(cls, rubric: Rubric, features: Sequence[str] = DEFAULT_FEATURES,
                   dimensions: Sequence[str] | None = None, window: int = 512, min_samples: int = 64,
                   ridge: float = 1e-3) -> LengthFormatDebias:
        """Built from dimension names (``None``: :func:`default_dimensions`) and the rubric's ranges."""
        names = rubric.dimension_names
        chosen = default_dimensions(rubric) if dimensions is None else list(dimensions)
        missing = [n for n in chosen if n not in names]
        if missing:
            raise ValueError(f"unknown dimension {missing[0]!r}; rubric {rubric.name} has {', '.join(names)}")
        return cls(features, [names.index(n) for n in chosen], [d.low for d in rubric.dimensions],
                   [d.high for d in rubric.dimensions], window, min_samples, ridge)

    @property
    def window_rows(self) -> int:
        return int(self._x.shape[0])

    def correct(self, scores: torch.Tensor, features: torch.Tensor, update: bool = True) -> torch.Tensor:
        """Scores ``[B, G, D]`` with the feature-explained part removed (same dtype, NaN kept, clamped to range).

        ``update=True`` first adds the batch to the window and refits; ``False`` applies the current fit.
        """
        if scores.ndim != 3 or scores.shape[-1] != self.low.numel() or features.shape != (
                *scores.shape[:2], len(self.features)):
            raise ValueError(f"expected scores [B, G, {self.low.numel()}] and features [B, G, {len(self.features)}], "
                             f"got {tuple(scores.shape)} and {tuple(features.shape)}")
        y = scores.detach().reshape(-1, scores.shape[-1]).to(torch.float64).cpu()
        x = features.reshape(-1, len(self.features)).to(torch.float64).cpu()
        if update:
            self._x = torch.cat([self._x, x])[-self.window:]
            self._y = torch.cat([self._y, y])[-self.window:]
            self._fit()
        out = y.clone()
        for d in self.dimensions:
            scored = ~torch.isnan(y[:, d])
            if not self.fitted[d] or not scored.any():
                continue
            z = (x - x[scored].mean(dim=0)) / self.scale[d]
            corrected = (y[:, d] - z @ self.coefficients[d]).clamp(self.low[d], self.high[d])
            out[:, d] = torch.where(scored, corrected, y[:, d])
        return out.reshape(scores.shape).to(device=scores.device, dtype=scores.dtype)

    def _fit(self) -> None:
        n_features = len(self.features)
        for d in self.dimensions:
            scored = ~torch.isnan(self._y[:, d])
            n = int(scored.sum())
            if n < self.min_samples:
                self.fitted[d] = False
                self.coefficients[d], self.scale[d], self.r2[d] = 0.0, 1.0, 0.0
                continue
            x, y = self._x[scored], self._y[scored, d]
            sd = x.std(dim=0, unbiased=False)
            scale = torch.where(sd > 0, sd, torch.ones_like(sd))
            z = (x - x.mean(dim=0)) / scale
            yc = y - y.mean()
            gram = z.T @ z / n + self.ridge * torch.eye(n_features, dtype=torch.float64)
            # pinv rather than solve: with ridge 0 a constant feature makes the system singular
            beta = torch.linalg.pinv(gram) @ (z.T @ yc / n)
            beta = torch.where(sd > 0, beta, torch.zeros_like(beta))
            total = float((yc**2).sum())
            residual = float(((yc - z @ beta) ** 2).sum())
            self.coefficients[d], self.scale[d] = beta, scale
            self.r2[d] = 1.0 - residual / total if total > 0 else 0.0
            self.fitted[d] = True

    def metrics(self, dimension_names: Sequence[str], prefix: str = "debias/") -> dict[str, float]:
        """``debias/<dimension>/<feature>`` (β) and ``debias/<dimension>/r2`` of each corrected dimension."""
        out = {f"{prefix}window": float(self.window_rows)}
        for d in self.dimensions:
            name = dimension_names[d]
            for f, feature in enumerate(self.features):
                out[f"{prefix}{name}/{feature}"] = float(self.coefficients[d, f])
            out[f"{prefix}{name}/r2"] = float(self.r2[d])
        return out

    def state_dict(self) -> dict[str, torch.Tensor]:
        """The window and the current fit, as tensors."""
        return {"features": self._x.clone(), "scores": self._y.clone(), "coefficients": self.coefficients.clone(),
                "scale": self.scale.clone(), "r2": self.r2.clone(), "fitted": self.fitted.clone()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        """Continue from :meth:`state_dict`; a state for other features or dimensions raises ``ValueError``."""
        d, f = self.coefficients.shape
        if state["coefficients"].shape != (d, f) or state["features"].shape[1:] != (f,) \
                or state["scores"].shape[1:] != (d,):
            raise ValueError(f"the saved bias correction has {state['coefficients'].shape[1]} features and "
                             f"{state['coefficients'].shape[0]} dimensions; this run has {f} and {d}")
        self._x = state["features"].to(torch.float64)[-self.window:].clone()
        self._y = state["scores"].to(torch.float64)[-self.window:].clone()
        self.coefficients = state["coefficients"].to(torch.float64).clone()
        self.scale = state["scale"].to(torch.float64).clone()
        self.r2 = state["r2"].to(torch.float64).clone()
        self.fitted = state["fitted"].to(torch.bool).clone()
