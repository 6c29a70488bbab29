"""The supervised objective (``objective=sft`` / ``rlkit sft``): the masked NLL by hand, demonstrations built from
records, validation of records without one, and end-to-end runs whose saved policy warm-starts ``rlkit fit``."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlkit import ConfigError, DataError
from rlkit.cli import main
from rlkit.config import check_config, compose_config
from rlkit.core.objective import CompletionLossInputs
from rlkit.lm.models import build_tiny_policy, load_policy
from rlkit.lm.sampling import demonstration_batch, demonstration_text, tokenize_prompts
from rlkit.plugin import masked_nll
from rlkit_plugins.objectives.sft import SupervisedObjective


def test_masked_nll_by_hand():
    # two completions: the first has 2 tokens, the second 1 (its second position is padding, any value)
    logp = torch.tensor([[math.log(0.5), math.log(0.25)], [math.log(0.8), float("nan")]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss = masked_nll(logp, mask, num_tokens=3.0)
    expected = -(math.log(0.5) + math.log(0.25) + math.log(0.8)) / 3  # = 2.3026 / 3 = 0.7675
    assert float(loss.detach()) == pytest.approx(expected, abs=1e-6)
    assert float(loss.detach()) == pytest.approx(0.76753, abs=1e-4)
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[-1 / 3, -1 / 3], [-1 / 3, 0.0]]))
    # micro-batches normalised by the step's token count add up to the one-pass loss
    halves = masked_nll(logp[:1], mask[:1], 3.0) + masked_nll(logp[1:], mask[1:], 3.0)
    assert float(halves) == pytest.approx(expected, abs=1e-6)


def test_the_objective_ignores_advantages_and_needs_no_reference():
    objective = SupervisedObjective(SupervisedObjective.Params())
    assert objective.signal == "demonstrations" and objective.reference_use is None
    logp = torch.log(torch.tensor([[0.5, 0.5]]))
    inputs = dict(logp=logp, old_logp=logp, ref_logp=None, mask=torch.ones(1, 2), num_sequences=1, num_tokens=2.0,
                  max_completion_length=2)
    a, _ = objective.loss(CompletionLossInputs(advantages=torch.zeros(1), **inputs))
    b, metrics = objective.loss(CompletionLossInputs(advantages=torch.tensor([5.0]), **inputs))
    assert float(a) == float(b) == pytest.approx(math.log(2))
    assert float(metrics["sft/token_nll"]) == pytest.approx(math.log(2))


def test_demonstrations_from_records(tmp_path):
    _, tokenizer = load_policy(build_tiny_policy(cache_dir=tmp_path))
    assert demonstration_text({"prompt": "1+1=", "completion": "2", "reference": "3"}) == "2"
    assert demonstration_text({"prompt": [{"role": "user", "content": "1+1="}],
                               "completion": [{"role": "assistant", "content": "2"}]}) == "2"
    assert demonstration_text({"prompt": "1+1=", "reference": 2}) == "2"
    assert demonstration_text({"prompt": "1+1="}) is None
    records = [{"prompt": "3+4=", "reference": "7"}, {"prompt": "10+10=", "completion": "20"},
               {"prompt": "1+1=", "completion": "2222222222"}]
    batch = demonstration_batch(tokenizer, records, max_new_tokens=4)
    prompt_ids, _ = tokenize_prompts(tokenizer, records)
    assert torch.equal(batch.input_ids[:, :batch.prompt_length], prompt_ids), "prompts tokenised as for sampling"
    assert [t[0] for t in batch.texts] == ["7", "20", "2222"]
    assert batch.truncated.tolist() == [False, False, True], "a demonstration cut at the limit has no EOS"
    eos = tokenizer.eos_token_id
    ends = [batch.completion_ids[i][batch.completion_mask[i].bool()][-1].item() for i in range(3)]
    assert ends[:2] == [eos, eos], "the EOS is learnt: it is inside the mask"


def test_records_without_a_demonstration_are_named(registry, tmp_path):
    data = tmp_path / "prompts.jsonl"
    # record 1 carries the reference the default rubric's correctness is scored from: its lack is a mistake of its own
    data.write_text(json.dumps({"prompt": "1+1=", "completion": "2", "reference": "2"}) + "\n"
                    + json.dumps({"prompt": "2+2="}) + "\n")
    cfg = compose_config(registry, ["objective=sft", f"data.path={data}"])
    with pytest.raises(DataError, match="record 2 has neither a `completion` nor a `reference`") as err:
        check_config(cfg, registry)
    assert str(data) in str(err.value)
    with pytest.raises(ConfigError):  # still a run config: its values are checked like any other
        check_config(compose_config(registry, ["objective=sft", "max_completion_length=0"]), registry)


@pytest.mark.slow
def test_rlkit_sft_learns_resumes_and_warm_starts_fit(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLKIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    run = tmp_path / "sft"
    # from the random weights: the default policy has had its supervised steps already
    common = ["model=tiny_random", "logger=none", "batch_size=8", "torch_threads=1", "checkpoint_every=10"]
    assert main(["sft", *common, "trainer.max_steps=10", f"hydra.run.dir={run}"]) == 0
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    nll = [s["metrics"]["sft/token_nll"] for s in steps if "sft/token_nll" in s["metrics"]]
    assert len(nll) == 10 and nll[-1] < 0.75 * nll[0], nll  # it imitates: 4.6 -> 2.9 nats a token in 10 steps
    # resume from its checkpoint for 5 more steps
    resumed = tmp_path / "resumed"
    assert main(["sft", *common, "trainer.max_steps=15", f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}",
                 f"hydra.run.dir={resumed}"]) == 0
    assert torch.load(resumed / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 15
    # the saved policy folder is a warm start for RL
    capsys.readouterr()
    assert main(["fit", "logger=none", "trainer.max_steps=1", "batch_size=2", "num_generations=2",
                 f"model.name_or_path={run / 'policy'}", f"hydra.run.dir={tmp_path / 'rl'}"]) == 0
    warm, _ = load_policy(run / "policy")
    cold, _ = load_policy(build_tiny_policy(cache_dir=tmp_path / "cache"))
    assert any(not torch.equal(a, b) for a, b in zip(warm.parameters(), cold.parameters(), strict=True))
