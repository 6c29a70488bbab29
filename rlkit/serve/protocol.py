"""The reward API's request and response bodies (pydantic), shared by ``rlkit serve`` and the ``reward_api``
judge; FastAPI publishes them as the OpenAPI schema."""

from __future__ import annotations

import time
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlkit.reward.episodes_io import episode_problem, split_messages

Scalar = str | int | Annotated[float, Field(allow_inf_nan=False)] | bool | None


class _Body(BaseModel):
    """A request body: an unknown key is a mistake worth a 422. Responses ignore unknown keys, so an older client
    reads a newer server."""

    model_config = ConfigDict(extra="forbid")


class ChatMessage(_Body):
    role: str = Field(min_length=1, max_length=64, examples=["user"])
    content: str


class EpisodeMessage(_Body):
    """A message of an episode: a tool's result names its tool."""

    role: str = Field(min_length=1, max_length=64, examples=["tool"])
    content: str
    name: str | None = Field(default=None, max_length=256, description="the tool a tool message answers for")

    def record(self) -> dict[str, str]:
        """The message as a conversation holds it (no ``name`` when there is none)."""
        return self.model_dump(exclude_none=True)


EpisodeTurns = Annotated[list[EpisodeMessage], Field(min_length=1)]


def _episode_problem(messages: list[EpisodeMessage]) -> str | None:
    return episode_problem([m.record() for m in messages])  # what `rlkit score` refuses in a file, refused here


