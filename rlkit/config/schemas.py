"""The schema of the whole run config: every top-level key and block of ``conf/config.yaml``, with its type, default,
constraint and description. It is the one place defaults live: ``conf/config.yaml`` selects plugin groups and composes
these defaults (registered in Hydra's ConfigStore as ``rlkit_run_defaults``), ``rlkit validate`` checks a composed
config against it, and ``docs/config-reference.md`` is generated from it. Plugins' params have their own schemas,
held by each plugin."""

from __future__ import annotations

import re
from typing import Any, Literal

import pydantic
from omegaconf import OmegaConf
from pydantic import Field

# A description that would say "see below" is a sign the key needs one here: the reference page is built from these.


# Bounds far above any real run, so that a slipped key (`batch_size=99999999999999999999999`) is named by
# `rlkit validate` instead of failing deep inside a run. DeepSeekMath's GRPO (Shao et al. 2024, sec. 4.2) sampled
# 64 outputs a question with a training batch size of 1024; these allow 64x and 16x that.
MAX_BATCH_SIZE = 65_536
MAX_NUM_GENERATIONS = 1_024
# Lightning's seed_everything (and numpy) take a seed in [0, 2**32 - 1] and raise on any other.
MAX_SEED = 2**32 - 1
# torch.set_num_threads takes a C int; no machine gives one process more cores than this.
MAX_TORCH_THREADS = 1_024
_INT64_MAX = 2**63 - 1  # what torch tensors, itertools.islice and the C libraries below rlkit can hold


class _Schema(pydantic.BaseModel):
    # strict: `torch_threads=true` is not 1, and `batch_size="8"` is a typo worth naming (Hydra already types values)
    model_config = pydantic.ConfigDict(extra="forbid", strict=True)

    @pydantic.field_validator("*", mode="after")
    @classmethod
    def _fits_64_bits(cls, value: Any) -> Any:
        # Python ints have no limit but nothing they reach does: a count past 2**63 passed validation once and
        # failed inside a run (itertools.islice), so every integer key of every block is held to 64 bits here.
        if type(value) is int and not -_INT64_MAX - 1 <= value <= _INT64_MAX:
            raise ValueError(f"must fit in 64 bits (at most {_INT64_MAX}), got {value}")
        return value


def _finite(**kwargs: Any) -> Any:
    return Field(allow_inf_nan=False, **kwargs)


# --- plugin-less groups: model, data, rubric ------------------------------------------------------------------


class LoraConfig(_Schema):
    """peft LoRA on the policy; ``r: 0`` trains the full model."""

    r: int = Field(default=0, ge=0, description="LoRA rank; 0 trains every weight.")
    alpha: float | None = _finite(default=None, gt=0, description="LoRA alpha; null: 2·r, a common choice.")
    dropout: float = Field(default=0.0, ge=0, lt=1, description="Dropout on the LoRA branch.")
    target_modules: str | list[str] = Field(default="all-linear", description="Modules that get adapters.")
    save: Literal["merged", "adapter"] = Field(
        default="adapter", description="What `policy/` holds: the adapter alone (a few MB; every command that "
                                       "loads a model by path merges it into its base, once, in the rlkit cache), "
                                       "or a merged plain model that stands without its base.")

    @property
    def enabled(self) -> bool:
        return self.r > 0


class WarmStartConfig(_Schema):
    """A supervised warm start of the embedded tiny policy (``rlkit/lm/warm_start.py``): before the run, the random-init
    policy is trained ``steps`` steps on draws of the synthetic task (prompt → reference) that exclude every held-out
    prompt of the run, with the masked token NLL of ``objective=sft``, then cached. A policy that can already do the
    task sometimes leaves a reward room to teach: it is the default policy (``model=tiny``)."""

    steps: int = Field(default=0, ge=0, description="SFT steps; 0: the random-init policy. `model=tiny` sets 600 where "
                                                    "a warm start can be made, `model=tiny_random` 0; set by hand, it "
                                                    "must be 0 with model.name_or_path or data.path.")
    batch_size: int = Field(default=64, ge=1, description="Demonstrations per step, drawn with replacement.")
    lr: float = _finite(default=3e-3, gt=0, description="AdamW learning rate of the warm start.")
    seed: int = Field(default=0, description="Seeds the draws and the optimiser.")


