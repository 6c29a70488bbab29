"""What a plugin of each kind is: a ``typing.Protocol`` per kind listing every member the host reads.

Each member's docstring is its contract: what it is, when the host reads it and, for an optional member (marked
``@optional(absent)``), what the host does when a plugin lacks it. The required members are what
``rlkit.core.registry.check_declarations`` asks of every plugin it builds, and ``tests/core/test_protocols.py``
fails when the host reads a member no protocol declares, so this module is the one list a plugin author reads.

A plugin need not inherit from its protocol (they are structural, as type checkers read them): a class attribute, an
instance attribute or a property all satisfy a member written here as a property.

Types from layers above the core (a generator's ``SampledBatch``, a backend's ``Completion``) cannot be imported
here; they are named by the aliases below, each saying where the real type lives in ``rlkit.plugin``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:  # annotations only: the core must not load torch to be imported
    from pathlib import Path

    import torch

    from rlkit.core.objective import CompletionLossInputs, PairLossInputs, PairTargets
    from rlkit.core.rubric import Rubric
    from rlkit.core.types import EnvStep, PreferencePairs, RecordField, RewardBatch, Rollout

# the real types live above the core (their home in the door, ``rlkit.plugin``, is named in each)
GenerationRequest = Any  # rlkit.plugin.GenerationRequest
SampledBatch = Any  # rlkit.plugin.SampledBatch
Completion = Any  # rlkit.plugin.Completion
Judgement = Any  # rlkit.plugin.Judgement: what one judge call said (scores, reasons, confidence, spend, metrics)
MonitorView = Any  # rlkit.plugin.MonitorView
Alert = Any  # rlkit.plugin.Alert
JudgeBackend = Any  # rlkit.plugin.JudgeBackend: the host's wrapper around a judge's backend reference
Spend = Any  # rlkit.plugin.Spend
CallPlan = Any  # rlkit.plugin.CallPlan
JudgeLoad = Any  # rlkit.plugin.JudgeLoad
TokenPrice = Any  # what rlkit.plugin.token_price returns
Pending = Any  # anything with ``result()``: a future

Member_T = TypeVar("Member_T")


class _OptionalProperty(property):
    # a property marked optional: a ``property`` itself takes no attributes, a subclass does
    absent: str


def optional(absent: str) -> Callable[[Member_T], Member_T]:
    """Mark a protocol member optional; ``absent`` says what the host does when a plugin lacks it."""

    def mark(member: Any) -> Any:
        if isinstance(member, property):
            member = _OptionalProperty(member.fget, doc=member.__doc__)
        member.absent = absent
        return member

    return mark


@dataclass(frozen=True)
class Member:
    """One member of a kind's protocol, as the docs and the declaration check read it."""

    name: str
    required: bool
    attribute: bool  # a value (a class or instance attribute), not a method
    signature: str  # ``score(rollout: Rollout, rubric: Rubric) -> torch.Tensor``; ``max_turns: int`` for a value
    doc: str
    absent: str  # what the host does without it ("" for a required member)


@functools.cache  # read when every plugin is built (its kind's declares)
def protocol_members(protocol: type) -> tuple[Member, ...]:
    """Every member ``protocol`` declares, its own first (in the order written), then those of its bases."""
    seen: dict[str, Member] = {}
    for cls in protocol.__mro__:
        if cls.__module__ != __name__:  # Protocol, Generic, object
            continue
        for name, value in vars(cls).items():
            if not name.startswith("_") and name not in seen and (isinstance(value, property) or callable(value)):
                seen[name] = _member(name, value)
    return tuple(seen.values())


def required_members(protocol: type) -> tuple[str, ...]:
    """The names every plugin of the kind must have."""
    return tuple(m.name for m in protocol_members(protocol) if m.required)


