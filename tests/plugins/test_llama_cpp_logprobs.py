"""What the ``llama_cpp`` generator makes of the two places where llama.cpp's answer is not one entry per sampled token,
on a real engine serving a tiny policy whose vocabulary splits characters into bytes and ends turns with a
``<|im_end|>`` that is not its EOS: a token that ends partway through a UTF-8 character has no log-prob entry (the
others keep theirs, the batch is not refused, training corrects with the known ones), and a completion the engine
ended with ``<|im_end|>`` is finished, not cut."""

from __future__ import annotations

import json
import math

import pytest

from rlkit.cli import main
from rlkit.core.registry import Registry, create_plugin_manager

torch = pytest.importorskip("torch")
pytest.importorskip("xllamacpp", reason="llama.cpp's engine is the judge-server extra")

from rlkit.lm.logprobs import ImportanceCorrection, importance_correction  # noqa: E402
from rlkit.lm.models import TinyPolicySpec, build_model, build_tokenizer  # noqa: E402
from rlkit.lm.sampling import GenerationRequest, sequence_log_probs  # noqa: E402
from rlkit_plugins.generators.llama_cpp_wire import aligned_logprobs  # noqa: E402

_REGISTRY = Registry(create_plugin_manager())
# é is two bytes and € three: the byte-level vocabulary (no merges) has one token per byte, so a sampled lead byte
# leaves the text mid-character. Digits and arithmetic, so the synthetic task's prompts keep most of their text.
ALPHABET = "0123456789 +=?é€\n"
IM_END = "<|im_end|>"  # llama.cpp counts it among the end-of-generation tokens by its text (llama-vocab.cpp)
MAX_NEW = 12
F32_ATOL = 1e-5  # the f32 engine against the trainer: float32 rounding (see test_llama_cpp_generator.py)


def _byte_policy():
    spec = TinyPolicySpec(alphabet=ALPHABET)
    tokenizer = build_tokenizer(spec)
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_END]})
    return build_model(spec, tokenizer).eval(), tokenizer


@pytest.fixture(scope="module")
def sampled():
    """12 completions of 3 prompts at temperature 1 from the engine, the policy and the generator's metrics."""
    model, tokenizer = _byte_policy()
    assert tokenizer.convert_tokens_to_ids(IM_END) != tokenizer.eos_token_id
    generator = _REGISTRY.create("generator", "llama_cpp", {"threads": 1})
    records = [{"prompt": "3 + 4 ="}, {"prompt": "é + € ="}, {"prompt": "10 + 20 = ?"}]
    try:
        generator.setup(model, tokenizer)
        batch = generator.generate(model, tokenizer, GenerationRequest(records, 4, MAX_NEW, temperature=1.0,
                                                                       seeds=[5, 105, 205]))
        metrics = generator.metrics()
    finally:
        generator.close()
    return model, tokenizer, batch, metrics


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet read backwards: the character a token spells a byte with -> the byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _cut_mid_character(text: bytes) -> bool:
    """Whether ``text`` ends inside a UTF-8 character: llama.cpp's ``validate_utf8`` (tools/server), which looks at
    the last three bytes for a lead byte whose character they do not finish."""
    for back in range(1, min(4, len(text) + 1)):
        lead = text[-back]
        need = 2 if lead & 0xE0 == 0xC0 else 3 if lead & 0xF0 == 0xE0 else 4 if lead & 0xF8 == 0xF0 else 0
        if need > back:
            return True
    return False


def _withheld(ids: list[int], tokenizer) -> set[int]:
    """Positions the server gives no log-prob entry: the text so far ends mid-character after them."""
    decode, special = _byte_decoder(), set(tokenizer.all_special_ids)
    text, out = b"", set()
    for i, token in enumerate(ids):
        if token not in special:  # a control token spells nothing in the server's text
            text += bytes(decode[c] for c in tokenizer.convert_ids_to_tokens(token))
        if _cut_mid_character(text):
            out.add(i)
    return out


def test_a_token_cut_mid_character_has_no_engine_logprob_and_the_rest_are_the_trainers(sampled):
    model, tokenizer, batch, metrics = sampled
    mask = batch.completion_mask.bool()
    unknown = batch.engine_logprobs.isnan() & mask
    withheld = [_withheld(row[:int(n)].tolist(), tokenizer)
                for row, n in zip(batch.completion_ids, mask.sum(1), strict=True)]
    # the server's rule, computed here from the bytes, leaves out exactly the tokens the generator marked unknown
    assert [set(torch.nonzero(row).flatten().tolist()) for row in unknown] == withheld
    assert sum(map(len, withheld)) >= 3, "the seeds sample characters split across tokens"
    assert metrics["generator/logprobs_missing"] == float(unknown.sum())
    assert not batch.engine_logprobs[~mask].isnan().any(), "0 past the mask, as before"
    with torch.no_grad():
        ours = sequence_log_probs(model, batch)
    known = mask & ~unknown
    assert known.sum() > 40
    # every known log-prob is its own token's: one placed on a neighbour would be off by far more than rounding
    assert float((ours - batch.engine_logprobs)[known].abs().max()) < F32_ATOL


