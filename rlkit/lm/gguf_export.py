"""A Hugging Face model folder written as one GGUF file that llama.cpp (llama-server, ollama, LM Studio) loads: the
inverse of :mod:`rlkit.lm.gguf`.

The layout is llama.cpp's own conversion's (``convert_hf_to_gguf.py``, classes ``TextModel``, ``LlamaModel`` and
``Qwen2Model``), written with the ``gguf`` package that script uses: the metadata keys of ``set_gguf_parameters``,
tensor names from ``gguf.TensorNameMap``, a llama model's query and key rows permuted (llama.cpp rotates adjacent
pairs of a head's dimensions, transformers its two halves), no ``output.weight`` when the output projection is the
embedding matrix, norms and biases kept in float32 whatever the type, and the tokenizer as ``gpt2`` BPE (tokens,
token types, merges, special ids, the chat template). The file is written beside its final place and renamed when
complete, so an interrupted export leaves nothing llama.cpp would load as a model.
"""

from __future__ import annotations

import json
import os
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError
from rlkit.lm.gguf import GGUF_SUFFIX

EXPORT_TYPES = ("f32", "f16", "q8_0")

# transformers' model_type -> (llama.cpp's general.architecture, whether the query/key rows are permuted): the
# architectures whose conversion is llama.cpp's plain TextModel path (convert_hf_to_gguf.py: LlamaModel sets
# undo_permute; Qwen2Model rotates halves as transformers does, llama.cpp's NEOX rope, so nothing is permuted).
ARCHITECTURES: dict[str, tuple[str, bool]] = {"llama": ("llama", True), "qwen2": ("qwen2", False)}

# llama.cpp's LlamaFileType for general.file_type: ALL_F32, MOSTLY_F16, MOSTLY_Q8_0.
_FILE_TYPE = {"f32": 0, "f16": 1, "q8_0": 7}

# llama.cpp names a BPE tokenizer's pre-tokenizer (tokenizer.ggml.pre) by the hash of how it encodes this text
# (convert_hf_to_gguf.py, get_vocab_base_pre; the text and hashes are copied from there).
_CHECK_TEXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ "
    "🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "
    "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, "
    "'RE you sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL"
)
_PRE_BY_HASH = {
    "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249": "smollm",  # HuggingFaceTB/SmolLM(2)
    "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe",  # meta-llama/Meta-Llama-3-8B
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",  # Qwen/Qwen1.5-7B (and Qwen2/2.5)
    "d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c": "qwen2",  # Qwen/Qwen3-Embedding-0.6B
    "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454": "gpt-2",  # openai-community/gpt2
}
# How llama.cpp's pre-tokenizers of these names split text before the merges, as transformers' GGUF tokenizer builder
# spells them (llama-3's and Qwen2's); rlkit.testing.gguf_files trains its tiny tokenizers with the same splits.
PRE_TOKENIZER_SPLIT = {
    "llama-bpe": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+",
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
             r"|\s+(?!\S)|\s+",
}
# A tokenizer trained elsewhere with one of these split expressions splits text as that pre-tokenizer does, whatever
# its merges.
_PRE_BY_SPLIT = {split: name for name, split in PRE_TOKENIZER_SPLIT.items()}


@dataclass(frozen=True)
class ExportedGguf:
    """What :func:`export_gguf` wrote."""

    path: Path
    architecture: str
    type: str
    tensors: int
    bytes: int