def _member(name: str, value: Any) -> Member:
    absent = getattr(value, "absent", "")
    documented = value.fget if isinstance(value, property) else value
    doc = " ".join(inspect.cleandoc(documented.__doc__ or "").split())
    if isinstance(value, property):
        returns = value.fget.__annotations__.get("return", "Any") if value.fget else "Any"
        return Member(name, not absent, True, f"{name}: {returns}", doc, absent)
    signature = inspect.signature(value)
    shown: list[str] = []
    for param in signature.parameters.values():
        if param.name == "self":
            continue
        if param.kind is param.KEYWORD_ONLY and not any(s == "*" for s in shown):
            shown.append("*")
        shown.append(f"{param.name}: {param.annotation}")
    return Member(name, not absent, False, f"{name}({', '.join(shown)}) -> {signature.return_annotation}", doc,
                  absent)


# --- what any plugin may have -----------------------------------------------------------------------------------


class PluginProtocol(Protocol):
    """What a plugin of any kind may have."""

    @optional("the plugin is taken to work with any rubric")
    def check_rubric(self, rubric: Rubric) -> None:
        """Raise ``rlkit.RubricError`` or ``rlkit.ConfigError`` when the plugin cannot work with ``rubric``. Called by
        ``rlkit validate`` and before every run, before anything heavy is built; a judge is asked with the user's
        rubric, every later part with the one the scores follow (a judge's ``scored_rubric``)."""


