"""The policy model: the embedded tiny default, built locally and cached, and loading any model by path.

The tiny policy takes the same path as a user's checkpoint: it is written with ``save_pretrained`` and
read back with ``AutoModelForCausalLM`` / ``AutoTokenizer``, so ``rlkit fit`` has one loading code path.
transformers is imported inside the functions, so importing this module (e.g. for the spec) does not load it.
"""

from __future__ import annotations

import hashlib
import json
import string
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.core.errors import ConfigError

# where a reference resolves and how the cache builds were here before; imported by those names still
from rlkit.lm.locate import check_model_directory, check_weights_files, locate_model  # noqa: F401
from rlkit.lm.model_cache import (  # noqa: F401
    TINY_JUDGE_CACHE_ENV,
    WARM_START_CACHE_ENV,
    build_cached,
    default_cache_dir,
)

if TYPE_CHECKING:
    from rlkit.lm.placement import Placement

# Printable ASCII minus the control whitespace (tab, CR, VT, FF): digits, letters, punctuation, space, newline.
DEFAULT_ALPHABET = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")
SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")
# Files a complete save holds; a folder missing any of them is rebuilt.
_DTYPES = ("auto", "float32", "float16", "bfloat16")
_FORMAT = 1  # bump when the build recipe changes, so old cache folders are not reused


@dataclass(frozen=True)
class TinyPolicySpec:
    """Architecture, init seed and tokenizer alphabet of the embedded tiny Qwen2-style policy."""

    hidden_size: int = 64
    intermediate_size: int = 128
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 128
    tie_word_embeddings: bool = True
    seed: int = 0
    # The tokenizer's training corpus: each character becomes exactly one token (no merges).
    alphabet: str = DEFAULT_ALPHABET


def _architecture() -> tuple[type, type]:
    """Qwen2 config and model classes, or Llama's where this transformers lacks Qwen2."""
    try:
        from transformers import Qwen2Config, Qwen2ForCausalLM

        return Qwen2Config, Qwen2ForCausalLM
    except ImportError:
        from transformers import LlamaConfig, LlamaForCausalLM

        return LlamaConfig, LlamaForCausalLM


def spec_hash(spec: TinyPolicySpec) -> str:
    """Short hash of the spec, architecture, transformers major version and build format."""
    key = {"spec": asdict(spec), "arch": _architecture()[1].__name__, "format": _FORMAT,
           "transformers": version("transformers").split(".")[0]}
    return hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]


