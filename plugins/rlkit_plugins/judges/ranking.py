"""``ranking``: a generative ranking judge. The completions of a group are shown together, labelled A, B,
C, ..., and the model answers an order such as ``B > A = D >> C`` (``>>`` clearly better, ``=`` equal),
read by :func:`rlkit.judging.ranking_parsing.parse_ranking` (JSON, ``[[...]]``, chains, comma lists; cycles broken
deterministically by Copeland score, never an error).

Every group is ranked ``repetitions`` times, each time with the completions shuffled under the labels
(distinct shuffles while there are any, fixed per group, so cached answers stay valid). Ranks become one reward per
completion in [0, 1], the median over the repetitions that could be read (position-bias control):

* ``linear``: ``(n - rank) / (n - 1)``: 1 for the best, 0 for the worst, tied completions share.
* ``softmax``: ``exp(-(rank - 1) / temperature)``: the softmax weight of the rank relative to the best's, so
  the best gets 1 and lower temperatures leave little for the rest.
* ``margin``: the strength-weighted height above the bottom tier (``>`` counts 1, ``>>`` 2, ``=`` 0)
  divided by the total: "clearly better" opens a wider gap.
* ``wins``: pairwise majority over the repetitions (Copeland): the share of the other completions it ranks
  above in more repetitions than below (a draw counts 1/2).

The scores follow a derived one-dimension rubric, ``rank`` in [0, 1] (:meth:`RankingJudge.scored_rubric`),
which is what aggregation, weights and advantages see; the judged rubric only shapes the prompt. With
``advantage=rank`` only the order counts.

Agreement between repetitions is the position-bias check: per group, the mean Kendall τ-b between the
repetitions' ranks, clipped to [0, 1], is the group's confidence (its judgement's ``confidence``); the training
loop scales that group's advantages by it when ``confidence: true``, so a group the judge orders
differently every time barely moves the policy. ``judge/swap_consistency`` is the share of completion
pairs that every repetition ordered the same way.

The rank-gap distribution (the ranking note's check of how far the judge's ranking pulls a group apart) is read
from the rewards the group ends with, sorted: the gaps between adjacent places. ``judge/rank_gap_mean`` is their
mean (a group's spread over its ``n - 1`` gaps), ``judge/rank_gap_min`` the mean over groups of the smallest gap
between distinct places (the closest call the update still acts on), ``judge/rank_tie_share`` the share of adjacent
places that are tied (no gradient between them). Gaps near zero everywhere mean the judge barely separates the
completions, or its repetitions disagree and the median flattens them.

With ``reference_leak_check`` the judge counts the records whose reference answer its group prompt holds verbatim
outside the completions (and beyond what ``show_reference`` shows on purpose), warns once and logs
``judge/reference_leaks``, as the ``llm`` judge does (the check is shared: ``rlkit.plugin.ReferenceLeakCheck``).

An answer with no readable order is asked again (``parse_retries``); a group none of whose repetitions
could be read follows ``failure_policy``: ``nan`` and ``drop_group`` leave the group unscored (no
advantage), ``min`` gives every completion 0 (a group without order, so also no advantage). Never a
silent 0 for some completions only. An answer that reads two ways (a worst-first phrase with a ``>`` chain, ``>`` and
``<`` in one chain, rlkit.judging.ranking_parsing) is such an unreadable answer, never a guessed order.

A model judge sees each completion normalised and capped at ``max_completion_chars`` (``judge/completions_capped``
counts the cut ones), and an answer's fragments copied from a completion are not read as its order
(``rlkit.judging.shown``).
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
from collections.abc import Hashable
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from rlkit.plugin import (
    DEFAULT_MAX_COMPLETION_CHARS,
    RANKING_COMPACT_TEMPLATE,
    Anchor,
    BackendRef,
    CallPlan,
    CompletionView,
    Dimension,
    FailureWarning,
    JudgeBackend,
    JudgeError,
    JudgeLoad,
    Judgement,
    ParamError,
    PluginRef,
    RankingParse,
    ReferenceLeakCheck,
    ResponseCache,
    Rollout,
    Rubric,
    Spend,
    ask,
    chosen_template,
    group_labels,
    hookimpl,
    parse_ranking,
    ranks_from_order,
    render_template,
    seen_prompt,
    template_hash,
    template_path,
)
from rlkit.plugin import kendall_tau_b as stats_kendall_tau_b
from rlkit_plugins.judges.rule import RuleJudge

if TYPE_CHECKING:
    import torch

FULL_TEMPLATE = "judge/rank_group.jinja"
RankReward = Literal["linear", "softmax", "margin", "wins"]


def ranking_rubric(rubric: Rubric) -> Rubric:
    """The one-dimension rubric a ranking judge's scores follow: ``rank`` in [0, 1] within the group."""
    dim = Dimension(name="rank", description=f"place within its group under rubric {rubric.name}", type="scale",
                    range=(0.0, 1.0), anchors={0.0: Anchor(text="worst of its group"),
                                               1.0: Anchor(text="best of its group")})
    return Rubric(name=f"{rubric.name}-ranking", version=rubric.version,
                  description=f"group ranks under {rubric.name} v{rubric.version} ({rubric.short_hash})",
                  dimensions=[dim])