class _Stateful(Protocol):
    @optional("nothing of the plugin's travels in checkpoints")
    def state_dict(self) -> dict[str, Any]:
        """What the plugin learnt or counted, as plain values (numbers, strings, None, lists and dicts of them);
        saved in every checkpoint."""

    @optional("a resumed run starts the plugin afresh")
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved, when a run resumes from a checkpoint."""


# --- the reward path ---------------------------------------------------------------------------------------------


class JudgeProtocol(PluginProtocol, Protocol):
    """Scores each completion on each rubric dimension (``judge=<name>``).

    A judge answers each call with one ``rlkit.plugin.Judgement`` from :meth:`assess` (scores, reasons, written
    scores, confidence, spend, metrics together), so nothing about a call is read from the judge afterwards. A judge
    written before ``Judgement`` (``score`` alone, then the "last call" members ``metrics``, ``group_confidence``,
    ``reasons``, ``written_scores``) keeps working: the host reads it through ``rlkit.plugin.judgement_of``, the one
    place those members are read."""

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        """Raw scores ``float32 [B, G, D]``: B prompts, G completions each, D the rubric's dimensions in rubric order,
        each inside its dimension's range, NaN where the judge could not score (never a silent 0). What callers that
        want the scores alone use (a composite judge written before ``Judgement``, the integrations); a judge with
        :meth:`assess` returns ``self.assess(rollout, rubric).scores``."""

    @optional("the host calls score() and reads the last-call members (metrics, group_confidence, reasons, "
              "written_scores) right after it")
    def assess(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        """Everything this call said, as one ``rlkit.plugin.Judgement``: ``scores`` as :meth:`score` returns them,
        and where the judge has them the one-line ``reasons`` ``[B][G] -> {dimension: reason}``, the
        ``written_scores`` ``[B, G, D]`` (levels as written, where ``scores`` are expected values), the group
        ``confidence`` ``float32 [B]`` in [0, 1], this call's ``spend`` and its ``metrics``. Called once per training
        step (the loop logs the metrics and scales each group's advantages by its confidence), and by ``rlkit
        score`` (reasons and written scores beside each completion), ``calibrate`` and the evaluations. A composite
        judge joins its members' judgements with ``rlkit.plugin.MemberJudges``."""

    @optional("nothing is logged for the judge")
    def metrics(self) -> dict[str, float]:
        """Before ``Judgement``: metrics of the last ``score`` call (``judge/parse_failure_rate``), read by
        ``judgement_of`` right after it as the judgement's ``metrics``. A judge with :meth:`assess` returns them
        there instead."""

    @optional("the judge's scores follow the rubric it is asked with")
    def scored_rubric(self, rubric: Rubric) -> Rubric:
        """The rubric its scores follow, derived from the one it is asked with (a ranking judge's single ``rank``
        dimension in [0, 1]). ``score`` still receives the user's rubric; D, the range checks, aggregation, weights,
        advantages and logs use the derived one. Composite judges refuse such a judge as a member."""

    @optional("scores are used as they are")
    def group_confidence(self) -> torch.Tensor | None:
        """Before ``Judgement``: ``float32 [B]`` in [0, 1] for the last ``score`` call, how much the judge trusts each
        group's order, read by ``judgement_of`` as the judgement's ``confidence``. The training loop multiplies that
        group's advantages (or its preference pairs' weights) by it."""

    @optional("no completion has a reason")
    def reasons(self) -> list[list[dict[str, str]]] | None:
        """Before ``Judgement``: the last ``score`` call's one-line reason per dimension, ``[B][G] -> {dimension:
        reason}`` (None: it gives none), read by ``judgement_of`` as the judgement's ``reasons``; ``rlkit score``
        writes them beside each completion's scores, ``rlkit calibrate`` beside its disagreements."""

    @optional("no written levels are reported")
    def written_scores(self) -> torch.Tensor | None:
        """Before ``Judgement``: the last ``score`` call's levels as the judge wrote them, ``[B, G, D]``, where its
        scores are expected values, read by ``judgement_of`` as the judgement's ``written_scores``; ``rlkit score``
        writes them beside the scores."""

    @optional("nothing is required of the records")
    def record_fields(self, rubric: Rubric) -> list[RecordField]:
        """The prompt-record fields its scoring reads (the rule judge's ``match`` checks read ``reference``):
        ``rlkit validate``, ``fit`` and ``score`` refuse data in which no record has one and warn with counts when
        some lack it."""

    @optional("no caveat is printed")
    def scope_caveats(self, records: list[dict[str, Any]], rubric: Rubric) -> list[str]:
        """Why its scores on these records may mean little (the offline tiny judge knows only the default task's
        sums); ``rlkit validate``, ``fit`` and ``score`` warn with each."""

    @optional("the records are first checked when they are scored")
    def check_records(self, records: list[dict[str, Any]], rubric: Rubric) -> None:
        """Raise the ``rlkit.RubricError`` scoring these records would meet (a ``per_record`` rubric: each record's own
        rubric, loaded and checked), so ``rlkit validate`` refuses what ``fit`` would, before any model loads."""

    @optional("every unscored dimension is reported as unscored")
    def not_applicable(self, records: list[dict[str, Any]], rubric: Rubric) -> list[str]:
        """The rubric's dimensions it has nothing to score on for any of these records by design (a ``per_record``
        frame's ``pitfalls_avoided`` when no record has a pitfall): ``rlkit score`` reports them as not applicable."""

    @optional("False")
    @property
    def scores_per_record(self) -> bool:
        """True when it scores each record against that record's own rubric; ``rlkit validate`` refuses a
        ``per_record`` rubric with a judge that does not."""

    @optional("no local model is compared with the policy")
    def model_folders(self) -> list[Path]:
        """The local models it asks; ``rlkit validate`` warns when one is the policy's model or shares its base
        (``allow_self_judge`` silences it)."""

    @optional("None: the judge asks no model")
    @property
    def backend(self) -> JudgeBackend | None:
        """The model the judge asks, as the host built it from a ``backend`` reference (``rlkit.plugin.JudgeBackend``).
        ``rlkit serve`` answers chats with it, ``rlkit rubric generate`` and ``rubric.evolve`` write criteria with it,
        and the rubric audit treats a judge with one as model-based."""

    @optional("the judge is taken to make no model calls: no spend is reported")
    def spend(self) -> Spend | None:
        """Running totals of its model calls (calls, tokens, latency, cache hits, retries, price) since it was built,
        not a call's (that is the judgement's ``spend``): metered per step, calls made outside ``assess`` (a
        monitor's) included, and written to the run's summary at the end of ``rlkit fit``; a judge with it is taken
        to ask a model (its calibration caveat is shown). A composite judge sums its members'
        (``MemberJudges.spend``)."""

    @optional("no calls are planned")
    def planned_calls(self, load: JudgeLoad, rubric: Rubric) -> CallPlan | None:
        """The calls one step of ``load`` is expected to make; ``rlkit validate`` prints the plan and its price."""

    @optional("nothing is closed")
    def close(self) -> None:
        """Release what it holds (an engine, connections) when the run or command ends."""


class AggregatorProtocol(PluginProtocol, Protocol):
    """Turns dimension scores into one reward per completion (``aggregator=<name>``)."""

    def aggregate(self, batch: RewardBatch) -> torch.Tensor:
        """The reward ``float32 [B, G]`` from ``batch.scores`` (normalised to [0, 1], NaN = not scored) and
        ``batch.weights``; NaN allowed, meaning "no reward could be formed". Called once per training step."""

    @optional("False")
    @property
    def group_relative(self) -> bool:
        """True when the reward compares completions within their group (a rank, a win rate, a Pareto front):
        ``rlkit validate`` asks for ``num_generations >= 2``, held-out completions are combined by
        ``heldout_aggregator`` instead, and preference gaps use the weighted sum, not this reward."""

    @optional("the gap in the reward (or the weighted sum, for a group_relative aggregator)")
    def pair_gaps(self, batch: RewardBatch, pairs: PreferencePairs) -> torch.Tensor:
        """``float32 [P]``: how far apart each chosen/rejected pair stands on this aggregator's ordering; preference
        constructors' ``min_gap`` is compared with it."""

    @optional("False: the property test is skipped")
    @property
    def order_invariant(self) -> bool:
        """True when only the order of each dimension's scores matters; ``rlkit.testing``'s property suite checks it."""


class AdvantageEstimatorProtocol(PluginProtocol, Protocol):
    """Turns a step's rewards (or dimension scores) into advantages (``advantage=<name>``)."""

    def advantages(self, batch: RewardBatch) -> torch.Tensor:
        """``float32 [B, G]`` with no NaN: a completion whose reward is NaN gets 0. Reads the whole batch (raw and
        normalised scores, weights, reward, rubric; ``extras["completion_lengths"]`` ``[B, G]`` in training, and with
        a multi-turn environment ``extras["num_turns"]`` and ``extras["step_scores"]`` ``[B, G, T, D]``). Called once
        per step for an objective with signal ``advantages``."""

    @optional("False: the contract does not check zero-mean groups")
    @property
    def zero_mean_groups(self) -> bool:
        """True when each group's advantages sum to zero by construction; the contract suite checks it."""

    @optional("False")
    @property
    def group_relative(self) -> bool:
        """True when it compares completions within their group; ``rlkit validate`` asks for
        ``num_generations >= 2`` (a group of one would give every advantage 0)."""

    @optional("False: it returns [B, G]")
    @property
    def per_turn(self) -> bool:
        """True when, for a multi-turn batch, it may return ``[B, G, T]``, one advantage per policy turn (0 where a
        turn does not exist); the loop gives each turn's tokens its advantage. Single-turn batches get ``[B, G]``."""

    @optional("False")
    @property
    def ignores_aggregator(self) -> bool:
        """True when it forms advantages from the dimensions' scores, not the reward: ``rlkit validate`` warns that a
        non-default aggregator only feeds the logged reward, and refuses a KL penalty in the reward."""

    @optional("False: the property test is skipped")
    @property
    def order_invariant(self) -> bool:
        """True when only the order of the rewards matters; ``rlkit.testing``'s property suite checks it."""


class PreferenceConstructorProtocol(PluginProtocol, Protocol):
    """Turns groups of completions into chosen/rejected pairs (``preference=<name>``, with ``objective=group_dpo``)."""

    def pairs(self, batch: RewardBatch) -> PreferencePairs:
        """For each pair: the prompt index, the chosen and rejected completion indices within its group, and a weight
        or soft label in [0, 1]. A completion with NaN reward is never paired. Called once per step by an objective
        with signal ``pairs``."""

    @optional("the aggregator's ordering measures the gap")
    def pair_gaps(self, batch: RewardBatch, pairs: PreferencePairs) -> torch.Tensor:
        """``float32 [P]``: for a constructor that orders completions by a rule of its own (a Pareto front), the gap
        ``min_gap`` is compared with."""


class WeightSchedulerProtocol(PluginProtocol, Protocol):
    """Owns the rubric dimensions' weights once training starts (``weights=<name>``)."""

    def weights(self, step: int, scores: torch.Tensor, rubric: Rubric) -> torch.Tensor:
        """Non-negative weights ``float32 [D]`` for this step, from the batch's normalised scores ``[B, G, D]``; the
        rubric's weights (``rubric.initial_weights()``) are only the starting values. Called once per step."""

    def state_dict(self) -> dict[str, Any]:
        """What the scheduler learnt, as plain values; saved in every checkpoint."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved, so a resumed run continues exactly."""


# --- the update --------------------------------------------------------------------------------------------------


class ObjectiveProtocol(_Stateful, PluginProtocol, Protocol):
    """What the policy is trained to minimise (``objective=<name>``): it says what it needs and turns tensors into a
    loss; the loop owns sampling, the log-prob passes, micro-batching, the DDP arithmetic and the optimiser step."""

    @property
    def signal(self) -> str:
        """``advantages`` (the loop asks the advantage estimator), ``pairs`` (the loop hands the preference constructor
        to :meth:`pair_targets`) or ``demonstrations`` (the loop trains on each record's own completion instead of
        sampling; ``loss`` gets zero advantages)."""

    @property
    def num_iterations(self) -> int:
        """Optimiser steps per rollout (PPO-style inner epochs; 1 for on-policy)."""

    @property
    def needs_old_logprobs(self) -> bool:
        """Whether ``old_logp`` must come from a separate no-grad pass (meaningful only with ``num_iterations > 1``;
        otherwise the loop passes ``logp.detach()``)."""

    @property
    def reference_use(self) -> str | None:
        """None when no reference model is needed; else what it is used for, completing "model.reference=none leaves
        no reference for ..." (``rlkit validate`` prints it)."""

    @property
    def mask_truncated_completions(self) -> bool:
        """Whether completions cut at the length limit are left out of the loss."""

    def loss(self, inputs: CompletionLossInputs | PairLossInputs) -> tuple[torch.Tensor, dict[str, float]]:
        """A pure function of one micro-batch's inputs (``CompletionLossInputs`` for signal ``advantages`` and
        ``demonstrations``, ``PairLossInputs`` for ``pairs``): a scalar whose gradient flows only through the policy's
        log-probs, and detached scalar metrics, logged as they are named (``kl``, ``clip_ratio``)."""

    @optional("required with signal pairs: check_declarations refuses a pairs objective without it")
    def pair_targets(self, batch: RewardBatch, truncated: torch.Tensor, *, constructor: Any, aggregator: Any,
                     step: int) -> tuple[PairTargets, dict[str, float]]:
        """For signal ``pairs``: this step's pairs over the global batch (``truncated`` is ``bool [B*G]``;
        ``constructor`` and ``aggregator`` are the run's), their labels and weights, and metrics about them."""

    @optional("False")
    @property
    def group_relative(self) -> bool:
        """True when the loss compares completions within their group (pairs from a group); ``rlkit validate`` asks
        for ``num_generations >= 2``."""

    @optional("False")
    @property
    def needs_entropy(self) -> bool:
        """True to receive each pass's per-token entropy, with its gradient, as ``CompletionLossInputs.entropy`` (an
        entropy bonus)."""

    @optional("1.0: no entropy mask")
    @property
    def top_entropy_quantile(self) -> float:
        """Below 1, the loop makes a no-grad entropy pass with the policy that sampled and hands
        ``CompletionLossInputs.entropy_mask``, the step's top quantile of tokens by entropy."""

    @optional("False: any KL term is the loss's")
    @property
    def kl_in_reward(self) -> bool:
        """True when a KL penalty is subtracted from each completion's reward before the advantages are formed: the
        loop then asks :meth:`reward_penalty`, and ``rlkit validate`` refuses an estimator that ignores the reward."""

    @optional("required when kl_in_reward is True")
    def reward_penalty(self, logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """``[N]``: what is subtracted from each completion's reward, from the sampling policy's and the reference's
        token log-probs ``[N, C]`` over ``mask``; logged as ``kl_reward/penalty``."""


# --- sampling ----------------------------------------------------------------------------------------------------


class GeneratorProtocol(_Stateful, PluginProtocol, Protocol):
    """Samples the policy's completions (``generator=<name>``), in-process or through an inference engine."""

    def setup(self, policy: Any, tokenizer: Any) -> None:
        """Before the first ``generate`` (held-out evaluation comes first), with the policy on its device: an engine
        starts here and loads the policy's current weights. Called again when a checkpoint has replaced them."""

    def generate(self, policy: Any, tokenizer: Any, request: GenerationRequest) -> SampledBatch:
        """B × ``request.num_generations`` sequences, each record's G completions consecutive: ``input_ids`` ``[B*G,
        P+C]`` (the prompt left-padded to P, then the completion), ``attention_mask``, ``completion_mask`` ``[B*G, C]``
        (1 up to and including the first end token: the EOS or another the model ends on, ``end_token_ids``),
        ``texts`` ``[B][G]``, ``truncated`` ``[B*G]``, in the policy tokenizer's tokens
        (``rlkit.plugin.assemble_sampled_batch`` builds them). Follows ``request.temperature``, ``greedy`` and
        ``prompt_token_ids`` (sample after exactly those ids). Called once per training step and for evaluation."""

    def sync_weights(self, policy: Any) -> None:
        """After every optimiser step: the next ``generate`` must sample from the updated weights (an engine copies
        them in; a generator sampling with the policy itself does nothing)."""

    def close(self) -> None:
        """When the run ends: stop any engine it started."""

    @optional("0: each step samples when it starts")
    @property
    def max_lag(self) -> int:
        """With :meth:`submit`, how many steps ahead the loop may submit requests, so sampling overlaps training.
        ``sync_weights`` must not change the weights a submitted request samples from."""

    @optional("the loop cannot ask ahead (max_lag is ignored)")
    def submit(self, policy: Any, tokenizer: Any, request: GenerationRequest) -> Pending:
        """Start sampling ``request``; ``result()`` on what it returns gives the ``SampledBatch``, whose
        ``policy_version`` and ``policy_lag`` say which weights sampled it."""

    @optional("model.reference=engine is refused")
    def score_reference(self, sampled: SampledBatch) -> Pending:
        """The engine's reference model's log-prob of each completion token: ``result()`` gives ``float [N, C]``.
        The loop asks before the policy's pass and reads after it (``model.reference=engine``)."""

    @optional("nothing is logged for the generator")
    def metrics(self) -> dict[str, float]:
        """Metrics since the last call (an engine's weight syncs: ``time/sync``, ``sync/bytes``); the training loop
        logs them every step."""

    @optional("nothing of the generator's travels in checkpoints")
    def state_dict(self) -> dict[str, Any]:
        """What travels in checkpoints (an engine's version counters)."""

    @optional("a resumed run starts the generator's counters afresh")
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved; on resume it is called before ``setup``."""

    @optional("False: the contract's seeded-sampling test is skipped")
    @property
    def honours_seeds(self) -> bool:
        """True when it honours ``request.seeds`` (one per record), so a record's completions do not depend on the
        rest of the batch; the contract suite checks it."""

    @optional("model.reference=engine is refused: no served reference name")
    @property
    def params(self) -> Any:
        """Its bound ``Params``; ``rlkit validate`` reads ``params.reference_model`` (the name the engine serves the
        reference under) when ``model.reference=engine``."""


class PromptSamplerProtocol(_Stateful, PluginProtocol, Protocol):
    """Picks which training prompts each step trains on (``sampler=<name>``); the epoch shuffle paces the run."""

    def setup(self, records: list[dict[str, Any]], seed: int) -> None:
        """Once, before anything else: the training records (held-out split removed) in the order ``pick`` indexes
        them, and the run seed. Raises ``rlkit.DataError`` for records it cannot use."""

    @optional("each step trains on the epoch shuffle as it is (uniform)")
    def pick(self, draw: int, proposed: list[int]) -> list[int]:
        """The indices of the records step ``draw`` trains on, ``len(proposed)`` distinct ones when there are that
        many, where ``proposed`` is the epoch shuffle's. A pure function of ``draw``, ``proposed`` and what
        ``observe`` saw, seeded from the run seed and ``draw``: the loop may call it ahead of the step and again at
        it. A sampler with ``pick`` needs ``observe``, ``state_dict`` and ``load_state_dict`` too."""

    @optional("False")
    @property
    def adaptive(self) -> bool:
        """Read after ``setup``: True when ``pick`` depends on what ``observe`` saw, so the loop cannot read the next
        steps' prompts ahead (a generator's ``max_lag``); False promises ``pick`` reads ``draw`` and ``proposed``."""

    @optional("required with pick")
    def observe(self, draw: int, indices: list[int], raw_scores: torch.Tensor, rubric: Rubric) -> None:
        """After step ``draw``: the step's ``RewardBatch.raw_scores`` ``float32 [B, G, D]`` of the records
        ``indices`` it trained on (each dimension in its own range, bias-corrected, conditions masked; NaN = not
        scored or masked), on ``rubric``, the one the scores follow. Called only for a sampler with ``pick``."""

    @optional("required with pick")
    def state_dict(self) -> dict[str, Any]:
        """What ``observe`` learnt, as plain values (numbers, strings, None, lists and dicts of them); saved in every
        checkpoint."""

    @optional("required with pick")
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` saved; called after ``setup``, so a resumed run picks exactly what the
        uninterrupted one would."""

    @optional("nothing is logged for the sampler")
    def metrics(self) -> dict[str, float]:
        """Logged as ``sampler/<metric>`` after every step."""


class EnvironmentProtocol(PluginProtocol, Protocol):
    """What a rollout is, one policy turn or an episode (``environment=<name>``)."""

    @property
    def max_turns(self) -> int:
        """The most policy turns an episode takes (1: single turn, sampled exactly as without an environment)."""

    def reset(self, record: dict[str, Any]) -> str | list[dict[str, Any]]:
        """The episode's first observation from a prompt record: a prompt string or chat messages."""

    def step(self, messages: list[dict[str, Any]], completion: str) -> EnvStep:
        """After a policy turn (``messages`` the conversation before it, ``completion`` the text just sampled): the
        observation to append, ``done`` and ``info`` counts (``tool_calls``, ``tool_errors``). Never raises on what
        the policy wrote: a malformed or failing tool call is an observation. ``info`` is summed over the episode into
        ``Episode.info`` and the ``episode/`` metrics; a turn whose observation never reaches the policy (at the turn
        limit or past the token budget) does not count."""

    @optional("None: only max_completion_length per policy turn bounds an episode")
    @property
    def max_tokens(self) -> int | None:
        """The episode's token budget after the prompt, policy and environment tokens together."""

    @optional("no tools are rendered into the prompt")
    def tools(self) -> list[dict[str, Any]]:
        """JSON schemas of the tools (transformers' ``tools=`` format), rendered by the tokenizer's chat template."""

    @optional("nothing is set up")
    def setup(self, tokenizer: Any) -> None:
        """Once, with the policy's tokenizer, before the first multi-turn episode (to read tool calls in its chat
        format); may raise ``rlkit.ConfigError``."""

    @optional("nothing is closed")
    def close(self) -> None:
        """When the run ends."""


# --- model judging -----------------------------------------------------------------------------------------------


class JudgeBackendProtocol(PluginProtocol, Protocol):
    """Where a model-based judge sends its prompts (``judge.params.backend={name: <name>, params: {...}}``)."""

    def identity(self) -> dict[str, Any]:
        """What determines its answers (backend name, model, decoding settings): part of every response-cache key."""

    def complete(self, prompts: list[list[dict[str, str]]]) -> list[Completion]:
        """One chat per request, answered in order. A request that still fails after the backend's own retries comes
        back with ``text=None`` and an ``error``; the judge's failure policy decides what that means."""

    def close(self) -> None:
        """Release connections, processes or models."""

    @optional("False: it is never passed a schema")
    @property
    def structured_outputs(self) -> bool:
        """True when ``complete(prompts, schema=...)`` constrains every answer to that JSON schema (a judge with
        ``structured: true`` then sends its rubric's)."""

    @optional("False: scoring: expected is refused")
    @property
    def level_probs_outputs(self) -> bool:
        """True when ``complete(prompts, schema=..., level_probs=True)`` gives each answered ``Completion`` its
        ``level_probs``: for each integer field of the schema whose levels are one digit, ``{level: probability}`` over
        exactly those levels (summing to 1), read at the token that wrote the field's value. A field it cannot read
        may be left out (the judge keeps the written level); a backend that cannot read any raises
        ``rlkit.ConfigError`` rather than answer without them. The ``llm`` judge's ``scoring: expected`` needs it."""

    @optional("False: the llm judge's scoring: auto is sampled")
    @property
    def expected_by_default(self) -> bool:
        """True when, besides ``level_probs_outputs``, every answer comes with the levels' probabilities at no cost and
        no risk of their being missing (``llama_cpp``: an engine rlkit runs), so the ``llm`` judge's ``scoring: auto``
        scores by them. A backend asking a server of the user's (``openai``) leaves it False."""

    @optional("False")
    @property
    def needs_model(self) -> bool:
        """True when it has no model to answer with (``hf`` with none named): the host swaps it, on the first
        request, for :meth:`with_model` on the offline tiny judge."""

    @optional("required when needs_model is True")
    def with_model(self, folder: Path) -> JudgeBackendProtocol:
        """A backend like this one answering with the model in ``folder``."""

    @optional("None: spend is counted in tokens, with no cost")
    @property
    def price(self) -> TokenPrice | None:
        """What its tokens cost (``rlkit.plugin.token_price``); spend and planned calls are priced with it."""

    @optional("0: planned calls count no answer tokens")
    @property
    def max_answer_tokens(self) -> int:
        """The most tokens one answer may take; ``rlkit validate``'s call plan counts them."""

    @optional("the first request finds out")
    def check_ready(self) -> None:
        """Once, before any scoring: raise ``rlkit.ConfigError`` naming the server when it cannot be reached."""

    @optional("None: no local model is compared with the policy")
    @property
    def model_folder(self) -> Path | None:
        """The local model folder it answers with; a judge's ``model_folders`` reports it."""

    @optional("False: rlkit serve does not answer chats with it")
    @property
    def generates_locally(self) -> bool:
        """True when it generates in this process, so ``rlkit serve`` may answer chats with it (the model named by
        ``params.model``)."""

    @optional("required when generates_locally is True")
    @property
    def params(self) -> Any:
        """Its bound ``Params``; ``rlkit serve`` names the chat model by ``params.model``."""


# --- around training ---------------------------------------------------------------------------------------------


class MonitorProtocol(_Stateful, PluginProtocol, Protocol):
    """A reward-hacking or health check run during ``rlkit fit`` (``monitors=[<name>, ...]``, each under its key)."""

    def observe(self, step: int, view: MonitorView) -> dict[str, float]:
        """Every training step (it keeps its own cadence, cheap when not due): finite metrics, logged as
        ``monitors/<key>/<metric>``."""

    def alerts(self) -> list[Alert]:
        """The alerts raised since the last call; the host prints each once and appends it to
        ``run_dir/alerts.jsonl``."""

    def summary(self) -> dict[str, Any]:
        """JSON-serialisable, at the end of the run (``run_dir/monitors.json``)."""

    @optional("False")
    @property
    def reads_reference(self) -> bool:
        """True when it reads ``MonitorView.log_probs``' reference side: the run keeps a reference policy even when the
        objective needs none, and ``model.reference=none`` is refused."""


class AuditProbeProtocol(PluginProtocol, Protocol):
    """A cheap trick ``rlkit rubric audit`` plays on a rubric before any training (``audit.probes=[<name>, ...]``)."""

    def game(self, record: dict[str, Any], rubric: Rubric) -> str | None:
        """A gamed completion, from one audited record (``prompt``, ``completion``, ``reference`` when it has one),
        that a sound rubric and judge should NOT score higher than the original; None where the trick does not
        apply. Deterministic (any randomness seeded from the record), the record left unchanged."""

    @optional("the factory's docstring's first line")
    @property
    def description(self) -> str:
        """The trick in one line, for the audit's card."""

    @optional("False")
    @property
    def content_free(self) -> bool:
        """True when the gamed completion keeps none of the original's content (its words replaced, its numbers
        zeroed), as the degradation ladder's rungs do. Where the original's empty answer scores at least as high as
        the original, the original is no better than saying nothing and beating it shows nothing; there the audit
        counts a gain only where the gamed completion beats the empty answer too (content-free markup that beats
        silence is still a trick)."""
