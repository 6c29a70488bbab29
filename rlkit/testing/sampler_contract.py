"""The contract suite of prompt samplers (``rlkit_register_prompt_samplers``): valid indices, a ``pick`` that is pure
and seeded, and a sampler restored from its ``state_dict`` that picks what the uninterrupted one does."""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
import torch

from rlkit.core.rubric import Rubric, rubric_from_dict

LEVELS = ("easy", "medium", "hard")


def example_sampler_records(count: int = 12, *, difficulty: bool = True) -> list[dict[str, Any]]:
    """Arithmetic prompts with a ``reference``, and a ``difficulty`` of easy, medium or hard in turn (or none)."""
    records = [{"prompt": f"{i}+{i}=", "reference": str(2 * i)} for i in range(count)]
    if difficulty:
        for i, record in enumerate(records):
            record["difficulty"] = LEVELS[i % 3]
    return records


def example_sampler_rubric() -> Rubric:
    """A binary ``correctness`` (what the built-in samplers read by default) and a ``brevity`` scale."""
    return rubric_from_dict({"name": "sampler-contract", "version": "1", "dimensions": [
        {"name": "correctness", "type": "binary", "checks": [{"type": "match", "field": "reference"}]},
        {"name": "brevity", "type": "scale", "range": [1, 5], "checks": [{"type": "length", "max": 8}]}]},
        source="<sampler contract rubric>")


def scripted_scores(indices: list[int], draw: int, group: int = 4) -> torch.Tensor:
    """Raw scores ``[B, G, 2]`` that depend on the record and the step: some prompts always solved, some never, some
    in between, one completion unscored now and then."""
    rows = []
    for i in indices:
        solved = [1.0 if (i % 3 == 0) or (i % 3 == 1 and (g + draw) % 2 == 0) else 0.0 for g in range(group)]
        brevity = [float(1 + (i + g) % 5) for g in range(group)]
        if (i + draw) % 5 == 0:
            solved[-1] = float("nan")
        rows.append([[s, b] for s, b in zip(solved, brevity, strict=True)])
    return torch.tensor(rows, dtype=torch.float32)


def _round_trip(state: Any) -> Any:
    """``state`` through ``torch.save`` and a ``weights_only`` load, as a checkpoint carries it."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer, weights_only=True)


class PromptSamplerContract:
    """Subclass and provide a ``sampler`` fixture (the built plugin, before ``setup``; each test runs copies of it);
    ``records``, ``rubric`` and ``batch_size`` have defaults a plugin may override."""

    seed = 3
    steps = 8

    @pytest.fixture
    def records(self) -> list[dict[str, Any]]:
        return example_sampler_records()

    @pytest.fixture
    def rubric(self) -> Rubric:
        return example_sampler_rubric()

    @pytest.fixture
    def batch_size(self) -> int:
        return 4

    def _fresh(self, sampler: Any, records: list[dict[str, Any]]) -> Any:
        built = copy.deepcopy(sampler)
        built.setup(records, self.seed)
        return built

    @staticmethod
    def _proposed(draw: int, n: int, size: int) -> list[int]:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(draw // max(n // size, 1))).tolist()
        start = draw % max(n // size, 1) * size
        return order[start:start + size]

    def _run(self, built: Any, records: list[dict[str, Any]], rubric: Rubric, size: int, draws: range) -> list:
        picks = []
        for draw in draws:
            proposed = self._proposed(draw, len(records), size)
            if not callable(getattr(built, "pick", None)):
                picks.append(proposed)
                continue
            picked = list(built.pick(draw, proposed))
            built.observe(draw, picked, scripted_scores(picked, draw), rubric)
            picks.append(picked)
        return picks

    def test_check_rubric_accepts_its_rubric(self, sampler: Any, rubric: Rubric) -> None:
        check = getattr(sampler, "check_rubric", None)
        if check is not None:
            check(rubric)

    def test_picks_distinct_valid_indices(self, sampler: Any, records: list[dict[str, Any]], rubric: Rubric,
                                          batch_size: int) -> None:
        built = self._fresh(sampler, records)
        assert isinstance(built.adaptive, bool), "adaptive is a bool once setup has run"
        for picked in self._run(built, records, rubric, batch_size, range(self.steps)):
            assert len(picked) == batch_size and len(set(picked)) == batch_size
            assert all(isinstance(i, int) and 0 <= i < len(records) for i in picked)

    def test_pick_is_pure(self, sampler: Any, records: list[dict[str, Any]], rubric: Rubric, batch_size: int) -> None:
        built = self._fresh(sampler, records)
        if not callable(getattr(built, "pick", None)):
            return
        self._run(built, records, rubric, batch_size, range(3))
        before = _round_trip(built.state_dict())
        proposed = self._proposed(3, len(records), batch_size)
        first = built.pick(3, list(proposed))
        assert built.pick(3, list(proposed)) == first, "the same draw and proposal give the same pick"
        assert _round_trip(built.state_dict()) == before, "pick changed the sampler's state"

    def test_seeded_and_deterministic(self, sampler: Any, records: list[dict[str, Any]], rubric: Rubric,
                                      batch_size: int) -> None:
        torch.manual_seed(0)
        first = self._run(self._fresh(sampler, records), records, rubric, batch_size, range(self.steps))
        torch.manual_seed(1)  # the global RNG plays no part
        second = self._run(self._fresh(sampler, records), records, rubric, batch_size, range(self.steps))
        assert first == second

    def test_resumed_from_its_state_picks_what_the_uninterrupted_one_does(
            self, sampler: Any, records: list[dict[str, Any]], rubric: Rubric, batch_size: int) -> None:
        straight = self._run(self._fresh(sampler, records), records, rubric, batch_size, range(self.steps))
        half = self.steps // 2
        before = self._fresh(sampler, records)
        picks = self._run(before, records, rubric, batch_size, range(half))
        after = self._fresh(sampler, records)
        after.load_state_dict(_round_trip(before.state_dict()))
        picks += self._run(after, records, rubric, batch_size, range(half, self.steps))
        assert picks == straight

    def test_not_adaptive_means_picks_ignore_scores(self, sampler: Any, records: list[dict[str, Any]],
                                                    rubric: Rubric, batch_size: int) -> None:
        built = self._fresh(sampler, records)
        if built.adaptive or not callable(getattr(built, "pick", None)):
            return
        fresh = self._fresh(sampler, records)
        self._run(built, records, rubric, batch_size, range(self.steps))
        for draw in range(self.steps, self.steps + 3):
            proposed = self._proposed(draw, len(records), batch_size)
            assert built.pick(draw, proposed) == fresh.pick(draw, proposed), "a non-adaptive pick read the scores"

    def test_observes_unscored_prompts(self, sampler: Any, records: list[dict[str, Any]], rubric: Rubric,
                                       batch_size: int) -> None:
        built = self._fresh(sampler, records)
        if not callable(getattr(built, "pick", None)):
            return
        picked = built.pick(0, self._proposed(0, len(records), batch_size))
        built.observe(0, picked, torch.full((len(picked), 4, len(rubric.dimensions)), float("nan")), rubric)
        metrics = getattr(built, "metrics", None)
        if callable(metrics):
            assert all(isinstance(v, float) for v in metrics().values())
