"""The acceptance run of judge spend: ``rlkit fit`` with the ``llm`` judge asking a loopback OpenAI-compatible server,
whose own counts of calls and tokens the logged ``judge/`` figures must equal; and ``rlkit validate`` printing the
estimate those calls follow."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.runs.history import read_history
from rlkit.testing.canned_chat import CannedChatServer

pytestmark = pytest.mark.slow
VERDICT = json.dumps({"format": 1, "correctness": 0, "brevity": 4, "repetition": 5})  # the arithmetic rubric
STEPS, PROMPTS, GENERATIONS = 2, 2, 3


def _overrides(url: str, run_dir: Path) -> list[str]:
    return ["judge=llm", "judge.params.backend.name=openai",
            f"++judge.params.backend.params={{base_url: '{url}', max_retries: 0, price_input_per_million: 3.0, "
            "price_output_per_million: 15.0}", f"trainer.max_steps={STEPS}", f"batch_size={PROMPTS}",
            f"num_generations={GENERATIONS}", "data.heldout_fraction=0", "logger=csv", f"hydra.run.dir={run_dir}"]


def test_logged_judge_spend_equals_what_the_server_served(tmp_path, capsys, monkeypatch):
    from rlkit.train.module import RubricRLModule

    run_dir = tmp_path / "run"
    served_in_steps: list[dict[str, int]] = []  # the server's own counts, step by step
    training_step = RubricRLModule.training_step

    def counted_step(self, *args, **kwargs):
        before = dict(server.served)
        loss = training_step(self, *args, **kwargs)
        served_in_steps.append({k: server.served[k] - before[k] for k in before})
        return loss

    monkeypatch.setattr(RubricRLModule, "training_step", counted_step)
    with CannedChatServer(lambda messages: VERDICT) as server:
        assert main(["validate", *_overrides(server.url, run_dir)]) == 0
        validated = capsys.readouterr().out
        assert main(["fit", *_overrides(server.url, run_dir)]) == 0
        printed = capsys.readouterr().out
    steps = [m for _, m in read_history(run_dir / "metrics.jsonl") if "judge/calls" in m]
    assert len(steps) == len(served_in_steps) == STEPS
    for logged, served in zip(steps, served_in_steps, strict=True):
        assert logged["judge/calls"] == served["calls"] > 0
        assert logged["judge/tokens_in"] == served["prompt_tokens"]
        assert logged["judge/tokens_out"] == served["completion_tokens"]
        cost = (3.0 * served["prompt_tokens"] + 15.0 * served["completion_tokens"]) / 1e6
        assert logged["judge/cost"] == pytest.approx(cost)
        assert logged["judge/retries"] == 0 and logged["judge/calls_without_usage"] == 0

    # the estimate follows the real call pattern: one call a completion, cache hits aside
    expected = STEPS * PROMPTS * GENERATIONS
    line = f"{PROMPTS} prompts × {GENERATIONS} completions × 1 permutation = {PROMPTS * GENERATIONS} a step; " \
           f"× {STEPS} steps = {expected} calls"
    assert line in validated, validated
    assert re.search(r"judge tokens \(run\): ≈ [\d,]+ in, ≤ [\d,]+ out; cost ≈ ", validated)
    assert sum(m["judge/calls"] + m["judge/cache_hits"] for m in steps) == expected

    # the end-of-run summary counts the whole run, held-out scoring before and after training included
    whole = server.served
    assert (f"judge spend: {whole['calls']:,} calls, {whole['prompt_tokens']:,} tokens in, "
            f"{whole['completion_tokens']:,} out") in printed
    report = (run_dir / "report" / "report.md").read_text()
    calls = int(sum(m["judge/calls"] for m in steps))
    assert "## Judge spend" in report and f"| `judge/calls` | {calls:,} |" in report