def read_json_config(folder: Path, where: str, name: str = "config.json") -> dict[str, Any]:
    """A model folder's JSON config (``config.json``, a peft ``adapter_config.json``); one line when unreadable."""
    try:
        config = json.loads((folder / name).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{name} cannot be read: {exc}", where) from None
    if not isinstance(config, dict):
        raise ConfigError(f"{name} is not a JSON object", where)
    return config


def check_architecture(folder: Path, where: str) -> str:
    """The llama.cpp architecture of the model in ``folder``; one ``ConfigError`` naming the supported ones else."""
    model_type = read_json_config(folder, where).get("model_type")
    if model_type not in ARCHITECTURES:
        raise ConfigError(f"the model is a {model_type!r} model; GGUF export supports {', '.join(ARCHITECTURES)} "
                          "(transformers' model_type)", where)
    return ARCHITECTURES[model_type][0]


def export_gguf(folder: str | Path, out: str | Path, type: str = "f32", where: str | None = None) -> ExportedGguf:
    """Write the Hugging Face model in ``folder`` (weights, config, tokenizer) as the GGUF file ``out`` with its
    matrices as ``type`` (``f32``, ``f16`` or ``q8_0``). Errors are one ``ConfigError`` naming ``where``."""
    folder = Path(folder).expanduser()
    out = Path(out).expanduser()
    where = where or str(folder)
    if type not in EXPORT_TYPES:
        raise ConfigError(f"unknown type {type!r}; expected one of {', '.join(EXPORT_TYPES)}", where)
    check_architecture(folder, where)  # before loading anything
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32", local_files_only=True)
    return write_gguf(model, tokenizer, out, type, where, tokenizer_folder=folder, name=folder.name)


def write_gguf(model: Any, tokenizer: Any, out: str | Path, type: str = "f32", where: str = "policy",
               tokenizer_folder: str | Path | None = None, name: str | None = None) -> ExportedGguf:
    """Write an in-memory causal LM (a transformers model, or a peft model: its LoRA adapter merged in, the model
    left as it is) and its tokenizer as the GGUF file ``out``, as :func:`export_gguf` does from a folder, without
    saving the weights first: what a generator feeding llama.cpp the policy's current weights calls every sync.
    ``tokenizer_folder``: where the tokenizer's files are saved (their special ids and chat template are read
    from there); None: saved to a temporary folder here."""
    out = Path(out).expanduser()
    if type not in EXPORT_TYPES:
        raise ConfigError(f"unknown type {type!r}; expected one of {', '.join(EXPORT_TYPES)}", where)
    base = model.get_base_model() if hasattr(model, "peft_config") else model
    config = base.config
    if config.model_type not in ARCHITECTURES:
        raise ConfigError(f"the model is a {config.model_type!r} model; GGUF export supports "
                          f"{', '.join(ARCHITECTURES)} (transformers' model_type)", where)
    architecture = ARCHITECTURES[config.model_type][0]
    _check_rope(config, where)
    if tokenizer_folder is None:
        with tempfile.TemporaryDirectory(prefix="rlkit-tokenizer-") as saved:
            tokenizer.save_pretrained(saved)
            return write_gguf(model, tokenizer, out, type, where, saved, name)
    import gguf

    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        writer = gguf.GGUFWriter(tmp, architecture)
        _write_metadata(writer, config, name or str(getattr(config, "_name_or_path", "") or "policy"), type)
        _write_vocabulary(writer, tokenizer, Path(tokenizer_folder), config.vocab_size, where)
        count = _write_tensors(writer, merged_weights(model), config, architecture, type, where)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would keep the file from a server running as another user
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportedGguf(path=out, architecture=architecture, type=type, tensors=count, bytes=out.stat().st_size)


def merged_weights(model: Any) -> Iterator[tuple[str, Any]]:
    """The model's tensors under the base model's own names, a peft LoRA adapter's update (``get_delta_weight``,
    which applies its scaling) added to the weight it adapts, computed aside so the training weights are never
    merged and unmerged in place (each round trip would move them by a rounding error)."""
    if not hasattr(model, "peft_config"):
        yield from model.state_dict().items()
        return
    from peft.tuners.lora import LoraLayer

    base = model.get_base_model()
    deltas: dict[str, Any] = {}
    for module_name, module in base.named_modules():
        if isinstance(module, LoraLayer) and not module.merged:
            for adapter in module.active_adapters:
                if adapter in module.lora_A or adapter in module.lora_embedding_A:
                    delta = module.get_delta_weight(adapter)
                    deltas[module_name] = delta if module_name not in deltas else deltas[module_name] + delta
    for tensor_name, tensor in base.state_dict().items():
        if ".lora_" in tensor_name or ".original_module." in tensor_name:
            continue  # the adapter's factors (merged below), and the frozen copy a trained module replaces
        clean = tensor_name.replace(".base_layer.", ".").replace(".modules_to_save.default.", ".")
        owner = clean.rsplit(".", 1)[0]
        if clean.endswith(".weight") and owner in deltas:
            tensor = tensor + deltas[owner].to(tensor)
        yield clean, tensor


def _rope_parameters(config: Any) -> dict[str, Any]:
    """transformers 5 keeps theta and scaling in ``rope_parameters``; earlier versions in ``rope_theta`` and
    ``rope_scaling``."""
    params = dict(getattr(config, "rope_parameters", None) or getattr(config, "rope_scaling", None) or {})
    if "rope_theta" not in params and getattr(config, "rope_theta", None) is not None:
        params["rope_theta"] = config.rope_theta
    return params


def _check_rope(config: Any, where: str) -> None:
    kind = _rope_parameters(config).get("rope_type", _rope_parameters(config).get("type")) or "default"
    if kind not in ("default", "linear"):
        # llama3 needs a rope_freqs tensor and yarn four more keys (convert_hf_to_gguf.py): not written here
        raise ConfigError(f"the model's rotary embedding scaling {kind!r} is not exported; GGUF export writes "
                          "unscaled and linear rope only", where)


def _write_metadata(writer: Any, config: Any, name: str, type: str) -> None:
    """``TextModel.set_gguf_parameters`` and ``LlamaModel.set_gguf_parameters`` of llama.cpp's conversion."""
    import gguf

    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_name(str(getattr(config, "_name_or_path", "") or name) or name)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads or config.num_attention_heads)
    rope = _rope_parameters(config)
    if rope.get("rope_theta") is not None:
        writer.add_rope_freq_base(float(rope["rope_theta"]))
    if rope.get("rope_type", rope.get("type")) == "linear":
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(float(rope["factor"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if getattr(config, "head_dim", None) is not None:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    writer.add_vocab_size(config.vocab_size)
    writer.add_rope_dimension_count(head_dim)
    writer.add_file_type(_FILE_TYPE[type])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def _pre_tokenizer(tokenizer: Any, backend: dict[str, Any], where: str) -> str:
    """llama.cpp's name for how the tokenizer splits text before its merges."""
    found = _PRE_BY_HASH.get(sha256(str(tokenizer.encode(_CHECK_TEXT)).encode()).hexdigest())
    if found is not None:
        return found
    pre = backend.get("pre_tokenizer") or {}
    for part in [pre, *(pre.get("pretokenizers") or [])]:
        pattern = (part.get("pattern") or {}).get("Regex") if part.get("type") == "Split" else None
        if pattern in _PRE_BY_SPLIT:
            return _PRE_BY_SPLIT[pattern]
    if (backend.get("model") or {}).get("merges"):
        warnings.warn(f"{where}: the tokenizer's pre-tokenizer is not one llama.cpp names; written as 'default', "
                      "so llama.cpp may split some text differently before its merges", UserWarning, stacklevel=3)
    # without merges every symbol is its own token, so how text is split first changes nothing
    return "default"


def _write_vocabulary(writer: Any, tokenizer: Any, folder: Path, vocab_size: int, where: str) -> None:
    """``TextModel.get_vocab_base`` and ``_set_vocab_gpt2`` of llama.cpp's conversion."""
    import gguf

    try:
        backend = json.loads(tokenizer.backend_tokenizer.to_str())
    except AttributeError:
        backend = {}
    if (backend.get("model") or {}).get("type") != "BPE":
        raise ConfigError("the tokenizer is not a byte-level BPE (tokenizer.json with a BPE model); GGUF export "
                          "writes llama.cpp's gpt2 tokenizer only", where)
    vocab = tokenizer.get_vocab()
    if max(vocab.values()) >= vocab_size:
        raise ConfigError(f"the tokenizer has token ids up to {max(vocab.values())}, past the model's vocabulary of "
                          f"{vocab_size}", where)
    by_id = {index: token for token, index in vocab.items()}
    added = tokenizer.added_tokens_decoder
    tokens: list[str] = []
    types: list[int] = []
    for index in range(vocab_size):
        token = by_id.get(index)
        if token is None:  # the model's embedding is padded past the tokenizer (Qwen2.5's 151936 rows)
            tokens.append(f"[PAD{index}]")
            types.append(gguf.TokenType.UNUSED)
        elif index in added:
            tokens.append(token)
            types.append(gguf.TokenType.CONTROL if added[index].special else gguf.TokenType.USER_DEFINED)
        else:
            tokens.append(token)
            types.append(gguf.TokenType.NORMAL)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(_pre_tokenizer(tokenizer, backend, where))
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(folder, load_merges=True, n_vocab=vocab_size)
    if not special.merges:
        special.merges = [m if isinstance(m, str) else " ".join(m) for m in backend["model"].get("merges") or []]
    if not special.merges:
        # llama.cpp refuses a gpt2 tokenizer without a merges list (llama-vocab.cpp: "cannot find tokenizer merges"),
        # and gguf writes no empty array. A symbol starts as one character and only a merge lengthens it, so a merge
        # of two longer strings never applies: one symbol per character, as this tokenizer encodes (rlkit's tiny
        # policy has no merges).
        special.merges = ["<|no-merge|> <|no-merge|>"]
    for kind in ("bos", "eos", "unk", "pad"):  # the tokenizer as loaded is the truth where its files are silent
        index = getattr(tokenizer, f"{kind}_token_id", None)
        if kind not in special.special_token_ids and index is not None and index < vocab_size:
            special.special_token_ids[kind] = index
    probe = tokenizer("a")["input_ids"]  # what encoding adds, as llama.cpp's add_bos_token / add_eos_token say
    special.add_special_token.setdefault("bos", bool(probe) and probe[0] == tokenizer.bos_token_id
                                         and tokenizer.bos_token_id is not None and len(probe) > 1)
    special.add_special_token.setdefault("eos", bool(probe) and probe[-1] == tokenizer.eos_token_id
                                         and tokenizer.eos_token_id is not None and len(probe) > 1)
    if special.chat_template is None and getattr(tokenizer, "chat_template", None):
        special.chat_template = tokenizer.chat_template
    special.add_to_gguf(writer, quiet=True)


def _permute(weight: Any, heads: int) -> Any:
    """llama.cpp's ``LlamaModel.permute``: within each head, the rows of the first and second half of its dimensions
    interleaved, because llama.cpp's rotary embedding turns adjacent pairs where transformers' turns the halves."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2) \
        .reshape(weight.shape)


def _write_tensors(writer: Any, tensors: Iterable[tuple[str, Any]], config: Any, architecture: str, type: str,
                   where: str) -> int:
    """``ModelBase.prepare_tensors`` of llama.cpp's conversion, for a dense model."""
    import gguf
    import numpy as np

    arch = next(key for key, name in gguf.MODEL_ARCH_NAMES.items() if name == architecture)
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    permute = ARCHITECTURES[config.model_type][1]
    tied = bool(getattr(config, "tie_word_embeddings", False))
    count = 0
    for name, tensor in tensors:
        if name.endswith("rotary_emb.inv_freq") or (tied and name == "lm_head.weight"):
            continue  # recomputed by llama.cpp; the embedding matrix serves as the output projection
        new_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new_name is None:
            raise ConfigError(f"the model's tensor {name} has no name in llama.cpp's {architecture} layout", where)
        data = tensor.detach().float().cpu()
        if permute and name.endswith(("q_proj.weight", "q_proj.bias")):
            data = _permute(data, config.num_attention_heads)
        elif permute and name.endswith(("k_proj.weight", "k_proj.bias")):
            data = _permute(data, config.num_key_value_heads or config.num_attention_heads)
        array = np.ascontiguousarray(data.numpy(), dtype=np.float32)
        qtype = gguf.GGMLQuantizationType.F32
        if array.ndim > 1 and not new_name.endswith("_norm.weight"):  # llama.cpp reads norms and biases as F32
            qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
                     "q8_0": gguf.GGMLQuantizationType.Q8_0}[type]
        try:
            quantized = gguf.quants.quantize(array, qtype)
        except gguf.QuantError:  # a row not a whole number of 32-value blocks: F16, as llama.cpp's script falls back
            qtype = gguf.GGMLQuantizationType.F16
            quantized = gguf.quants.quantize(array, qtype)
        writer.add_tensor(new_name, quantized, raw_dtype=qtype)
        count += 1
    return count


def default_export_name(folder: Path, type: str) -> str:
    """``<folder name>-<type>.gguf``."""
    return f"{folder.name}-{type}{GGUF_SUFFIX}"