def embedded_only(steps: int, name_or_path: str | None, data_path: str | None) -> int:
    """``steps`` where the run uses the embedded policy on the synthetic task, else 0: the OmegaConf resolver
    ``rlkit.embedded_only`` of ``conf/model/tiny.yaml``. A default must not ask for a warm start where none can be
    made (a model of the user's, or a data file), while the same number set by hand there is refused."""
    return steps if name_or_path is None and data_path is None else 0


class ModelConfig(_Schema):
    """The policy (``model=<name>`` selects a preset under ``conf/model/``)."""

    name_or_path: str | None = Field(
        default=None, description="A local Hugging Face causal-LM folder, a GGUF file (imported into the rlkit cache "
                                  "on first use, `rlkit model import`), `pkg://<package>/<file>` inside an installed "
                                  "package, or a hub id already in the local HF cache; null: the embedded tiny policy, "
                                  "built from config and cached.")
    install_hint: str | None = Field(
        default=None, description="How to get the model when `name_or_path` cannot be found (a pip command, say): said "
                                  "in that error. Presets of models that pip packages ship set it.")
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = Field(default="float32", description="Weights' dtype.")
    reference: Literal["frozen", "adapter_off", "ema", "engine", "none"] = Field(
        default="frozen", description="What the KL term or the DPO loss compares with: a frozen copy of the initial "
                                      "policy, an EMA of the policy, the LoRA base with adapters off, the reference "
                                      "model the inference engine serves (generator=openai_server with "
                                      "generator.params.reference_model), or none (beta = 0 only).")
    ema_decay: float = Field(default=0.99, ge=0, lt=1,
                             description="reference=ema: after each optimiser step ref ← d·ref + (1 − d)·policy.")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapters through peft.")
    gradient_checkpointing: bool = Field(
        default=False, description="Recompute activations in backward: less memory, more compute.")
    warm_start: WarmStartConfig = Field(default_factory=WarmStartConfig,
                                        description="Supervised warm start of the embedded tiny policy.")
    chat_template: str | None = Field(
        default=None, description="A Jinja chat template file (a path or pkg://) that replaces the tokenizer's own, as "
                                  "TRL's chat_template_path; null: the tokenizer's. Multi-turn environments need one.")
    response_template: str | None = Field(
        default=None, description="A YAML or JSON file holding transformers' response_template (how a reply's tool "
                                  "calls are read, `parse_response`); null: the tokenizer's own, if any.")


class DataConfig(_Schema):
    """The training prompts (``data=<name>`` selects a preset under ``conf/data/``)."""

    path: str | None = Field(default=None, description="A JSONL file of prompt records; null: the synthetic task.")
    task: str | None = Field(default="arithmetic", description="The synthetic task when `path` is null.")
    num_prompts: int | None = Field(default=256, gt=0, description="Prompts the synthetic task generates.")
    chat: bool = Field(default=False, description="The synthetic task's prompts as chat messages (TRL's "
                                                  "conversational `prompt`), rendered with the model's chat template; "
                                                  "`calculator`'s always are.")
    instruction: str | None = Field(default=None, description="Appended to each synthetic prompt's question, e.g. "
                                                              "`Reply with only the number.` where the rubric asks it.")
    heldout_fraction: float = Field(default=0.125, ge=0, lt=1,
                                    description="Share of prompts held out and scored greedily before and after.")
    seed: int = Field(default=0, description="Seed of the synthetic task and of the held-out split.")

    def synthetic_records(self, count: int | None = None, seed: int | None = None) -> list[dict[str, Any]]:
        """The synthetic task's records as this block asks for them (``count`` and ``seed`` default to its own)."""
        from rlkit.data.records import synthetic_records

        assert self.task is not None
        return synthetic_records(self.task, self.num_prompts if count is None else count,
                                 self.seed if seed is None else seed, self.chat, self.instruction)


