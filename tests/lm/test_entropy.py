"""The policy-entropy metric (issue 24, section 3): hand-computed values, the log-probs it rides along with,
and `entropy` (with `reward/min`, `reward/max` and the near-saturation share) in a short fit's metrics."""

from __future__ import annotations

import csv
import math

import pytest
import torch

import rlkit.lm.logprobs as logprobs
from rlkit.cli import main
from rlkit.lm.logprobs import selective_log_softmax, selective_log_softmax_and_entropy
from rlkit.lm.sampling import SampledBatch, sequence_log_probs, sequence_log_probs_and_entropy

LN2, LN3 = math.log(2), math.log(3)


def test_entropy_of_two_tokens_over_three_words_by_hand():
    # token 1: logits 0, 0, 0 -> p = 1/3 each -> H = ln 3 = 1.0986
    # token 2: logits ln 4, ln 2, ln 2 -> p = 1/2, 1/4, 1/4 -> H = ½ ln 2 + 2·¼ ln 4 = 1.5 ln 2 = 1.0397
    logits = torch.tensor([[[0.0, 0.0, 0.0], [math.log(4), LN2, LN2]]])
    tokens = torch.tensor([[2, 0]])
    logp, entropy = selective_log_softmax_and_entropy(logits, tokens)
    assert logp.tolist()[0] == pytest.approx([-LN3, -LN2])            # ln ⅓ for word 2, ln ½ for word 0
    assert entropy.tolist()[0] == pytest.approx([LN3, 1.5 * LN2], abs=1e-6)
    # the step's metric: the mean over the masked completion tokens
    mask = torch.tensor([[1, 1]])
    assert float(entropy[mask > 0].mean()) == pytest.approx((LN3 + 1.5 * LN2) / 2, abs=1e-6)   # 1.0692
    assert float(entropy[torch.tensor([[1, 0]]) > 0].mean()) == pytest.approx(LN3, abs=1e-6)
    # a word of probability 0 (logit -inf) adds nothing: p = 2/3, 1/3, 0 -> H = ln 3 - ⅔ ln 2 = 0.6365
    _, h = selective_log_softmax_and_entropy(torch.tensor([[[LN2, 0.0, -math.inf]]]), torch.tensor([[0]]))
    assert float(h) == pytest.approx(LN3 - 2 / 3 * LN2, abs=1e-6)


def test_log_probs_are_unchanged_and_entropy_is_detached_and_chunked(monkeypatch):
    torch.manual_seed(0)
    logits = torch.randn(5, 7, 11, requires_grad=True)
    tokens = torch.randint(0, 11, (5, 7))
    logp, entropy = selective_log_softmax_and_entropy(logits, tokens)
    assert torch.equal(logp, selective_log_softmax(logits, tokens)), "the loss sees exactly the same log-probs"
    assert logp.requires_grad and not entropy.requires_grad
    p = torch.softmax(logits.detach(), dim=-1)
    assert torch.allclose(entropy, -(p * p.log()).sum(-1), atol=1e-5)
    monkeypatch.setattr(logprobs, "LOG_SOFTMAX_CHUNK_ELEMENTS", 11 * 7)   # one row per chunk
    chunked_logp, chunked = selective_log_softmax_and_entropy(logits, tokens)
    assert torch.equal(chunked_logp, logp) and torch.allclose(chunked, entropy)
    # half precision: upcast a chunk at a time, as the log-probs are
    _, half = selective_log_softmax_and_entropy(logits.detach().bfloat16(), tokens)
    assert half.dtype == torch.float32 and torch.allclose(half, entropy, atol=0.05)


def test_sequence_log_probs_and_entropy_match_the_plain_pass():
    from rlkit.lm.models import build_tiny_policy, load_policy

    model = load_policy(build_tiny_policy())[0]
    torch.manual_seed(0)
    n, p, c = 4, 5, 6
    ids = torch.randint(0, model.config.vocab_size, (n, p + c))
    attention = torch.ones(n, p + c, dtype=torch.long)
    attention[0, :2] = 0                                   # left padding
    completion_mask = torch.ones(n, c, dtype=torch.long)
    completion_mask[1, 3:] = 0                             # a short completion
    completion_mask[:, 5] = 0                              # a column past every completion is cut
    sampled = SampledBatch(ids, attention, completion_mask, p, [], torch.zeros(n, dtype=torch.bool))
    with torch.no_grad():
        plain = sequence_log_probs(model, sampled)
        logp, entropy = sequence_log_probs_and_entropy(model, sampled)
    assert torch.equal(logp, plain)
    assert entropy.shape == (n, c) and (entropy[:, 5] == 0).all()
    inside = entropy[:, :5]
    assert ((inside > 0) & (inside <= math.log(model.config.vocab_size) + 1e-5)).all()


def test_fit_logs_entropy_reward_range_and_near_saturation(tmp_path):
    run_dir = tmp_path / "run"
    assert main(["fit", "model=tiny_random", "logger=csv", "trainer.max_steps=2", "batch_size=4",
                 "num_generations=4", f"hydra.run.dir={run_dir}"]) == 0
    (path,) = run_dir.glob("csv/version_0/metrics.csv")
    with path.open() as fh:
        rows = [row for row in csv.DictReader(fh) if row.get("reward/mean")]
    assert len(rows) == 2
    vocab = 100  # the tiny policy's
    for row in rows:
        assert 0.0 < float(row["entropy"]) <= math.log(vocab) + 1e-6
        low, mean, high = float(row["reward/min"]), float(row["reward/mean"]), float(row["reward/max"])
        assert low <= mean <= high
        strict = float(row["rewards/format/saturated_groups"])
        assert strict <= float(row["rewards/format/near_saturated_groups"]) <= 1.0
