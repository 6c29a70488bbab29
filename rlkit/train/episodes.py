"""Rollouts as episodes: G per record, policy turns sampled through the generator, environment turns in between.

With an environment of one turn (``single_turn``, the default) a rollout is one ``generate`` call, exactly as without
an environment. With more, every episode's next policy turn is sampled after the exact ids of its conversation so
far (``GenerationRequest.prompt_token_ids``), all active episodes in one request; the result is one
``SampledBatch`` per step whose completion holds every turn, the environment's tokens attended to but 0 in
``completion_mask`` (so the loss, the KL and the token counts see the policy's tokens only), plus the episodes
themselves (``rlkit.Episode``) for judges, tables and metrics.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from rlkit.core.types import Episode
from rlkit.lm.conversation import ChatFormat, as_messages
from rlkit.lm.sampling import GenerationRequest, SampledBatch, episode_tensors, pad_id

ENDINGS = ("done", "max_turns", "max_tokens", "truncated")


@dataclass
class _Play:
    """One episode being played: its record, its conversation, and its completion ids so far."""

    record: int
    messages: list[dict[str, Any]]
    prompt: list[int]
    first_turn: int = 0
    ids: list[int] = field(default_factory=list)
    policy: list[int] = field(default_factory=list)     # 1 per policy token, 0 per environment token
    engine: list[float] = field(default_factory=list)   # the engine's log-prob per token (0 on environment tokens)
    spans: list[tuple[int, int]] = field(default_factory=list)
    turns: list[str] = field(default_factory=list)
    info: Counter = field(default_factory=Counter)
    ended: str | None = None
    cut: bool = False


def turn_seed(seed: int, index: int, turn: int) -> int:
    """The seed of an episode's later turn, from its record's seed, its place in the group and the turn."""
    return ((seed * 1_000_003 + index) * 1_000_033 + turn) & 0xFFFFFFFF


class EpisodeRunner:
    """Plays a step's episodes with ``environment`` (an ``rlkit_register_environments`` plugin)."""

    def __init__(self, environment: Any, tokenizer: Any) -> None:
        self.environment = environment
        self.tokenizer = tokenizer
        setup = getattr(environment, "setup", None)
        if callable(setup) and self.multi_turn:
            setup(tokenizer)
        tools = getattr(environment, "tools", None)
        self.format = ChatFormat(tokenizer, tools() if callable(tools) else None)

    @property
    def multi_turn(self) -> bool:
        return int(getattr(self.environment, "max_turns", 1)) > 1

    def run(self, generate: Callable[[GenerationRequest], SampledBatch], request: GenerationRequest) -> SampledBatch:
        """The step's rollout: ``generate`` samples each policy turn."""
        if not self.multi_turn:
            return generate(self.first_turn(request))
        return self._play(generate, request)

    def first_turn(self, request: GenerationRequest) -> GenerationRequest:
        """A single-turn rollout's request: each record's prompt is the environment's first observation (its one
        policy turn ends the episode, so ``step`` is not called)."""
        return replace(request, records=[{**r, "prompt": self.environment.reset(r)} for r in request.records])

    def _play(self, generate: Callable[[GenerationRequest], SampledBatch], request: GenerationRequest) -> SampledBatch:
        env, g = self.environment, request.num_generations
        budget = getattr(env, "max_tokens", None)
        plays: list[_Play] = []
        for b, record in enumerate(request.records):
            first = as_messages(env.reset(record))
            prompt = self.format.prompt_ids(first)
            plays.extend(_Play(b, [dict(m) for m in first], prompt, len(first)) for _ in range(g))
        active = list(range(len(plays)))
        turn = 0
        version = lag = None
        while active:
            left = [self._room(plays[i], request.max_new_tokens, budget) for i in active]
            if turn == 0:
                rows = list(range(len(plays)))
                sampled = generate(replace(request, prompt_token_ids=[plays[i * g].prompt
                                                                      for i in range(len(request.records))],
                                            max_new_tokens=min(left)))
            else:
                seeds = None if request.seeds is None else [
                    turn_seed(int(request.seeds[plays[i].record]), i % g, turn) for i in active]
                rows = active
                sampled = generate(replace(
                    request, records=[request.records[plays[i].record] for i in active], num_generations=1,
                    seeds=seeds, max_new_tokens=min(left),
                    prompt_token_ids=[plays[i].prompt + plays[i].ids for i in active]))
            version = sampled.policy_version if version is None else version
            lag = sampled.policy_lag if lag is None else lag
            flat = [text for group in sampled.texts for text in group]
            still = []
            for row, i in enumerate(rows):
                play = plays[i]
                kept = int(sampled.completion_mask[row].sum())
                ids = sampled.completion_ids[row, :kept].tolist()
                start = len(play.ids)
                play.ids += ids
                play.policy += [1] * len(ids)
                if sampled.engine_logprobs is not None:
                    play.engine += sampled.engine_logprobs[row, :kept].tolist()
                play.spans.append((start, start + len(ids)))
                play.turns.append(flat[row])
                if bool(sampled.truncated[row]):
                    play.cut, play.ended = True, "truncated"
                    play.messages.append({"role": "assistant", "content": flat[row]})
                    continue
                outcome = env.step(list(play.messages), flat[row])
                play.messages.append({"role": "assistant", "content": flat[row]})
                if outcome.done:
                    play.ended = "done"
                elif len(play.turns) >= int(env.max_turns):
                    # the observation never reaches the policy: what the last turn asked for does not count
                    play.ended = "max_turns"
                    continue
                if not outcome.done:
                    extra = self.format.observation_ids(play.messages, outcome.observation)
                    if budget is not None and len(play.ids) + len(extra) >= int(budget):
                        play.ended = "max_tokens"
                        continue
                play.info.update({k: float(v) for k, v in (outcome.info or {}).items()})
                if not outcome.done:
                    play.messages.extend(dict(m) for m in outcome.observation)
                    play.ids += extra
                    play.policy += [0] * len(extra)
                    if sampled.engine_logprobs is not None:
                        play.engine += [0.0] * len(extra)
                    still.append(i)
            active = still
            turn += 1
        return self._assemble(plays, request, g, version, lag)

    @staticmethod
    def _room(play: _Play, per_turn: int, budget: int | None) -> int:
        """How many tokens the episode's next turn may sample: ``per_turn``, less where the budget ends sooner."""
        return per_turn if budget is None else max(1, min(per_turn, int(budget) - len(play.ids)))

    def _assemble(self, plays: list[_Play], request: GenerationRequest, g: int, version: int | None,
                  lag: int | None) -> SampledBatch:
        input_ids, attention, policy, prompt_length = episode_tensors(
            [p.prompt for p in plays], [p.ids for p in plays], [p.policy for p in plays], pad_id(self.tokenizer))
        engine = None
        if all(len(p.engine) == len(p.ids) for p in plays) and any(p.engine for p in plays):
            engine = torch.zeros(policy.shape)
            for i, p in enumerate(plays):
                engine[i, :len(p.engine)] = torch.tensor(p.engine)
        episodes = [[Episode(tuple(p.messages), tuple(p.turns), {**p.info, "ended": p.ended}, p.first_turn)
                     for p in plays[b * g:(b + 1) * g]] for b in range(len(request.records))]
        texts = [[p.turns[-1] for p in plays[b * g:(b + 1) * g]] for b in range(len(request.records))]
        return SampledBatch(input_ids, attention, policy, prompt_length, texts, torch.tensor([p.cut for p in plays]),
                            engine,
                            version, lag, episodes=episodes, turn_spans=[list(p.spans) for p in plays])