class RubricEvolveConfig(_Schema):
    """Rubrics that evolve during training (``rlkit/evaluation/rubric_evolution.py``): every ``every`` steps the
    judge's backend writes new criteria for each prompt of the step from the contrast between its best and worst
    completions, into a per-prompt buffer of at most ``max_active`` criteria beside the record's own (rubric=per_record
    only); criteria whose scores saturate are retired. Every change is a new version of the prompt's rubric, written
    with its diff under ``run_dir/rubrics/``; checkpoints hold the buffer; held-out and golden-set scores keep the
    records' own rubrics."""

    every: int = Field(default=0, ge=0, description="Steps between rounds of new criteria; 0: the rubric is fixed.")
    max_active: int = Field(default=5, ge=1, le=13,
                            description="Evolved criteria active per prompt at most (the oldest retire first); also "
                                        "capped so a prompt's rubric keeps at most 20 criteria.")
    max_new: int = Field(default=3, ge=1, le=10, description="New criteria the backend may write per prompt a round.")
    saturation_share: float = _finite(
        default=1.0, gt=0.5, le=1, description="An evolved criterion is saturated in a group when this share of its "
                                               "scored completions give the same answer (1.0: all of them).")
    retire_after: int = Field(default=1, ge=1, description="Rounds in a row an evolved criterion must be saturated "
                                                           "before it is retired.")
    retries: int = Field(default=0, ge=0, description="Reminders after an answer that cannot be read; what still "
                                                      "fails is skipped and counted in rubric/evolve_malformed.")
    template: str = Field(default="judge/evolve_criteria.jinja", min_length=1,
                          description="The prompt asking for new criteria: a shipped template or a file.")


class RubricScheduleConfig(_Schema):
    """A staged rubric (``rlkit/reward/rubric_schedule.py``): training starts on the first stage's dimensions (the
    others weigh 0) and adds the next stage's once every active dimension is saturated (its
    ``rewards/<dimension>/saturated_groups`` averaged over the stage's last ``window`` steps above ``min_share``, the
    signal `rlkit rubric tighten` reads). Each stage is a version of the rubric (``<version>+stage.<k>``), logged as
    ``rubric/stage``, written under ``run_dir/rubrics/`` and kept in checkpoints."""

    stages: list[list[str]] = Field(default_factory=list,
                                    description="Dimension names per stage, every dimension of the rubric in exactly "
                                                "one; empty: no schedule, every dimension from the start.")
    min_share: float = _finite(default=0.5, ge=0, lt=1,
                               description="A dimension is saturated when more than this share of groups are, on "
                                           "average over the window (0.5: the doctor's zero-advantage threshold).")
    window: int = Field(default=10, ge=1, description="Steps of the current stage the saturated share is averaged "
                                                      "over; a stage lasts at least this long (10: the doctor's).")


class RubricConfig(_Schema):
    """The rubric the judge scores (``rubric=<name>`` selects a preset under ``conf/rubric/``)."""

    path: str = Field(description="A rubric YAML: a file path or `pkg://module/relative/path`.")
    evolve: RubricEvolveConfig = Field(default_factory=RubricEvolveConfig, description=RubricEvolveConfig.__doc__)
    schedule: RubricScheduleConfig = Field(default_factory=RubricScheduleConfig,
                                           description=RubricScheduleConfig.__doc__)
    dropout: float = _finite(
        default=0.0, ge=0, lt=1,
        description="Rubric dropout (arXiv 2608.11669): during training each scored dimension of a group is left out "
                    "of its reward with this probability, the aggregation renormalised over the kept dimensions' "
                    "weights; at least one is kept. Drawn from the run seed and the step (a resume draws the same); "
                    "held-out and golden-set scores never drop. 0: off (rlkit/reward/dropout.py).")


class LoggerConfig(_Schema):
    """The run's logger (``logger=<option>`` under ``conf/logger/``): W&B offline by default, so no account is
    needed; ``csv`` writes ``csv/.../metrics.csv``; ``none`` logs nothing (``metrics.jsonl`` is always kept)."""

    name: Literal["wandb", "csv", "none"] = Field(default="wandb", description="Which logger.")
    project: str = Field(default="rlkit", min_length=1, description="W&B project.")
    mode: Literal["offline", "online"] = Field(default="offline", description="W&B mode; online syncs.")


# --- blocks of conf/config.yaml ------------------------------------------------------------------------------------


