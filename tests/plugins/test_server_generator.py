"""The ``openai_server`` generator against a real ``OpenAICompatibleServer`` on loopback (no mocked client): the
generator contract, log-probs after a weight sync (full weights and LoRA), greedy parity with the ``hf``
generator, retries, the start-up error, and ``rlkit fit`` end to end."""

from __future__ import annotations

import json
import socket

import pytest
import torch

from rlkit.cli import main
from rlkit.core.errors import ConfigError
from rlkit.core.registry import Registry, create_plugin_manager
from rlkit.lm.models import build_tiny_policy, load_policy
from rlkit.lm.sampling import GenerationRequest, sequence_log_probs
from rlkit.testing import GeneratorContract, example_prompts
from rlkit.testing.openai_server import OpenAICompatibleServer

_REGISTRY = Registry(create_plugin_manager())


@pytest.fixture(scope="module")
def server():
    with OpenAICompatibleServer() as live:  # its own copy of the tiny policy
        yield live


def _generator(server: OpenAICompatibleServer, **params):
    return _REGISTRY.create("generator", "openai_server", {"base_url": server.url, "retry_backoff": 0.01, **params})


@pytest.fixture
def policy():
    return load_policy(build_tiny_policy())


def _request(records, *, g: int = 2, greedy: bool = False, seeds=(11, 22, 33)) -> GenerationRequest:
    return GenerationRequest(records, 1 if greedy else g, 6, temperature=1.0, greedy=greedy,
                             seeds=None if greedy else list(seeds)[:len(records)])


def _perturb(model, seed: int = 0) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=gen))


class TestServerGeneratorContract(GeneratorContract):
    @pytest.fixture
    def generator(self, server):
        generator = _generator(server, sync="full")
        yield generator
        generator.close()


def test_engine_logprobs_equal_the_synced_policys_own(server, policy):
    model, tokenizer = policy
    generator = _generator(server, sync="full")
    try:
        generator.setup(model, tokenizer)
        assert generator.policy_version == 0
        _perturb(model)  # an optimiser step
        generator.sync_weights(model)
        assert generator.policy_version == 1 and server.weight_updates >= 2
        records = example_prompts()
        out = generator.generate(model, tokenizer, _request(records))
        assert out.policy_version == 1
        assert out.engine_logprobs.shape == out.completion_mask.shape
        assert (out.engine_logprobs[out.completion_mask == 0] == 0).all()
        with torch.no_grad():
            own = sequence_log_probs(model, out)
        mask = out.completion_mask.bool()
        torch.testing.assert_close(out.engine_logprobs[mask], own[mask], atol=1e-5, rtol=0)
    finally:
        generator.close()


def test_a_sync_waits_for_requests_out_so_a_rollout_comes_from_the_version_it_names(server, policy):
    import copy

    model, tokenizer = policy
    generator = _generator(server, sync="full", max_lag=1)
    try:
        generator.setup(model, tokenizer)
        before = copy.deepcopy(model)
        server.set_faults(delay=0.5)  # the request is still out when the sync comes
        pending = generator.submit(model, tokenizer, _request(example_prompts()))
        _perturb(model)
        generator.sync_weights(model)
        server.set_faults(delay=0.0)
        out = pending.result()
        assert (out.policy_version, out.policy_lag, generator.policy_version) == (0, 1, 1)
        with torch.no_grad():
            sampler, trained = sequence_log_probs(before, out), sequence_log_probs(model, out)
        mask = out.completion_mask.bool()
        torch.testing.assert_close(out.engine_logprobs[mask], sampler[mask], atol=1e-5, rtol=0)
        assert (out.engine_logprobs[mask] - trained[mask]).abs().max() > 1e-3, "the sync moved the weights"
        paths = [r.path.rstrip("/") for r in server.log]
        assert paths.index("/v1/completions") < paths.index("/update_weights_from_disk", paths.index("/v1/completions"))
    finally:
        server.set_faults(delay=0.0)
        generator.close()


def test_greedy_completions_equal_the_hf_generators(server, policy):
    model, tokenizer = policy
    generator = _generator(server, sync="full")
    hf = _REGISTRY.create("generator", "hf")
    try:
        generator.setup(model, tokenizer)
        records = example_prompts()
        ours = generator.generate(model, tokenizer, _request(records, greedy=True))
        theirs = hf.generate(model, tokenizer, _request(records, greedy=True))
        assert ours.completion_ids.tolist() == theirs.completion_ids.tolist()
        assert ours.texts == theirs.texts and torch.equal(ours.input_ids, theirs.input_ids)
    finally:
        generator.close()


