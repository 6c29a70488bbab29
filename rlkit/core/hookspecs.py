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

Any plugin object, of any kind, may define ``check_rubric(rubric) -> None`` and raise
``rlkit.RubricError`` or ``rlkit.ConfigError`` when it cannot work with that rubric;
``rlkit validate`` and every run call it before anything heavy is built.
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
    """Register judge factories.

    A judge object has ``score(rollout: rlkit.Rollout, rubric: rlkit.Rubric) -> torch.Tensor``
    returning raw scores ``float32 [B, G, D]``: B prompts, G completions each, D = the
    rubric's dimensions in rubric order, each value inside that dimension's range, NaN where the
    judge could not score (never a silent 0). Its ``check_rubric`` rejects dimensions it cannot
    score. An optional ``metrics() -> dict[str, float]`` (e.g. ``judge/parse_failure_rate``) describes
    the last ``score`` call; the training loop logs it every step. An optional
    ``record_fields(rubric) -> list[rlkit.RecordField]`` names the prompt-record fields its scoring reads (the
    rule judge's ``match`` checks read ``reference``): ``rlkit validate``, ``fit`` and ``score`` refuse data in
    which no record has one and warn with counts when some lack it, instead of leaving a dimension unscored. An
    optional ``model_folders() -> list[pathlib.Path]`` names the local models it asks; ``rlkit validate`` warns when
    one is the policy's model or shares its base (``allow_self_judge`` silences it). An optional
    ``reasons() -> list[list[dict[str, str]]] | None`` gives the last ``score`` call's one-line reason per
    dimension, ``[B][G] -> {dimension: reason}`` (None: it gives none); ``rlkit score`` writes them beside each
    completion's scores and ``rlkit calibrate`` beside its disagreements. An optional
    ``scope_caveats(records, rubric) -> list[str]`` says why its scores on these records may mean little (the
    offline tiny judge knows only the default task's sums); ``rlkit validate``, ``fit`` and ``score`` warn with each.

    Two optional methods serve judges that do not score dimension by dimension:

    * ``scored_rubric(rubric) -> rlkit.Rubric``: the rubric its scores follow, derived from the one it is
      asked with (a ranking judge's single ``rank`` dimension in [0, 1]). ``score`` still receives the
      user's rubric; D, the range checks, aggregation, weights, advantages and logs use the derived one.
      Composite judges (hybrid, ensemble, cascade) refuse such a judge as a member.
    * ``group_confidence() -> torch.Tensor | None``: ``float32 [B]`` in [0, 1] for the last ``score`` call,
      how much the judge trusts each group's order; the training loop multiplies that group's advantages
      (or its preference-pair weights) by it.
    """


@hookspec
def rlkit_register_aggregators(register: Register) -> None:
    """Register aggregator factories.

    An aggregator has ``aggregate(batch: rlkit.RewardBatch) -> torch.Tensor`` returning the
    reward ``float32 [B, G]`` from ``batch.scores`` (normalised to [0, 1], NaN = not scored) and
    ``batch.weights``. NaN is allowed in the result and means "no reward could be formed".

    An aggregator whose reward compares completions within their group (a rank, a win rate, a Pareto front)
    sets the class attribute ``group_relative = True``: ``rlkit validate`` then asks for ``num_generations >= 2``,
    and held-out completions, scored one per prompt, are combined by ``heldout_aggregator`` instead (a lone
    completion's rank says nothing).

    Optionally ``pair_gaps(batch, pairs) -> float32 [P]``: how far apart each chosen/rejected pair stands on this
    aggregator's ordering (``group_dpo`` drops pairs under ``min_gap`` by it; without it, the gap in the reward, or
    the weighted sum for a ``group_relative`` reward: :func:`rlkit.reward.preferences.pair_gaps`).
    """