class OptimConfig(_Schema):
    """AdamW on the policy. The default suits the embedded, warm-started tiny policy; ``model=tiny_random`` (from
    random weights) sets 2e-3; real models train at ~1e-6."""

    lr: float = _finite(default=2e-4, ge=0, description="Learning rate. A fine-tuning rate: 2e-3 undoes the default "
                                                        "policy's warm start (benchmarks/README.md).")
    weight_decay: float = _finite(default=0.0, ge=0, description="AdamW weight decay.")
    warmup_steps: int = Field(default=0, ge=0, description="Linear learning-rate warm-up steps.")
    gradient_clip_val: float | None = _finite(default=1.0, gt=0,
                                              description="Clip the gradient norm to this; null: no clipping.")
    max_nonfinite: int = Field(
        default=3, ge=0, description="A step whose loss or gradient is not finite skips its update (no weight or "
                                     "optimiser-state change, logged as train/skipped_nonfinite); this many such "
                                     "steps in a row stop the run with a checkpoint (exit 4). 0: never stop.")
    gradient_accumulation_steps: int = Field(
        default=1, ge=1, description="Each step's batch_size × num_generations completions go through the log-prob "
                                     "passes and backward in this many micro-batches, then one optimiser step: the "
                                     "same update with less activation memory.")
    length_buckets: int = Field(
        default=2, ge=1, description="Policy-gradient passes group completions of similar length: rows sorted by "
                                     "length are split into max(this, gradient_accumulation_steps) passes, cut where "
                                     "the padding saved is largest (same gradient). 4–8 suit real models with very "
                                     "varied lengths (benchmarks/README.md).")


class DebiasConfig(_Schema):
    """Length/format bias correction of the judge's scores (``rlkit/reward/debias.py``): each step every corrected
    dimension's scores over the last ``window`` completions are regressed on the features and the part they explain
    is removed (the batch mean is kept). Coefficients are logged as ``debias/<dimension>/<feature>``."""

    enabled: bool = Field(default=False, description="Turn the correction on.")
    features: list[str] = Field(default_factory=lambda: ["length", "newlines", "markdown"],
                                description="Features regressed out: length, newlines, markdown, digits_share.")
    dimensions: list[str] | None = Field(
        default=None, description="Dimensions corrected; null: every dimension but gates and dimensions another "
                                  "one's condition reads. Leave out any meant to depend on length (e.g. brevity).")
    window: int = Field(default=512, ge=1, description="Completions the fit sees (the latest).")
    min_samples: int = Field(default=64, ge=2, description="Scored completions a dimension needs before correction.")
    ridge: float = _finite(default=1e-3, ge=0, description="Added to the features' correlation matrix.")


class LogSamplesConfig(_Schema):
    """Sampled completions with their scores, to ``run_dir/samples.jsonl`` and a W&B table ``samples``."""

    every: int = Field(default=10, ge=0, description="Steps between sample tables; 0 turns it off.")
    rows: int = Field(default=16, ge=1, description="Completions per table.")


class ScoreConfig(_Schema):
    """``rlkit score``: where scored records go and how the judge is asked. With an output the records are scored
    in shards of ``shard_size``, each written atomically to ``<output>.shards/``; a killed command resumes there."""

    output: str | None = Field(default=None, description="JSONL written with each completion's scores, reward and "
                                                         "rank; null: print the table only.")
    batch_size: int = Field(default=64, ge=1, description="Records per judge batch.")
    shard_size: int = Field(default=256, ge=1, description="Records per resumable shard.")
    retries: int = Field(default=3, ge=0, description="Retries of a judge batch failing transiently.")
    retry_backoff: float = _finite(default=1.0, ge=0, description="Seconds before the first retry, doubled after.")
    progress: bool = Field(default=True, description="Progress bar with rate and ETA (only on a terminal).")