def _favour_eos(model, tokenizer, records) -> None:
    """Point the EOS row of the (tied) output embedding along the prompts' last hidden state: some samples end early."""
    from rlkit.lm.sampling import tokenize_prompts

    ids, mask = tokenize_prompts(tokenizer, records)
    with torch.no_grad():
        hidden = model(input_ids=ids, attention_mask=mask, output_hidden_states=True).hidden_states[-1][:, -1]
        weight = model.get_output_embeddings().weight
        weight[tokenizer.eos_token_id] += 3 * torch.nn.functional.normalize(hidden.mean(0), dim=0) * \
            weight.norm(dim=1).mean()


def test_seeded_samples_equal_the_hf_generators_per_prompt_seed_draws(server, policy):
    model, tokenizer = policy
    generator = _generator(server, sync="full")
    hf = _REGISTRY.create("generator", "hf", {"per_prompt_seed": True})
    try:
        generator.setup(model, tokenizer)
        records = example_prompts()
        ours = generator.generate(model, tokenizer, _request(records, g=4))
        theirs = hf.generate(model, tokenizer, _request(records, g=4))
        assert ours.completion_ids.tolist() == theirs.completion_ids.tolist()
        assert len({tuple(row) for row in ours.completion_ids.tolist()}) > len(records), "samples, not copies"
    finally:
        generator.close()


def test_concurrent_requests_are_decoded_together_and_each_gets_its_own_draws(policy):
    import httpx

    from rlkit.judging.http import run_async

    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13], [14]]

    async def ask(url: str, bodies: list[dict]) -> list[dict]:
        import asyncio

        async with httpx.AsyncClient(timeout=60) as client:
            answers = await asyncio.gather(*(client.post(f"{url}/completions", json=b) for b in bodies))
        return [a.json()["choices"] for a in answers]

    bodies = [{"prompt": p, "n": 3, "max_tokens": 5, "seed": 40 + i, "logprobs": 0, "return_token_ids": True}
              for i, p in enumerate(prompts)]
    with OpenAICompatibleServer(policy=policy, batch_window_s=0.3) as live:
        together = run_async(lambda: ask(live.url, bodies))
        assert live.decode_passes == 1, "four requests in one window: one batched decode"
        alone = [run_async(lambda b=b: ask(live.url, [b]))[0] for b in bodies]
        assert live.decode_passes == 5
    for mine, single in zip(together, alone, strict=True):
        assert [c["token_ids"] for c in mine] == [c["token_ids"] for c in single], "independent of its neighbours"
        for a, b in zip(mine, single, strict=True):
            assert a["logprobs"]["token_logprobs"] == pytest.approx(b["logprobs"]["token_logprobs"], abs=1e-5)


def test_completions_that_end_at_eos_are_padded_and_masked(server, policy):
    model, tokenizer = policy
    records = example_prompts()
    _favour_eos(model, tokenizer, records)
    generator = _generator(server, sync="full")
    try:
        generator.setup(model, tokenizer)
        out = generator.generate(model, tokenizer, _request(records, g=4))
        lengths = out.completion_mask.sum(dim=1)
        assert out.truncated.any() and (~out.truncated).any(), "the test wants some rows to end early"
        for row in range(out.input_ids.shape[0]):
            kept = int(lengths[row])
            tail = out.completion_ids[row, kept:]
            assert (tail == tokenizer.pad_token_id).all(), "padded with the pad id after the engine's tokens"
            if not out.truncated[row]:
                assert int(out.completion_ids[row, kept - 1]) == tokenizer.eos_token_id
        with torch.no_grad():
            own = sequence_log_probs(model, out)
        keep = out.completion_mask.bool()
        torch.testing.assert_close(out.engine_logprobs[keep], own[keep], atol=1e-5, rtol=0)
        assert (out.engine_logprobs[~keep] == 0).all()
    finally:
        generator.close()


