"""`rlkit validate` (and so `rlkit fit`) hints, in one line, that a model with a chat template trained on plain
prompts should get them as chat turns, and a LoRA adapter rather than a full fine-tune."""

from __future__ import annotations

import json
import shutil

import pytest

from rlkit.cli import main
from rlkit.lm.models import build_tiny_policy

HINT = "carries a chat template (an instruct model) but is trained on plain prompts"


@pytest.fixture(scope="module")
def instruct(tmp_path_factory):
    """The tiny policy with a chat template, as an instruct model's folder carries one."""
    root = tmp_path_factory.mktemp("models")
    folder = shutil.copytree(build_tiny_policy(cache_dir=root), root / "instruct")
    (folder / "chat_template.jinja").write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n"
                                                "{% endfor %}")
    return folder


def _hints(capsys, *overrides: str) -> list[str]:
    assert main(["validate", "optim.lr=1e-5", *overrides]) == 0
    return [line for line in capsys.readouterr().err.splitlines() if HINT in line]


def test_an_instruct_model_on_plain_prompts_gets_one_line_naming_chat_and_lora(capsys, instruct):
    (line,) = _hints(capsys, f"model.name_or_path={instruct}")
    assert line.startswith(f"rlkit: warning: {instruct} {HINT}: data.chat=true")
    assert "model.lora.r=16" in line
    (line,) = _hints(capsys, f"model.name_or_path={instruct}", "model.lora.r=8")
    assert "data.chat=true" in line and "lora" not in line.split(";")[0], "LoRA is on already"
    assert _hints(capsys, f"model.name_or_path={instruct}", "data.chat=true") == []


def test_a_data_file_of_plain_prompts_is_hinted_and_chat_messages_are_not(capsys, instruct, tmp_path):
    plain, chat = tmp_path / "plain.jsonl", tmp_path / "chat.jsonl"
    sums = [(a, b) for a in range(2, 9) for b in range(2, 5)]
    plain.write_text("".join(json.dumps({"prompt": f"{a}+{b}=", "reference": str(a + b)}) + "\n" for a, b in sums))
    chat.write_text("".join(json.dumps({"prompt": [{"role": "user", "content": f"{a}+{b}="}],
                                        "reference": str(a + b)}) + "\n" for a, b in sums))
    (line,) = _hints(capsys, f"model.name_or_path={instruct}", f"data.path={plain}")
    assert f"write {plain}'s prompts as chat messages" in line
    assert _hints(capsys, f"model.name_or_path={instruct}", f"data.path={chat}") == []


def test_a_model_without_a_chat_template_and_the_embedded_policy_get_no_hint(capsys, tmp_path):
    assert _hints(capsys, f"model.name_or_path={build_tiny_policy(cache_dir=tmp_path)}") == []
    assert _hints(capsys) == []
