"""The small data objects that travel along the reward pipeline, with their shapes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: `import rlkit` (every command, `rlkit --help`) need not load torch's 1.7 s
    import torch

    from rlkit.core.rubric import Rubric


@dataclass(frozen=True)
class Episode:
    """One multi-turn episode as an environment played it out (``rlkit_register_environments``).

    ``messages`` is the whole conversation: the environment's first messages, then each policy turn (``role:
    assistant``, its sampled text) and each environment turn (tool results, a simulated user's replies) in order.
    ``turns`` holds the policy turns' texts alone, in order (what step-scoped rubric dimensions score); ``info``
    what the environment reported along the way (``tool_calls``, ``tool_errors``, ``ended``: why the episode
    stopped: ``done``, ``max_turns``, ``max_tokens`` or ``truncated``).
    """

    messages: tuple[dict[str, Any], ...]
    turns: tuple[str, ...]
    info: dict[str, Any] = field(default_factory=dict)
    first_turn: int = 0  # the index in ``messages`` of the first policy turn (the messages before it: the prompt)

    @property
    def num_turns(self) -> int:
        return len(self.turns)


@dataclass(frozen=True)
class EnvStep:
    """What an environment answers after a policy turn: messages to append (tool results, a simulated user's reply;
    empty when done), whether the episode is over, and counts to add to the episode's ``info``."""

    observation: list[dict[str, Any]] = field(default_factory=list)
    done: bool = True
    info: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Rollout:
    """What a judge scores: B prompt records, each with G completions.

    ``records[b]`` is the prompt's data record (``prompt`` plus any fields such as
    ``reference``); ``completions[b][g]`` is the text of completion g. The training loop adds
    ``completion_token_counts`` ``[B, G]`` so judges can bound length in tokens.

    With a multi-turn environment, ``completions[b][g]`` is the episode's last policy turn (its final answer, so a
    single-turn judge reads what it always read) and ``episodes[b][g]`` the whole :class:`Episode`; ``episodes`` is
    None for single-turn rollouts.
    """

    records: Sequence[dict[str, Any]]
    completions: Sequence[Sequence[str]]
    completion_token_counts: torch.Tensor | None = None
    episodes: Sequence[Sequence[Episode]] | None = None
    # set when the completions are one policy turn of each episode (step-scoped dimensions): the turn, from 1; each
    # record's ``prompt`` is then the conversation before that turn
    step: int | None = None
    # each record's prompt as the policy saw it: chat messages rendered by its chat template (system prompt and role
    # markers included), text as it is; None where the caller did not render them (``rlkit.plugin.seen_prompt``
    # falls back to the messages as ``role: content`` lines)
    prompt_texts: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if len(self.records) != len(self.completions):
            raise ValueError(f"{len(self.records)} records but {len(self.completions)} completion groups")
        sizes = {len(group) for group in self.completions}
        if len(sizes) > 1:
            raise ValueError(f"every prompt needs the same number of completions, got sizes {sorted(sizes)}")
        if self.episodes is not None and [len(e) for e in self.episodes] != [len(c) for c in self.completions]:
            raise ValueError("episodes must be [B][G] like completions")
        if self.prompt_texts is not None and len(self.prompt_texts) != len(self.records):
            raise ValueError(f"{len(self.prompt_texts)} prompt texts for {len(self.records)} records")

    @property
    def num_prompts(self) -> int:
        return len(self.records)

    @property
    def group_size(self) -> int:
        return len(self.completions[0]) if self.completions else 0


@dataclass(frozen=True)
class RecordField:
    """A field of the prompt record that a judge reads to score ``dimension`` (a judge's optional
    ``record_fields(rubric)``): a record without it leaves what reads it unscored, so validation reads the data
    for it before any work. ``where`` names the rubric entry that reads it."""

    field: str
    dimension: str
    where: str


@dataclass(frozen=True)
class RewardBatch:
    """Everything a reward plugin may read, for one batch of B prompts × G completions.

    * ``raw_scores`` ``float32 [B, G, D]``: the scores the reward is formed from, in each dimension's own
      rubric range (not [0, 1]), but not the judge's output as it came: during training the part the length/format
      bias correction (``debias``, when enabled) explains has been removed, and a conditional dimension is masked (NaN)
      wherever its condition is not met. A step-scoped dimension holds the mean of its step scores. NaN = not
      scored or masked. Filled by ``rlkit.reward.pipeline.weighed_scores`` (the training step's
      ``rlkit.train.step_rewards.RewardPipeline.batch`` corrects the judge's checked scores before it); held-out,
      golden-set and ``rlkit score`` batches skip the bias correction. Rubric dropout leaves it whole (only the
      aggregator's view drops dimensions; a per-record rubric's criteria are dropped in the judge).
    * ``scores`` ``float32 [B, G, D]``: the same mapped to [0, 1] by the host from the rubric's
      ranges (normalisation happens once, there); NaN kept.
    * ``weights`` ``float32 [D]``: the current dimension weights, owned by the weight scheduler.
    * ``rewards`` ``float32 [B, G]`` or None before aggregation; NaN = no reward could be formed.
    * ``rubric``: the rubric the scores follow (dimension order, ranges, gates, priorities).
    """

    rubric: Rubric
    raw_scores: torch.Tensor
    scores: torch.Tensor
    weights: torch.Tensor
    rewards: torch.Tensor | None = None
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.raw_scores.ndim != 3 or self.raw_scores.shape != self.scores.shape:
            raise ValueError(
                f"scores must be [B, G, D] and match raw_scores, got {tuple(self.scores.shape)} "
                f"and {tuple(self.raw_scores.shape)}"
            )
        dims = self.raw_scores.shape[-1]
        if self.weights.shape != (dims,):
            raise ValueError(f"weights must be [{dims}], got {tuple(self.weights.shape)}")
        if self.rewards is not None and self.rewards.shape != self.raw_scores.shape[:2]:
            raise ValueError(
                f"rewards must be {list(self.raw_scores.shape[:2])}, got {list(self.rewards.shape)}"
            )

    @property
    def shape(self) -> tuple[int, int, int]:
        b, g, d = self.raw_scores.shape
        return b, g, d

    def with_rewards(self, rewards: torch.Tensor) -> RewardBatch:
        return replace(self, rewards=rewards)


@dataclass(frozen=True)
class PreferencePairs:
    """Preference pairs drawn from groups; all tensors have one entry per pair.

    ``prompt_index``, ``chosen`` and ``rejected`` are ``int64 [P]`` (chosen/rejected index
    completions within the prompt's group); ``weight`` is ``float32 [P]`` in [0, 1]: a pair
    weight, or the soft probability that ``chosen`` beats ``rejected``.
    """

    prompt_index: torch.Tensor
    chosen: torch.Tensor
    rejected: torch.Tensor
    weight: torch.Tensor

    def __post_init__(self) -> None:
        n = self.prompt_index.shape
        for name in ("chosen", "rejected", "weight"):
            if getattr(self, name).shape != n:
                raise ValueError(f"{name} must have shape {tuple(n)}, got {tuple(getattr(self, name).shape)}")

    def __len__(self) -> int:
        return int(self.prompt_index.shape[0])
