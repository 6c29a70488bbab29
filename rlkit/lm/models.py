"""The policy model: the embedded tiny default, built locally and cached, and loading any model by path.

The tiny policy takes the same path as a user's checkpoint: it is written with ``save_pretrained`` and
read back with ``AutoModelForCausalLM`` / ``AutoTokenizer``, so ``rlkit fit`` has one loading code path.
transformers is imported inside the functions, so importing this module (e.g. for the spec) does not load it.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import string
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.core.errors import ConfigError, no_such
from rlkit.core.package_files import PACKAGE_SCHEME
from rlkit.lm.gguf import is_gguf

if TYPE_CHECKING:
    from rlkit.lm.placement import Placement

# Printable ASCII minus the control whitespace (tab, CR, VT, FF): digits, letters, punctuation, space, newline.
DEFAULT_ALPHABET = "".join(c for c in string.printable if c not in "\t\r\x0b\x0c")
SPECIAL_TOKENS = ("<pad>", "<eos>", "<bos>", "<unk>")
# Files a complete save holds; a folder missing any of them is rebuilt.
_SAVED_FILES = ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json")
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


# Where warm starts (rlkit.lm.warm_start) go when set, instead of beside their base in the rlkit cache: many caches
# (each test's own, say) can then share the one that took a while to train, while what builds in a second stays in each.
WARM_START_CACHE_ENV = "RLKIT_WARM_START_CACHE"


def default_cache_dir() -> Path:
    """``$RLKIT_CACHE`` if set, else ``~/.cache/rlkit``."""
    return Path(os.environ.get("RLKIT_CACHE") or Path.home() / ".cache" / "rlkit").expanduser()


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


def _is_complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in _SAVED_FILES)


def build_cached(target: Path, write: Callable[[Path], None],
                 is_complete: Callable[[Path], bool] = _is_complete) -> Path:
    """``target`` if it holds a complete save (``is_complete``), else ``write(folder)`` into a fresh folder beside
    it, renamed into place: a killed build never leaves a half-written folder, and concurrent builds both succeed."""
    from transformers.utils import logging as hf_logging

    if is_complete(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    os.chmod(tmp, 0o755)  # mkdtemp's 0700 would keep a shared cache's folders from its other users
    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a shard bar for a sub-megabyte file is noise
    try:
        write(tmp)
        if target.exists() and not is_complete(target):
            shutil.rmtree(target)  # left by something other than this function, which only renames whole folders
        try:
            os.replace(tmp, target)
        except OSError:
            if not is_complete(target):  # else a concurrent build won the rename; its folder is as good
                raise
    finally:
        if bars:
            hf_logging.enable_progress_bar()
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def build_tiny_policy(spec: TinyPolicySpec | None = None, cache_dir: Path | str | None = None) -> Path:
    """Save the tiny policy under ``cache_dir/tiny-policy-<hash>`` (reused if already complete); return it."""
    spec = spec or TinyPolicySpec()
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()

    def write(folder: Path) -> None:
        tokenizer = build_tokenizer(spec)
        build_model(spec, tokenizer).save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    return build_cached(root / f"tiny-policy-{spec_hash(spec)}", write)


def check_model_directory(name_or_path: str | Path) -> Path:
    """The path of a local Hugging Face model directory, or a ConfigError naming model.name_or_path."""
    where = f"model.name_or_path ({name_or_path})"
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise ConfigError(no_such(path, "model directory", directory=True), where)
    if not (path / "config.json").is_file():
        raise ConfigError("not a Hugging Face model directory (no config.json)", where)
    check_weights_files(path, where)
    return path


def check_weights_files(path: Path, where: str) -> None:
    """Every weights file of a model folder whole, read from headers alone (milliseconds, nothing loaded): a
    ``.safetensors`` file at least as long as its header says its tensors reach, a ``.bin`` a zip archive (torch's
    format since 1.6). A copy cut short otherwise fails only when training starts, as a library traceback."""
    import json
    import struct
    import zipfile

    for file in sorted(path.glob("*.safetensors")):
        size = file.stat().st_size
        with file.open("rb") as fh:
            head = fh.read(8)
            length = struct.unpack("<Q", head)[0] if len(head) == 8 else None
            raw = fh.read(length) if length is not None and length <= size - 8 else b""
        try:
            header = json.loads(raw) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            header = None
        if not isinstance(header, dict):
            raise ConfigError(f"{file.name} is corrupt or truncated: its safetensors header cannot be read "
                              f"({size} bytes)", where)
        ends = [entry["data_offsets"][1] for name, entry in header.items()
                if name != "__metadata__" and isinstance(entry, dict) and len(entry.get("data_offsets") or []) == 2]
        needed = 8 + length + max(ends, default=0)
        if size < needed:
            raise ConfigError(f"{file.name} is truncated: {size} bytes, its header describes {needed} (copy it "
                              "again)", where)
    for file in sorted(path.glob("*.bin")):
        if file.name.startswith(("pytorch_model", "model")) and not zipfile.is_zipfile(file):
            raise ConfigError(f"{file.name} is corrupt or truncated: not the zip archive torch saves", where)


def _looks_like_path(ref: str) -> bool:
    return ref.startswith(("/", "./", "../", "~")) or Path(ref).expanduser().exists()


def locate_model(name_or_path: str | Path) -> Path:
    """A local model directory, a GGUF file imported on first use (:func:`rlkit.lm.gguf.import_gguf`), or a hub id's
    snapshot in the local Hugging Face cache; never the network. ``pkg://module/file`` names a file inside an
    installed package, ``parts://`` one joined from parts that packages hold (:mod:`rlkit.lm.joined_files`)."""
    from rlkit.lm.joined_files import is_parts_ref, model_file

    ref = str(name_or_path)
    if ref.startswith(PACKAGE_SCHEME) or is_parts_ref(ref):
        ref = str(model_file(ref))
    if is_gguf(ref):
        from rlkit.lm.gguf import import_gguf

        return import_gguf(ref, where=f"model.name_or_path ({ref})")
    if _looks_like_path(ref):
        from rlkit.lm.adapters import is_adapter_folder, merged_adapter

        if is_adapter_folder(ref):  # a LoRA run's policy/ (model.lora.save=adapter): its merge, built once
            return merged_adapter(ref, where=f"model.name_or_path ({ref})")
        return check_model_directory(ref)
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    try:
        folder = snapshot_download(ref, local_files_only=True)
    except HFValidationError:
        raise ConfigError("no such model directory, and not a valid hub id", f"model.name_or_path ({ref})") from None
    except (LocalEntryNotFoundError, FileNotFoundError):
        from huggingface_hub.constants import HF_HUB_CACHE

        raise ConfigError(f"no such directory, and hub id {ref!r} is not in the local Hugging Face cache "
                          f"({HF_HUB_CACHE}); rlkit never downloads at run time: fetch it beforehand "
                          f"(`hf download {ref}`) or pass a directory", "model.name_or_path") from None
    return check_model_directory(folder)


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
