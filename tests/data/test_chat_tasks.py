"""Chat-formatted tasks: the synthetic task as conversational prompts, rendered with the model's chat template
exactly as ``apply_chat_template`` renders them, and seen that way by the sample table and by judges."""

from __future__ import annotations

import json

import pytest

from rlkit.cli import main
from rlkit.core.types import Rollout
from rlkit.data.records import arithmetic_task, seen_prompt, synthetic_records
from rlkit.lm.gguf import import_gguf
from rlkit.lm.models import load_policy
from rlkit.lm.sampling import tokenize_prompts
from rlkit.testing.gguf_files import write_tiny_gguf


@pytest.fixture(scope="module")
def chat_tokenizer(tmp_path_factory):
    """A tokenizer with a chat template, as a GGUF import gives it."""
    root = tmp_path_factory.mktemp("chat")
    write_tiny_gguf(root / "tiny.gguf", architecture="qwen2")
    return load_policy(import_gguf(root / "tiny.gguf", cache_dir=root / "cache", quiet=True))[1]


def test_the_chat_task_asks_the_same_sums_as_messages_with_the_instruction():
    text = arithmetic_task(8, seed=3)
    chat = arithmetic_task(8, seed=3, chat=True, instruction="Reply with only the number.")
    for t, c in zip(text, chat, strict=True):
        a, b = t["prompt"].rstrip("=").split("+")
        assert c["prompt"] == [{"role": "user", "content": f"What is {a} + {b}? Reply with only the number."}]
        assert c["reference"] == t["reference"] == str(int(a) + int(b))
    assert synthetic_records("arithmetic", 8, 3, True, None)[0]["prompt"][0]["content"].endswith("?")


def test_chat_prompts_are_tokenised_as_apply_chat_template_gives_them(chat_tokenizer):
    records = arithmetic_task(5, seed=1, chat=True, instruction="Reply with only the number.")
    ids, mask = tokenize_prompts(chat_tokenizer, records)
    for row, m, record in zip(ids.tolist(), mask.tolist(), records, strict=True):
        expected = chat_tokenizer.apply_chat_template(record["prompt"], add_generation_prompt=True,
                                                      return_dict=False)
        assert [t for t, keep in zip(row, m, strict=True) if keep] == list(expected)


def test_judges_read_the_prompt_as_the_policy_saw_it(chat_tokenizer):
    from rlkit.lm.sampling import render_prompt

    records = arithmetic_task(2, seed=0, chat=True)
    rendered = [render_prompt(r["prompt"], chat_tokenizer) for r in records]
    assert rendered[0].startswith("<|im_start|>user\nWhat is ") and rendered[0].endswith("<|im_start|>assistant\n")
    seen = Rollout(records=records, completions=[["7"], ["8"]], prompt_texts=rendered)
    assert [seen_prompt(seen, i) for i in range(2)] == rendered
    unrendered = Rollout(records=records, completions=[["7"], ["8"]])
    assert seen_prompt(unrendered, 0) == f"user: {records[0]['prompt'][0]['content']}"
    with pytest.raises(ValueError, match="1 prompt texts for 2 records"):
        Rollout(records=records, completions=[["7"], ["8"]], prompt_texts=rendered[:1])


@pytest.mark.parametrize("override, key", [("data.chat=true", "data.chat"),
                                           ("data.instruction=Be brief.", "data.instruction")])
def test_chat_options_with_a_data_file_are_refused(tmp_path, capsys, override, key):
    records = tmp_path / "records.jsonl"
    records.write_text('{"prompt": "3+4=", "reference": "7"}\n')
    assert main(["validate", "data=jsonl", f"data.path={records}", override]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlkit: error: {key}: shapes the synthetic task's prompts") and err.count("\n") == 1


@pytest.mark.parametrize("message, expected", [
    ({"role": "wizard", "content": "1+1="},
     "\"prompt\"[0]: unknown role 'wizard'; a chat message's role is one of system, developer, user, assistant"),
    ({"role": "user", "content": 5}, '"prompt"[0]: content must be text, got int'),
])
def test_a_chat_record_of_an_unknown_role_or_non_text_content_is_one_line(tmp_path, capsys, message, expected):
    data = tmp_path / "chat.jsonl"
    data.write_text('{"prompt": "1+2=", "reference": "3"}\n' + json.dumps({"prompt": [message], "reference": "2"})
                    + "\n")
    assert main(["validate", f"data.path={data}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlkit: error: {data}:2: {expected}") and err.count("\n") == 1, err


def test_a_chat_preset_scores_a_file_of_completions(tmp_path, capsys):
    """`rlkit score` judges completions as they are, so the preset's synthetic-task keys are no error there: scoring a
    file with the judge, rubric and weights a chat run trained with is one override (experiment=...)."""
    records = tmp_path / "completions.jsonl"
    records.write_text('{"prompt": "3+4=", "reference": "7", "completion": "7"}\n'
                       '{"prompt": "3+5=", "reference": "8", "completion": "9"}\n')
    out = tmp_path / "scores.jsonl"
    assert main(["score", f"data.path={records}", "data.chat=true", "data.instruction=Be brief.",
                 f"score.output={out}"]) == 0
    scored = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["completion"] for row in scored] == ["7", "9"]
    assert scored[0]["reward"] > scored[1]["reward"]
