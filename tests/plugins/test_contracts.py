"""Every registered plugin runs its kind's contract suite; the suites themselves can fail."""

from __future__ import annotations

import pytest
import torch

from rlkit.core.registry import Registry, create_plugin_manager
from rlkit.testing import (
    AdvantageEstimatorContract,
    AggregatorContract,
    AuditProbeContract,
    EnvironmentContract,
    GeneratorContract,
    JudgeBackendContract,
    JudgeContract,
    ObjectiveContract,
    PreferenceConstructorContract,
    PromptSamplerContract,
    WeightSchedulerContract,
)
from rlkit.testing.monitor_contract import MonitorContract
from rlkit.testing.properties import AdvantageEstimatorProperties, AggregatorProperties

_REGISTRY = Registry(create_plugin_manager())


def _build(kind: str, name: str):
    return _REGISTRY.create(kind, name)


# A model judge needs a model trained for the rubric it scores: tests/plugins/test_llm_judge.py runs this suite on
# the llm judge with the offline tiny judge and its rubric, tests/plugins/test_ranking_offline.py on the ranking
# judge with the offline tiny ranking judge (run here too, it built that judge a second time: ~90 s of the suite).
_MODEL_JUDGES = {"llm", "ranking"}
# A GRM is a model trained by rlkit train-grm: tests/grm/test_grm.py trains one and runs this suite on judge=grm.
# A reward model is trained by rlkit train-rm: tests/grm/test_reward_model.py runs the suite on it.
_TRAINED_JUDGES = {"grm", "reward_model"}
# A remote judge needs a live server judging the suite's rubric: tests/serve/test_serve.py runs the suite on reward_api.
_REMOTE_JUDGES = {"reward_api"}


class TestObjectives(ObjectiveContract):
    @pytest.fixture(params=_REGISTRY.names("objective"))
    def objective(self, request):
        return _build("objective", request.param)


class TestPolicyGradientOptions(ObjectiveContract):
    """GSPO, CISPO, the k2 KL estimator and the per-prompt normalisation meet the contract as the default objective
    does. (k1 cannot: as a loss, ``β·(log π_θ - log π_ref)`` has gradient β on every token even at the reference,
    zero only in expectation over samples; tests/plugins/test_losses.py pins that down.)"""

    @pytest.fixture(params=[{"importance_sampling_level": "sequence", "epsilon": 3e-4, "epsilon_high": 4e-4},
                            {"loss_type": "cispo", "epsilon_high": 4.0},
                            {"kl": {"estimator": "k2"}, "num_iterations": 2}, {"loss_type": "prompt_mean"}],
                    ids=["gspo", "cispo", "k2", "prompt_mean"])
    def objective(self, request):
        return _REGISTRY.create("objective", "policy_gradient", request.param)


class TestObjectivesWithoutReference(ObjectiveContract):
    @pytest.fixture(params=[("policy_gradient", {"beta": 0.0, "num_iterations": 2}),
                            ("group_dpo", {"loss_type": "simpo", "sft_weight": 0.0})], ids=["pg-beta0", "simpo"])
    def objective(self, request):
        name, params = request.param
        return _REGISTRY.create("objective", name, params)


class TestJudges(JudgeContract):
    @pytest.fixture(params=[n for n in _REGISTRY.names("judge")
                            if n not in _MODEL_JUDGES | _REMOTE_JUDGES | _TRAINED_JUDGES])
    def judge(self, request):
        return _build("judge", request.param)


class TestAggregators(AggregatorContract):
    @pytest.fixture(params=_REGISTRY.names("aggregator"))
    def aggregator(self, request):
        return _build("aggregator", request.param)


class TestAdvantageEstimators(AdvantageEstimatorContract):
    @pytest.fixture(params=_REGISTRY.names("advantage_estimator"))
    def estimator(self, request):
        return _build("advantage_estimator", request.param)


class TestWeightSchedulers(WeightSchedulerContract):
    @pytest.fixture(params=_REGISTRY.names("weight_scheduler"))
    def scheduler(self, request):
        return _build("weight_scheduler", request.param)


class TestPreferenceConstructors(PreferenceConstructorContract):
    @pytest.fixture(params=_REGISTRY.names("preference_constructor"))
    def constructor(self, request):
        return _build("preference_constructor", request.param)


@pytest.fixture(scope="module")
def tiny_policy_path():
    from rlkit.lm.models import build_tiny_policy

    return build_tiny_policy()