@hookspec
def rlkit_register_advantage_estimators(register: Register) -> None:
    """Register advantage-estimator factories.

    An estimator has ``advantages(batch: rlkit.RewardBatch) -> torch.Tensor`` returning
    ``float32 [B, G]`` with no NaN: a completion whose reward is NaN gets advantage 0. It reads
    the whole batch (raw and normalised scores, weights, reward, rubric), so per-dimension
    methods need no other contract. The training loop adds ``batch.extras["completion_lengths"]``, the
    completions' token counts ``float32 [B, G]``, for estimators that weigh by length (OPO); a batch from
    elsewhere may lack it. An estimator whose groups are zero-mean by construction sets
    the class attribute ``zero_mean_groups = True`` and the contract suite checks it. An estimator that compares
    completions within their group sets ``group_relative = True``, and ``rlkit validate`` asks for
    ``num_generations >= 2`` (a group of one would give every advantage 0).

    Multi-turn credit: with a multi-turn environment the batch's extras carry ``num_turns`` (``int [B, G]``, each
    episode's policy turns) and, when the rubric has ``scope: step`` dimensions, ``step_scores`` (``float32
    [B, G, T, D]`` normalised to [0, 1], NaN where a turn does not exist and in episode-scoped dimensions). An estimator
    that sets ``per_turn = True`` may return ``[B, G, T]``, one advantage per policy turn (0 where a turn does not
    exist); the loop gives each turn's tokens its advantage. For single-turn batches it must return ``[B, G]``.
    """


@hookspec
def rlkit_register_preference_constructors(register: Register) -> None:
    """Register preference-constructor factories.

    A constructor has ``pairs(batch: rlkit.RewardBatch) -> rlkit.PreferencePairs``: for each
    pair, the prompt index, the chosen and rejected completion indices within that prompt's
    group, and a weight or soft label in [0, 1]. A completion with NaN reward is never paired. A constructor that
    orders completions by a rule of its own (a Pareto front) may define ``pair_gaps(batch, pairs) -> float32 [P]``,
    the gap ``min_gap`` is compared with; otherwise the aggregator's ordering measures it.
    """


@hookspec
def rlkit_register_weight_schedulers(register: Register) -> None:
    """Register weight-scheduler factories.

    A scheduler owns the dimension weights once training starts (the rubric's weights are only
    the initial values, read from ``rubric.initial_weights()``). It has
    ``weights(step: int, scores: torch.Tensor, rubric: rlkit.Rubric) -> torch.Tensor`` taking the
    normalised scores ``[B, G, D]`` of the current batch and returning non-negative weights
    ``float32 [D]``, plus ``state_dict()`` and ``load_state_dict(state)`` so a resumed run
    continues exactly.
    """


@hookspec
def rlkit_register_objectives(register: Register) -> None:
    """Register objective factories: what the policy is trained to minimise (``objective=<name>``).

    The loop owns sampling, the log-prob passes, micro-batching, the DDP arithmetic and the optimiser step; an
    objective says what it needs and turns tensors into a loss. It has:

    * ``group_relative`` (optional, default False): True when the loss compares completions within their group
      (pairs from a group); ``rlkit validate`` then asks for ``num_generations >= 2``.
    * ``signal``: ``"advantages"`` (the loop asks the advantage estimator for ``[B, G]`` advantages), ``"pairs"``
      (the loop hands the preference constructor to :meth:`pair_targets`) or ``"demonstrations"`` (the loop trains
      on each record's own completion, tokenised after its prompt, instead of sampling; ``loss`` gets
      ``CompletionLossInputs`` with zero advantages).
    * ``num_iterations: int``: optimiser steps per rollout (PPO-style inner epochs; 1 for on-policy).
    * ``needs_old_logprobs: bool``: whether ``old_logp`` must come from a separate no-grad pass (only meaningful
      with ``num_iterations > 1``; otherwise the loop passes ``logp.detach()``).
    * ``reference_use: str | None``: None when the objective needs no reference model; else what it uses one for,
      in words that complete "model.reference=none leaves no reference for ..." (validation prints it).
    * ``mask_truncated_completions: bool``: completions cut at the length limit are left out of the loss.
    * optional ``needs_entropy: bool`` (default False): the loop computes each pass's per-token entropy with its
      gradient and hands it over as ``CompletionLossInputs.entropy`` (an entropy bonus).
    * optional ``top_entropy_quantile: float`` (default 1.0): below 1, the loop makes a no-grad entropy pass with
      the policy that sampled and hands ``CompletionLossInputs.entropy_mask``, the step's top quantile of tokens.
    * ``loss(inputs) -> (loss, metrics)``: a pure function of ``rlkit.plugin.CompletionLossInputs`` (signal
      ``advantages``) or ``rlkit.plugin.PairLossInputs`` (signal ``pairs``): a scalar whose gradient flows only
      through the policy's log-probs, and a dict of detached scalar metrics (logged as they are named, e.g.
      ``kl``, ``clip_ratio``, ``rewards/margins``).
    * ``pair_targets(batch: rlkit.RewardBatch, truncated: torch.Tensor, *, constructor, aggregator, step: int) ->
      (rlkit.plugin.PairTargets, dict[str, float])`` for signal ``pairs``: this step's pairs over the global batch
      (``truncated`` is ``bool [B*G]``; ``constructor`` and ``aggregator`` are the run's), labels and weights, and
      metrics about them.
    * optional ``state_dict()`` / ``load_state_dict(state)``: state that travels in checkpoints.

    ``rlkit.testing.ObjectiveContract`` checks shapes, zero loss on zero advantages or zero gradient on identical
    pairs, that gradient flows only through the policy's log-probs, and that masked positions do not matter.
    """


