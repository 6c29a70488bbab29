"""The ``self_internalisation`` monitor: the texts' log-probs checked by hand on a tiny model, the gap's
arithmetic, its contract suite, config errors, and a short ``rlkit fit`` that logs it."""

from __future__ import annotations

import json

import pytest
import torch
from monitor_fit import fit_rows  # same folder

from rlkit import ConfigError
from rlkit.core.registry import load_registry
from rlkit.lm.models import build_tiny_policy, load_policy
from rlkit.lm.reference import FrozenCopyReference, mean_log_probs_of_texts
from rlkit.lm.sampling import render_prompt
from rlkit.reward.monitor_view import make_view
from rlkit.testing import MonitorContract
from rlkit.testing.monitor_contract import arithmetic_rubric

REGISTRY = load_registry()
RUBRIC = arithmetic_rubric()
RECORDS = [{"prompt": "1+2=", "reference": "3"}, {"prompt": "4+4=", "reference": "8"}]


def monitor(**params):
    return REGISTRY.create("monitor", "self_internalisation", {"every": 1, **params})


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    policy, tokenizer = load_policy(build_tiny_policy(cache_dir=tmp_path_factory.mktemp("tiny")))
    return policy, tokenizer


def by_hand(model, tokenizer, prompt: str, text: str) -> float:
    """Mean log-prob per token of ``text`` + EOS after the rendered prompt: one forward over the joined ids."""
    prompt_ids = tokenizer(render_prompt(prompt, tokenizer), add_special_tokens=False)["input_ids"]
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + ids])).logits[0].float()
    logp = torch.log_softmax(logits[len(prompt_ids) - 1:-1], dim=-1)
    return float(logp.gather(1, torch.tensor(ids).unsqueeze(1)).mean())


def test_log_probs_of_texts_match_a_forward_by_hand(tiny):
    policy, tokenizer = tiny
    reference = FrozenCopyReference(policy)
    with torch.no_grad():  # the policy moves away from its copy
        for p in policy.parameters():
            p.add_(0.05 * torch.randn_like(p, generator=torch.Generator().manual_seed(0)))
    texts = [["3", "first 1, second 2, finally 3"], ["8", "16"]]
    policy.train()
    on_policy, on_reference = mean_log_probs_of_texts(policy, reference, tokenizer, RECORDS, texts, 32)
    for i, record in enumerate(RECORDS):
        for j, text in enumerate(texts[i]):
            assert float(on_policy[i, j]) == pytest.approx(by_hand(policy, tokenizer, record["prompt"], text),
                                                           abs=1e-5)
            assert float(on_reference[i, j]) == pytest.approx(
                by_hand(reference.model, tokenizer, record["prompt"], text), abs=1e-5)
    assert not torch.allclose(on_policy, on_reference)
    assert policy.training  # the pass switched dropout off and put the mode back
    assert mean_log_probs_of_texts(policy, None, tokenizer, RECORDS, texts, 32)[1] is None


def test_the_gap_is_own_drift_minus_what_the_references_gained():
    # own completions: policy -1.0 vs reference -2.0 per token (drift +1.0); references: -1.5 vs -1.25 (-0.25)
    def log_probs(records, texts):
        if len(texts[0]) == 1:
            return torch.full((len(records), 1), -1.5), torch.full((len(records), 1), -1.25)
        return torch.full((len(records), len(texts[0])), -1.0), torch.full((len(records), len(texts[0])), -2.0)

    view = make_view(0, RECORDS, [["3", "3"], ["8", "9"]], torch.zeros(2, 2, 4), RUBRIC, log_probs=log_probs,
                     generate=lambda records, n: [])
    metrics = monitor().observe(0, view)
    assert metrics == pytest.approx({"internalised": -0.25, "own_drift": 1.0, "gap": 1.25})