@pytest.fixture(scope="module")
def tiny_judge_server(tiny_policy_path):
    """An OpenAI-compatible server answering with the tiny policy, loaded once for the module."""
    from rlkit.testing.openai_server import OpenAICompatibleServer

    with OpenAICompatibleServer(tiny_policy_path) as server:
        yield server


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    """A tiny random GGUF that llama.cpp serves (the llama_cpp backend's engine)."""
    from rlkit.testing.gguf_files import write_tiny_gguf

    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_tiny_gguf(path, architecture="llama")
    return path


@pytest.fixture(scope="module", params=["hf", "qwen_coder", "openai", "tiny", "llama_cpp"])
def built_judge_backend(request, tiny_policy_path):
    """Each built-in backend once per module (the hf one loads its model on first use), greedy, 8 new tokens.

    Each needs its own params (a model, a server), so they are listed rather than taken from the registry;
    test_builtin_judge_backends_are_all_tested keeps the list complete.
    """
    threads = torch.get_num_threads()
    if request.param in ("hf", "qwen_coder"):  # qwen_coder is hf with another default model: the tiny one here
        params = {"model": str(tiny_policy_path), "max_new_tokens": 8}
        # On a busy 2-core machine, 2 intra-op threads fighting other processes make the tiny model ~100x slower.
        torch.set_num_threads(1)
    elif request.param == "tiny":  # the offline tiny judge's backend answers with the embedded tiny policy here
        params = {"max_new_tokens": 8}
        torch.set_num_threads(1)
    elif request.param == "llama_cpp":
        pytest.importorskip("xllamacpp", reason="the llama_cpp backend's engine is the judge-server extra")
        params = {"model": str(request.getfixturevalue("tiny_gguf")), "max_tokens": 8, "threads": 1}
    else:
        params = {"base_url": request.getfixturevalue("tiny_judge_server").url, "max_tokens": 8}
    backend = _REGISTRY.create("judge_backend", request.param, params)
    yield backend
    backend.close()
    torch.set_num_threads(threads)


class TestGenerators(GeneratorContract):
    """Every registered generator, and hf once more with per-prompt seeds (the seeded-sampling test) and once
    through `generate` instead of its decoding loop."""

    # openai_server needs a live server: tests/plugins/test_server_generator.py runs the suite against one
    @pytest.fixture(params=[*((n, {}) for n in _REGISTRY.names("generator") if n != "openai_server"),
                            ("hf", {"per_prompt_seed": True}),
                            ("hf", {"decode_loop": False})],
                    ids=lambda p: p[0] + "".join(f"-{k}={v}" for k, v in p[1].items()))
    def generator(self, request):
        name, params = request.param
        generator = _REGISTRY.create("generator", name, params)
        yield generator
        generator.close()


class TestEnvironments(EnvironmentContract):
    """Every registered environment, with its default params."""

    @pytest.fixture(params=_REGISTRY.names("environment"))
    def environment(self, request):
        environment = _REGISTRY.create("environment", request.param, {})
        yield environment
        environment.close()


class TestJudgeBackends(JudgeBackendContract):
    @pytest.fixture
    def backend(self, built_judge_backend):
        return built_judge_backend


def test_builtin_judge_backends_are_all_tested():
    builtin = {e.name for e in _REGISTRY.entries("judge_backend") if e.provider == "rlkit"}
    assert builtin == {"hf", "qwen_coder", "openai", "tiny", "llama_cpp"}


def test_every_kind_is_covered_by_a_suite():
    assert {k.key for k in _REGISTRY.kinds()} == {
        "judge", "aggregator", "advantage_estimator", "preference_constructor", "weight_scheduler", "judge_backend",
        "environment", "generator", "monitor", "objective", "prompt_sampler", "audit_probe"}


def test_contract_catches_a_broken_estimator():
    class Broken:
        zero_mean_groups = True

        def advantages(self, batch):
            return batch.rewards  # NaN for unscored completions, not zero-mean

    suite = AdvantageEstimatorContract()
    from rlkit.testing import example_reward_batch

    batch = example_reward_batch()
    with pytest.raises(AssertionError):
        suite.test_shape_dtype_and_finite(Broken(), batch)
    with pytest.raises(AssertionError):
        suite.test_zero_mean_groups_when_declared(Broken(), batch)


def test_contract_catches_a_judge_out_of_range():
    from rlkit import JudgeError
    from rlkit.testing import example_rollout, example_rubric

    class TooHigh:
        def score(self, rollout, rubric):
            return torch.full((rollout.num_prompts, rollout.group_size, len(rubric.dimensions)), 7.0)

    with pytest.raises(JudgeError, match="outside its range"):
        JudgeContract().test_shape_dtype_and_range(TooHigh(), example_rollout(), example_rubric())