def shuffled_orders(n: int, repetitions: int, seed: int, group_key: str) -> list[list[int]]:
    """Which completion each label shows, per repetition: the identity first, then distinct shuffles while
    there are any left (n! of them), fixed by (seed, group content) so the same group is asked the same
    prompts every time and its cached answers stay valid."""
    digest = hashlib.sha256(f"{seed}/{group_key}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    orders, seen = [list(range(n))], {tuple(range(n))}
    while len(orders) < repetitions:
        order = list(range(n))
        for _ in range(100):  # distinct while possible; a group of 2 has only 2 orders
            rng.shuffle(order)
            if tuple(order) not in seen or len(seen) >= math.factorial(min(n, 10)):
                break
        seen.add(tuple(order))
        orders.append(order[:])
    return orders


def margin_heights(parse: RankingParse, labels: list[str]) -> list[float]:
    """Each label's strength-weighted height above the bottom tier, divided by the total height."""
    total = sum(parse.strengths)
    height, below = {}, total
    for t, tier in enumerate(parse.order):
        for label in tier:
            height[label] = below / total if total > 0 else 0.5
        if t < len(parse.strengths):
            below -= parse.strengths[t]
    return [height[label] for label in labels]


def rank_rewards(ranks: list[list[float]], method: RankReward, temperature: float = 1.0) -> list[float]:
    """Rewards in [0, 1] for n completions from each repetition's average ranks (1 = best): the median over
    repetitions of each one's reward, so one position-biased answer cannot move it (``wins``: the pairwise
    majority over them). ``margin`` is computed by :func:`combine_repetitions`."""
    n = len(ranks[0])
    if method == "wins":
        wins = [0.0] * n
        for x, y in combinations(range(n), 2):
            above = sum(r[x] < r[y] for r in ranks) - sum(r[x] > r[y] for r in ranks)
            wins[x] += 1.0 if above > 0 else 0.5 if above == 0 else 0.0
            wins[y] += 1.0 if above < 0 else 0.5 if above == 0 else 0.0
        return [w / (n - 1) for w in wins]
    if method == "linear":
        per = [[(n - r) / (n - 1) for r in rep] for rep in ranks]
    elif method == "softmax":
        per = [[math.exp(-(r - 1) / temperature) for r in rep] for rep in ranks]
    else:
        raise ValueError(f"unknown rank reward {method!r}")
    return [statistics.median(rep[i] for rep in per) for i in range(n)]


def kendall_tau_b(x: list[float], y: list[float]) -> float:
    """Kendall's τ-b of two rank vectors (ties allowed); 1.0 when both are all tied, 0.0 when only one is."""
    tau = stats_kendall_tau_b(x, y)
    if math.isnan(tau):
        return 1.0 if len(set(x)) <= 1 and len(set(y)) <= 1 else 0.0
    return tau


def rank_gaps(rewards: list[float]) -> list[float]:
    """The gaps between adjacent places of a group's rewards sorted best first (``n - 1`` of them, >= 0)."""
    ordered = sorted(rewards, reverse=True)
    return [a - b for a, b in zip(ordered, ordered[1:], strict=False)]


def rank_gap_metrics(groups: list[list[float]], tie: float = 1e-9) -> dict[str, float]:
    """``judge/rank_gap_mean``, ``judge/rank_gap_min`` and ``judge/rank_tie_share`` over the ranked groups'
    rewards (a gap within ``tie`` is a tie); a metric without a value (no gap, or only ties) is left out."""
    gaps = [rank_gaps(rewards) for rewards in groups]
    flat = [gap for group in gaps for gap in group]
    if not flat:
        return {}
    out = {"judge/rank_gap_mean": sum(flat) / len(flat),
           "judge/rank_tie_share": sum(gap <= tie for gap in flat) / len(flat)}
    closest = [min(distinct) for group in gaps if (distinct := [gap for gap in group if gap > tie])]
    if closest:
        out["judge/rank_gap_min"] = sum(closest) / len(closest)
    return out


def _sign(v: float) -> int:
    return (v > 0) - (v < 0)


@dataclass(frozen=True)
class GroupRanking:
    """One group's repetitions combined: a reward per completion, Kendall τ-b for every pair of
    repetitions, and how many completion pairs every repetition ordered the same way."""

    rewards: list[float]
    taus: list[float]
    consistent_pairs: int
    compared_pairs: int
    tie_share: float = 0.0  # the share of adjacent places tied ("="), mean over the repetitions


def tie_share(order: list[list[str]], size: int) -> float:
    """The share of a group's ``size - 1`` adjacent places an order ties (``A > B = C > D``: 1 of 3)."""
    return sum(len(tier) - 1 for tier in order) / max(size - 1, 1)


def combine_repetitions(reps: list[tuple[RankingParse, list[int]]], labels: list[str], method: RankReward,
                        temperature: float = 1.0) -> GroupRanking:
    """``reps``: each readable repetition's parse and which completion each label showed in it."""
    g = len(labels)
    ranks, heights = [], []
    for parse, shown in reps:
        by_label, height_by_label = ranks_from_order(parse.order, labels), margin_heights(parse, labels)
        rank, height = [0.0] * g, [0.0] * g
        for position, completion in enumerate(shown):
            rank[completion], height[completion] = by_label[position], height_by_label[position]
        ranks.append(rank)
        heights.append(height)
    if method == "margin":
        rewards = [statistics.median(h[c] for h in heights) for c in range(g)]
    else:
        rewards = rank_rewards(ranks, method, temperature)
    taus = [kendall_tau_b(x, y) for x, y in combinations(ranks, 2)]
    consistent = compared = 0
    if len(ranks) > 1:
        for x, y in combinations(range(g), 2):
            compared += 1
            consistent += len({_sign(r[x] - r[y]) for r in ranks}) == 1
    ties = statistics.mean(tie_share(parse.order, g) for parse, _ in reps)
    return GroupRanking(rewards, taus, consistent, compared, ties)


class RankingJudge:
    @dataclass
    class Params:
        backend: BackendRef = field(default_factory=lambda: PluginRef.to("judge_backend", "tiny"))
        template: str | None = None  # None: compact for the offline tiny ranking judge, rank_group.jinja otherwise
        repetitions: int = 3
        reward: RankReward = "linear"
        temperature: float = 1.0  # softmax only
        confidence: bool = True   # scale each group's advantages by the agreement of its repetitions
        # … and by 1 - tie_penalty × the share of its adjacent places tied: the ranking note (§3.2) asks the judge to
        # avoid ties and to give a tie lower confidence
        tie_penalty: float = 0.5
        # the record's reference in the prompt: None shows it to the offline tiny judge (it ranks by comparing with
        # it) and keeps it from model judges, which the ranking note (§5.5) warns may copy it instead of judging
        show_reference: bool | None = None
        # warn once when a record's reference appears verbatim in the group prompt outside the completions, more
        # often than the template and rubric alone hold it (shown on purpose by show_reference is not a leak): the
        # judge is shown the answer key; logs judge/reference_leaks, as the llm judge's check
        reference_leak_check: bool = False
        parse_retries: int = 1
        failure_policy: Literal["nan", "min", "drop_group"] = "nan"
        failure_warning: float = 0.05
        seed: int = 0
        # a model judge sees each completion normalised and cut to this many characters, head and tail
        # (rlkit.judging.shown: why this default); the offline tiny judge sees it as written
        max_completion_chars: int = DEFAULT_MAX_COMPLETION_CHARS

    def __init__(self, params: Params) -> None:
        from rlkit.plugin import RANKING_SPEC, build_tiny_judge, ranking_spec

        if params.repetitions < 1:
            raise ParamError("must be >= 1", "repetitions")
        if params.parse_retries < 0:
            raise ParamError("must be >= 0", "parse_retries")
        if params.reward not in get_args(RankReward):
            raise ParamError(f"must be one of {', '.join(get_args(RankReward))}, got {params.reward!r}", "reward")
        if not params.temperature > 0:
            raise ParamError(f"must be > 0, got {params.temperature}", "temperature")
        if not 0 <= params.tie_penalty <= 1:
            raise ParamError(f"must lie in [0, 1], got {params.tie_penalty}", "tie_penalty")
        CompletionView.check(params.max_completion_chars, "judge.params.max_completion_chars")
        self.params = params
        # offline, one tiny judge per group size: it learns where each label's line is for one size
        self.backend = JudgeBackend(params.backend,
                                    lambda size=RANKING_SPEC.group_size: build_tiny_judge(
                                        ranking_spec(size), teacher=RuleJudge(RuleJudge.Params())))
        self.default_template = RANKING_COMPACT_TEMPLATE if self.backend.offline else FULL_TEMPLATE
        if params.template is not None:
            template_path(params.template)  # fail at validate time on a missing template
        self.cache = ResponseCache()
        self._warning = FailureWarning("ranking", params.failure_warning, params.parse_retries,
                                       params.failure_policy)
        self._leaks = ReferenceLeakCheck("ranking")

    def check_rubric(self, rubric: Rubric) -> None:
        """Before any scoring: a backend that asks a server must reach it (probed once)."""
        self.backend.check_ready()

    def scored_rubric(self, rubric: Rubric) -> Rubric:
        """The scores follow :func:`ranking_rubric`, not the judged rubric's dimensions."""
        return ranking_rubric(rubric)

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        return self.assess(rollout, rubric).scores

    def assess(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        """Each group's rank rewards ``[B, G, 1]``, its confidence ``[B]`` in [0, 1] (1 for every group when
        ``confidence`` is off), the call's spend, and as metrics its parse-failure, incomplete and cycle counts,
        agreement between repetitions (Kendall τ, swap consistency), mean confidence, rank gaps, cache hit rate and
        latency (and, with ``reference_leak_check``, ``judge/reference_leaks``)."""
        import torch
        before = self.backend.meter.total()
        b, g, k = rollout.num_prompts, rollout.group_size, self.params.repetitions
        if g < 2:
            raise JudgeError(f"ranks the completions of a group against each other and needs at least 2 per "
                             f"prompt, got {g} (num_generations)", "judge 'ranking'")
        backend = self.backend.get(g)
        template = chosen_template(self.params.template, rubric, "ranking", self.default_template)
        # once per call: the rubric hash serialises the rubric and reads the templates it names
        identity, t_hash, r_hash = backend.identity(), template_hash(template), rubric.content_hash
        labels = group_labels(g)
        shown: dict[tuple[int, int], list[int]] = {}
        requests: dict[Hashable, tuple[str, list[dict[str, str]]]] = {}
        view = CompletionView(self.params.max_completion_chars, raw=self.backend.offline)
        for i, record in enumerate(rollout.records):
            prompt = seen_prompt(rollout, i)
            group_key = hashlib.sha256("\x00".join([prompt, *rollout.completions[i]]).encode()).hexdigest()
            group = [view.show((i, c), text) for c, text in enumerate(rollout.completions[i])]
            reference = self.backend.shown_reference(record, self.params.show_reference)
            for rep, order in enumerate(shuffled_orders(g, k, self.params.seed, group_key)):
                shown[(i, rep)] = order
                candidates = [{"label": label, "text": group[c]} for label, c in zip(labels, order, strict=True)]
                example = " > ".join(labels[:3])
                text = render_template(template, rubric=rubric, prompt=prompt, candidates=candidates,
                                       labels=labels, reference=reference, example_order=example)
                key = ResponseCache.key(judge="ranking", backend=identity, template=t_hash,
                                        rubric=r_hash, permutation=rep, seed=self.params.seed,
                                        prompt=prompt, reference=reference, completions=group)
                requests[(i, rep)] = (key, [{"role": "user", "content": text}])

        leaks = None
        if self.params.reference_leak_check:
            blank = [{"label": label, "text": ""} for label in labels]  # the completions may give the answer

            def group_prompt(record: dict[str, Any], prompt: str) -> str:
                return render_template(template, rubric=rubric, prompt=prompt, candidates=blank, labels=labels,
                                       reference=self.backend.shown_reference(record, self.params.show_reference),
                                       example_order=" > ".join(labels[:3]))

            leaks = self._leaks.count(rollout.records, group_prompt, template)

        def read(slot: Hashable, text: str) -> tuple[RankingParse | None, bool]:
            got = parse_ranking(view.unquoted(text, [(slot[0], c) for c in range(g)]), labels)  # type: ignore[index]
            return (None if got.method == "none" else got), got.complete

        reminder = f"End with one line ranking every label best first, e.g. {' > '.join(labels)}."
        asked = ask(backend, self.cache, requests, read, self.params.parse_retries, lambda slot: reminder,
                    meter=self.backend.meter)
        scores = torch.full((b, g, 1), math.nan)
        confidence = torch.ones(b)
        failed = incomplete = cycles = consistent = compared = 0
        taus: list[float] = []
        ranked: list[list[float]] = []  # each ranked group's rewards, for the rank-gap distribution
        for i in range(b):
            read_reps = [(asked.parsed[(i, rep)], shown[(i, rep)]) for rep in range(k) if (i, rep) in asked.parsed]
            failed += k - len(read_reps)
            incomplete += sum(not got.complete for got, _ in read_reps)
            cycles += sum(got.cycles_broken for got, _ in read_reps)
            if not read_reps:
                if self.params.failure_policy == "min":
                    scores[i, :, 0] = 0.0
                continue
            group = combine_repetitions(read_reps, labels, self.params.reward, self.params.temperature)
            scores[i, :, 0] = torch.tensor(group.rewards)
            ranked.append(group.rewards)
            taus += group.taus
            consistent, compared = consistent + group.consistent_pairs, compared + group.compared_pairs
            if self.params.confidence:
                agreement = max(0.0, sum(group.taus) / len(group.taus)) if group.taus else 1.0
                confidence[i] = agreement * (1.0 - self.params.tie_penalty * group.tie_share)
        requests_total = b * k
        rate = failed / max(requests_total, 1)
        metrics = {"judge/parse_failure_rate": rate, "judge/incomplete_rate": incomplete / max(requests_total, 1),
                   "judge/cycles_broken": float(cycles), "judge/confidence_mean": float(confidence.mean()),
                   **asked.metrics(self.cache), **rank_gap_metrics(ranked), **view.metrics()}
        if taus:
            metrics["judge/rank_agreement"] = sum(taus) / len(taus)
        if compared:
            metrics["judge/swap_consistency"] = consistent / compared
        if leaks is not None:
            metrics["judge/reference_leaks"] = float(leaks)
        self._warning.check(rate, "rankings")
        return Judgement(scores, confidence=confidence, spend=self.backend.meter.total() - before, metrics=metrics)

    def model_folders(self) -> list[Path]:
        """The local model this judge asks, when one is named (``rlkit validate`` compares it with the policy's)."""
        folder = self.backend.model_folder
        return [folder] if folder is not None else []

    def close(self) -> None:
        """Close the backend (a ``llama_cpp`` backend stops its engine)."""
        self.backend.close()

    def spend(self) -> Spend:
        """Calls, tokens, latency, cache hits and retries so far (``rlkit.judging.spend``)."""
        return self.backend.meter.total()

    def planned_calls(self, load: JudgeLoad, rubric: Rubric) -> CallPlan:
        """One call a group and repetition, the whole group in it."""
        g, k = load.generations, self.params.repetitions
        labels = group_labels(g)
        template = chosen_template(self.params.template, rubric, "ranking", self.default_template)
        candidates = [{"label": label, "text": load.placeholder_completion()} for label in labels]
        prompt = render_template(template, rubric=rubric, prompt=load.placeholder_prompt(), candidates=candidates,
                                 labels=labels, reference=None, example_order=" > ".join(labels[:3]))
        return self.backend.plan(load.prompts * k, f"{load.prompts} groups of {g} × {k} "
                                 f"repetition{'s' * (k != 1)}", prompt)


@hookimpl
def rlkit_register_judges(register):
    register("ranking", RankingJudge)