def test_records_without_references_are_left_out_and_none_is_an_error():
    seen = []

    def log_probs(records, texts):
        seen.append([r["prompt"] for r in records])
        return torch.zeros(len(records), len(texts[0])), torch.zeros(len(records), len(texts[0]))

    records = [{"prompt": "1+2="}, RECORDS[1]]
    view = make_view(0, records, [["3", "3"], ["8", "9"]], torch.zeros(2, 2, 4), RUBRIC, log_probs=log_probs,
                     generate=lambda r, n: [])
    monitor().observe(0, view)
    assert seen == [["4+4="], ["4+4="]]
    bare = make_view(0, [{"prompt": "1+2="}], [["3"]], torch.zeros(1, 1, 4), RUBRIC, log_probs=log_probs,
                     generate=lambda r, n: [])
    with pytest.raises(ConfigError, match="no training record has a `reference`"):
        monitor().observe(0, bare)


def test_config_errors_name_the_field(tmp_path):
    with pytest.raises(ConfigError, match="every"):
        monitor(every=0)
    with pytest.raises(ConfigError, match="no prompts file"):
        monitor(prompts=str(tmp_path / "missing.jsonl")).check_rubric(RUBRIC)
    path = tmp_path / "bare.jsonl"
    path.write_text(json.dumps({"prompt": "1+1="}) + "\n")
    with pytest.raises(ConfigError, match="no record with a `reference`"):
        monitor(prompts=str(path)).check_rubric(RUBRIC)
    view = make_view(0, RECORDS, [["3"], ["8"]], torch.zeros(2, 1, 4), RUBRIC, generate=lambda r, n: [],
                     log_probs=lambda records, texts: (torch.zeros(len(records), 1), None))
    with pytest.raises(ConfigError, match="no reference policy"):
        monitor().observe(0, view)
    with pytest.raises(ConfigError, match="inside rlkit fit"):
        monitor().observe(0, make_view(0, RECORDS, [["3"], ["8"]], torch.zeros(2, 1, 4), RUBRIC))


class TestSelfInternalisationContract(MonitorContract):
    @pytest.fixture(params=[{}, {"every": 2}])
    def monitor(self, request):
        return REGISTRY.create("monitor", "self_internalisation", request.param)


@pytest.mark.slow
@pytest.mark.parametrize(("lr", "beta"), [(0.0, 0.04), (1e-2, 0.0)])
def test_fit_logs_the_gap(tmp_path, monkeypatch, lr, beta):
    # beta 0: the objective needs no reference; the monitor's reads_reference keeps one for it
    code, run_dir, rows = fit_rows(tmp_path, monkeypatch, 3, "monitors=[self_internalisation]",
                                   "monitors.self_internalisation.params.every=1", f"optim.lr={lr}",
                                   f"objective.params.beta={beta}")
    assert code == 0
    key = "monitors/self_internalisation/{}"
    assert len(rows) == 3
    internalised = [float(r[key.format("internalised")]) for r in rows]
    drift = [float(r[key.format("own_drift")]) for r in rows]
    gap = [float(r[key.format("gap")]) for r in rows]
    assert gap == pytest.approx([d - i for d, i in zip(drift, internalised, strict=True)], abs=1e-6)
    if lr == 0.0:  # the policy never leaves its frozen copy: nothing moved, toward anything
        assert internalised + drift == pytest.approx([0.0] * 6, abs=1e-5)
    else:  # measured after each step's update: the policy has moved from its copy
        assert all(abs(d) > 1e-4 for d in drift)
    summary = json.loads((run_dir / "monitors.json").read_text())
    assert summary["self_internalisation"]["measurements"] == 3


def test_a_run_without_a_reference_is_refused_before_training(tmp_path, monkeypatch, capsys):
    code, run_dir, _ = fit_rows(tmp_path, monkeypatch, 1, "monitors=[self_internalisation]", "model.reference=none",
                                "objective.params.beta=0")
    assert code == 2
    assert "model.reference=none leaves no reference for monitors.self_internalisation" in capsys.readouterr().err
    assert not (run_dir / "policy").exists()