def test_contract_catches_an_aggregator_that_invents_rewards():
    from rlkit.testing import example_reward_batch

    class ZeroFill:
        def aggregate(self, batch):
            return torch.nan_to_num(batch.scores.nanmean(-1), nan=0.0)

    with pytest.raises(AssertionError, match="nobody scored"):
        AggregatorContract().test_nan_only_where_nothing_was_scored(ZeroFill(), example_reward_batch())


class TestAggregatorProperties(AggregatorProperties):
    @pytest.fixture(params=_REGISTRY.names("aggregator"))
    def aggregator(self, request):
        return _build("aggregator", request.param)


class TestAdvantageEstimatorProperties(AdvantageEstimatorProperties):
    @pytest.fixture(params=_REGISTRY.names("advantage_estimator"))
    def estimator(self, request):
        return _build("advantage_estimator", request.param)


def test_contract_catches_a_generator_that_never_syncs_and_a_misaligned_mask():
    """An engine-style generator samples from a copy taken at setup: sync_weights that copies nothing fails;
    one that marks the whole completion as kept (past EOS) fails the alignment test."""
    import copy

    from rlkit.lm.models import build_tiny_policy, load_policy
    from rlkit.testing import example_prompts
    from rlkit_plugins.generators.hf import HFGenerator

    class StaleEngine(HFGenerator):
        def setup(self, policy, tokenizer):
            self.engine = copy.deepcopy(policy)

        def generate(self, policy, tokenizer, request):
            return super().generate(self.engine, tokenizer, request)

    class MaskPastEos(HFGenerator):
        def generate(self, policy, tokenizer, request):
            out = super().generate(policy, tokenizer, request)
            out.completion_mask[:] = 1
            return out

    suite, records = GeneratorContract(), example_prompts()
    with pytest.raises(AssertionError, match="ignored the new weights"):
        suite.test_sync_weights_reaches_the_next_generate(StaleEngine(HFGenerator.Params()),
                                                          load_policy(build_tiny_policy()), records)
    policy = load_policy(build_tiny_policy())
    policy[0].get_output_embeddings().weight.data[policy[1].eos_token_id] += 5.0  # EOS early: padding follows
    with pytest.raises(AssertionError):
        suite.test_shapes_masks_and_texts_line_up(MaskPastEos(HFGenerator.Params()), policy, records)


class TestMonitors(MonitorContract):
    @pytest.fixture(params=_REGISTRY.names("monitor"))
    def monitor(self, request):
        # every measurement due on the suite's steps (these default to rarer cadences)
        every = {name: {"every": 2} for name in ("judge_stability", "label_sample", "probes")}.get(
            request.param, {})
        return _build_with("monitor", request.param, every)


def _build_with(kind: str, name: str, params: dict):
    plugin = _REGISTRY.create(kind, name, params)
    check = getattr(plugin, "check_rubric", None)
    if check is not None:
        from rlkit.testing.monitor_contract import arithmetic_rubric

        check(arithmetic_rubric())
    return plugin


class TestAuditProbes(AuditProbeContract):
    @pytest.fixture(params=_REGISTRY.names("audit_probe"))
    def probe(self, request):
        return _build("audit_probe", request.param)


def test_audit_probe_contract_catches_an_impure_probe():
    class Counting:
        calls = 0

        def game(self, record, rubric):
            self.calls += 1
            return f"{record['completion']} {self.calls}"

    from rlkit.testing import example_audit_rubric

    suite = AuditProbeContract()

    class Request:
        fixturenames: list[str] = []

    with pytest.raises(AssertionError, match="pure function"):
        suite.test_is_deterministic_and_leaves_the_record(Counting(), Request())
    assert example_audit_rubric().name == "probe-contract"


class TestPromptSamplers(PromptSamplerContract):
    @pytest.fixture(params=_REGISTRY.names("prompt_sampler"))
    def sampler(self, request):
        return _build("prompt_sampler", request.param)


class TestPromptSamplersOnRecordsWithoutDifficulty(PromptSamplerContract):
    """Without a ``difficulty`` field, difficulty_mix measures levels (an adaptive sampler)."""

    @pytest.fixture(params=_REGISTRY.names("prompt_sampler"))
    def sampler(self, request):
        return _build("prompt_sampler", request.param)

    @pytest.fixture
    def records(self):
        from rlkit.testing import example_sampler_records

        return example_sampler_records(difficulty=False)