def test_extra_body_reaches_the_engine(server, policy):
    model, tokenizer = policy
    records = example_prompts()
    _favour_eos(model, tokenizer, records)
    for extra, all_full in (({}, False), ({"min_tokens": 6}, True)):  # vLLM's min_tokens: no EOS before 6
        generator = _generator(server, sync="full", extra_body=extra)
        try:
            generator.setup(model, tokenizer)
            out = generator.generate(model, tokenizer, _request(records, g=4))
            assert bool((out.completion_token_counts == 6).all()) is all_full
        finally:
            generator.close()


def test_sync_every_and_none_leave_the_server_alone(server, policy):
    model, tokenizer = policy
    for params, pushes in (({"sync": "none"}, 0), ({"sync": "full", "sync_every": 2}, 2)):
        generator = _generator(server, **params)
        try:
            before = server.weight_updates
            generator.setup(model, tokenizer)
            for _ in range(3):
                generator.sync_weights(model)
            assert server.weight_updates - before == pushes
            assert generator.policy_version == max(pushes - 1, 0)
            if params["sync"] == "full":  # held-out evaluation samples the policy as it is: a stale version goes out
                generator.generate(model, tokenizer, _request(example_prompts(), greedy=True))
                assert server.weight_updates - before == pushes + 1 and generator.policy_version == pushes
        finally:
            generator.close()


def test_requests_are_retried_past_server_errors(server, policy):
    model, tokenizer = policy
    generator = _generator(server, sync="none", retries=2)
    try:
        generator.setup(model, tokenizer)
        server.set_faults(fail_first=2)
        out = generator.generate(model, tokenizer, _request(example_prompts()))
        assert out.input_ids.shape[0] == 2 * len(example_prompts())
        assert server.faults_served("fail") >= 2
    finally:
        server.set_faults(fail_first=0)
        generator.close()


def test_a_batch_wider_than_max_concurrency_is_sent_as_answers_free_places(server, policy):
    model, tokenizer = policy
    records = example_prompts()
    assert len(records) >= 3
    wide, narrow = _generator(server, sync="none"), _generator(server, sync="none", max_concurrency=1)
    try:
        wide.setup(model, tokenizer)
        narrow.setup(model, tokenizer)
        before = server.request_count
        one_at_a_time = narrow.generate(model, tokenizer, _request(records))
        assert server.request_count - before == len(records)
        together = wide.generate(model, tokenizer, _request(records))
        assert torch.equal(one_at_a_time.input_ids, together.input_ids), "same seeds, same samples, same order"
    finally:
        wide.close()
        narrow.close()


def test_connections_the_server_closed_are_replaced_without_a_retry(server, policy):
    model, tokenizer = policy
    generator = _generator(server, sync="none", retries=0)
    try:
        generator.setup(model, tokenizer)
        first = generator.generate(model, tokenizer, _request(example_prompts()))
        server.drop_connections()  # as uvicorn does to connections idle for 5 s
        again = generator.generate(model, tokenizer, _request(example_prompts()))
        assert torch.equal(first.input_ids, again.input_ids)
    finally:
        generator.close()


def test_with_max_lag_a_sync_leaves_the_load_until_the_batch_out_is_read(server, policy):
    model, tokenizer = policy
    generator = _generator(server, sync="full", max_lag=1)
    try:
        generator.setup(model, tokenizer)
        pending = generator.submit(model, tokenizer, _request(example_prompts()))
        updates = server.weight_updates
        _perturb(model)
        generator.sync_weights(model)  # returns without waiting for the batch out
        assert server.weight_updates == updates and generator.policy_version == 1
        assert pending.result().policy_version == 0
        assert server.weight_updates == updates + 1, "read, so nothing sampled on the old weights is still out"
        after = generator.generate(model, tokenizer, _request(example_prompts(), greedy=True))
        assert after.policy_version == 1
        with torch.no_grad():
            own = sequence_log_probs(model, after)
        mask = after.completion_mask.bool()
        torch.testing.assert_close(after.engine_logprobs[mask], own[mask], atol=1e-5, rtol=0)
    finally:
        generator.close()


def test_a_server_that_is_down_is_one_config_error_naming_base_url(policy):
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    generator = _REGISTRY.create("generator", "openai_server",
                                 {"base_url": f"http://127.0.0.1:{port}/v1", "retries": 0})
    with pytest.raises(ConfigError) as caught:
        generator.setup(*policy)
    message = str(caught.value)
    assert "\n" not in message and "generator.params.base_url" in message
    assert f"cannot connect to http://127.0.0.1:{port}/v1 (connection refused); start the server" in message