def test_a_completion_ended_by_an_end_of_generation_token_other_than_eos_is_finished(sampled):
    _, tokenizer, batch, _ = sampled
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    ends = (tokenizer.eos_token_id, im_end)
    lengths = batch.completion_mask.sum(1).tolist()
    last = [int(row[n - 1]) for row, n in zip(batch.completion_ids, lengths, strict=True)]
    by_im_end = [r for r, token in enumerate(last) if token == im_end]
    assert by_im_end, "the seeds end some completion with <|im_end|>"
    for r, (n, token) in enumerate(zip(lengths, last, strict=True)):
        # finished: ended by the engine's end token, however short; cut: exactly max_new_tokens, no end token
        assert bool(batch.truncated[r]) == (token not in ends), (r, token)
        assert n == MAX_NEW or token in ends, (r, n, token)
        assert int(batch.completion_mask[r, n:].sum()) == 0, "padding is never in the mask"
    assert not batch.truncated[by_im_end].any()


def test_aligned_logprobs_places_an_entry_only_where_it_can_only_be():
    nan = math.nan
    # token 1 left out (mid-character): entries of tokens 0, 2, 3
    assert _same(aligned_logprobs([4, 8, 9, 5], [(4, -1.0), (9, -2.0), (5, -3.0)]), [-1.0, nan, -2.0, -3.0])
    # the entry for id 7 may be token 1's or token 2's: neither gets it; the others are certain
    assert _same(aligned_logprobs([5, 7, 7, 9], [(7, -1.0), (9, -2.0)]), [nan, nan, nan, -2.0])
    assert _same(aligned_logprobs([3, 3], []), [nan, nan])
    assert aligned_logprobs([4, 8], [(8, -1.0), (4, -2.0)]) is None, "entries out of the tokens' order"
    assert aligned_logprobs([4], [(4, -1.0), (4, -1.0)]) is None, "more entries than tokens"


def _same(got: list[float] | None, want: list[float]) -> bool:
    return got is not None and len(got) == len(want) and all(
        (math.isnan(a) and math.isnan(b)) or a == b for a, b in zip(got, want, strict=True))


@pytest.mark.parametrize("level", ["token", "sequence", "geometric"])
def test_importance_correction_lets_the_policys_logprob_stand_in_for_an_unknown_one(level):
    old = torch.log(torch.tensor([[0.5, 0.5, 0.9], [0.1, 0.8, 0.5]]))
    engine = torch.log(torch.tensor([[0.25, 0.5, 0.1], [0.4, 0.2, 0.5]]))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    unknown = engine.clone()
    unknown[0, 0] = unknown[1, 1] = torch.nan  # as if the engine had sampled exactly what the policy says there
    stand_in = torch.where(unknown.isnan(), old, engine)
    correction = ImportanceCorrection(level, "truncate", 10.0, 0.0)
    weights, sums = importance_correction(old, unknown, mask, correction)
    want, want_sums = importance_correction(old, stand_in, mask, correction)
    if level == "geometric":  # the mean over the known tokens, not over the stand-ins too: row 2's is sqrt(0.25)
        want = torch.tensor([[1.0, 1.0, 0.0], [0.5, 0.5, 0.5]])
    assert torch.isfinite(weights).all() and torch.allclose(weights, want)
    assert float(sums["known"]) == 3.0
    assert float(sums["ratio"]) == pytest.approx(float(weights.sum()))
    # KL over the known tokens only: ratios 1 (0.5/0.5), 0.25 (0.1/0.4) and 1 (0.5/0.5)
    assert float(sums["mismatch_kl"]) == pytest.approx(0.25 - 1 - math.log(0.25), rel=1e-5)


@pytest.mark.slow
def test_fit_with_split_characters_and_is_correction_trains_on_finite_losses(tmp_path):
    model, tokenizer = _byte_policy()
    policy = tmp_path / "policy"
    model.save_pretrained(policy)
    tokenizer.save_pretrained(policy)
    assert main(["fit", "generator=llama_cpp", "generator.params.threads=1", f"model.name_or_path={policy}",
                 "is_correction.level=token", "trainer.max_steps=2", "batch_size=2", "num_generations=4",
                 "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]) == 0
    rows = [json.loads(line)["metrics"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "generator/logprobs_missing" in r]
    assert len(steps) == 2
    assert sum(r["generator/logprobs_missing"] for r in steps) > 0, "the run sampled split characters"
    assert all(math.isfinite(r[key]) for r in steps for key in ("loss", "rollout/mismatch_kl", "rollout/is_ratio_mean"))
    # the first step samples from the policy itself: the known tokens' ratios are 1 to float rounding
    assert steps[0]["rollout/mismatch_kl"] == pytest.approx(0.0, abs=1e-6)
