"""A reward model reads a prompt in ``rlkit fit`` as it read it in training: the texts ``train-grm`` and ``train-rm``
build from ``rlkit data from-labels`` output equal the texts ``judge=grm`` and ``judge=reward_model`` build for the
same question as a fit record, for a chat record (labelled from a chat run, or written by hand as the bare question)
and a plain-text one. Nothing is trained: the models are untrained tiny ones, their inputs are recorded on the way in.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from rlkit.cli import main
from rlkit.core.registry import load_registry
from rlkit.core.rubric import load_rubric
from rlkit.core.types import Rollout
from rlkit.data.prompts import reward_prompt
from rlkit.data.records import arithmetic_task, prompt_text
from rlkit.evaluation.labelling import labelling_line
from rlkit.grm.model import GRM_INFO, GenerativeRewardModel, GrmFormat
from rlkit.grm.reward_model import ScalarRewardModel
from rlkit.grm.rm_training import RewardModelModule, RmTrainConfig
from rlkit.grm.training import GrmDataConfig, GrmModule, GrmTrainConfig, load_preference_data

# the readable templates: they show the prompt whether or not a reference is given
READABLE = GrmFormat("grm/pairwise.jinja", "grm/listwise.jinja", 64)
INSTRUCTION = "Reply with only the number."  # experiment=smollm2_arithmetic's
# the trainers' training_step runs outside a Trainer here: its self.log() has nowhere to go, as intended
pytestmark = pytest.mark.filterwarnings("ignore:You are trying to `self.log\\(\\)`")


@pytest.fixture(scope="module")
def tiny(cache) -> tuple[Any, Any]:
    from rlkit.lm.models import TinyPolicySpec, build_model, build_tokenizer

    spec = TinyPolicySpec(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                          num_key_value_heads=1, max_position_embeddings=1024)
    tokenizer = build_tokenizer(spec)
    return build_model(spec, tokenizer).eval(), tokenizer


def _grm_folder(tiny, folder: Path, objective: str) -> Path:
    """The untrained tiny model saved as train-grm saves a GRM (its grm.json says how it is asked)."""
    from rlkit.lm.models import save_policy

    save_policy(*tiny, folder, "merged")
    info = {"objective": objective, "format": {"pairwise_template": READABLE.pairwise_template,
                                               "listwise_template": READABLE.listwise_template,
                                               "max_response_chars": READABLE.max_response_chars}}
    (folder / GRM_INFO).write_text(json.dumps(info))
    return folder


def _rubric() -> Any:
    from rlkit.core.package_files import resolve_path

    return load_rubric(resolve_path("pkg://rlkit.conf/rubric_files/chat_arithmetic.yaml"))


def _fit_records(kind: str) -> list[dict[str, Any]]:
    """Four records as ``rlkit fit`` reads them: the chat task (one user message) or the plain-text one."""
    if kind == "plain":
        return arithmetic_task(4, seed=3)
    return arithmetic_task(4, seed=3, chat=True, instruction=INSTRUCTION)


def _labelled(records: list[dict[str, Any]], form: str, folder: Path) -> Path:
    """Two labelled answers per record, the right one better, in a labelling file whose prompt is written as a
    labelling page writes a fit run's record (``from-run``: ``user: <question>`` for a chat record) or as a person
    writes it by hand (``bare``: the question alone, as conf/calibration/chat_arithmetic_labels.jsonl)."""
    rubric = _rubric()
    lines = []
    for record in records:
        prompt = record["prompt"]
        if form == "bare" and not isinstance(prompt, str):
            prompt = prompt[-1]["content"]
        for answer, level in ((record["reference"], 1), (f"It is {record['reference']}0, I think.", 0)):
            line = labelling_line(prompt=prompt, completion=answer, rubric=rubric, step=0, window=0,
                                  reference=record["reference"])
            line["labels"] = {d.name: level for d in rubric.dimensions}
            lines.append(line)
    path = folder / f"labels-{form}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert main(["data", "from-labels", str(path), "--out", str(folder / f"data-{form}"),
                 "--heldout-fraction", "0.3"]) == 0
    return folder / f"data-{form}"


def _record_inputs(monkeypatch, cls: type, method: str, argument: int = 1) -> list[str]:
    """Every text ``cls.method`` is handed (its positional ``argument``), recorded on the way to the real method."""
    seen: list[str] = []
    real = getattr(cls, method)

    def recording(*args: Any, **kwargs: Any) -> Any:
        seen.extend(args[argument])
        return real(*args, **kwargs)

    monkeypatch.setattr(cls, method, recording)
    return seen


def _judge_rollout(records: list[dict[str, Any]], train: list[Any]) -> Rollout:
    """The fit records whose question the training split holds, each with its two labelled answers as its group."""
    asked = {reward_prompt(example.prompt) for example in train}
    chosen = [r for r in records if reward_prompt(r["prompt"]) in asked]
    assert chosen, "the training split holds some of the labelled questions"
    groups = [[r["reference"], f"It is {r['reference']}0, I think."] for r in chosen]
    return Rollout(records=chosen, completions=groups)


CASES = [("chat", "from-run"), ("chat", "bare"), ("plain", "from-run")]


@pytest.mark.parametrize("objective", ["pairwise", "listwise"])
@pytest.mark.parametrize(("kind", "form"), CASES)
def test_train_grm_and_judge_grm_ask_the_same_question(kind, form, objective, tiny, tmp_path, monkeypatch):
    records = _fit_records(kind)
    data = _labelled(records, form, tmp_path)
    settings = GrmTrainConfig(objective=objective, data=GrmDataConfig(train=str(data / "train.jsonl"),
                                                                       val=str(data / "heldout.pairs.jsonl")))
    train, _ = load_preference_data(settings.data, tmp_path, registry=None, listwise=objective == "listwise")
    grm = GenerativeRewardModel(*tiny, READABLE, objective)
    asked = _record_inputs(monkeypatch, GenerativeRewardModel, "next_token_logits")
    GrmModule(grm, settings, total_steps=1).training_step(train, 0)
    trained_on = set(asked)
    asked.clear()
    judge = load_registry().create("judge", "grm", {"model": str(_grm_folder(tiny, tmp_path / "grm", objective))})
    judge.assess(_judge_rollout(records, train), _rubric())
    judged = set(asked)
    # pairwise: both orders on both sides; listwise: training shows one shuffled order, the judge both
    assert trained_on <= judged and (objective == "listwise" or trained_on == judged)
    if kind == "chat":
        assert all("Question: What is " in q and "user: " not in q for q in judged)


@pytest.mark.parametrize(("kind", "form"), CASES)
def test_train_rm_and_judge_reward_model_read_the_same_text(kind, form, tiny, tmp_path, monkeypatch):
    records = _fit_records(kind)
    data = _labelled(records, form, tmp_path)
    settings = RmTrainConfig(data=GrmDataConfig(train=str(data / "train.pairs.jsonl"),
                                                val=str(data / "heldout.pairs.jsonl")))
    train, _ = load_preference_data(settings.data, tmp_path, registry=None, block="rm")
    rm = ScalarRewardModel(*tiny)
    read = _record_inputs(monkeypatch, ScalarRewardModel, "encode")
    RewardModelModule(rm, settings, total_steps=1).training_step(train, 0)
    trained_on = set(read)
    read.clear()
    folder = rm.save(tmp_path / "reward_model", {})
    judge = load_registry().create("judge", "reward_model", {"model": str(folder)})
    judge.assess(_judge_rollout(records, train), _rubric())
    assert trained_on == set(read)
    if kind == "chat":
        assert all(text.startswith("What is ") for text in read)


def test_one_question_renders_alike_in_every_shape():
    messages = [{"role": "user", "content": "What is 3 + 4?"}]
    assert reward_prompt(messages) == reward_prompt(prompt_text(messages)) == reward_prompt("What is 3 + 4?") \
        == "What is 3 + 4?"
    # the tiny GRM's synthetic prompts, and any plain-text prompt, are read as they are
    assert reward_prompt("3+4=") == "3+4="
    turns = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "3+4?"}]
    assert reward_prompt(turns) == reward_prompt(prompt_text(turns)) == "system: Be brief.\nuser: 3+4?"
    dialogue = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
                {"role": "user", "content": "3+4?"}]
    assert reward_prompt(dialogue) == reward_prompt(prompt_text(dialogue)) == prompt_text(dialogue)
