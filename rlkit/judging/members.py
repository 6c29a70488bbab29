"""Asking a judge for its :class:`~rlkit.judging.types.Judgement`, and what composite judges (``hybrid``,
``ensemble``, ``cascade``) share to delegate to the judges they combine.

:func:`judgement_of` is the one place a judge written before ``Judgement`` (a ``score`` tensor, then "last call"
methods) is read: the host and every composite ask judges through it. :class:`MemberJudges` is a composite's members,
built by the host from ``PluginRef`` params against the run's registry: it refuses the ones a composite cannot
combine, forwards the optional members (rubric checks, record fields, caveats, model folders, spend, close) and
joins the members' judgements into the composite's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.core.errors import ConfigError, ParamError
from rlkit.core.registry import member_params_where
from rlkit.judging.spend import Spend, judge_spend, sum_spend
from rlkit.judging.types import Judgement, Reasons

if TYPE_CHECKING:
    import torch

    from rlkit.core.rubric import Rubric
    from rlkit.core.types import RecordField, Rollout


def judgement_of(judge: Any, rollout: Rollout, rubric: Rubric) -> Judgement:
    """What ``judge`` says of ``rollout``: its ``assess`` where it has one; else (a judge written before
    ``Judgement``) its ``score`` tensor with what its last-call members (``reasons``, ``written_scores``,
    ``group_confidence``, ``metrics``) report right after, and the change in its running ``spend``."""
    assess = getattr(judge, "assess", None)
    if callable(assess):
        return assess(rollout, rubric)
    before = judge_spend(judge)
    scores = judge.score(rollout, rubric)
    after = judge_spend(judge)
    metrics = _optional(judge, "metrics")
    return Judgement(scores, reasons=_optional(judge, "reasons", default=None),
                     written_scores=_optional(judge, "written_scores", default=None),
                     confidence=_optional(judge, "group_confidence", default=None),
                     spend=None if after is None else after - (before or Spend()),
                     metrics=dict(metrics) if metrics else {})


def check_member_judge(ref: Any, parent: str) -> Any:
    """The member judge of ``ref`` (a built ``PluginRef``); a composite that names its own kind, or a member
    that derives its own rubric (``scored_rubric``, such as ``ranking``) and so has no per-dimension scores to
    combine, is refused, naming the field."""
    if ref.name == parent:
        raise ConfigError(f"a {parent} judge cannot contain itself", ref.where)
    if callable(getattr(ref.plugin, "scored_rubric", None)):
        raise ConfigError(f"judge {ref.name!r} scores groups on a rubric of its own, not the rubric's dimensions; "
                          f"a {parent} judge combines per-dimension judges", ref.where)
    return ref.plugin


def _optional(judge: Any, method: str, *args: Any, default: Any = ()) -> Any:
    """What ``judge.<method>(*args)`` gives, or ``default`` for a judge without that optional method."""
    found = getattr(judge, method, None)
    return found(*args) if callable(found) else default


def _each_once(lists: Iterable[list[Any]]) -> list[Any]:
    out: list[Any] = []
    for items in lists:
        for item in items:
            if item not in out:
                out.append(item)
    return out


def member_record_fields(members: Iterable[tuple[Any, Rubric]]) -> list[RecordField]:
    """The record fields any of ``(judge, the rubric it is asked with)`` reads, each once: a field one member
    needs and a record lacks leaves that member's score of the dimension out of the composite's."""
    return _each_once(_optional(judge, "record_fields", rubric) for judge, rubric in members)


def member_scope_caveats(members: Iterable[tuple[Any, Rubric]], records: Sequence[dict[str, Any]]) -> list[str]:
    """Each member's ``scope_caveats(records, rubric)`` (why its scores on these records may mean little), each once."""
    return _each_once(_optional(judge, "scope_caveats", records, rubric) for judge, rubric in members)


def member_model_folders(members: Iterable[Any]) -> list[Path]:
    """The local model folders the member judges ask (their ``model_folders()``), each once."""
    return _each_once(_optional(judge, "model_folders") for judge in members)


def close_judges(judges: Iterable[Any]) -> None:
    """Close each judge that can be closed (a model judge stops the engine its backend runs): a composite's
    ``close``."""
    for judge in judges:
        close = getattr(judge, "close", None)
        if callable(close):
            close()


def last_reasons(judge: Any) -> Reasons | None:
    """A judge's reasons for its last ``score`` call (its optional ``reasons()``), or None. Kept for plugins written
    before ``Judgement``; :func:`judgement_of` gives a call's reasons with its scores."""
    found = getattr(judge, "reasons", None)
    return found() if callable(found) else None