class ServeConfig(_Schema):
    """``rlkit serve``: the configured judge, aggregator, weights and rubric behind an HTTP reward API
    (``POST /v1/reward``, ``GET /v1/info``, ``GET /health``, OpenAPI schema at ``/openapi.json``)."""

    host: str = Field(default="127.0.0.1", min_length=1,
                      description="Address to bind; loopback by default. 0.0.0.0 exposes it (set a token then).")
    port: int = Field(default=8000, ge=0, le=65535, description="TCP port; 0: any free port (printed at start).")
    api_key_env: str | None = Field(
        default="RLKIT_SERVE_TOKEN",
        description="Environment variable holding the bearer token (the token never goes in the config); an unset "
                    "variable means no auth.")
    rate_limit: int = Field(default=600, ge=0, description="Requests per minute per client (HTTP 429); 0: no limit.")
    max_responses: int = Field(default=64, ge=1, description="Responses per request (HTTP 413 over it).")
    max_response_chars: int = Field(default=20_000, ge=1, description="Characters per response (HTTP 413 over it).")
    max_body_bytes: int = Field(default=2_000_000, ge=1, description="Request body size (HTTP 413 over it).")
    timeout_s: float = _finite(default=60.0, gt=0, description="Judging one request longer than this answers 504.")

    @pydantic.field_validator("api_key_env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(f"must name an environment variable (the token never goes in the config), got {value!r}")
        return value


class CalibrateConfig(_Schema):
    """``rlkit calibrate``: how well the configured judge agrees with human labels, per rubric dimension."""

    labels: str = Field(default="pkg://rlkit.conf/calibration/arithmetic_labels.jsonl", min_length=1,
                        description="JSONL, one completion per line: prompt, completion, reference (optional), "
                                    "labels {dimension: level}. conf/calibration/LABELLING.md is the guide.")
    output: str = Field(default="calibration", min_length=1,
                        description="Folder for calibration.md and the confusion-matrix PNGs (relative: to the cwd).")
    threshold: float = _finite(default=0.6, ge=-1, le=1,
                               description="Flag a dimension whose kappa or rho is below this, or undefined.")
    disagreements: int = Field(default=10, ge=0, description="How many of the lines where judge and humans "
                                                             "disagree most to list (0: none).")
    previous: str | None = Field(default=None, description="A previous round's calibration.json (or its folder) "
                                                           "of the same rubric, compared per dimension and line.")


class EvalConfig(_Schema):
    """``rlkit eval`` and the golden-set callback of ``rlkit fit``: greedy completions on a held-out prompt set that
    never enters training, scored with the run's judge, step-0 weights and aggregator, plus reference metrics."""

    prompts: str = Field(default="pkg://rlkit.conf/golden/arithmetic_golden.jsonl", min_length=1,
                         description="JSONL of {prompt, reference (optional), ...}.")
    checkpoint: str | None = Field(default=None, description="A policy folder, a Lightning .ckpt of this model, or "
                                                             "null: model.name_or_path.")
    output: str = Field(default="eval/results.jsonl", min_length=1,
                        description="Results JSONL (rows appended per checkpoint, rubric version and dimension); "
                                    "the markdown table goes beside it. Relative: to the cwd.")
    every: int = Field(default=0, ge=0, description="`rlkit fit`: evaluate the golden set every N steps; 0: off.")
    batch_size: int = Field(default=32, ge=1, description="Prompts per generation batch.")
    max_completion_length: int | None = Field(default=None, ge=1,
                                              description="null: the top-level max_completion_length.")
    reference_field: str = Field(default="reference", min_length=1, description="Record field of the reference.")
    embedding: str | None = Field(
        default="auto", description="Embedding similarity to the reference: `auto` uses the bundled "
                                    "all-MiniLM-L6-v2 when installed; a model name or folder must load; null: off.")

    @pydantic.field_validator("output")
    @classmethod
    def _jsonl_output(cls, value: str) -> str:
        if value.endswith(".md"):
            raise ValueError("must be a .jsonl path (the markdown table is written beside it)")
        return value


class AuditConfig(_Schema):
    """``rlkit rubric audit``: cheap-trick probes, a degradation ladder, re-grading, dimension order, redundancy and
    human alignment of the run's rubric and judge, combined into a trust score (docs/rubric-audit.md)."""

    records: str | None = Field(default=None, description="JSONL of records with completions (prompt, completion or "
                                                          "completions, reference and labels optional); null: the "
                                                          "policy samples completions on num_prompts prompts.")
    num_prompts: int = Field(default=32, ge=1, description="Prompts of the run's data the policy samples on when "
                                                           "records is null.")
    probes: list[str] | None = Field(default=None, description="Audit probes to run (`rlkit plugins` lists them); "
                                                               "null: every registered probe.")
    ladder: bool = Field(default=True, description="Score each record's degradation ladder (wrong numbers, shuffled "
                                                   "words, truncation, empty).")
    regrade: bool | None = Field(default=None, description="Score the originals a second time with a fresh judge; "
                                                           "null: only a model-based (stochastic) judge.")
    order: bool | None = Field(default=None, description="Score the originals with the rubric's dimensions in reverse "
                                                         "order; null: only a prompted (model-based) judge.")
    hackable_share: float = _finite(default=0.1, gt=0, le=1,
                                    description="A probe whose gamed completions score higher on at least this share "
                                                "of the records it applies to marks the rubric hackable.")
    fail_under: float = _finite(default=0.7, ge=0, le=1,
                                description="The audit fails (exit status 1, stored as failed) when the trust score "
                                            "is below this or a probe is hackable; `--fail-under` sets it.")
    bootstrap: int = Field(default=1000, ge=100, description="Bootstrap resamples of the records for each interval.")
    output: str = Field(default="audit", min_length=1, description="Folder for audit.json and audit.md (relative: to "
                                                                   "the cwd).")
    require: bool = Field(default=False, description="`rlkit fit`: refuse to start unless this rubric version "
                                                     "(name, version, content hash) has a passed audit stored.")

    @pydantic.field_validator("probes", mode="before")
    @classmethod
    def _one_probe(cls, value: Any) -> Any:
        # `audit.probes=keyword_stuffing` (as `rlkit plugins` prints it) means a list of one
        return [value] if isinstance(value, str) else value


class SamplingConfig(_Schema):
    """Dynamic sampling (DAPO): groups that teach nothing are replaced by groups of more prompts
    (``rlkit/train/dynamic_sampling.py``), and the reward of completions cut at the length limit. Logged as
    ``sampling/groups_dropped``, ``sampling/extra_rounds`` and ``sampling/informative_frac``."""

    filter: Literal["none", "zero_spread", "mean_range"] = Field(
        default="none", description="Which groups a step keeps: `none` all (no extra sampling); `zero_spread` those "
                                    "whose rewards, or scores in any weighted dimension, differ by more than tol; "
                                    "`mean_range` those whose mean reward lies in [lo, hi].")
    tol: float = Field(default=1e-6, ge=0, allow_inf_nan=False,
                       description="`zero_spread`: a spread (max - min within the group, of the reward or of a "
                                   "dimension's [0, 1] score) at or below this counts as none: float noise is no "
                                   "signal.")
    lo: float = _finite(default=0.0, description="`mean_range`: the lowest group mean reward kept.")
    hi: float = _finite(default=1.0, description="`mean_range`: the highest group mean reward kept.")
    max_rounds: int = Field(default=3, ge=0, description="Extra rounds of prompts a step may sample to replace dropped "
                                                         "groups (each at most a batch); then it trains on what it "
                                                         "has.")
    truncated: Literal["keep", "value", "mask"] = Field(
        default="keep", description="The reward of completions cut at max_completion_length: `keep` the judge's, "
                                    "`value` replace it by truncated_value, `mask` none (advantage 0, out of the "
                                    "group's statistics).")
    truncated_value: float = _finite(default=0.0, description="`truncated: value`: the reward of a cut completion.")

    @pydantic.model_validator(mode="after")
    def _range(self) -> SamplingConfig:
        if self.lo > self.hi:
            raise ValueError(f"lo ({self.lo}) is greater than hi ({self.hi})")
        return self


class ImportanceCorrectionConfig(_Schema):
    """The correction for completions an inference engine sampled (a generator that returns engine log-probs, e.g.
    ``openai_server``), from ``r = exp(log π_old - log π_engine)`` per token (``rlkit.lm.logprobs``). Logged as
    ``rollout/is_ratio_mean``, ``rollout/is_clipped_frac``, ``rollout/is_masked_frac`` and ``rollout/mismatch_kl``."""

    level: Literal["token", "sequence", "geometric"] = Field(
        default="token", description="`token`: each token by its own ratio; `sequence`: every token of a completion by "
                                     "the product of its ratios; `geometric`: by their geometric mean.")
    mode: Literal["truncate", "mask"] = Field(
        default="truncate", description="`truncate`: the weight capped at `cap` (TIS); `mask`: weight 0 outside "
                                        "[`low`, `cap`] (IcePop with `low` > 0; TRL's sequence_mask).")
    cap: float = _finite(default=2.0, gt=0, description="The highest weight kept (TRL's vllm_importance_sampling_cap, "
                                                        "2.0; its sequence_mask uses 3).")
    low: float = _finite(default=0.0, ge=0, description="`mask`: the lowest weight kept (IcePop's lower bound, "
                                                        "e.g. 0.5); 0: no lower bound.")

    @pydantic.model_validator(mode="after")
    def _bounds(self) -> ImportanceCorrectionConfig:
        if self.low >= self.cap:
            raise ValueError(f"low ({self.low}) must be below cap ({self.cap})")
        if self.low > 0 and self.mode == "truncate":
            raise ValueError("low bounds mode: mask; truncate caps from above only (set mode: mask, or low: 0)")
        return self


class RunConfig(_Schema):
    """The top-level keys of ``conf/config.yaml`` (plugin groups, ``model``, ``data``, ``rubric``, ``trainer`` and
    ``logger`` are checked by their own schemas)."""

    seed: int = Field(default=42, ge=0, le=MAX_SEED,
                      description="Seeds Python, NumPy and torch (Lightning's seed_everything).")
    batch_size: int = Field(default=8, ge=1, le=MAX_BATCH_SIZE,
                            description="Prompts per optimisation step (TRL's name).")
    num_generations: int = Field(
        default=8, ge=1, le=MAX_NUM_GENERATIONS,
        description="Completions per prompt (a group). At least 2 whenever the estimator, objective or aggregator "
                    "compares completions within their group.")
    max_completion_length: int = Field(default=16, ge=1, description="New tokens per completion at most.")
    temperature: float = _finite(default=1.0, gt=0, description="Sampling temperature of training rollouts.")
    score_normalization: Literal["range", "quantile"] = Field(
        default="range", description="How dimension scores reach the weights and aggregator: `range` maps each "
                                     "dimension's rubric range to [0, 1]; `quantile` then replaces each by its "
                                     "quantile within the batch.")
    heldout_judge: str | None = Field(
        default="rule", description="The judge of held-out completions when the training judge only ranks within "
                                    "groups (judge=ranking): it scores the user's rubric alone.")
    heldout_aggregator: str = Field(
        default="weighted_sum", min_length=1,
        description="How held-out scores are combined when the training judge or aggregator only ranks within a "
                    "group (judge=ranking, aggregator=lexicographic or pareto): an absolute yardstick that does not "
                    "move with the group.")
    heldout_weights: str = Field(default="constant", min_length=1,
                                 description="The weight scheduler of those held-out scores.")
    torch_threads: int | None = Field(
        default=None, ge=1, le=MAX_TORCH_THREADS,
        description="Intra-op threads for torch; null: the cores other jobs leave free at start-up (this process's "
                    "CPUs minus the 1-minute load average that is not its own, at least 1, at most torch's default; "
                    "rlkit/train/threads.py), torch's default where OMP_NUM_THREADS is set. On a shared machine "
                    "fewer threads can be many times faster.")
    eval_on_interrupt: bool = Field(
        default=False, description="After a Ctrl-C, still evaluate the held-out split at the end (minutes on a real "
                                   "model); false: the summary's end column is left empty.")
    checkpoint_every: int = Field(default=20, ge=1, description="Steps between Lightning checkpoints "
                                                                "(run_dir/checkpoints/last.ckpt is kept).")
    checkpoint_keep_last: int = Field(
        default=0, ge=0, description="Step checkpoints kept beside last.ckpt (checkpoints/step-000040.ckpt, the N "
                                     "most recent; older ones are deleted): where last.ckpt turns out damaged, a "
                                     "resume offers the newest whole one. 0: last.ckpt alone (one checkpoint's disk).")
    heldout_every: int | None = Field(
        default=None, ge=1, description="Steps between held-out evaluations during training (TRL's eval_steps), "
                                        "logged as heldout/<dimension> at their step; null: before and after only.")
    is_correction: ImportanceCorrectionConfig | None = Field(
        default_factory=ImportanceCorrectionConfig,
        description="The correction for completions an inference engine sampled: `level` token | sequence | "
                    "geometric, `mode` truncate | mask, `cap`, `low`; null: off. Default: TRL's token truncation at "
                    "2.0.")
    ckpt_path: str | None = Field(default=None, description="A Lightning checkpoint of a compatible run (same rubric "
                                                            "and model) to resume from.")
    allow_self_judge: bool = Field(
        default=False, description="Silence the warning that a model judge's model is the policy's model or shares "
                                   "its base (the rubric design note's collusion risk: a judge can be pleased by the "
                                   "model it trains); set it when that is what you mean.")
    log_samples: LogSamplesConfig = Field(default_factory=LogSamplesConfig, description=LogSamplesConfig.__doc__)
    debias: DebiasConfig = Field(default_factory=DebiasConfig, description="Length/format bias correction.")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description=SamplingConfig.__doc__)
    optim: OptimConfig = Field(default_factory=OptimConfig, description=OptimConfig.__doc__)
    score: ScoreConfig = Field(default_factory=ScoreConfig, description="`rlkit score`.")
    serve: ServeConfig = Field(default_factory=ServeConfig, description="`rlkit serve`.")
    calibrate: CalibrateConfig = Field(default_factory=CalibrateConfig, description="`rlkit calibrate`.")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="`rlkit eval` and the golden-set callback.")
    audit: AuditConfig = Field(default_factory=AuditConfig, description="`rlkit rubric audit` and `rlkit fit "
                                                                        "audit.require=true`.")