def episode_metrics(sampled: SampledBatch) -> dict[str, float]:
    """``episode/`` metrics of a step's episodes (none for single-turn rollouts): turns, environment tokens, how
    episodes ended, and every count the environment reported (``tool_calls``, ``tool_errors``), per episode."""
    if sampled.episodes is None:
        return {}
    flat = [e for group in sampled.episodes for e in group]
    n = max(len(flat), 1)
    env_tokens = float(sampled.completion_spans.sum() - sampled.completion_token_counts.sum())
    turns = sum(e.num_turns for e in flat)
    out = {"episode/turns": turns / n, "episode/env_tokens": env_tokens / n,
           "episode/turn_length": float(sampled.completion_token_counts.sum()) / max(turns, 1)}
    for ending in ENDINGS:
        out[f"episode/ended_{ending}"] = sum(e.info.get("ended") == ending for e in flat) / n
    counts = sorted({k for e in flat for k, v in e.info.items() if isinstance(v, int | float)})
    for key in counts:
        out[f"episode/{key}"] = sum(float(e.info.get(key, 0.0)) for e in flat) / n
    if "tool_calls" in counts and "tool_errors" in counts:
        calls = sum(float(e.info.get("tool_calls", 0.0)) for e in flat)
        out["episode/tool_error_rate"] = sum(float(e.info.get("tool_errors", 0.0)) for e in flat) / max(calls, 1.0)
    return out


def token_advantages(advantages: torch.Tensor, turn_spans: list[list[tuple[int, int]]] | None,
                     width: int) -> torch.Tensor:
    """Per-turn advantages ``[N, T]`` as the loss takes them: ``[N, C]``, each policy turn's tokens its turn's
    advantage (environment tokens and padding 0, outside the mask anyway); for single-turn rows (no ``turn_spans``)
    the first turn's, ``[N]``, exactly what a per-completion estimator gives."""
    if turn_spans is None:
        return advantages[:, 0]
    out = torch.zeros((advantages.shape[0], width), dtype=advantages.dtype, device=advantages.device)
    for row, spans in enumerate(turn_spans):
        for t, (start, end) in enumerate(spans[:advantages.shape[1]]):
            out[row, start:end] = advantages[row, t]
    return out


def episode_means(advantages: torch.Tensor, num_turns: torch.Tensor | None) -> torch.Tensor:
    """``[B, G]``: each episode's per-turn advantages ``[B, G, T]`` averaged over the turns it has (for the samples
    table and the advantage metrics)."""
    t = advantages.shape[-1]
    counts = num_turns if num_turns is not None else torch.ones(advantages.shape[:2], dtype=torch.long)
    exists = torch.arange(t).view(1, 1, -1) < counts.to(advantages.device).view(*advantages.shape[:2], 1)
    return (advantages * exists).sum(dim=-1) / exists.sum(dim=-1).clamp(min=1)
