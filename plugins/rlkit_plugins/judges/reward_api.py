"""``reward_api``: scores from a remote ``rlkit serve``, so ``rlkit fit`` can train against a judge served elsewhere.

Each prompt's group is one ``POST {base_url}/v1/reward`` (prompt, responses, and the record's other scalar fields,
e.g. ``reference``; a multi-turn rollout's responses are its episodes' messages after the prompt, so the server's
judge sees the episodes, tool calls and errors included, as a local one would), sent concurrently (at most
``concurrency`` in flight) with the retries and backoff of the ``openai`` backend (``rlkit.judging.http``). The
bearer token comes from the environment variable ``api_key_env``, read per call; unset sends none.

Before anything is scored (``check_rubric``, so ``rlkit validate``, ``score`` and ``fit`` fail in seconds), ``GET
/v1/info`` must show the server judging the same dimensions (names and ranges, in order) as the local rubric, or a
``ConfigError`` names ``judge.params.base_url``; so does a server that refuses the connection (``cannot connect to
http://127.0.0.1:8000 (connection refused)``, after the usual retries). A server whose judge derives its own rubric
(``judge=ranking``) makes this judge derive the same one (``scored_rubric``). A group that still fails after its
retries gets NaN scores (never a silent zero), is counted in ``judge/request_failures`` and warned about.
"""

from __future__ import annotations

import asyncio
import math
import os
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rlkit.plugin import (
    CallPlan,
    ConfigError,
    EngineError,
    InfoResponse,
    JudgeLoad,
    Judgement,
    ParamError,
    RewardResponse,
    Rollout,
    Rubric,
    Spend,
    hookimpl,
    post_with_retries,
    retry_delay,
    rubric_from_dict,
    run_async,
    snippet,
    tls_context,
)
from rlkit_plugins.backends.reachability import connect_failure

if TYPE_CHECKING:
    import torch

WHERE = "judge.params"  # at run time, where a reward server that misbehaves is configured
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _dims(info: Any) -> list[tuple[str, float, float]]:
    return [(d.name, float(d.low), float(d.high)) for d in info.dimensions]


def _scalar_fields(record: dict[str, Any]) -> dict[str, Any]:
    """The record's fields a check may read, as the API takes them: scalars only (lists, e.g. completions, stay)."""
    return {k: v for k, v in record.items() if k != "prompt" and (
        v is None or isinstance(v, (str, bool, int)) or (isinstance(v, float) and math.isfinite(v)))}


def _episode_messages(episode: Any) -> list[dict[str, str]]:
    """An episode's messages after its prompt as the API takes them: role, text content, a tool's name."""
    out = []
    for m in episode.messages[episode.first_turn:]:
        content = m.get("content")
        message = {"role": str(m.get("role")), "content": content if isinstance(content, str) else ""}
        if isinstance(m.get("name"), str):
            message["name"] = m["name"]
        out.append(message)
    return out


