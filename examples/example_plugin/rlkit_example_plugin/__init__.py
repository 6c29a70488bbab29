"""An example third-party plugin: the ``anchor_overlap`` judge.

It scores every rubric dimension by how many words a completion shares with the dimension's
positive anchor examples versus its negative ones. It is deliberately simple; what it shows is
the shape of a plugin: a factory with a ``Params`` schema, a registration hook, and a YAML file
that joins rlkit's ``judge`` config group through ``rlkit_config_search_path``. It imports only the plugin door,
``rlkit.plugin``, as every plugin should.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import Judgement, ParamError, Rollout, Rubric, RubricError, hookimpl

if TYPE_CHECKING:
    import torch

_WORD = re.compile(r"\w+")


def _words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


class AnchorOverlapJudge:
    """Position of a completion between a dimension's negative and positive anchor vocabulary."""

    @dataclass
    class Params:
        min_overlap: int = 1

    def __init__(self, params: Params) -> None:
        if params.min_overlap < 1:  # ParamError names the key where the judge is configured (a composite's member too)
            raise ParamError(f"must be >= 1, got {params.min_overlap}", "min_overlap")
        self.params = params

    def check_rubric(self, rubric: Rubric) -> None:
        for i, dim in enumerate(rubric.dimensions):
            if not any(a.positive for a in dim.anchors.values()):
                raise RubricError("anchor_overlap needs positive anchor examples",
                                        f"{rubric.source}: dimensions[{i}]({dim.name}).anchors")

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        return self.assess(rollout, rubric).scores

    def assess(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        """The scores, and how many completions shared too few words with the anchors to be scored."""
        import torch
        out = torch.full((rollout.num_prompts, rollout.group_size, len(rubric.dimensions)), float("nan"))
        for d, dim in enumerate(rubric.dimensions):
            positive = set().union(*(_words(x) for a in dim.anchors.values() for x in a.positive))
            negative = set().union(*(_words(x) for a in dim.anchors.values() for x in a.negative))
            for b, group in enumerate(rollout.completions):
                for g, text in enumerate(group):
                    words = _words(text)
                    pos, neg = len(words & positive), len(words & negative)
                    if pos + neg >= self.params.min_overlap:
                        out[b, g, d] = dim.low + (dim.high - dim.low) * pos / (pos + neg)
        unscored = torch.isnan(out).all(dim=-1).float().mean()
        return Judgement(out, metrics={"judge/no_overlap_rate": float(unscored)})


@hookimpl
def rlkit_register_judges(register):
    register("anchor_overlap", AnchorOverlapJudge)


@hookimpl
def rlkit_config_search_path():
    return ["pkg://rlkit_example_plugin.conf"]