def test_lora_sync_loads_a_new_adapter_and_its_logprobs_match(policy):
    import httpx
    from peft import LoraConfig, get_peft_model

    model, tokenizer = policy
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with OpenAICompatibleServer() as live:
        generator = _generator(live, sync="adapter")
        try:
            generator.setup(model, tokenizer)
            assert generator.served_model == "default-v0" and "default-v0" in live.adapters
            _perturb(model, seed=1)  # only the adapter's weights train
            generator.sync_weights(model)
            assert generator.served_model == "default-v1" and list(live.adapters) == ["default-v1"]
            out = generator.generate(model, tokenizer, _request(example_prompts()))
            assert out.policy_version == 1
            with torch.no_grad():
                own = sequence_log_probs(model, out)
            mask = out.completion_mask.bool()
            torch.testing.assert_close(out.engine_logprobs[mask], own[mask], atol=1e-5, rtol=0)
            base = httpx.post(f"{live.url}/completions", json={"prompt": [5, 6], "max_tokens": 4, "temperature": 0,
                                                               "logprobs": 0}, timeout=30).json()
            with torch.no_grad(), model.disable_adapter():  # the base name serves the base weights
                expected = torch.log_softmax(model(input_ids=torch.tensor([[5, 6]])).logits[0, -1], -1)
            first = base["choices"][0]["logprobs"]["token_logprobs"][0]
            assert abs(first - float(expected.max())) < 1e-5
            chat = httpx.post(f"{live.url}/chat/completions", json={
                "model": "default-v1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}, timeout=30)
            assert chat.status_code == 200, "chat completions serve adapters too"
        finally:
            generator.close()


def test_the_test_server_speaks_vllms_completions_and_sglangs_weight_routes(server, tmp_path):
    import httpx

    url, root = server.url, server.url.removesuffix("/v1")
    body = {"prompt": [[5, 6, 7], [8, 9]], "n": 2, "max_tokens": 3, "seed": 3, "logprobs": 1,
            "return_token_ids": True, "return_tokens_as_token_ids": True}
    answer = httpx.post(f"{url}/completions", json=body, timeout=30).json()
    assert answer["object"] == "text_completion" and [c["index"] for c in answer["choices"]] == [0, 1, 2, 3]
    assert [c["prompt_token_ids"] for c in answer["choices"]] == [[5, 6, 7]] * 2 + [[8, 9]] * 2
    for choice in answer["choices"]:
        ids, logprobs = choice["token_ids"], choice["logprobs"]
        assert len(ids) == len(logprobs["token_logprobs"]) and choice["finish_reason"] in ("stop", "length")
        assert logprobs["tokens"] == [f"token_id:{t}" for t in ids] and all(v <= 0 for v in logprobs["token_logprobs"])
    assert httpx.post(f"{url}/completions", json=body, timeout=30).json()["choices"] == answer["choices"], "seeded"
    plain = httpx.post(f"{url}/completions", json={"prompt": [5, 6], "max_tokens": 2}, timeout=30).json()
    assert plain["choices"][0]["logprobs"] is None and plain["choices"][0]["token_ids"] is None
    missing = httpx.post(f"{url}/completions", json={"prompt": [5], "model": "nope"}, timeout=30)
    assert missing.status_code == 404
    failed = httpx.post(f"{root}/update_weights_from_disk", json={"model_path": str(tmp_path / "none")}, timeout=30)
    assert failed.status_code == 400 and failed.json()["success"] is False
    no_adapter = httpx.post(f"{url}/load_lora_adapter", json={"lora_name": "a", "lora_path": str(tmp_path)})
    assert no_adapter.status_code == 404, "vLLM's LoRAAdapterNotFoundError"


def test_token_ids_are_read_from_token_id_names_when_absent():
    from rlkit_plugins.generators.openai_server import _read_choices

    choice = {"index": 0, "text": "ab", "finish_reason": "length",
              "logprobs": {"tokens": ["token_id:7", "token_id:9"], "token_logprobs": [-1.5, -0.25]}}
    answer = json.dumps({"choices": [choice]}).encode()
    assert _read_choices(1)(answer) == [([7, 9], [-1.5, -0.25], False)], "finish_reason length: cut"
    assert _read_choices(2)(answer) is None, "too few choices is a malformed answer (retried)"
    assert _read_choices(1)(json.dumps({"choices": [{"index": 0, "text": "x"}]}).encode()) is None
    assert _read_choices(1)(b"not json") is None


@pytest.mark.parametrize(("params", "field"), [
    ({"sync": "weights"}, "sync"), ({"base_url": "localhost:8000"}, "base_url"), ({"sync_every": 0}, "sync_every"),
    ({"timeout_s": 0}, "timeout_s"), ({"max_concurrency": 0}, "max_concurrency"), ({"max_lag": -1}, "max_lag")])
def test_bad_params_name_their_field(params, field):
    with pytest.raises(ConfigError, match=f"generator.params.{field}"):
        _REGISTRY.create("generator", "openai_server", params)


def test_lora_sync_needs_a_lora_policy(server, policy):
    generator = _generator(server, sync="adapter")
    with pytest.raises(ConfigError, match="generator.params.sync"):
        generator.setup(*policy)


@pytest.mark.slow
def test_fit_samples_from_the_server_end_to_end(tmp_path):
    # a server that serves other weights than the policy's until the generator's first sync
    with OpenAICompatibleServer(policy=load_policy(build_tiny_policy())) as live:
        _perturb(live.model, seed=3)
        assert main(["fit", "generator=openai_server", f"generator.params.base_url={live.url}",
                     "generator.params.sync=full", "trainer.max_steps=2", "batch_size=2", "num_generations=2",
                     "logger=none", f"hydra.run.dir={tmp_path / 'run'}"]) == 0
        completions = [r for r in live.log if r.path.rstrip("/") == "/v1/completions"]
        assert completions and all(r.status == 200 for r in completions)
        assert live.weight_updates == 3, "setup, then one push per optimiser step"
    rows = [json.loads(line)["metrics"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout/policy_lag" in r]
    assert [r["rollout/policy_lag"] for r in steps] == [0.0, 0.0], "synced after every step: on-policy"
    assert all(r["time/sync"] > 0 and r["sync/bytes"] > 0 for r in steps), "each step's sync, in its metrics"
    # the engine serves the synced weights in the same numerics: every importance ratio is ~1, none capped
    assert all(abs(r["rollout/is_ratio_mean"] - 1) < 1e-3 and r["rollout/is_clipped_frac"] == 0 for r in steps)
    assert main(["fit", "trainer.max_steps=1", "batch_size=2", "num_generations=2", "logger=none",
                 f"hydra.run.dir={tmp_path / 'hf'}"]) == 0
    hf_rows = [json.loads(line)["metrics"] for line in (tmp_path / "hf" / "metrics.jsonl").read_text().splitlines()]
    start, hf_start = ([r for r in table if "heldout/reward" in r][0] for table in (rows, hf_rows))
    assert start == hf_start, "the start table scores the policy (sampled by the engine after its first sync)"


def test_the_reference_the_engine_serves_scores_as_a_frozen_copy_does(policy):
    from rlkit.lm.reference import FrozenCopyReference

    model, tokenizer = policy
    base = build_tiny_policy()
    with OpenAICompatibleServer(base, reference=base) as live:
        generator = _generator(live, sync="full", max_lag=1, reference_model="reference")
        try:
            generator.setup(model, tokenizer)
            frozen = FrozenCopyReference(model)
            _perturb(model)  # the policy moves (and is pushed); the reference the engine serves must not
            generator.sync_weights(model)
            batch = generator.generate(model, tokenizer, _request(example_prompts(), g=3))
            assert getattr(batch, "reference_scores", None) is not None, "asked for when the batch was read"
            mask = batch.completion_mask.bool()
            with torch.no_grad():
                expected = frozen.log_probs(model, batch)
            torch.testing.assert_close(generator.score_reference(batch).result()[mask], expected[mask], atol=1e-5,
                                       rtol=0)
            part = batch.rows(torch.tensor([1, 4]))  # a subset carries no scores: asked for again
            torch.testing.assert_close(generator.score_reference(part).result()[part.completion_mask.bool()],
                                       expected[[1, 4]][part.completion_mask.bool()], atol=1e-5, rtol=0)
            answer = live.log[-1]
            assert answer.path.rstrip("/") == "/v1/completions" and answer.status == 200
        finally:
            generator.close()


def test_prompt_logprobs_follow_vllms_fields(policy):
    import httpx

    model, tokenizer = policy
    with OpenAICompatibleServer(policy=policy) as live:
        body = {"prompt": [[5, 6, 7, 8], [9, 10]], "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
        choices = httpx.post(f"{live.url}/completions", json=body, timeout=30).json()["choices"]
        for choice, prompt in zip(choices, body["prompt"], strict=True):
            entries = choice["prompt_logprobs"]
            assert entries[0] is None and len(entries) == len(prompt)
            ids = torch.tensor([prompt])
            with torch.no_grad():
                own = torch.log_softmax(model(input_ids=ids).logits[0, :-1], -1).gather(1, ids[0, 1:, None])[:, 0]
            for entry, token, value in zip(entries[1:], prompt[1:], own.tolist(), strict=True):
                (key, info), = entry.items()
                assert key == str(token) and abs(info["logprob"] - value) < 1e-5 and info["rank"] >= 1
        sampled = httpx.post(f"{live.url}/completions", json={**body, "max_tokens": 2, "min_tokens": 2,
                                                                "temperature": 1.0, "seed": 5,
                                                                "return_token_ids": True}, timeout=30).json()
        assert [c["prompt_logprobs"] for c in sampled["choices"]] == [c["prompt_logprobs"] for c in choices]
        assert [len(c["token_ids"]) for c in sampled["choices"]] == [2, 2], "sampled after the scoring pass"
        missing = httpx.post(f"{live.url}/completions", json={**body, "model": "reference"}, timeout=30)
        assert missing.status_code == 404, "no reference model served unless given one"


@pytest.mark.slow
@pytest.mark.parametrize(("objective", "metric"), [("policy_gradient", "kl"), ("group_dpo", "loss/preference")])
def test_a_fit_scoring_its_reference_on_the_engine_trains_as_with_a_frozen_copy(tmp_path, objective, metric):
    base = build_tiny_policy()
    common = ["generator=openai_server", "generator.params.sync=full", "generator.params.max_lag=1",
              "model=tiny_random", "trainer.max_steps=3", "batch_size=2", "num_generations=4", "logger=none",
              "log_samples.every=0", f"objective={objective}"]
    kl = {}
    for reference in ("frozen", "engine"):
        extra = ["model.reference=engine", "generator.params.reference_model=reference"] * (reference == "engine")
        with OpenAICompatibleServer(base, reference=base) as live:
            assert main(["fit", *common, f"generator.params.base_url={live.url}", *extra,
                         f"hydra.run.dir={tmp_path / reference}"]) == 0
        lines = (tmp_path / reference / "metrics.jsonl").read_text().splitlines()
        rows = [json.loads(line)["metrics"] for line in lines]
        kl[reference] = [r[metric] for r in rows if metric in r]
    assert len(kl["engine"]) == 3 and len(set(kl["frozen"])) > 1, "the policy moved away from its reference"
    assert kl["engine"] == pytest.approx(kl["frozen"], abs=1e-6)


def test_reference_engine_needs_a_generator_that_scores_and_the_served_name():
    from rlkit.testing import validate_overrides

    with pytest.raises(ConfigError, match="generator=hf has none"):
        validate_overrides(["model.reference=engine"])
    with pytest.raises(ConfigError, match="serves the reference model under") as caught:
        validate_overrides(["model.reference=engine", "generator=openai_server"])
    assert caught.value.where == "generator.params.reference_model"


@pytest.mark.slow
@pytest.mark.parametrize("correction", [["is_correction.cap=1.5"],
                                        ["is_correction.level=geometric", "is_correction.mode=mask",
                                         "is_correction.low=0.999", "is_correction.cap=1.001"]],
                         ids=["token-truncate", "geometric-mask"])
def test_a_frozen_sampler_lags_and_is_corrected(tmp_path, correction):
    with OpenAICompatibleServer() as live:
        assert main(["fit", "generator=openai_server", f"generator.params.base_url={live.url}",
                     "generator.params.sync=none", "model=tiny_random", "trainer.max_steps=3", "batch_size=2",
                     "num_generations=2", "optim.lr=0.05", *correction, "logger=none",
                     f"hydra.run.dir={tmp_path / 'run'}"]) == 0
    rows = [json.loads(line)["metrics"] for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in rows if "rollout/policy_lag" in r]
    assert [r["rollout/policy_lag"] for r in steps] == [0.0, 1.0, 2.0]
    assert {r["rollout/policy_version"] for r in steps} == {0.0}
    assert steps[0]["rollout/is_ratio_mean"] == pytest.approx(1.0, abs=1e-3)
    assert steps[0]["rollout/mismatch_kl"] == pytest.approx(0.0, abs=1e-4), "the sampler is the policy at step 0"
    assert abs(steps[-1]["rollout/is_ratio_mean"] - 1) > 1e-3, "the policy moved away from the frozen sampler"
    assert steps[-1]["rollout/mismatch_kl"] > steps[0]["rollout/mismatch_kl"]
    if "is_correction.mode=mask" in correction:  # a band of ±0.1% around 1: the moved policy's completions fall out
        assert steps[0]["rollout/is_masked_frac"] == 0.0 and steps[-1]["rollout/is_masked_frac"] > 0
        assert all(r["rollout/is_clipped_frac"] == 0 for r in steps)
    else:
        assert all(r["rollout/is_masked_frac"] == 0 for r in steps)


@pytest.mark.slow
def test_a_server_that_dies_mid_run_is_one_line_naming_the_checkpoint_to_resume(tmp_path, capsys):
    import threading
    import time

    run = tmp_path / "run"
    # a second's wait for the engine (the default is two minutes), then the one line
    common = ["generator=openai_server", "generator.params.sync=full", "generator.params.retries=0",
              "generator.params.unavailable_timeout=1", "model=tiny_random", "batch_size=2", "num_generations=2",
              "checkpoint_every=2", "logger=none", "data.num_prompts=16"]
    live = OpenAICompatibleServer().start()

    def kill_after_first_checkpoint() -> None:
        deadline = time.monotonic() + 120
        while not (run / "checkpoints" / "last.ckpt").is_file() and time.monotonic() < deadline:
            time.sleep(0.02)
        live.stop()

    killer = threading.Thread(target=kill_after_first_checkpoint, daemon=True)
    killer.start()
    with pytest.raises(SystemExit) as exited:
        main(["fit", *common, f"generator.params.base_url={live.url}", "trainer.max_steps=50", f"hydra.run.dir={run}"])
    killer.join()
    assert exited.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("rlkit: error:")]
    assert len(lines) == 1 and "generator.params.base_url" in lines[0], lines
    assert f"resumes it: ckpt_path={run / 'checkpoints' / 'last.ckpt'}" in lines[0]
    # a new server, and the run goes on from the checkpoint it names
    with OpenAICompatibleServer() as fresh:
        assert main(["fit", *common, f"generator.params.base_url={fresh.url}", "trainer.max_steps=4",
                     f"ckpt_path={run / 'checkpoints' / 'last.ckpt'}", f"hydra.run.dir={tmp_path / 'resumed'}"]) == 0
    assert torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 4


def _metrics(run) -> list[dict[str, float]]:
    rows = [json.loads(line)["metrics"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "rollout/policy_lag" in r]


# the random-init policy: a warm start of its own for 16 prompts would cost each fit ~12 s and test nothing here
_AHEAD = ["generator=openai_server", "generator.params.sync=full", "generator.params.max_lag=1", "batch_size=2",
          "num_generations=2", "logger=none", "checkpoint_every=2", "data.num_prompts=16", "model=tiny_random"]


@pytest.mark.slow
def test_judging_while_the_next_step_samples_gives_the_synchronous_rewards(tmp_path):
    # max_lag 1: step t+1's rollout is requested before step t judges, so the engine samples it while the judge
    # works; each step's reward must still come from that step's own completions. At lr 0 the policy never moves,
    # so the lagged run samples exactly what the synchronous one does (seeded per prompt and step), and any reward
    # taken from the wrong step's completions would show as a difference.
    runs = {}
    for lag in (0, 1):
        with OpenAICompatibleServer(max_batch_rows=1) as live:
            assert main(["fit", *_AHEAD, f"generator.params.base_url={live.url}", f"generator.params.max_lag={lag}",
                         "optim.lr=0", "trainer.max_steps=4", f"hydra.run.dir={tmp_path / str(lag)}"]) == 0
        runs[lag] = _metrics(tmp_path / str(lag))
    assert [r["rollout/requested_ahead"] for r in runs[1]] == [0.0, 1.0, 1.0, 1.0]
    keys = [k for k in runs[0][0] if k.startswith("rewards/") and k.endswith("/mean")] + ["reward/mean"]
    assert len(keys) > 1
    for key in keys:
        assert [r[key] for r in runs[1]] == [r[key] for r in runs[0]], key
    rewards = [r["reward/mean"] for r in runs[0]]
    assert len(set(rewards)) > 1, "steps sampled different prompts, so a mix-up of steps would change the rewards"


@pytest.mark.slow
def test_max_lag_one_requests_the_next_step_ahead_and_resumes_exactly(tmp_path):
    # One run of 4 steps, against one of 2 steps resumed to 4: the rollout requested ahead at step 2 travels in the
    # checkpoint, so the resumed steps train on the same rollouts, with the same lags, as the uninterrupted ones.
    # One row a decoding pass: which requests share a padded pass depends on timing (a busy machine), and a row's
    # log-probs in another padding differ in the last float bits, which the importance weights carry into the weights.
    with OpenAICompatibleServer(max_batch_rows=1) as live:
        assert main(["fit", *_AHEAD, f"generator.params.base_url={live.url}", "trainer.max_steps=4",
                     f"hydra.run.dir={tmp_path / 'straight'}"]) == 0
        assert live.weight_updates == 5, "one push at start, one per optimiser step"
    straight = _metrics(tmp_path / "straight")
    assert [r["rollout/policy_lag"] for r in straight] == [0.0, 1.0, 1.0, 1.0]
    assert [r["rollout/policy_version"] for r in straight] == [0.0, 0.0, 1.0, 2.0]
    assert [r["rollout/requested_ahead"] for r in straight] == [0.0, 1.0, 1.0, 1.0]
    assert any(abs(r["rollout/is_ratio_mean"] - 1) > 1e-4 for r in straight[1:]), "lagged rollouts are reweighted"
    with OpenAICompatibleServer(max_batch_rows=1) as live:
        assert main(["fit", *_AHEAD, f"generator.params.base_url={live.url}", "trainer.max_steps=2",
                     f"hydra.run.dir={tmp_path / 'first'}"]) == 0
    with OpenAICompatibleServer(max_batch_rows=1) as live:
        assert main(["fit", *_AHEAD, f"generator.params.base_url={live.url}", "trainer.max_steps=4",
                     f"ckpt_path={tmp_path / 'first' / 'checkpoints' / 'last.ckpt'}",
                     f"hydra.run.dir={tmp_path / 'resumed'}"]) == 0
    resumed = _metrics(tmp_path / "resumed")
    assert len(resumed) == 2
    for key in ("rollout/policy_lag", "rollout/policy_version", "rollout/requested_ahead", "rollout/is_ratio_mean",
                "reward/mean", "loss", "completion_length"):
        assert [r[key] for r in resumed] == pytest.approx([r[key] for r in straight[2:]], rel=1e-5, abs=1e-7), key
    a, _ = load_policy(tmp_path / "straight" / "policy")
    b, _ = load_policy(tmp_path / "resumed" / "policy")
    for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters(), strict=True):
        torch.testing.assert_close(x, y, rtol=0, atol=1e-6, msg=name)


@pytest.mark.slow
def test_two_processes_push_each_version_once(tmp_path):
    import os
    import subprocess
    import sys

    run = tmp_path / "ddp"
    env = {**os.environ, "WANDB_SILENT": "true", "PYTHONHASHSEED": "0"}
    env.pop("LOCAL_RANK", None)
    with OpenAICompatibleServer() as live:
        proc = subprocess.run([sys.executable, "-m", "rlkit", "fit", *_AHEAD, f"generator.params.base_url={live.url}",
                               "trainer=ddp", "batch_size=4", "trainer.max_steps=3", f"hydra.run.dir={run}"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert live.weight_updates == 4, "process 0 alone pushes: once at start, once per optimiser step"
        completions = [r for r in live.log if r.path.rstrip("/") == "/v1/completions" and r.status == 200]
    assert "2 processes hold the same parameters" in proc.stdout
    assert len(completions) >= 2 * 3, "each process samples its own prompts"
    assert [r["rollout/policy_lag"] for r in _metrics(run)] == [0.0, 1.0, 1.0]


def test_server_process_serves_on_a_free_port_and_stops_after():
    import httpx

    from rlkit.testing.openai_server import server_process

    with server_process() as (url, process):
        assert url.startswith("http://127.0.0.1:") and url.endswith("/v1")
        assert httpx.get(f"{url}/models", timeout=10).json()["data"][0]["id"] == "default"
    assert process.poll() is not None, "the server process is stopped on leaving"