@hookspec
def rlkit_register_generators(register: Register) -> None:
    """Register generator factories: what samples the policy's completions (``generator=<name>``).

    The loop calls, in this order:

    * ``setup(policy, tokenizer) -> None`` before the first ``generate`` (``rlkit fit`` evaluates the held-out
      split before training), with the policy on its device (an inference engine starts here and loads the
      policy's current weights); again when a checkpoint has replaced those weights (a resumed run).
    * ``generate(policy, tokenizer, request: rlkit.plugin.GenerationRequest) -> rlkit.plugin.SampledBatch``
      once per training step (and with ``request.greedy`` for held-out evaluation). For B records it returns
      B × ``request.num_generations`` sequences, record by record, each record's G completions consecutive:
      ``input_ids`` ``[B*G, P+C]`` = the prompt, left-padded to P, then C completion tokens (C ≤
      ``request.max_new_tokens``), ``attention_mask`` over both, ``completion_mask`` ``[B*G, C]`` 1 up to and
      including the first EOS, ``texts`` ``[B][G]`` the decoded completions, ``truncated`` ``[B*G]`` rows without
      EOS. ``rlkit.plugin.assemble_sampled_batch`` builds all of that from prompt and completion ids. The
      tokens must be the policy tokenizer's (the loop scores them under the policy). Sampling follows
      ``request.temperature``; a generator may honour ``request.seeds`` (one per record) to make a record's
      completions independent of the rest of the batch.
    * ``sync_weights(policy) -> None`` after every optimiser step: the next ``generate`` must sample from the
      updated weights (an engine copies them in; a generator that samples with the policy itself does nothing).
    * ``close() -> None`` when the run ends.

    A generator that samples elsewhere (an inference engine) may also let the loop ask ahead:

    * ``max_lag: int`` (attribute) > 0 with ``submit(policy, tokenizer, request) -> pending``, where
      ``pending.result()`` returns the ``SampledBatch``: the loop submits the next ``max_lag`` steps' requests
      before the current step's update, so sampling overlaps training. ``sync_weights`` must not change the
      weights a submitted request samples from (wait for it, or keep its version servable), so each batch's
      ``policy_version`` and ``policy_lag`` say truthfully which weights sampled it.
    * ``state_dict() -> dict`` / ``load_state_dict(state)``: what travels in checkpoints (version counters);
      ``load_state_dict`` is called before ``setup`` on resume.
    * ``score_reference(sampled) -> pending``, where ``pending.result()`` is ``float [N, C]``: the reference
      model's log-prob of each completion token (``model.reference=engine``; the loop asks before the policy's pass
      and reads after it).

    rlkit's contract suite (``rlkit.testing.GeneratorContract``) checks these shapes and the weight sync.
    A generator honours ``request.prompt_token_ids`` when given (one id list per record): it samples after exactly
    those ids, never re-tokenising them (a multi-turn episode's later turns).
    """


