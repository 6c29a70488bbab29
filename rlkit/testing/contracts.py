"""Contract suites, one per plugin kind: shapes, dtypes, NaN handling, determinism, invariants.

Each suite is a plain pytest class whose tests use one fixture named after the kind
(``judge``, ``aggregator``, ``estimator``, ``constructor``, ``scheduler``, ``backend``). Data fixtures
(``rubric``, ``rollout``, ``reward_batch``, ``chats``) have defaults a plugin may override.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch

from rlkit.core.rubric import Rubric, rubric_from_dict
from rlkit.core.stats import nan_weighted_sum
from rlkit.core.types import PreferencePairs, RewardBatch, Rollout
from rlkit.judging import Completion
from rlkit.judging.members import judgement_of
from rlkit.judging.spend import Spend
from rlkit.judging.types import Judgement
from rlkit.reward.pipeline import aggregate_rewards, check_judge_output, normalize_scores


def example_rubric() -> Rubric:
    """Three dimensions of different kinds and ranges, each with rule checks and anchor examples."""
    return rubric_from_dict({
        "name": "contract",
        "version": "1",
        "dimensions": [
            {"name": "answer", "type": "binary", "weight": 2.0,
             "anchors": {0: {"text": "wrong", "negative": ["five"]}, 1: {"text": "right", "positive": ["four"]}},
             "checks": [{"type": "keywords", "any": ["four", "4"]}]},
            {"name": "brevity", "type": "scale", "range": [1, 5],
             "anchors": {1: {"text": "long", "negative": ["well let me think"]},
                         5: {"text": "short", "positive": ["four"]}},
             "checks": [{"type": "length", "max": 20}, {"type": "length", "max": 8}]},
            {"name": "exact", "type": "scale", "range": [0, 10], "weight": 0.5,
             "anchors": {10: {"text": "matches", "positive": ["4"]}},
             "checks": [{"type": "match", "field": "reference", "mode": "numeric"}]},
        ],
    }, source="<contract rubric>")


def example_rollout() -> Rollout:
    """Two prompts × four completions; the second prompt has no reference (a check cannot apply)."""
    return Rollout(
        records=[{"prompt": "2+2=", "reference": "4"}, {"prompt": "Say four."}],
        completions=[["4", "four", "five", "well let me think, it is 4"],
                     ["four", "4 4 4", "", "Four is the answer here"]],
    )


def example_reward_batch(seed: int = 0, *, prompts: int = 4, group: int = 6) -> RewardBatch:
    """Random scores over ``example_rubric`` with NaN holes, a saturated group and an unscored row."""
    rubric = example_rubric()
    gen = torch.Generator().manual_seed(seed)
    dims = len(rubric.dimensions)
    unit = torch.rand(prompts, group, dims, generator=gen)
    low = torch.tensor([d.low for d in rubric.dimensions])
    high = torch.tensor([d.high for d in rubric.dimensions])
    raw = low + unit * (high - low)
    raw[..., 0] = raw[..., 0].round()  # binary dimension
    raw[0, 1, 2] = float("nan")        # one dimension not scored
    raw[1, 2, :] = float("nan")        # one completion nobody could score
    raw[2] = raw[2, :1].expand(group, dims)  # a saturated group: all completions equal
    weights = torch.tensor(rubric.initial_weights())
    batch = RewardBatch(rubric=rubric, raw_scores=raw, scores=normalize_scores(raw, rubric), weights=weights)
    return batch.with_rewards(nan_weighted_sum(batch.scores, batch.weights))


class _DataFixtures:
    @pytest.fixture
    def rubric(self) -> Rubric:
        return example_rubric()

    @pytest.fixture
    def rollout(self) -> Rollout:
        return example_rollout()

    @pytest.fixture
    def reward_batch(self) -> RewardBatch:
        return example_reward_batch()


class JudgeContract(_DataFixtures):
    """Scores are float32 [B, G, D], inside each range or NaN, and repeatable."""

    def test_shape_dtype_and_range(self, judge: Any, rollout: Rollout, rubric: Rubric) -> None:
        raw = judge.score(rollout, rubric)
        derive = getattr(judge, "scored_rubric", None)
        scored = derive(rubric) if callable(derive) else rubric  # what the scores follow
        assert isinstance(raw, torch.Tensor)
        assert raw.dtype == torch.float32
        assert tuple(raw.shape) == (rollout.num_prompts, rollout.group_size, len(scored.dimensions))
        check_judge_output(raw, rollout, scored, "under test")  # raises when out of range

    def test_group_confidence_when_reported(self, judge: Any, rollout: Rollout, rubric: Rubric) -> None:
        confidence = judgement_of(judge, rollout, rubric).confidence
        if confidence is not None:
            assert tuple(confidence.shape) == (rollout.num_prompts,)
            assert ((confidence >= 0) & (confidence <= 1)).all()

    def test_judgement_holds_the_call(self, judge: Any, rollout: Rollout, rubric: Rubric) -> None:
        """What the host reads of one call (its ``assess``, or ``score`` and the last-call members): scores as
        ``score`` gives them, and reasons, written scores, spend and metrics each of its documented shape."""
        said = judgement_of(judge, rollout, rubric)
        assert isinstance(said, Judgement), f"assess must return a Judgement, got {type(said).__name__}"
        again = judge.score(rollout, rubric)
        assert torch.equal(torch.isnan(said.scores), torch.isnan(again)), "assess and score disagree"
        assert torch.allclose(said.scores.nan_to_num(-1), again.nan_to_num(-1)), "assess and score disagree"
        b, g = rollout.num_prompts, rollout.group_size
        if said.reasons is not None:
            assert [len(group) for group in said.reasons] == [g] * b
            assert all(isinstance(why, str) for group in said.reasons for one in group for why in one.values())
        if said.written_scores is not None:
            assert tuple(said.written_scores.shape) == tuple(said.scores.shape)
        if said.spend is not None:
            assert isinstance(said.spend, Spend) and said.spend.calls >= 0
        assert all(isinstance(k, str) and isinstance(v, int | float) for k, v in said.metrics.items())

    def test_scores_something(self, judge: Any, rollout: Rollout, rubric: Rubric) -> None:
        assert not torch.isnan(judge.score(rollout, rubric)).all(), "a judge that scores nothing is broken"

    def test_deterministic(self, judge: Any, rollout: Rollout, rubric: Rubric) -> None:
        torch.manual_seed(0)
        first = judge.score(rollout, rubric)
        torch.manual_seed(0)
        second = judge.score(rollout, rubric)
        assert torch.equal(torch.isnan(first), torch.isnan(second))
        assert torch.allclose(first.nan_to_num(-1), second.nan_to_num(-1))

    def test_check_rubric_accepts_its_rubric(self, judge: Any, rubric: Rubric) -> None:
        check = getattr(judge, "check_rubric", None)
        if check is not None:
            check(rubric)


class AggregatorContract(_DataFixtures):
    """Rewards are float32 [B, G]; NaN only where nothing could be scored; repeatable."""

    def test_shape_and_dtype(self, aggregator: Any, reward_batch: RewardBatch) -> None:
        rewards = aggregator.aggregate(reward_batch)
        assert rewards.dtype == torch.float32
        assert tuple(rewards.shape) == reward_batch.shape[:2]

    def test_nan_only_where_nothing_was_scored(self, aggregator: Any, reward_batch: RewardBatch) -> None:
        rewards = aggregator.aggregate(reward_batch)
        unscored = torch.isnan(reward_batch.scores).all(dim=-1)
        assert torch.isnan(rewards[unscored]).all(), "a completion nobody scored must not get a reward"
        assert not torch.isnan(rewards[~unscored]).any(), "a partly scored completion must get a reward"

    def test_deterministic(self, aggregator: Any, reward_batch: RewardBatch) -> None:
        a, b = aggregator.aggregate(reward_batch), aggregator.aggregate(reward_batch)
        assert torch.equal(a.nan_to_num(-7), b.nan_to_num(-7))

    def test_equal_scores_give_equal_rewards(self, aggregator: Any, reward_batch: RewardBatch) -> None:
        rewards = aggregator.aggregate(reward_batch)
        saturated = rewards[2]  # example_reward_batch makes group 2 identical
        assert torch.allclose(saturated, saturated[:1].expand_as(saturated))


class AdvantageEstimatorContract(_DataFixtures):
    """Advantages are float32 [B, G] with no NaN; unscored completions get 0; saturated groups 0."""

    def test_shape_dtype_and_finite(self, estimator: Any, reward_batch: RewardBatch) -> None:
        adv = estimator.advantages(reward_batch)
        assert adv.dtype == torch.float32
        assert tuple(adv.shape) == reward_batch.shape[:2]
        assert torch.isfinite(adv).all()

    def test_unscored_completion_gets_zero(self, estimator: Any, reward_batch: RewardBatch) -> None:
        adv = estimator.advantages(reward_batch)
        assert reward_batch.rewards is not None
        assert (adv[torch.isnan(reward_batch.rewards)] == 0).all()

    def test_saturated_group_gets_zero(self, estimator: Any, reward_batch: RewardBatch) -> None:
        assert torch.allclose(estimator.advantages(reward_batch)[2], torch.zeros(reward_batch.shape[1]))

    def test_deterministic_under_seed(self, estimator: Any, reward_batch: RewardBatch) -> None:
        torch.manual_seed(0)
        a = estimator.advantages(reward_batch)
        torch.manual_seed(0)
        assert torch.equal(a, estimator.advantages(reward_batch))

    def test_zero_mean_groups_when_declared(self, estimator: Any, reward_batch: RewardBatch) -> None:
        if not getattr(estimator, "zero_mean_groups", False):
            pytest.skip("estimator does not declare zero-mean groups")
        adv = estimator.advantages(reward_batch)
        assert reward_batch.rewards is not None
        scored = ~torch.isnan(reward_batch.rewards)
        group_sum = torch.where(scored, adv, torch.zeros_like(adv)).sum(dim=1)
        assert torch.allclose(group_sum, torch.zeros_like(group_sum), atol=1e-4)


class PreferenceConstructorContract(_DataFixtures):
    """Pairs index valid, distinct, scored completions; weights lie in [0, 1]; repeatable."""

    def test_pairs_are_valid(self, constructor: Any, reward_batch: RewardBatch) -> None:
        pairs = constructor.pairs(reward_batch)
        assert isinstance(pairs, PreferencePairs)
        b, g, _ = reward_batch.shape
        assert pairs.prompt_index.dtype == torch.int64 and pairs.weight.dtype == torch.float32
        if len(pairs):
            assert ((pairs.prompt_index >= 0) & (pairs.prompt_index < b)).all()
            for idx in (pairs.chosen, pairs.rejected):
                assert ((idx >= 0) & (idx < g)).all()
            assert (pairs.chosen != pairs.rejected).all()
            assert ((pairs.weight >= 0) & (pairs.weight <= 1)).all()

    def test_never_pairs_unscored(self, constructor: Any, reward_batch: RewardBatch) -> None:
        pairs = constructor.pairs(reward_batch)
        assert reward_batch.rewards is not None
        nan = torch.isnan(reward_batch.rewards)
        assert not nan[pairs.prompt_index, pairs.chosen].any()
        assert not nan[pairs.prompt_index, pairs.rejected].any()

    def test_no_pairs_from_saturated_group(self, constructor: Any, reward_batch: RewardBatch) -> None:
        pairs = constructor.pairs(reward_batch)
        assert not (pairs.prompt_index == 2).any(), "a group of equal completions has no preference"

    def test_deterministic(self, constructor: Any, reward_batch: RewardBatch) -> None:
        a, b = constructor.pairs(reward_batch), constructor.pairs(reward_batch)
        for name in ("prompt_index", "chosen", "rejected", "weight"):
            assert torch.equal(getattr(a, name), getattr(b, name))


class WeightSchedulerContract(_DataFixtures):
    """Weights are float32 [D], non-negative, not all zero; state round-trips."""

    def test_shape_and_sign(self, scheduler: Any, reward_batch: RewardBatch) -> None:
        w = torch.as_tensor(scheduler.weights(0, reward_batch.scores, reward_batch.rubric))
        assert w.dtype == torch.float32
        assert tuple(w.shape) == (len(reward_batch.rubric.dimensions),)
        assert (w >= 0).all() and (w > 0).any()

    def test_state_round_trip(self, scheduler: Any, reward_batch: RewardBatch) -> None:
        for step in range(3):
            scheduler.weights(step, reward_batch.scores, reward_batch.rubric)
        state = scheduler.state_dict()
        scheduler.load_state_dict(state)
        assert scheduler.state_dict() == state

    def test_feeds_the_host_pipeline(self, scheduler: Any, reward_batch: RewardBatch) -> None:
        batch = aggregate_rewards(reward_batch.raw_scores, reward_batch.rubric, scheduler, _WeightedMean())
        assert batch.rewards is not None and batch.rewards.shape == reward_batch.shape[:2]


class _WeightedMean:
    """The simplest aggregator (the weighted mean of the normalised scores), so the suite needs no plugin."""

    def aggregate(self, batch: RewardBatch) -> torch.Tensor:
        return nan_weighted_sum(batch.scores, batch.weights)


def example_chats() -> list[list[dict[str, str]]]:
    """Three chats of different lengths, one with a system message: requests for judge-backend suites."""
    return [
        [{"role": "user", "content": "What is 2+2? Answer with one number."}],
        [{"role": "system", "content": "You are a strict grader."},
         {"role": "user", "content": "Rate from 1 to 5: 'Paris is the capital of France.'"}],
        [{"role": "user", "content": "Hi"}],
    ]


class JudgeBackendContract:
    """``identity()`` is a JSON dict naming the backend; ``complete`` answers every chat, in order, with a
    ``Completion`` (a str, or None and an ``error``); no chats give []; greedy answers repeat.

    The ``backend`` fixture must decode greedily (temperature 0) and be cheap to call several times: a small
    model and a few new tokens. Set ``batch_invariant = False`` in the subclass when a chat's greedy answer may
    depend on which other chats share its batch (servers that batch requests on a GPU); the order test then
    checks only that each answer arrives.
    """

    batch_invariant = True

    @pytest.fixture
    def chats(self) -> list[list[dict[str, str]]]:
        return example_chats()

    def test_identity_is_a_json_dict_naming_the_backend(self, backend: Any) -> None:
        identity = backend.identity()
        assert isinstance(identity, dict)
        assert isinstance(identity.get("backend"), str) and identity["backend"], "identity() needs a 'backend'"
        # Round-trips exactly: no tuples, paths or other types a JSON cache key would silently change.
        assert json.loads(json.dumps(identity, sort_keys=True)) == identity
        assert backend.identity() == identity

    def test_one_completion_per_chat(self, backend: Any, chats: list[list[dict[str, str]]]) -> None:
        results = backend.complete(chats)
        assert isinstance(results, list) and len(results) == len(chats)
        for result in results:
            assert isinstance(result, Completion)
            if result.text is None:
                assert isinstance(result.error, str) and result.error, "a failed request must say why"
            else:
                assert isinstance(result.text, str)
            assert result.latency >= 0 and result.attempts >= 1
        assert any(r.text is not None for r in results), "a backend that answers nothing is broken"

    def test_answers_in_request_order(self, backend: Any, chats: list[list[dict[str, str]]]) -> None:
        forward = backend.complete(chats)
        backward = backend.complete(chats[::-1])
        assert len(backward) == len(chats)
        if self.batch_invariant:
            assert [r.text for r in backward] == [r.text for r in forward][::-1]

    def test_no_chats_give_no_completions(self, backend: Any) -> None:
        assert backend.complete([]) == []

    def test_greedy_is_deterministic(self, backend: Any, chats: list[list[dict[str, str]]]) -> None:
        first, second = backend.complete(chats), backend.complete(chats)
        assert [r.text for r in first] == [r.text for r in second]

    def test_has_close(self, backend: Any) -> None:
        assert callable(getattr(backend, "close", None))

    def test_expected_by_default_only_with_level_probabilities(self, backend: Any) -> None:
        # the llm judge's `scoring: auto` trusts this flag to mean every structured answer carries them
        if getattr(backend, "expected_by_default", False):
            assert getattr(backend, "structured_outputs", False) and getattr(backend, "level_probs_outputs", False), \
                "expected_by_default needs structured_outputs and level_probs_outputs"


def example_prompts() -> list[dict[str, Any]]:
    """Three prompt records of different lengths, one a chat: requests for generator suites."""
    return [{"prompt": "2+2="}, {"prompt": "17+25="},
            {"prompt": [{"role": "system", "content": "add"}, {"role": "user", "content": "3+4="}]}]


class GeneratorContract:
    """The shapes and alignment of ``generate``'s ``SampledBatch``, greedy determinism, the record order, and
    that ``sync_weights`` makes the next ``generate`` sample from the updated policy.

    Fixtures: ``generator`` and ``policy`` (a ``(model, tokenizer)`` pair; the default builds rlkit's tiny
    policy, which the tests modify, so it is built fresh per test). Set ``batch_invariant = False`` when a
    record's greedy completion may depend on the other records in its batch (batched GPU kernels).
    """

    batch_invariant = True
    num_generations = 2
    max_new_tokens = 6

    @pytest.fixture
    def policy(self) -> tuple[Any, Any]:
        from rlkit.lm.models import build_tiny_policy, load_policy

        return load_policy(build_tiny_policy())

    @pytest.fixture
    def records(self) -> list[dict[str, Any]]:
        return example_prompts()

    def _generate(self, generator: Any, policy: tuple[Any, Any], records: list[dict[str, Any]], *,
                  greedy: bool = False, num_generations: int | None = None, seeds: list[int] | None = None) -> Any:
        from rlkit.lm.sampling import GenerationRequest

        model, tokenizer = policy
        request = GenerationRequest(records, num_generations or self.num_generations, self.max_new_tokens,
                                    temperature=1.0, greedy=greedy, seeds=seeds)
        return generator.generate(model, tokenizer, request)

    def test_shapes_masks_and_texts_line_up(self, generator: Any, policy: tuple[Any, Any],
                                            records: list[dict[str, Any]]) -> None:
        from rlkit.lm.sampling import render_prompt

        model, tokenizer = policy
        generator.setup(model, tokenizer)
        out = self._generate(generator, policy, records)
        n, g = len(records) * self.num_generations, self.num_generations
        p = out.prompt_length
        assert out.input_ids.dim() == 2 and out.input_ids.shape[0] == n
        c = out.input_ids.shape[1] - p
        assert 0 < c <= self.max_new_tokens
        assert out.attention_mask.shape == out.input_ids.shape
        assert out.completion_mask.shape == (n, c) and out.truncated.shape == (n,)
        assert set(out.completion_mask.unique().tolist()) <= {0, 1}
        assert len(out.texts) == len(records) and all(len(t) == g for t in out.texts)
        eos = tokenizer.eos_token_id
        for row in range(n):
            record = records[row // g]
            prompt = out.input_ids[row, :p][out.attention_mask[row, :p].bool()]
            assert tokenizer.decode(prompt) == render_prompt(record["prompt"], tokenizer), "prompt rows out of order"
            completion = out.input_ids[row, p:]
            kept = int(out.completion_mask[row].sum())
            assert torch.equal(out.attention_mask[row, p:], out.completion_mask[row].to(out.attention_mask.dtype))
            assert out.completion_mask[row, :kept].all(), "completion_mask must be 1 up to its end, then 0"
            ends_with_eos = kept > 0 and int(completion[kept - 1]) == eos
            assert bool(out.truncated[row]) == (not ends_with_eos), "truncated means: no EOS"
            assert (eos not in completion[:kept - 1].tolist()) if kept else True, "mask runs past the first EOS"
            text = tokenizer.decode(completion[:kept], skip_special_tokens=True)
            assert out.texts[row // g][row % g] == text

    def test_greedy_is_deterministic_and_in_record_order(self, generator: Any, policy: tuple[Any, Any],
                                                         records: list[dict[str, Any]]) -> None:
        generator.setup(*policy)
        first = self._generate(generator, policy, records, greedy=True, num_generations=1)
        again = self._generate(generator, policy, records, greedy=True, num_generations=1)
        assert first.texts == again.texts
        if self.batch_invariant:
            reversed_ = self._generate(generator, policy, records[::-1], greedy=True, num_generations=1)
            assert reversed_.texts == first.texts[::-1]

    def test_keeps_the_policy_mode(self, generator: Any, policy: tuple[Any, Any],
                                   records: list[dict[str, Any]]) -> None:
        model, _ = policy
        generator.setup(*policy)
        model.train()
        self._generate(generator, policy, records)
        assert model.training, "generate must leave the policy in training mode when it found it so"

    def test_sync_weights_reaches_the_next_generate(self, generator: Any, policy: tuple[Any, Any],
                                                    records: list[dict[str, Any]]) -> None:
        model, _ = policy
        generator.setup(*policy)
        before = self._generate(generator, policy, records, greedy=True, num_generations=1)
        with torch.no_grad():  # an optimiser step that leaves every logit equal: every prompt gets one answer
            model.get_output_embeddings().weight.zero_()
            bias = getattr(model.get_output_embeddings(), "bias", None)
            if bias is not None:
                bias.zero_()
        generator.sync_weights(model)
        after = self._generate(generator, policy, records, greedy=True, num_generations=1)
        answers = {tuple(t) for t in after.completion_ids.tolist()}
        assert len(answers) == 1 and after.completion_ids.tolist() != before.completion_ids.tolist(), \
            "generate ignored the new weights"

    def test_seeded_sampling_ignores_the_rest_of_the_batch(self, generator: Any, policy: tuple[Any, Any],
                                                          records: list[dict[str, Any]]) -> None:
        if not getattr(generator, "honours_seeds", False):
            pytest.skip("this generator does not promise per-record seeded sampling (honours_seeds)")
        generator.setup(*policy)
        seeds = [11, 22, 33]
        together = self._generate(generator, policy, records, seeds=seeds)
        alone = self._generate(generator, policy, records[1:2], seeds=seeds[1:2])
        assert alone.texts[0] == together.texts[1]
        other_seed = self._generate(generator, policy, records[1:2], seeds=[23])
        assert self._generate(generator, policy, records[1:2], seeds=[23]).texts == other_seed.texts

    def test_samples_after_the_given_prompt_token_ids(self, generator: Any, policy: tuple[Any, Any],
                                                      records: list[dict[str, Any]]) -> None:
        """A multi-turn episode's next turn continues exactly the ids it hands over (``prompt_token_ids``): the
        rendered prompt's ids give the same greedy answer, and a conversation that is no rendered text's
        tokenisation (ids glued across a boundary) comes back verbatim as the prompt."""
        from rlkit.lm.sampling import GenerationRequest, tokenize_prompts

        model, tokenizer = policy
        generator.setup(*policy)
        ids, mask = tokenize_prompts(tokenizer, records)
        given = [row[m.bool()].tolist() for row, m in zip(ids, mask, strict=True)]
        rendered = self._generate(generator, policy, records, greedy=True, num_generations=1)
        request = GenerationRequest(records, 1, self.max_new_tokens, greedy=True, prompt_token_ids=given)
        assert generator.generate(model, tokenizer, request).texts == rendered.texts
        glued = [given[0] + [tokenizer.eos_token_id] + given[1], given[2]]
        out = generator.generate(model, tokenizer, GenerationRequest(records[:2], 2, self.max_new_tokens,
                                                                     prompt_token_ids=glued))
        p = out.prompt_length
        for row in range(4):
            prompt = out.input_ids[row, :p][out.attention_mask[row, :p].bool()].tolist()
            assert prompt == glued[row // 2], "the prompt ids were re-tokenised or reordered"

    def test_has_close(self, generator: Any) -> None:
        assert callable(getattr(generator, "close", None))