class RewardApiJudge:
    """Asks a remote reward API (``rlkit serve``) for each group's scores."""

    @dataclass
    class Params:
        base_url: str = "http://127.0.0.1:8000"
        api_key_env: str = "RLKIT_SERVE_TOKEN"
        timeout: float = 60.0
        max_retries: int = 3
        backoff: float = 0.5
        unavailable_timeout: float = 120.0
        """Seconds a server that stops answering is waited for before the run stops (the ``openai`` backend's
        default and reasons); 0: stop once ``max_retries`` are spent."""
        concurrency: int = 8

    def __init__(self, params: RewardApiJudge.Params | None = None) -> None:
        import httpx  # here, not at module level: every rlkit command imports all built-in plugins

        p = params or RewardApiJudge.Params()
        try:
            url = httpx.URL(p.base_url)
        except Exception:  # httpx raises several types for unparsable URLs
            url = None
        if url is None or url.scheme not in ("http", "https") or not url.host:
            raise ParamError(f"must be an http(s) URL such as http://127.0.0.1:8000, got {p.base_url!r}",
                             "base_url")
        if not _ENV_NAME.fullmatch(p.api_key_env or ""):
            raise ParamError(f"must be the name of an environment variable (the token itself never goes in the "
                              f"config), got {p.api_key_env!r}", "api_key_env")
        for name, low, strict in (("timeout", 0, True), ("max_retries", 0, False), ("backoff", 0, False),
                                  ("unavailable_timeout", 0, False), ("concurrency", 1, False)):
            value = getattr(p, name)
            if not math.isfinite(value) or value < low or (strict and value == low):
                raise ParamError(f"must be {'>' if strict else '>='} {low}, got {value}", name)
        self.params = p
        self._base = p.base_url.rstrip("/")
        self._checked: dict[str, Rubric] = {}  # local rubric hash -> the rubric the server's scores follow
        self._spend = Spend()

    def _headers(self) -> dict[str, str]:
        token = os.environ.get(self.params.api_key_env)
        return {"Authorization": f"Bearer {token}"} if token else {}

    def _info(self) -> InfoResponse:
        import httpx

        p, where, error, connected = self.params, f"{WHERE}.base_url", "", False
        for attempt in range(p.max_retries + 1):
            if attempt:
                time.sleep(retry_delay(p.backoff, attempt - 1))
            try:
                response = httpx.get(f"{self._base}/v1/info", headers=self._headers(), timeout=p.timeout,
                                     verify=tls_context())
            except httpx.HTTPError as exc:
                error, connected = connect_failure(exc, p.timeout), False
                continue
            connected = True
            if response.status_code == 401:
                raise ConfigError(f"{self._base} refused the token (HTTP 401); set the environment variable "
                                  f"{p.api_key_env} to the server's token", where)
            if response.status_code == 429 or response.status_code >= 500:
                error = f"HTTP {response.status_code}"
                continue
            try:
                response.raise_for_status()
                return InfoResponse.model_validate_json(response.content)
            except Exception as exc:
                raise ConfigError(f"{self._base}/v1/info is not an rlkit reward API: {snippet(str(exc))}",
                                  where) from None
        tries = f" after {p.max_retries + 1} attempts" if p.max_retries else ""
        if not connected:
            raise ConfigError(f"cannot connect to {self._base} ({error}){tries}, so cannot reach the reward API; "
                              "start it with `rlkit serve` or fix the URL", where)
        raise ConfigError(f"cannot reach the reward API at {self._base}: GET /v1/info answered {error}{tries}", where)

    def check_rubric(self, rubric: Rubric) -> None:
        """The server must judge this rubric's dimensions (names and ranges); learn what its scores follow."""
        if rubric.content_hash in self._checked:
            return
        info = self._info()
        theirs = _dims(info.rubric)
        ours = [(d.name, float(d.low), float(d.high)) for d in rubric.dimensions]
        if theirs != ours:
            def show(dims: list[tuple[str, float, float]]) -> str:
                return ", ".join(f"{n} [{lo:g}, {hi:g}]" for n, lo, hi in dims)
            raise ConfigError(f"the server at {self._base} judges rubric {info.rubric.name} v{info.rubric.version} "
                              f"({show(theirs)}); the local rubric {rubric.name} v{rubric.version} has "
                              f"({show(ours)})", f"{WHERE}.base_url")
        if info.rubric.hash != rubric.content_hash:
            # same dimensions, other anchors, checks or templates: the scores may mean something else
            warnings.warn(f"the server at {self._base} judges rubric {info.rubric.name} v{info.rubric.version} "
                          f"({info.rubric.hash[:12]}), not the local {rubric.name} v{rubric.version} "
                          f"({rubric.short_hash}); the dimensions match, their definitions differ", stacklevel=2)
        if info.scored_rubric.hash == info.rubric.hash:
            self._checked[rubric.content_hash] = rubric
            return
        # The server's judge derives its own rubric (a ranking judge): so does this one, for check_config.
        definition = {k: v for k, v in (info.scored_rubric.definition or {}).items() if k != "templates"}
        derived = rubric_from_dict(definition, source=f"{self._base}/v1/info")
        self._checked[rubric.content_hash] = derived
        self.scored_rubric: Callable[[Rubric], Rubric] = lambda _rubric: derived

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        return self.assess(rollout, rubric).scores

    def assess(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        """The server's scores, with the call's requests, failed groups, retries and mean latency as metrics."""
        import torch
        self.check_rubric(rubric)
        scored = self._checked[rubric.content_hash]
        names = scored.dimension_names
        g = rollout.group_size
        groups = rollout.completions if rollout.episodes is None else [[_episode_messages(e) for e in group]
                                                                        for group in rollout.episodes]
        payloads = [{"prompt": record["prompt"], "responses": list(group), "fields": _scalar_fields(record)}
                    for record, group in zip(rollout.records, groups, strict=True)]

        def read(response: Any) -> list[list[float]] | None:
            try:
                body = RewardResponse.model_validate_json(response.content)
            except Exception:
                return None
            if len(body.results) != g or any(set(r.scores) != set(names) for r in body.results):
                return None
            return [[math.nan if r.scores[n] is None else r.scores[n] for n in names] for r in body.results]

        outcomes = run_async(lambda: self._post_all(payloads, read), "rlkit-reward-api")
        scores = torch.full((rollout.num_prompts, g, len(names)), math.nan)
        for i, out in enumerate(outcomes):
            if out.value is not None:
                scores[i] = torch.tensor(out.value, dtype=torch.float32)
        failed = [o for o in outcomes if o.value is None]
        # a reward server is not billed by the token: its spend is requests, their latency and retries
        spent = Spend(calls=len(outcomes), latency_s=sum(o.latency for o in outcomes),
                      retries=sum(o.attempts - 1 for o in outcomes))
        self._spend = self._spend + spent
        metrics = {"judge/requests": float(len(outcomes)), "judge/request_failures": float(len(failed)),
                   "judge/retries": float(sum(o.attempts - 1 for o in outcomes)),
                   "judge/latency_mean": sum(o.latency for o in outcomes) / max(len(outcomes), 1)}
        if failed:
            warnings.warn(f"reward_api: {len(failed)} of {len(outcomes)} groups got no scores from {self._base} "
                          f"(left unscored); first error: {failed[0].error}", stacklevel=2)
        return Judgement(scores, spend=spent, metrics=metrics)

    async def _post_all(self, payloads: list[dict[str, Any]], read: Callable[[Any], Any]) -> list[Any]:
        import httpx

        p = self.params
        slots = asyncio.Semaphore(p.concurrency)
        limits = httpx.Limits(max_connections=p.concurrency, max_keepalive_connections=p.concurrency)

        async def post(client: httpx.AsyncClient, payload: dict[str, Any]) -> Any:
            out = await post_with_retries(client, f"{self._base}/v1/reward", payload, slots=slots, timeout=p.timeout,
                                          max_retries=p.max_retries, backoff=p.backoff, read=read,
                                          malformed="not a reward response for this group",
                                          unavailable_timeout=p.unavailable_timeout,
                                          unavailable_where=f"{WHERE}.unavailable_timeout")
            if out.unavailable:  # raised here, so the groups still waiting are cancelled rather than waited for
                raise EngineError(f"the reward API at {self._base} stopped answering and has not answered for "
                                  f"{p.unavailable_timeout:g} s ({WHERE}.unavailable_timeout); last try: {out.error}; "
                                  "no step is trained on scores it did not give", f"{WHERE}.base_url")
            return out

        async with httpx.AsyncClient(timeout=httpx.Timeout(p.timeout), limits=limits, headers=self._headers(),
                                     verify=tls_context()) as client:
            return list(await asyncio.gather(*(post(client, payload) for payload in payloads)))

    def spend(self) -> Spend:
        """Requests (one a group), their latency and retries so far (``rlkit.judging.spend``); no tokens."""
        return self._spend

    def planned_calls(self, load: JudgeLoad, rubric: Rubric) -> CallPlan:
        """One request a group, whatever the rubric."""
        return CallPlan(load.prompts, 0, 0, f"{load.prompts} prompts × 1 request (a group each)")


@hookimpl
def rlkit_register_judges(register: Callable[..., None]) -> None:
    """Register the ``reward_api`` judge."""
    register("reward_api", RewardApiJudge)