@hookspec
def rlkit_register_prompt_samplers(register: Register) -> None:
    """Register prompt-sampler factories: which training prompts each step trains on (``sampler=<name>``).

    The data loader walks an epoch shuffle of the training records (a fresh permutation per epoch, from the run seed
    and the epoch alone), which paces the run and resumes mid-epoch. A sampler has:

    * ``setup(records: list[dict], seed: int) -> None``: the training records (the held-out split removed), in the
      order ``pick`` indexes them, and the run seed; once, before anything else. It raises ``rlkit.DataError`` for
      records it cannot use, and decides ``adaptive``.
    * ``pick(draw: int, proposed: list[int]) -> list[int]`` (optional): the indices of the records step ``draw``
      trains on (``draw`` counts the steps this sampler picked for, 0, 1, ..., resumed runs included),
      ``len(proposed)`` distinct ones when there are that many records, where ``proposed`` is what the epoch shuffle
      would train on. A pure function of ``draw``, ``proposed`` and what ``observe`` saw: it must not change the
      sampler's state, and its randomness comes from the run seed and ``draw``, because the loop may call it ahead of
      the step (a generator's ``max_lag`` lookahead) and again at the step. A sampler without ``pick`` trains on the
      epoch shuffle as it is (``uniform``).
    * ``adaptive: bool`` (attribute, read after ``setup``): True when ``pick`` depends on what ``observe`` saw. The
      loop then cannot read the next steps' prompts ahead, and a generator with ``max_lag`` samples each step when
      it starts; False promises that ``pick`` depends on ``draw`` and ``proposed`` alone.
    * ``observe(draw: int, indices: list[int], raw_scores: torch.Tensor, rubric: rlkit.Rubric) -> None``: after
      step ``draw``, the judge's raw scores ``float32 [B, G, D]`` (NaN = not scored; ``rubric`` is what they
      follow) of the records ``indices`` it trained on. Called only for a sampler with ``pick``.
    * ``state_dict() -> dict`` / ``load_state_dict(state)``: what ``observe`` learnt, as plain values (numbers,
      strings, None, lists and dicts of them); it travels in checkpoints, and ``load_state_dict`` is called after
      ``setup``, so a resumed run picks exactly what the uninterrupted one would.
    * optional ``metrics() -> dict[str, float]``: logged as ``sampler/<metric>`` after every step.

    A sampler with ``pick`` runs on one process, and not with dynamic sampling's ``sampling.filter`` (which reads its
    prompts on in the epoch shuffle itself): ``rlkit validate`` refuses that combination.
    ``rlkit.testing.PromptSamplerContract`` checks the indices, that ``pick`` is pure and seeded, and that a sampler
    restored from ``state_dict`` picks what the uninterrupted one does.
    """


@hookspec
def rlkit_register_environments(register: Register) -> None:
    """Register environment factories: what a rollout is, one policy turn or an episode (``environment=<name>``).

    The default ``single_turn`` is prompt → one completion. An environment has:

    * ``max_turns: int``: the most policy turns an episode takes (1: single turn, the loop samples exactly as
      without an environment); ``max_tokens: int | None``: the episode's token budget after the prompt, policy and
      environment tokens together (None: only ``max_completion_length`` per policy turn bounds it).
    * ``reset(record) -> str | list[dict]``: the episode's first observation, a prompt string or chat messages
      (``{"role", "content"}``), from a prompt record.
    * ``step(messages, completion) -> rlkit.plugin.EnvStep``: after a policy turn, with ``messages`` the conversation
      before it and ``completion`` the text the policy just sampled: ``observation`` (messages to append, e.g.
      ``{"role": "tool", "name": ..., "content": ...}``; empty when done), ``done`` and ``info`` (a dict of
      counts such as ``tool_calls`` and ``tool_errors``, summed over the episode into ``Episode.info`` and the
      ``episode/`` metrics; a turn whose observation never reaches the policy, at the turn limit or past the token
      budget, does not count). It never raises on what the policy wrote: a malformed tool call or a failing tool is
      an observation the policy sees.
    * optional ``tools() -> list[dict]``: JSON schemas of the tools (transformers' ``tools=`` format), rendered
      into the prompt by the tokenizer's chat template.
    * optional ``setup(tokenizer) -> None``: called once with the policy's tokenizer before the first multi-turn
      episode (to read tool calls in its chat format); may raise ``rlkit.ConfigError`` when it cannot work with it.
    * optional ``close() -> None`` when the run ends.

    The loop (``rlkit.train.episodes``) plays G episodes per record, policy turns sampled through the generator,
    each next turn sampled after the exact token ids so far (environment turns are tokenised as the chat template
    renders them after the policy's end-of-turn token, never re-tokenising earlier turns); environment tokens are
    attended to and left out of the loss. ``rlkit.testing.EnvironmentContract`` checks the contract.
    """