class RewardRequest(_Body):
    """One group: a prompt and the responses to score against each other; or one episode, ``messages``."""

    prompt: str | Annotated[list[ChatMessage], Field(min_length=1)] | None = Field(
        default=None, description="the prompt text, or its chat messages (required with responses)",
        examples=["3+4="])
    responses: list[str | EpisodeTurns] | None = Field(
        default=None, min_length=1, description="the responses to score (one group): each a text, or an episode "
        "after the prompt (the assistant's turns with tool results or a user's replies between them, ending with the "
        "assistant's answer)", examples=[["7", "12"]])
    messages: Annotated[list[EpisodeMessage], Field(min_length=2)] | None = Field(
        default=None, description="instead of prompt and responses, one whole conversation: the prompt's messages, "
        "then the episode from the first assistant turn on", examples=[[
            {"role": "user", "content": "37*14"}, {"role": "assistant", "content": '[calc(e="37*14")]'},
            {"role": "tool", "name": "calc", "content": "518"}, {"role": "assistant", "content": "518"}]])
    fields: dict[str, Scalar] = Field(
        default_factory=dict, description="other fields of the prompt's record that the rubric's checks read, "
                                          "e.g. {\"reference\": \"7\"}", examples=[{"reference": "7"}])

    @field_validator("fields")
    @classmethod
    def _no_prompt(cls, value: dict[str, Any]) -> dict[str, Any]:
        if "prompt" in value:
            raise ValueError("'prompt' goes in the request's own prompt field, not in fields")
        return value

    @field_validator("responses")
    @classmethod
    def _episodes_end_with_an_answer(cls, value: list[Any] | None) -> list[Any] | None:
        for i, response in enumerate(value or []):
            problem = None if isinstance(response, str) else _episode_problem(response)
            if problem:
                raise ValueError(f"responses[{i}]: {problem}")
        return value

    @field_validator("messages")
    @classmethod
    def _a_prompt_then_an_episode(cls, value: list[EpisodeMessage] | None) -> list[EpisodeMessage] | None:
        if value is None:
            return value
        if value[0].role == "assistant":
            raise ValueError("the conversation must open with the prompt's messages, before the first assistant turn")
        problem = _episode_problem(value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _one_shape(self) -> RewardRequest:
        if self.messages is not None:
            if self.prompt is not None or self.responses is not None:
                raise ValueError("give either messages (one conversation) or prompt and responses, not both")
        elif self.prompt is None or self.responses is None:
            raise ValueError("give prompt and responses (one group), or messages (one conversation)")
        return self

    def prompt_record(self) -> str | list[dict[str, str]]:
        """The prompt as a data record holds it (of ``messages``: the messages before the first assistant turn)."""
        if self.messages is not None:
            return split_messages([m.record() for m in self.messages])[0]
        assert self.prompt is not None
        return self.prompt if isinstance(self.prompt, str) else [m.model_dump() for m in self.prompt]

    def response_records(self) -> list[str | list[dict[str, str]]]:
        """Each response as text or an episode's messages (of ``messages``: one, from the first assistant turn)."""
        if self.messages is not None:
            return [split_messages([m.record() for m in self.messages])[1]]
        return [r if isinstance(r, str) else [m.record() for m in r] for r in self.responses or []]


class RubricIdentity(BaseModel):
    name: str
    version: str
    hash: str = Field(description="sha256 of the rubric's canonical content")


class DimensionInfo(BaseModel):
    name: str
    type: str
    low: float
    high: float


class RubricInfo(RubricIdentity):
    dimensions: list[DimensionInfo]
    definition: dict[str, Any] | None = Field(default=None, description="the rubric's canonical content")

    def identity(self) -> RubricIdentity:
        """Name, version and hash only."""
        return RubricIdentity(name=self.name, version=self.version, hash=self.hash)


class InfoResponse(BaseModel):
    judge: str
    rubric: RubricInfo = Field(description="the rubric the judge is asked with")
    scored_rubric: RubricInfo = Field(description="the rubric the scores follow: the same one, unless the judge "
                                                  "derives its own (a ranking judge's single 'rank' dimension)")
    chat_model: str | None = Field(description="the model /v1/chat/completions serves; null: not served")


class ScoredResponse(BaseModel):
    index: int = Field(description="position in the request's responses")
    reward: float | None = Field(description="the aggregated reward; null when no dimension could be scored")
    rank: int | None = Field(description="1 = best in the group; equal rewards share a rank; null without reward")
    scores: dict[str, float | None] = Field(description="raw score per dimension, in its own range; null where "
                                                        "not scored (or its condition is not met)")
    steps: dict[str, list[float | None]] | None = Field(
        default=None, description="each step-scoped dimension's raw score per policy turn of the response (a text: "
                                  "one turn), in order; its entry in scores is their mean. null when the rubric has "
                                  "no step-scoped dimension")


class RewardResponse(BaseModel):
    rubric: RubricIdentity = Field(description="the rubric the scores follow")
    judge: str
    dimensions: list[DimensionInfo]
    results: list[ScoredResponse]


class ErrorBody(BaseModel):
    detail: str | list[Any]


class ChatRequest(BaseModel):
    """OpenAI's chat-completions request; decoding follows the judge backend's settings, so other keys
    (max_tokens, temperature, ...) are accepted and ignored."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)


class ChatChoice(BaseModel):
    index: int
    message: ChatMessage
    finish_reason: str


class ChatResponse(BaseModel):
    id: str
    object: str = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]

    @classmethod
    def answer(cls, model: str, text: str) -> ChatResponse:
        """A one-choice answer."""
        created = int(time.time())
        return cls(id=f"chatcmpl-{time.time_ns()}", created=created, model=model,
                   choices=[ChatChoice(index=0, message=ChatMessage(role="assistant", content=text),
                                       finish_reason="stop")])


Turn = str | Annotated[list[ChatMessage], Field(min_length=1)]


class BatchRewardRequest(BaseModel):
    """A flat batch, one completion per row, as TRL's and OpenRLHF's remote reward functions send it.

    TRL's shape: ``prompts`` and ``completions`` (text or chat messages), plus dataset columns as lists with one
    value per row (``"reference": ["7", "7"]``), as TRL hands them to a reward function. OpenRLHF's shape
    (``openrlhf/utils/remote_rm_utils.py``): ``query`` (each prompt followed by its response, as one text),
    ``prompts`` and ``labels`` (read as the ``reference`` field rubric checks match against). Consecutive rows with
    the same prompt and columns form a group, as both trainers lay out the samples of a prompt.
    """

    # other keys are per-row columns: a list with one JSON scalar per row
    model_config = ConfigDict(extra="allow")
    __pydantic_extra__: dict[str, list[Scalar]] = Field(init=False)

    prompts: list[Turn] = Field(min_length=1, description="one prompt per row, text or chat messages",
                                examples=[["3+4=", "3+4="]])
    completions: list[Turn] | None = Field(default=None, description="TRL: one completion per row, text or chat "
                                                                      "messages (the last assistant turn is judged)",
                                           examples=[["7", "12"]])
    query: list[str] | None = Field(default=None, description="OpenRLHF: each row's prompt followed by its "
                                                               "response, one text")
    labels: list[Scalar] | None = Field(default=None, description="OpenRLHF: each row's label, read as the "
                                                                   "reference field", examples=[["7", "7"]])

    @model_validator(mode="after")
    def _rows(self) -> BatchRewardRequest:
        n = len(self.prompts)
        if (self.completions is None) == (self.query is None):
            raise ValueError("give either completions (TRL) or query (OpenRLHF), one per prompt")
        for name, values in [("completions", self.completions), ("query", self.query), ("labels", self.labels),
                             *(self.model_extra or {}).items()]:
            if values is not None and len(values) != n:
                raise ValueError(f"{name} has {len(values)} values for {n} prompts")
        extra = self.model_extra or {}
        if "prompt" in extra or ("reference" in extra and self.labels is not None):
            raise ValueError("a column named 'prompt', or 'reference' beside labels, would hide the request's own")
        if self.query is not None:
            for i, (prompt, query) in enumerate(zip(self.prompts, self.query, strict=True)):
                if not isinstance(prompt, str) or not query.startswith(prompt):
                    raise ValueError(f"query[{i}] does not start with prompts[{i}]: OpenRLHF's query is the prompt "
                                     "text followed by the response")
        return self

    def rows(self) -> tuple[list[dict[str, Any]], list[Any]]:
        """Each row's record (prompt, columns, ``reference`` from ``labels``) and its completion."""
        columns = dict(self.model_extra or {})
        if self.labels is not None:
            columns["reference"] = self.labels
        records = [{**{k: v[i] for k, v in columns.items()},
                    "prompt": p if isinstance(p, str) else [m.model_dump() for m in p]}
                   for i, p in enumerate(self.prompts)]
        if self.query is not None:
            return records, [q[len(p):] for q, p in zip(self.query, self.prompts, strict=True)]
        completions = [c if isinstance(c, str) else [m.model_dump() for m in c] for c in self.completions or []]
        return records, completions


class BatchRewardResponse(BaseModel):
    rewards: list[float | None] = Field(description="one reward per row, in order; null when no dimension could be "
                                                    "scored (TRL's convention), or the request's ?unscored= value")
    scores: list[float | None] = Field(description="the same rewards: OpenRLHF reads `scores` for dynamic filtering")
    extra_logs: dict[str, list[float | None]] = Field(
        description="each rubric dimension's raw score per row, in its own range; null where not scored "
                    "(OpenRLHF logs these)")
    rubric: RubricIdentity = Field(description="the rubric the scores follow")
