"""docs/integrations.md's Python snippets run as written (paths and the server's address swapped for local ones),
and print what their comments say."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.commands.common import compose_and_check
from rlkit.lm.models import build_tiny_policy
from rlkit.serve.app import RewardServer, ServeSettings, create_app

PAGE = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"


def _blocks() -> list[str]:
    return re.findall(r"```python\n(.+?)\n```", PAGE.read_text(encoding="utf-8"), re.DOTALL)


def _run(code: str) -> list[str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(PAGE), "exec"), {"__name__": "snippet"})
    return out.getvalue().splitlines()


def _commented(code: str) -> list[str]:
    """What each ``print(...)  # comment`` says it prints."""
    return [m.strip() for m in re.findall(r"^print\(.*\)\s+# (.+)$", code, re.MULTILINE)]


def test_the_page_has_the_snippets_this_test_runs():
    blocks = _blocks()
    assert len(blocks) == 5
    assert "GRPOTrainer" in blocks[0] and "compute_score" in blocks[2] and "DPOTrainer" in blocks[3]
    assert "RLKIT_URL" in blocks[4]


@pytest.mark.parametrize("index", [0, 1, 2])
def test_trl_and_verl_snippets_print_what_they_say(index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the GRPO snippet writes its output_dir here
    code = _blocks()[index]
    printed, expected = _run(code), _commented(code)
    assert expected and [line for line in printed if line in expected] == expected, printed  # TRL prints its logs too


def test_dpo_snippet_on_pairs_written_by_rlkit_data_pairs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ranked = [{"prompt": f"{i}+1=", "responses": [{"text": str(i + 1), "rank": 1}, {"text": "no", "rank": 2}]}
              for i in range(3)]
    Path("rankings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ranked), encoding="utf-8")
    assert main(["data", "pairs", "in=rankings.jsonl", "out=pairs.jsonl"]) == 0
    code = _blocks()[3].replace("/path/to/policy", str(build_tiny_policy()))
    code = code.replace('DPOConfig(output_dir="dpo")', 'DPOConfig(output_dir="dpo", use_cpu=True, report_to="none")')
    namespace: dict = {}
    exec(compile(code, str(PAGE), "exec"), namespace)
    assert len(namespace["trainer"].train_dataset) == 3


def test_remote_reward_snippet_against_rlkit_serve():
    validated = compose_and_check(["judge=rule"], read_data=False)
    with RewardServer(create_app(validated, ServeSettings(api_key_env=None, rate_limit=0))) as server:
        code = _blocks()[4].replace('"http://127.0.0.1:8000"', repr(server.url))
        (printed,) = _run(code)
    rewards = json.loads(printed)
    assert len(rewards) == 2 and rewards[0] > rewards[1]  # "7" is right for 3+4=, "12" is not
