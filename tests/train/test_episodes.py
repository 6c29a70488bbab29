"""Multi-turn episodes: the runner's token bookkeeping, the tools environment, the rule judge's episode checks, and a
short `rlkit fit experiment=calculator`."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import yaml

from rlkit.core.errors import ConfigError
from rlkit.core.package_files import resolve_path
from rlkit.core.types import EnvStep, Episode, Rollout
from rlkit.data.records import calculator_task
from rlkit.lm.conversation import apply_chat_format
from rlkit.lm.models import build_tiny_policy, load_policy
from rlkit.lm.sampling import GenerationRequest, demonstration_batch, sequence_log_probs
from rlkit.testing import validate_overrides
from rlkit.train.episodes import EpisodeRunner, episode_metrics
from rlkit_plugins.environments.single_turn import SingleTurn
from rlkit_plugins.environments.tools import ToolEnvironment
from rlkit_plugins.generators.hf import HFGenerator


def slow_tool(e: str) -> str:
    """Sleeps longer than any test's timeout.

    Args:
        e: Ignored.
    """
    time.sleep(30)
    return e


@pytest.fixture(scope="module")
def policy():
    model, tokenizer = load_policy(build_tiny_policy())
    template = resolve_path("pkg://rlkit.templates/chat/tiny_tools.jinja").read_text()
    response = yaml.safe_load(resolve_path("pkg://rlkit.templates/chat/tiny_tools_response.yaml").read_text())
    with torch.no_grad():  # EOS likelier, so the random policy's turns end within a few tokens and episodes go on
        model.get_output_embeddings().weight[tokenizer.eos_token_id] += 1.0
    return model, apply_chat_format(tokenizer, template, response)


class Scripted:
    """Answers every policy turn with a fixed tool message until ``max_turns``; records what it was shown."""

    max_tokens = None

    def __init__(self, max_turns: int = 3, reply: str = "1234", max_tokens: int | None = None) -> None:
        self.max_turns, self.reply, self.max_tokens = max_turns, reply, max_tokens
        self.seen: list[tuple[list[dict], str]] = []

    def reset(self, record):
        return record["prompt"]

    def step(self, messages, completion):
        self.seen.append((messages, completion))
        return EnvStep([{"role": "tool", "name": "calc", "content": self.reply}], done=False,
                       info={"tool_calls": 1, "tool_errors": 0})


def _recording(model, tokenizer):
    generator = HFGenerator(HFGenerator.Params())
    returned = []

    def generate(request):
        out = generator.generate(model, tokenizer, request)
        returned.append(out)
        return out
    return generate, returned


def test_single_turn_is_the_loop_without_an_environment(policy):
    model, tokenizer = policy
    generator = HFGenerator(HFGenerator.Params())
    request = GenerationRequest([{"prompt": "2+3="}, {"prompt": "11+4="}], 3, 8, seeds=[1, 2])
    torch.manual_seed(0)
    plain = generator.generate(model, tokenizer, request)
    torch.manual_seed(0)
    runner = EpisodeRunner(SingleTurn(), tokenizer)
    played = runner.run(lambda r: generator.generate(model, tokenizer, r), request)
    for name in ("input_ids", "attention_mask", "completion_mask", "truncated"):
        assert torch.equal(getattr(plain, name), getattr(played, name)), name
    assert played.texts == plain.texts and played.episodes is None and episode_metrics(played) == {}


def test_episode_tokens_are_the_sampled_ids_and_the_rendered_turns(policy):
    model, tokenizer = policy
    env = Scripted(max_turns=3)
    generate, returned = _recording(model, tokenizer)
    records = calculator_task(2, seed=3)
    out = EpisodeRunner(env, tokenizer).run(generate, GenerationRequest(records, 2, 6, seeds=[5, 6]))
    assert len(returned) >= 1 and out.episodes is not None
    p = out.prompt_length
    # each turn's ids, as the generator returned them, sit in the episode's completion at the turn's span
    turn_ids: dict[int, list[list[int]]] = {row: [] for row in range(4)}
    for turn, batch in enumerate(returned):
        rows = range(4) if turn == 0 else [r for r in range(4) if len(out.turn_spans[r]) > turn]
        for k, row in enumerate(rows):
            kept = int(batch.completion_mask[k].sum())
            turn_ids[row].append(batch.completion_ids[k, :kept].tolist())
    for row in range(4):
        episode = out.episodes[row // 2][row % 2]
        spans = out.turn_spans[row]
        completion = out.input_ids[row, p:]
        assert len(spans) == episode.num_turns == len(turn_ids[row])
        for (start, end), ids in zip(spans, turn_ids[row], strict=True):
            assert completion[start:end].tolist() == ids, "a policy turn was re-tokenised"
            assert out.completion_mask[row, start:end].all()
        end = spans[-1][1]
        assert int(out.completion_mask[row].sum()) == sum(b - a for a, b in spans)  # environment tokens: 0
        assert out.attention_mask[row, p:p + end].all() and not out.attention_mask[row, p + end:].any()
        # the whole row is the chat template's rendering of the episode (one token per character here)
        prompt = out.input_ids[row, :p][out.attention_mask[row, :p].bool()]
        text = tokenizer.decode(torch.cat([prompt, completion[:end]]))
        rendered = tokenizer.apply_chat_template(list(episode.messages), tools=None, tokenize=False)
        assert rendered.startswith(text) and text.endswith(episode.turns[-1] + ("<eos>" if not out.truncated[row]
                                                                                else ""))
        assert out.texts[row // 2][row % 2] == episode.turns[-1]
        ended = episode.info["ended"]
        assert ended in ("max_turns", "truncated") and (ended == "max_turns") == (episode.num_turns == 3)
        assert episode.info.get("tool_calls", 0) == sum(1 for m in episode.messages if m.get("role") == "tool")
    # the log-prob pass reads every row up to its last turn
    logp = sequence_log_probs(model, out)
    assert logp.shape == out.completion_mask.shape and torch.isfinite(logp).all()
    metrics = episode_metrics(out)
    assert metrics["episode/env_tokens"] > 0 and 1 <= metrics["episode/turns"] <= 3


def test_token_budget_ends_episodes(policy):
    model, tokenizer = policy
    generate, _ = _recording(model, tokenizer)
    out = EpisodeRunner(Scripted(max_turns=5, max_tokens=12), tokenizer).run(
        generate, GenerationRequest(calculator_task(2, seed=4), 2, 8, seeds=[1, 2]))
    for group in out.episodes:
        for episode in group:
            assert episode.info["ended"] in ("max_tokens", "truncated")
    assert int(out.completion_spans.max()) <= 12 + 8


def test_tools_environment_reads_calls_and_never_raises(policy):
    _, tokenizer = policy
    env = ToolEnvironment(ToolEnvironment.Params(timeout_s=0.5, tools=[
        "rlkit_plugins.environments.calculator:calc", "tests.train.test_episodes:slow_tool"]))
    env.setup(tokenizer)
    messages = [{"role": "user", "content": "37*14"}]
    try:
        ok = env.step(messages, '[calc(e="37*14")]')
        assert ok.observation == [{"role": "tool", "name": "calc", "content": "518"}] and not ok.done
        assert ok.info == {"tool_calls": 1, "tool_errors": 0}
        assert env.step(messages, "518").done
        for bad, says in (('[calc(e=37*14)]', "could not be read"), ('[nope(e="1")]', "no tool named 'nope'"),
                          ('[calc(x="1")]', "unexpected keyword"), ('[calc(e="1/0")]', "ZeroDivisionError"),
                          ('[slow_tool(e="1")]', "longer than 0.5 s")):
            out = env.step(messages, bad)
            assert not out.done and out.info["tool_errors"] == 1 and says in out.observation[0]["content"], bad
        # the pool that timed out was replaced: the next call runs
        assert env.step(messages, '[calc(e="2*3")]').observation[0]["content"] == "6"
    finally:
        env.close()


def test_tools_environment_needs_a_response_template():
    _, tokenizer = load_policy(build_tiny_policy())
    env = ToolEnvironment(ToolEnvironment.Params())
    with pytest.raises(ConfigError, match="response_template"):
        env.setup(tokenizer)
    with pytest.raises(ConfigError, match="cannot import the tool"):
        ToolEnvironment(ToolEnvironment.Params(tools=["no.such.module:f"]))


def test_rule_judge_scores_episode_counts():
    from rlkit.core.registry import Registry, create_plugin_manager
    from rlkit.core.rubric import load_rubric

    rubric = load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/calculator.yaml"))
    judge = Registry(create_plugin_manager()).create("judge", "rule", {})
    judge.check_rubric(rubric)
    record = {"prompt": "37*14", "reference": "518"}
    episodes = [[Episode((), ("518",), {"tool_calls": 1.0, "tool_errors": 0.0}),
                 Episode((), ("518",), {"tool_calls": 2.0, "tool_errors": 1.0}),
                 Episode((), ("518",), {})]]
    scores = judge.score(Rollout([record], [["518", "518", "518"]], episodes=episodes), rubric)
    assert scores[0, :, 0].tolist() == [1.0, 0.0, 0.0]  # same text, different episodes: scored apart
    assert scores[0, :, 1].tolist() == [1.0, 1.0, 1.0]
    single = judge.score(Rollout([record], [["518"]]), rubric)
    assert torch.isnan(single[0, 0, 0]) and single[0, 0, 1] == 1.0  # no episode: tool_use does not apply


def test_multi_turn_demonstrations_mask_the_tool_turns(policy):
    _, tokenizer = policy
    records = calculator_task(3, seed=0)
    batch = demonstration_batch(tokenizer, records, 32)
    p = batch.prompt_length
    for row, record in enumerate(records):
        start, end = batch.turn_spans[row][0][0], batch.turn_spans[row][-1][1]
        policy_text = tokenizer.decode(batch.input_ids[row, p:][batch.completion_mask[row].bool()])
        call, _, answer = (m["content"] for m in record["completion"])
        assert policy_text == f"{call}<eos>{answer}<eos>" and start == 0
        assert tokenizer.decode(batch.input_ids[row, p:p + end]) == f"{call}<eos>\nR:{record['reference']}\nA:" \
                                                                      f"{answer}<eos>"
    assert not batch.truncated.any()


def test_validate_refuses_what_episodes_cannot_do():
    with pytest.raises(ConfigError, match="max_lag=0"):
        validate_overrides(["experiment=calculator", "generator=openai_server",
                            "generator.params.base_url=http://127.0.0.1:9", "generator.params.max_lag=1"])
    with pytest.raises(ConfigError, match="demonstrations plays no episodes"):
        validate_overrides(["experiment=calculator", "objective=sft"])
    with pytest.raises(ConfigError, match="model.chat_template"):
        validate_overrides(["experiment=calculator", "model.chat_template=/no/such/template.jinja"])


def test_fit_plays_tool_episodes(tmp_path: Path, monkeypatch):
    from rlkit.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["fit", "experiment=calculator", "trainer.max_steps=2", "batch_size=2", "num_generations=2",
                 "model.warm_start.steps=3", "logger=none", "data.num_prompts=16", "hydra.run.dir=run"])
    assert code in (0, None)
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert rows and "episode" in rows[0] and rows[0]["episode"].startswith("assistant: ")
    history = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [h["metrics"] for h in history if "episode/turns" in h["metrics"]]
    assert len(steps) == 2 and all(1 <= s["episode/turns"] <= 2 for s in steps)


def test_request_prompt_ids_reach_the_generator(policy):
    """The first turn is sampled after the template's rendering with the tools listed, not the bare prompt."""
    model, tokenizer = policy
    env = ToolEnvironment(ToolEnvironment.Params(max_turns=2))
    seen = []
    generator = HFGenerator(HFGenerator.Params())

    def generate(request):
        seen.append(request)
        return generator.generate(model, tokenizer, request)
    try:
        EpisodeRunner(env, tokenizer).run(generate, GenerationRequest(calculator_task(1, seed=1), 2, 4,
                                                                      greedy=True))
    finally:
        env.close()
    first = seen[0]
    assert tokenizer.decode(first.prompt_token_ids[0]).startswith("T:calc(e)\nQ:")
    assert replace(first, prompt_token_ids=None).records[0]["prompt"][0]["role"] == "user"