def build_tokenizer(spec: TinyPolicySpec) -> Any:
    """A character-level byte-level BPE tokenizer trained on ``spec.alphabet``, left-padding."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    # Byte-level, because AutoTokenizer loads any qwen2 checkpoint as Qwen2Tokenizer, which rebuilds the
    # tokenizer as byte-level BPE from tokenizer.json's vocab and merges; a byte-level vocab with no
    # merges encodes identically there and here. Characters outside the alphabet are dropped on encode.
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    symbols = sorted({s for piece, _ in byte_level.pre_tokenize_str(spec.alphabet) for s in piece})
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()  # joins symbols back into bytes, not with spaces
    # vocab_size = specials + alphabet leaves no room for merges: one token per character.
    trainer = trainers.BpeTrainer(vocab_size=len(SPECIAL_TOKENS) + len(symbols), special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=symbols, show_progress=False)
    tok.train_from_iterator([spec.alphabet], trainer=trainer)
    pad, eos, bos, unk = SPECIAL_TOKENS
    # unk is named so Qwen2Tokenizer does not append its own "<|endoftext|>" past the model's vocabulary.
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token=pad, eos_token=eos, bos_token=bos,
                                   unk_token=unk, padding_side="left")


def build_model(spec: Any, tokenizer: Any) -> Any:
    """A randomly initialised causal LM for ``tokenizer``, identical for the same spec and seed.

    ``spec`` is a :class:`TinyPolicySpec` or anything with its architecture fields and ``seed``."""
    import torch
    from transformers import GenerationConfig

    config_cls, model_cls = _architecture()
    ids = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id,
           "bos_token_id": tokenizer.bos_token_id}
    config = config_cls(vocab_size=len(tokenizer), hidden_size=spec.hidden_size,
                        intermediate_size=spec.intermediate_size, num_hidden_layers=spec.num_hidden_layers,
                        num_attention_heads=spec.num_attention_heads, num_key_value_heads=spec.num_key_value_heads,
                        max_position_embeddings=spec.max_position_embeddings,
                        tie_word_embeddings=spec.tie_word_embeddings, **ids, **_attention_options(spec))
    with torch.random.fork_rng(devices=[]):  # seed the init without touching the caller's RNG
        torch.manual_seed(spec.seed)
        model = model_cls(config)
    model.generation_config = GenerationConfig(**ids)
    return model


def _attention_options(spec: Any) -> dict[str, Any]:
    """Config fields a spec may set beyond the policy's: ``initializer_range`` and a ``sliding_window`` over the
    first layer only (the offline tiny judge's, :class:`rlkit.judging.tiny_judge.TinyJudgeSpec`)."""
    out: dict[str, Any] = {}
    if getattr(spec, "initializer_range", None) is not None:
        out["initializer_range"] = spec.initializer_range
    window = getattr(spec, "sliding_window", None)
    if window:
        layers = spec.num_hidden_layers
        out |= {"use_sliding_window": True, "sliding_window": window, "max_window_layers": layers,
                "layer_types": ["sliding_attention"] + ["full_attention"] * (layers - 1)}
    return out


def build_tiny_policy(spec: TinyPolicySpec | None = None, cache_dir: Path | str | None = None) -> Path:
    """Save the tiny policy under ``cache_dir/tiny-policy-<hash>`` (reused if already complete); return it."""
    spec = spec or TinyPolicySpec()
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()

    def write(folder: Path) -> None:
        tokenizer = build_tokenizer(spec)
        build_model(spec, tokenizer).save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    return build_cached(root / f"tiny-policy-{spec_hash(spec)}", write)


def load_policy(name_or_path: str | Path, dtype: str = "float32",
                placement: Placement | None = None) -> tuple[Any, Any]:
    """Load a causal LM and its left-padding tokenizer from a local directory or the local HF cache (never the
    network); ``placement`` (:func:`rlkit.lm.placement.plan_placement`) spreads it over devices and disk."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = locate_model(name_or_path)
    if dtype not in _DTYPES:
        raise ConfigError(f"unknown dtype {dtype!r}; expected one of {', '.join(_DTYPES)}", "model.dtype")
    placed = placement.from_pretrained_kwargs() if placement is not None else {}
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, local_files_only=True, **placed)
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    tokenizer.padding_side = "left"  # decoder-only batched generation continues from the right edge
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if model.generation_config.pad_token_id is None:
        model.generation_config.pad_token_id = tokenizer.pad_token_id
    return model, tokenizer


def resolve_policy_path(name_or_path: str | Path | None, spec: TinyPolicySpec | None = None,
                        cache_dir: Path | str | None = None) -> Path:
    """The configured model's local directory (a hub id resolved in the local HF cache), or the built (cached)
    tiny policy when it is None."""
    if name_or_path is None:
        return build_tiny_policy(spec, cache_dir)
    return locate_model(name_or_path)


def enable_gradient_checkpointing(model: Any) -> None:
    """Activation checkpointing in training mode (non-reentrant, so frozen inputs under LoRA still get
    gradients); transformers 5 names it ``activation_checkpointing``, earlier versions ``gradient_checkpointing``."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def make_adamw(params: list[Any], *, lr: float, weight_decay: float, precision: str = "32-true",
               clips_gradients: bool = False) -> Any:
    """AdamW, fused where every parameter is a floating tensor on one CPU or CUDA device.

    torch picks its per-tensor loop for CPU parameters unless asked; the fused kernel took 16 ms instead of
    107 ms per step on a 14M policy here, and is what transformers' Trainer (hence TRL) uses by default on
    torch >= 2.8 (its ``adamw_torch_fused``). Lightning's mixed-precision plugins refuse to clip the gradients
    of an optimiser that unscales them itself, as a fused one may, so clipped mixed-precision runs keep the loop.
    """
    import torch

    fused = bool(params) and all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params) \
        and len({p.device for p in params}) == 1 and not ("mixed" in str(precision) and clips_gradients)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused or None)


def apply_lora(model: Any, lora: Any) -> Any:
    """Wrap ``model`` in peft LoRA adapters per ``model.lora`` (``rlkit.config.LoraConfig``); base weights frozen."""
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=lora.r, lora_alpha=lora.alpha if lora.alpha is not None else 2 * lora.r,
                        lora_dropout=lora.dropout, target_modules=lora.target_modules, task_type="CAUSAL_LM")
    try:
        return get_peft_model(model, config)
    except ValueError as exc:  # e.g. a target module name the model does not have
        raise ConfigError(str(exc).splitlines()[0], "model.lora.target_modules") from None


def save_policy(model: Any, tokenizer: Any, folder: Path, lora_save: str = "merged") -> Path:
    """Save the trained policy in Hugging Face format: the full (LoRA-merged) model, or only the adapter (which
    every loader by path merges on use: ``rlkit.lm.adapters``)."""
    from peft import PeftModel
    from transformers.utils import logging as hf_logging

    if isinstance(model, PeftModel) and lora_save == "merged":
        # merge into a copy, so the module keeps its adapters (e.g. for a validation after saving)
        import copy

        model = copy.deepcopy(model).merge_and_unload()
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a shard bar per save is noise beside the run's own progress
    try:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    if isinstance(model, PeftModel):
        from rlkit.lm.adapters import pin_adapter_base

        pin_adapter_base(Path(folder))
    return folder