# Plugin-less groups checked by their schema (what `group=<option>` YAMLs hold).
GROUP_SCHEMAS: dict[str, type[pydantic.BaseModel]] = {
    "model": ModelConfig,
    "data": DataConfig,
    "rubric": RubricConfig,
    "logger": LoggerConfig,
}
# Nodes passed on to a library: `trainer` holds lightning.Trainer's own arguments (checked against
# TRAINER_ARGUMENTS by rlkit.config.validate), `hydra` is Hydra's.
PASS_THROUGH_KEYS = ("trainer", "hydra")
# lightning.Trainer's arguments, written out: reading its signature imports Lightning, 5 of `rlkit validate`'s 11 s
# here. tests/config/test_config.py checks the list against the installed Lightning.
TRAINER_ARGUMENTS = (
    "accelerator", "accumulate_grad_batches", "barebones", "benchmark", "callbacks", "check_val_every_n_epoch",
    "default_root_dir", "detect_anomaly", "deterministic", "devices", "enable_autolog_hparams", "enable_checkpointing",
    "enable_model_summary", "enable_progress_bar", "fast_dev_run", "gradient_clip_algorithm", "gradient_clip_val",
    "inference_mode", "limit_predict_batches", "limit_test_batches", "limit_train_batches", "limit_val_batches",
    "log_every_n_steps", "logger", "max_epochs", "max_steps", "max_time", "min_epochs", "min_steps", "model_registry",
    "num_nodes", "num_sanity_val_steps", "overfit_batches", "plugins", "precision", "profiler",
    "reload_dataloaders_every_n_epochs", "strategy", "sync_batchnorm", "use_distributed_sampler", "val_check_interval",
)
# lightning.Trainer arguments that rlkit sets itself (rlkit.train.fit.build_trainer): a run may not set them.
TRAINER_KEYS_RLKIT_SETS = ("default_root_dir", "logger", "callbacks", "num_sanity_val_steps",
                           "check_val_every_n_epoch", "val_check_interval", "enable_model_summary")

RUN_DEFAULTS = "rlkit_run_defaults"


def register_run_defaults() -> None:
    """Put :class:`RunConfig`'s defaults in Hydra's ConfigStore as ``rlkit_run_defaults``, the node
    ``conf/config.yaml`` composes first: the defaults are written here and nowhere else."""
    from hydra.core.config_store import ConfigStore

    # `rubric.evolve` and `rubric.schedule` defaults too, so `rubric.evolve.every=4` overrides a key every rubric
    # preset has (the presets under conf/rubric/ name only their path; the group's YAML merges into this node)
    node = {**RunConfig().model_dump(mode="json"),
            "rubric": {"evolve": RubricEvolveConfig().model_dump(mode="json"),
                       "schedule": RubricScheduleConfig().model_dump(mode="json")}}
    ConfigStore.instance().store(name=RUN_DEFAULTS, node=node)


# Registered on import rather than with the defaults: a config composed elsewhere (a submitit job unpickles one)
# is resolved by check_config, which imports this module.
OmegaConf.register_new_resolver("rlkit.embedded_only", embedded_only, replace=True)