def _episode(*turns: str, tool: str = "518") -> Episode:
    messages: list[dict] = [{"role": "user", "content": "37*14"}]
    for i, turn in enumerate(turns):
        messages.append({"role": "assistant", "content": turn})
        if i < len(turns) - 1:
            messages.append({"role": "tool", "name": "calc", "content": tool})
    return Episode(tuple(messages), turns, {"tool_calls": float(len(turns) - 1), "tool_errors": 0.0}, 1)


def test_step_dimensions_are_scored_on_each_turn():
    from rlkit.core.registry import Registry, create_plugin_manager
    from rlkit.core.rubric import load_rubric
    from rlkit.reward.pipeline import check_judge_output
    from rlkit.reward.steps import score_steps, single_turn_steps, turn_rollout, with_step_means

    rubric = load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/calculator_steps.yaml"))
    judge = Registry(create_plugin_manager()).create("judge", "rule", {})
    episodes = [[_episode('[calc(e="37*14")]', "518"), _episode("518 is it")]]
    rollout = Rollout([{"prompt": [{"role": "user", "content": "37*14"}], "reference": "518"}],
                      [["518", "518 is it"]], episodes=episodes)
    turn, exists = turn_rollout(rollout, 1)
    assert exists.tolist() == [[True, False]] and turn.completions == [["518"], [""]]
    assert [m["role"] for m in turn.records[0]["prompt"]] == ["user", "assistant", "tool"]  # the context before
    steps = score_steps(lambda r: check_judge_output(judge.score(r, rubric), r, rubric, "rule"), rollout, rubric, 3)
    assert steps.shape == (1, 2, 3, 3) and torch.isnan(steps[..., :2]).all()  # episode-scoped: no step scores
    assert steps[0, 0, :2, 2].tolist() == [1.0, 1.0] and steps[0, 1, 0, 2] == 0.0
    assert torch.isnan(steps[0, 0, 2, 2]) and torch.isnan(steps[0, 1, 1:, 2]).all()
    raw = check_judge_output(judge.score(rollout, rubric), rollout, rubric, "rule")
    means = with_step_means(raw, steps, rubric)
    assert means[0, :, 2].tolist() == [1.0, 0.0] and torch.equal(means[..., :2], raw[..., :2])
    one = single_turn_steps(raw, rubric)
    assert one.shape == (1, 2, 1, 3) and torch.equal(one[:, :, 0, 2], raw[..., 2])


