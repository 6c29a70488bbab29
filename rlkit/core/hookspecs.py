"""Every hook rlkit calls, with the contract an implementation must honour.

A plugin is a module or object with functions marked ``@rlkit.hookimpl`` whose names match
the specs below. Registration hooks receive a ``register(name, factory)`` callback:

* ``name`` is what a config selects (``judge: {name: rule}`` or ``judge=rule`` on the command
  line). Names are unique within a kind; registering a name twice in one kind is an error that
  names both providers.
* ``factory`` is a callable ``factory(params) -> plugin object``. Its ``Params`` attribute, when
  present, is the schema of ``params`` (a dataclass or a pydantic model; every field needs a
  default). The host validates the config's ``params:`` against it before anything heavy is
  built, and passes an instance of it to ``factory``. Without ``Params`` the plugin takes no
  params and ``factory`` is called with ``None``.

Implementations may accept fewer arguments than a spec lists (pluggy's opt-in arguments), so
adding an argument to a spec later breaks no plugin. All hooks are broadcasts: every
implementation is called.

What a plugin of each kind is, every member the host reads, required and optional, is its kind's
``typing.Protocol`` in ``rlkit/core/protocols.py`` (``rlkit.plugin.JudgeProtocol``, ...); the kinds
themselves (hook, config group, contract suite) are declared once in ``rlkit/core/kinds.py``. Any
plugin, of any kind, may define ``check_rubric(rubric)`` (``PluginProtocol``).
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

hookspec = pluggy.HookspecMarker("rlkit")

Register = Callable[..., None]
"""``register(name: str, factory: Callable[[Any], Any]) -> None``"""


# --- set-up: configuration --------------------------------------------------------------------


@hookspec
def rlkit_config_search_path() -> list[str] | str | None:
    """Return Hydra search-path entries (``pkg://my_plugin.conf`` or ``file:///abs/dir``).

    Their YAML files join rlkit's config groups, so a plugin that ships
    ``my_plugin/conf/judge/my_judge.yaml`` is selected with ``judge=my_judge`` alone.
    rlkit's own ``pkg://rlkit.conf`` is always searched first.
    """


# --- set-up: registration, one hook per plugin kind --------------------------------------------


@hookspec
def rlkit_register_judges(register: Register) -> None:
    """Register judge factories (``judge=<name>``).

    A judge is a :class:`rlkit.plugin.JudgeProtocol` (``rlkit/core/protocols.py``, which lists every member the host
    reads, required and optional): ``score(rollout, rubric)`` returns raw scores ``float32 [B, G, D]``, each inside
    its dimension's range, NaN where it could not score (never a silent 0); optional members report metrics, reasons,
    confidence and spend, name the record fields it reads, and serve judges that score a derived rubric.
    """


@hookspec
def rlkit_register_aggregators(register: Register) -> None:
    """Register aggregator factories (``aggregator=<name>``).

    An aggregator is a :class:`rlkit.plugin.AggregatorProtocol`: ``aggregate(batch)`` returns the reward ``float32
    [B, G]`` from ``batch.scores`` (normalised to [0, 1], NaN = not scored) and ``batch.weights``; NaN is allowed in
    the result and means "no reward could be formed". One whose reward compares completions within their group sets
    ``group_relative = True``.
    """


@hookspec
def rlkit_register_advantage_estimators(register: Register) -> None:
    """Register advantage-estimator factories (``advantage=<name>``).

    An estimator is a :class:`rlkit.plugin.AdvantageEstimatorProtocol`: ``advantages(batch)`` returns ``float32 [B,
    G]`` with no NaN (a completion whose reward is NaN gets 0). It reads the whole batch (raw and normalised scores,
    weights, reward, rubric), so per-dimension methods need no other contract. With a multi-turn environment the
    batch's extras carry ``num_turns`` (``int [B, G]``) and, for ``scope: step`` dimensions, ``step_scores``
    (``float32 [B, G, T, D]``, NaN where a turn does not exist); a ``per_turn`` estimator may then return ``[B, G, T]``.
    """


@hookspec
def rlkit_register_preference_constructors(register: Register) -> None:
    """Register preference-constructor factories (``preference=<name>``, used by ``objective=group_dpo``).

    A constructor is a :class:`rlkit.plugin.PreferenceConstructorProtocol`: ``pairs(batch)`` returns
    ``rlkit.PreferencePairs`` (prompt index, chosen and rejected completion indices within its group, a weight or
    soft label in [0, 1]); a completion with NaN reward is never paired.
    """


@hookspec
def rlkit_register_weight_schedulers(register: Register) -> None:
    """Register weight-scheduler factories (``weights=<name>``).

    A scheduler is a :class:`rlkit.plugin.WeightSchedulerProtocol`. It owns the dimension weights once training
    starts (the rubric's weights, ``rubric.initial_weights()``, are only the initial values): ``weights(step, scores,
    rubric)`` returns non-negative ``float32 [D]`` from the batch's normalised scores, and its ``state_dict`` and
    ``load_state_dict`` make a resumed run continue exactly.
    """


@hookspec
def rlkit_register_objectives(register: Register) -> None:
    """Register objective factories: what the policy is trained to minimise (``objective=<name>``).

    An objective is a :class:`rlkit.plugin.ObjectiveProtocol`. The loop owns sampling, the log-prob passes,
    micro-batching, the DDP arithmetic and the optimiser step; an objective says what it needs (``signal``:
    ``advantages``, ``pairs`` or ``demonstrations``; ``num_iterations``, ``needs_old_logprobs``, ``reference_use``,
    ``mask_truncated_completions``) and ``loss(inputs)`` turns ``rlkit.plugin.CompletionLossInputs`` or
    ``PairLossInputs`` into a scalar and detached metrics, a pure function whose gradient flows only through the
    policy's log-probs.

    ``rlkit.testing.ObjectiveContract`` checks shapes, zero loss on zero advantages or zero gradient on identical
    pairs, that gradient flows only through the policy's log-probs, and that masked positions do not matter.
    """


@hookspec
def rlkit_register_generators(register: Register) -> None:
    """Register generator factories: what samples the policy's completions (``generator=<name>``).

    A generator is a :class:`rlkit.plugin.GeneratorProtocol`. The loop calls ``setup(policy, tokenizer)`` before the
    first ``generate`` (and again when a checkpoint replaced the weights), ``generate(policy, tokenizer, request)``
    once per step (B × ``request.num_generations`` sequences as a ``rlkit.plugin.SampledBatch``, in the policy
    tokenizer's tokens), ``sync_weights(policy)`` after every optimiser step and ``close()`` when the run ends. A
    generator that samples elsewhere may let the loop ask ahead (``max_lag`` with ``submit``) and score the reference
    (``score_reference``).

    ``rlkit.testing.GeneratorContract`` checks these shapes and the weight sync.
    """


@hookspec
def rlkit_register_prompt_samplers(register: Register) -> None:
    """Register prompt-sampler factories: which training prompts each step trains on (``sampler=<name>``).

    A sampler is a :class:`rlkit.plugin.PromptSamplerProtocol`. The data loader walks an epoch shuffle of the
    training records (a fresh permutation per epoch, from the run seed and the epoch alone), which paces the run and
    resumes mid-epoch; a sampler with ``pick`` chooses each step's records from what the shuffle proposes, learning
    from the judge's scores through ``observe``. Without ``pick`` it trains on the epoch shuffle as it is
    (``uniform``).

    A sampler with ``pick`` runs on one process, and not with dynamic sampling's ``sampling.filter`` (which reads its
    prompts on in the epoch shuffle itself): ``rlkit validate`` refuses that combination.
    ``rlkit.testing.PromptSamplerContract`` checks the indices, that ``pick`` is pure and seeded, and that a sampler
    restored from ``state_dict`` picks what the uninterrupted one does.
    """


@hookspec
def rlkit_register_environments(register: Register) -> None:
    """Register environment factories: what a rollout is, one policy turn or an episode (``environment=<name>``).

    An environment is a :class:`rlkit.plugin.EnvironmentProtocol`; the default ``single_turn`` is prompt → one
    completion. The loop (``rlkit.train.episodes``) plays G episodes per record: ``reset(record)`` gives the first
    observation, policy turns are sampled through the generator, each after the exact token ids so far, and
    ``step(messages, completion)`` answers each (environment turns are tokenised as the chat template renders them
    after the policy's end-of-turn token, never re-tokenising earlier turns); environment tokens are attended to and
    left out of the loss. ``rlkit.testing.EnvironmentContract`` checks the contract.
    """


@hookspec
def rlkit_register_monitors(register: Register) -> None:
    """Register monitor factories: reward-hacking and health checks run during ``rlkit fit``.

    A monitor is a :class:`rlkit.plugin.MonitorProtocol`. Monitors are selected as a list
    (``monitors=[template_phrases,length_drift]``, ``monitors=[]`` for none); each sits under its own key
    ``monitors.<key>`` with ``name`` and ``params``, is observed every step and summarised at the end of the run.
    ``rlkit.testing.MonitorContract`` checks the contract on hand-made views.
    """


@hookspec
def rlkit_register_judge_backends(register: Register) -> None:
    """Register judge-backend factories: where a model-based judge sends its prompts.

    A backend is a :class:`rlkit.plugin.JudgeBackendProtocol`, chosen inside a judge's params as a ``PluginRef``
    (``judge.params.backend={name: <name>, params: {...}}``), not as a config group: ``identity()`` (part of every
    response-cache key), ``complete(prompts)`` (one chat per request, answered in order; a request that still fails
    after the backend's own retries comes back with ``text=None`` and an ``error``, and the judge's failure policy
    decides what that means) and ``close()``; optional members say what it can answer with (structured outputs, the
    levels' probabilities) and what it costs.
    """



# --- before training: auditing a rubric --------------------------------------------------------------------------


@hookspec
def rlkit_register_audit_probes(register: Register) -> None:
    """Register audit-probe factories: cheap tricks ``rlkit rubric audit`` plays on a rubric before any training.

    A probe is a :class:`rlkit.plugin.AuditProbeProtocol`, chosen as a list,
    ``audit.probes=[keyword_stuffing,my_probe]`` (null, the default: every registered probe); each is built with its
    ``Params`` defaults (a probe's params all need one). The audit scores every gamed completion (``game(record,
    rubric)``) with the run's judge and aggregator beside its original. A probe whose gamed completions score strictly
    higher than the originals on at least ``audit.hackable_share`` of the records it applied to marks the rubric
    hackable. ``rlkit.testing.AuditProbeContract`` checks the contract.
    """