@hookspec
def rlkit_register_monitors(register: Register) -> None:
    """Register monitor factories: reward-hacking and health checks run during ``rlkit fit``.

    Selected as a list (``monitors=[template_phrases,length_drift]``, ``monitors=[]`` for none); each sits under
    its own key ``monitors.<key>`` with ``name`` and ``params``. A monitor has:

    * ``observe(step: int, view: rlkit.plugin.MonitorView) -> dict[str, float]``, called every training step;
      it keeps its own cadence (cheap when not due) and returns finite metrics, logged as
      ``monitors/<key>/<metric>``.
    * ``alerts() -> list[rlkit.plugin.Alert]``: the alerts raised since the last call (the host prints each
      once, and appends it to ``run_dir/alerts.jsonl``).
    * ``summary() -> dict``: JSON-serialisable, at the end of the run (``run_dir/monitors.json``).
    * optional ``state_dict()`` / ``load_state_dict(state)``: baselines that travel in checkpoints.
    * optional class attribute ``reads_reference = True``: the monitor reads ``MonitorView.log_probs``' reference
      side, so the run keeps a reference policy (``model.reference``) even when the objective needs none, and
      ``model.reference=none`` is refused; the objective's update never pays for it.

    ``rlkit.testing.MonitorContract`` checks these on hand-made views.
    """


@hookspec
def rlkit_register_judge_backends(register: Register) -> None:
    """Register judge-backend factories: where a model-based judge sends its prompts.

    Chosen inside a judge's params as a ``PluginRef`` (``judge.params.backend={name: <name>, params: {...}}``),
    not as a config group. A backend has:

    * ``identity() -> dict``: what determines its answers (backend name, model, decoding settings); part
      of every response-cache key.
    * ``complete(prompts: list[list[dict[str, str]]]) -> list[rlkit.plugin.Completion]``: one chat
      (a list of ``{"role", "content"}`` messages) per request, answered in order. A request that still
      fails after the backend's own retries comes back with ``text=None`` and an ``error`` string; the
      judge's failure policy decides what that means, never the backend.
    * ``close() -> None``: release connections, processes or models.
    * optional ``structured_outputs: bool``: true when ``complete(prompts, schema=...)`` constrains every answer to
      that JSON schema (a judge with ``structured: true`` then sends its rubric's); a backend without it is never
      passed a schema.
    * optional ``level_probs_outputs: bool``: true when ``complete(prompts, schema=..., level_probs=True)`` gives each
      answered ``Completion`` its ``level_probs``: for each integer field of the schema whose levels are one digit,
      ``{level: probability}`` over exactly those levels (summing to 1), read at the token that wrote the field's
      value (``hf``: from its logits in-process; ``openai``: from the server's ``top_logprobs``). A field it cannot
      read may be left out (the judge then keeps the written level); a backend that cannot read any (a server that
      returns no log-probs) raises a ``ConfigError`` rather than answer without them. The ``llm`` judge's
      ``scoring: expected`` needs it (and ``structured_outputs``); a backend without it is never asked.
    """



# --- before training: auditing a rubric --------------------------------------------------------------------------


@hookspec
def rlkit_register_audit_probes(register: Register) -> None:
    """Register audit-probe factories: cheap tricks ``rlkit rubric audit`` plays on a rubric before any training.

    Chosen as a list, ``audit.probes=[keyword_stuffing,my_probe]`` (null, the default: every registered probe); each
    is built with its ``Params`` defaults (a probe's params all need one). A probe has:

    * ``game(record: dict, rubric: rlkit.Rubric) -> str | None``: from one audited record (``prompt``, text or chat
      messages; ``completion``, the original text; ``reference`` when the record has one; any other field), a gamed
      completion that a sound rubric and judge should NOT score higher than the original; None where the trick does
      not apply (no reference, nothing to stuff). A pure function of its arguments: deterministic (any randomness
      seeded from the record), the record left unchanged.
    * optional ``description: str``: the trick in one line, for the card (else the factory's docstring's first line).

    The audit scores every gamed completion with the run's judge and aggregator beside its original. A probe whose
    gamed completions score strictly higher than the originals on at least ``audit.hackable_share`` of the records
    it applied to marks the rubric hackable. ``rlkit.testing.AuditProbeContract`` checks the contract.
    """
