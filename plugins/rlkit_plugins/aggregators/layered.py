"""``layered``: a tree of layers, each combining its dimensions (or sub-layers), then the layers combined."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from rlkit.plugin import ConfigError, RewardBatch, Rubric, hookimpl
from rlkit_plugins.aggregators.geometric import nan_geometric_mean
from rlkit_plugins.aggregators.minimum import nan_min
from rlkit_plugins.aggregators.weighted_sum import nan_weighted_sum

if TYPE_CHECKING:
    import torch

METHODS = ("weighted_sum", "geometric", "min", "gate")
LAYER_KEYS = ("name", "dimensions", "layers", "method", "weight")
WHERE = "aggregator.params"

# Layer values are float32 means; a gate of 0.8 should not fail on 0.79999995.
_GATE_SLACK = 1e-6


@dataclass(frozen=True)
class Layer:
    """One node of the tree: it reads either rubric dimensions or sub-layers, never both."""

    name: str
    method: str
    weight: float
    dimensions: tuple[str, ...] = ()
    layers: tuple[Layer, ...] = ()

    def dimension_names(self) -> list[str]:
        return list(self.dimensions) + [n for sub in self.layers for n in sub.dimension_names()]


def gate_chain(values: torch.Tensor, threshold: float) -> torch.Tensor:
    """``values [..., K]`` in order: each but the last must reach ``threshold`` or the result is 0;
    then the last value.

    An unscored (NaN) gate fails, as in ``min_first``; where the gates pass but the last value is
    NaN the result is 1.0 (passing the gates was all that could be checked); all NaN → NaN.
    """
    import torch
    gates, last = values[..., :-1], values[..., -1]
    passed = (gates >= threshold - _GATE_SLACK).all(dim=-1)  # NaN >= t is False: an unscored gate fails
    last = torch.where(torch.isnan(last), torch.ones_like(last), last)
    out = torch.where(passed, last, torch.zeros_like(last))
    return torch.where(torch.isnan(values).all(dim=-1), torch.full_like(out, float("nan")), out)


def _parse_layers(raw: Any, where: str, seen: dict[str, str]) -> tuple[Layer, ...]:
    """Validate ``layers`` config (list of mappings) into ``Layer`` nodes; ``seen`` maps dimension → layer."""
    if not isinstance(raw, list | tuple) or not raw:
        raise ConfigError("must be a non-empty list of layers", where)
    names: set[str] = set()
    out = []
    for i, item in enumerate(raw):
        here = f"{where}[{i}]"
        if not isinstance(item, dict):
            raise ConfigError(f"a layer is a mapping with keys {', '.join(LAYER_KEYS)}, got {item!r}", here)
        unknown = sorted(set(item) - set(LAYER_KEYS))
        if unknown:
            raise ConfigError(f"unknown key {unknown[0]!r}; valid keys: {', '.join(LAYER_KEYS)}", here)
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise ConfigError("every layer needs a non-empty 'name'", f"{here}.name")
        if name in names:
            raise ConfigError(f"duplicate layer name {name!r}", f"{here}.name")
        names.add(name)
        here = f"{where}[{i}]({name})"
        method = item.get("method", "weighted_sum")
        if method not in METHODS:
            raise ConfigError(f"unknown method {method!r}; available: {', '.join(METHODS)}", f"{here}.method")
        weight = item.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not math.isfinite(weight) \
                or weight < 0:
            raise ConfigError(f"weight must be a number >= 0, got {weight!r}", f"{here}.weight")
        if ("dimensions" in item) == ("layers" in item):
            raise ConfigError("a layer has either 'dimensions' or 'layers' (sub-layers), not both or neither", here)
        if "layers" in item:
            out.append(Layer(name, method, float(weight), layers=_parse_layers(item["layers"], f"{here}.layers", seen)))
            continue
        dims = item["dimensions"]
        if not isinstance(dims, list | tuple) or not dims or not all(isinstance(d, str) for d in dims):
            raise ConfigError("must be a non-empty list of dimension names", f"{here}.dimensions")
        for d in dims:
            if d in seen:
                raise ConfigError(f"dimension {d!r} is in layer {seen[d]!r} already; each dimension may appear "
                                  f"once", f"{here}.dimensions")
            seen[d] = name
        out.append(Layer(name, method, float(weight), dimensions=tuple(dims)))
    return tuple(out)


class LayeredAggregator:
    """The reward is a tree: each layer combines the normalised scores of its dimensions with their
    (scheduler) weights, or the values of its sub-layers with their configured weights; the
    top-level layers are then merged by ``combine`` with their weights.

    Methods, at every level: ``weighted_sum`` and ``geometric`` (NaN skipped, weights
    renormalised; see those aggregators), ``min`` (lowest of the values of positive weight) and
    ``gate`` (in listed order, each value but the last must reach ``gate_threshold`` or the result
    is 0.0, else the last value; an unscored gate fails; weights ignored). A layer none of whose
    dimensions was scored is NaN and skipped by its parent like an unscored dimension; the reward
    is NaN only where nothing the tree reads was scored. Dimensions in no layer are not used.
    With no ``layers`` the ``combine`` method applies to all rubric dimensions directly.
    """

    @dataclass
    class Params:
        layers: list[dict[str, Any]] = field(default_factory=list)
        """``[{name, dimensions: [...] | layers: [...], method: weighted_sum, weight: 1.0}, ...]``."""
        combine: Literal["weighted_sum", "geometric", "min", "gate"] = "weighted_sum"
        """How the top-level layers are merged."""
        gate_threshold: float = 1.0
        """What a gated value (normalised, [0, 1]) must reach under method ``gate``."""
        geometric_floor: float = 0.01
        """The score floor under method ``geometric`` (see the ``geometric`` aggregator)."""

    def __init__(self, params: Params) -> None:
        if params.combine not in METHODS:
            raise ConfigError(f"unknown method {params.combine!r}; available: {', '.join(METHODS)}",
                              f"{WHERE}.combine")
        if not (math.isfinite(params.gate_threshold) and 0 <= params.gate_threshold <= 1):
            raise ConfigError(f"gate_threshold must lie in [0, 1], got {params.gate_threshold:g}",
                              f"{WHERE}.gate_threshold")
        if not (math.isfinite(params.geometric_floor) and 0 < params.geometric_floor < 1):
            raise ConfigError(f"geometric_floor must lie in (0, 1), got {params.geometric_floor:g}",
                              f"{WHERE}.geometric_floor")
        self.params = params
        self.layers = _parse_layers(params.layers, f"{WHERE}.layers", {}) if params.layers else ()
        self._check_weights(self.layers, params.combine, f"{WHERE}.layers")

    @staticmethod
    def _check_weights(layers: Sequence[Layer], method: str, where: str) -> None:
        if layers and method != "gate" and all(layer.weight == 0 for layer in layers):
            raise ConfigError("all layer weights are 0; at least one must be positive", where)
        for i, layer in enumerate(layers):
            LayeredAggregator._check_weights(layer.layers, layer.method, f"{where}[{i}]({layer.name}).layers")

    def check_rubric(self, rubric: Rubric) -> None:
        valid = rubric.dimension_names
        for layer in self.layers:
            unknown = [n for n in layer.dimension_names() if n not in valid]
            if unknown:
                raise ConfigError(f"layer {layer.name!r} names unknown dimension(s) "
                                  f"{', '.join(map(repr, unknown))}; rubric {rubric.name!r} has: {', '.join(valid)}",
                                  f"{WHERE}.layers")

    def _combine(self, values: torch.Tensor, weights: torch.Tensor, method: str) -> torch.Tensor:
        if method == "weighted_sum":
            return nan_weighted_sum(values, weights)
        if method == "geometric":
            return nan_geometric_mean(values, weights, floor=self.params.geometric_floor)
        if method == "min":
            return nan_min(values, weights)
        return gate_chain(values, self.params.gate_threshold)

    def _value(self, layer: Layer, batch: RewardBatch) -> torch.Tensor:
        import torch
        if layer.layers:
            values = torch.stack([self._value(sub, batch) for sub in layer.layers], dim=-1)
            weights = torch.tensor([sub.weight for sub in layer.layers], dtype=values.dtype, device=values.device)
        else:
            names = batch.rubric.dimension_names
            idx = [names.index(n) for n in layer.dimensions]
            values, weights = batch.scores[..., idx], batch.weights[idx]
        return self._combine(values, weights, layer.method)

    def aggregate(self, batch: RewardBatch) -> torch.Tensor:
        import torch
        if not self.layers:
            return self._combine(batch.scores, batch.weights, self.params.combine).to(torch.float32)
        self.check_rubric(batch.rubric)
        root = Layer("<root>", self.params.combine, 1.0, layers=self.layers)
        return self._value(root, batch).to(torch.float32)


@hookimpl
def rlkit_register_aggregators(register):
    register("layered", LayeredAggregator)