def merge_reasons(parts: Iterable[tuple[str, Reasons | None, Sequence[int] | None]],
                  group_sizes: Sequence[int]) -> Reasons | None:
    """The member judges' reasons as the composite's, per completion: ``parts`` are ``(label, a member's reasons,
    the composite's groups they are of)`` (``None``: every group, in order). A dimension one member gave a reason
    for keeps it as given; one that several did shows each, labelled (``"llm: 12 is not 7; rule_llm: no digits"``).
    None when no member gave any."""
    said: dict[tuple[int, int, str], list[tuple[str, str]]] = {}
    for label, reasons, groups in parts:
        if reasons is None:
            continue
        for b, group in zip(range(len(group_sizes)) if groups is None else groups, reasons, strict=True):
            for j, by_dimension in enumerate(group):
                for dimension, why in by_dimension.items():
                    said.setdefault((b, j, dimension), []).append((label, why))
    if not said:
        return None
    merged: Reasons = [[{} for _ in range(size)] for size in group_sizes]
    for (b, j, dimension), whys in said.items():
        merged[b][j][dimension] = whys[0][1] if len(whys) == 1 else "; ".join(f"{label}: {why}" for label, why in whys)
    return merged


@dataclass(frozen=True)
class Member:
    """One judge a composite combines: its ``label`` (the name it is configured under, numbered where one repeats),
    the built ``judge``, and ``where`` its own params are configured (``judge.params.judges.llm.params``)."""

    label: str
    judge: Any
    where: str = ""


class MemberJudges:
    """A composite judge's members, and everything it forwards to them.

    ``refs``: ``(label, reference)`` pairs as the composite's params name them (a ``PluginRef`` the host built);
    ``parent``: the composite's name, for refusals. Methods that ask members with a rubric take ``asked``, the
    ``(member, rubric)`` pairs (a hybrid judge asks each member with its own dimensions); :meth:`each` pairs every
    member with one rubric."""

    def __init__(self, refs: Iterable[tuple[str, Any]], parent: str) -> None:
        self.parent = parent
        self.members = [Member(label, check_member_judge(ref, parent), member_params_where(ref))
                        for label, ref in refs]
        self.by_label = {m.label: m for m in self.members}

    @staticmethod
    def labelled(refs: Sequence[Any]) -> list[tuple[str, Any]]:
        """``refs`` labelled by their names, numbered where a name repeats (``llm#1``, ``llm#2``)."""
        names = [ref.name for ref in refs]
        return [(name if names.count(name) == 1 else f"{name}#{names[:i + 1].count(name)}", ref)
                for i, (name, ref) in enumerate(zip(names, refs, strict=True))]

    def __iter__(self) -> Iterator[Member]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)

    @property
    def judges(self) -> list[Any]:
        return [m.judge for m in self.members]

    def each(self, rubric: Rubric) -> list[tuple[Member, Rubric]]:
        """Every member, asked with ``rubric``."""
        return [(m, rubric) for m in self.members]

    def check_rubric(self, asked: Iterable[tuple[Member, Rubric]]) -> None:
        """Each member's ``check_rubric``; a member's ``ParamError`` names the member's own params."""
        for member, rubric in asked:
            check = getattr(member.judge, "check_rubric", None)
            if check is None:
                continue
            try:
                check(rubric)
            except ParamError as exc:
                raise exc.at(member.where) from None

    def record_fields(self, asked: Iterable[tuple[Member, Rubric]]) -> list[RecordField]:
        return member_record_fields((m.judge, rubric) for m, rubric in asked)

    def scope_caveats(self, asked: Iterable[tuple[Member, Rubric]], records: Sequence[dict[str, Any]]) -> list[str]:
        return member_scope_caveats(((m.judge, rubric) for m, rubric in asked), records)

    def model_folders(self) -> list[Path]:
        return member_model_folders(self.judges)

    def spend(self) -> Spend | None:
        """The members' running totals added; None when no member asks a model."""
        return sum_spend(judge_spend(judge) for judge in self.judges)

    def close(self) -> None:
        """Close every member (a model judge stops the engine its backend runs)."""
        close_judges(self.judges)

    def assess(self, member: Member, rollout: Rollout, rubric: Rubric) -> Judgement:
        """``member``'s judgement of ``rollout``, its scores as float32."""
        import torch

        judged = judgement_of(member.judge, rollout, rubric)
        return judged if judged.scores.dtype == torch.float32 else \
            Judgement(judged.scores.to(torch.float32), judged.reasons, judged.written_scores, judged.confidence,
                      judged.spend, judged.metrics)

    @staticmethod
    def joined(scores: torch.Tensor, parts: Sequence[tuple[str, Judgement, Sequence[int] | None]],
               group_sizes: Sequence[int], metrics: Mapping[str, float] | None = None) -> Judgement:
        """The composite's judgement: its own ``scores``, and from its members' judgements ``parts`` (``(label,
        judgement, the composite's groups it is of)``; None: every group) the reasons merged per completion
        (:func:`merge_reasons`), the spend added and the metrics (later members' over earlier ones'), then the
        composite's own ``metrics``."""
        merged: dict[str, float] = {}
        for _, judged, _ in parts:
            merged.update(judged.metrics)
        merged.update(metrics or {})
        reasons = merge_reasons(((label, judged.reasons, groups) for label, judged, groups in parts), group_sizes)
        return Judgement(scores, reasons=reasons, spend=sum_spend(judged.spend for _, judged, _ in parts),
                         metrics=merged)