def test_fit_credits_turns_with_step_scores(tmp_path: Path, monkeypatch):
    from rlkit.cli import main

    monkeypatch.chdir(tmp_path)
    code = main(["fit", "experiment=calculator", "rubric=calculator_steps", "advantage=turn_return",
                 "trainer.max_steps=2", "batch_size=2", "num_generations=2", "model.warm_start.steps=3",
                 "logger=none", "data.num_prompts=16", "hydra.run.dir=run"])
    assert code in (0, None)
    rows = [json.loads(line) for line in (tmp_path / "run" / "samples.jsonl").read_text().splitlines()]
    assert rows and all(len(r["well_formed_turn/steps"].split()) >= 1 for r in rows)
    history = [json.loads(line)["metrics"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert any("steps/well_formed_turn/turn_1" in h for h in history)


def test_calculator_demonstrations_render_their_prompt_as_the_episodes_do(policy):
    """A warm start on prompts rendered differently from the episodes' (no tool list) taught a policy that wrote
    garbage once the tool list appeared: the records' tools are the environment's, and the prompts match."""
    _, tokenizer = policy
    env = ToolEnvironment(ToolEnvironment.Params())
    try:
        records = calculator_task(2, seed=0)
        assert records[0]["tools"] == env.tools()
        demo = demonstration_batch(tokenizer, records, 32)
        runner = EpisodeRunner(env, tokenizer)
        for row, record in enumerate(records):
            prompt = demo.input_ids[row, :demo.prompt_length][demo.attention_mask[row, :demo.prompt_length].bool()]
            assert prompt.tolist() == runner.format.prompt_ids(record["prompt"])
    finally:
        env.close()


def test_single_turn_environment_reproduces_the_run_without_one(tmp_path: Path, monkeypatch):
    """environment=single_turn (the default) against no environment at all: the same metrics, step for step."""
    from rlkit.cli import main

    monkeypatch.chdir(tmp_path)
    histories = []
    for env, choice in (("single_turn", "environment=single_turn"), ("none", "~environment")):
        code = main(["fit", choice, "trainer.max_steps=3", "batch_size=2", "num_generations=4",
                     "logger=none", "model.warm_start.steps=5", f"hydra.run.dir={env}"])
        assert code in (0, None)
        rows = [json.loads(line) for line in (tmp_path / env / "metrics.jsonl").read_text().splitlines()]
        histories.append([{k: v for k, v in r["metrics"].items() if not k.startswith(("time/", "tokens_per_sec"))}
                          for r in rows])
    assert histories[0] == histories[1] and len(histories[0]) >= 3
    assert "environment" not in validate_overrides(["~environment"]).plugins  # the second run had none
