"""Tiny GGUF files, written on the spot, for tests of GGUF import.

rlkit's own tests, and third-party plugin authors testing code that imports GGUF checkpoints, need a GGUF file that
transformers' GGUF loader reads, small enough to write and load in well under a second, and a reference to compare
what was loaded against. :func:`write_tiny_gguf` writes a randomly initialised causal LM ("llama" or "qwen2": two
layers, hidden size 64, a vocabulary of a few hundred tokens) with a byte-level BPE tokenizer and a ChatML chat
template as one GGUF file, and saves the same model and tokenizer in Hugging Face format next to it::

    source = write_tiny_gguf(tmp_path / "tiny.gguf", architecture="qwen2")
    model = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="tiny.gguf")
    reference = AutoModelForCausalLM.from_pretrained(source)  # same logits, same token ids

The file follows llama.cpp's conventions (``convert_hf_to_gguf.py``): its metadata keys, its tensor names, the
row permutation of a llama model's query and key projections (llama.cpp rotates adjacent pairs of a head's
dimensions, transformers its two halves; its loader undoes the permutation) and, for a model whose output
projection is its embedding matrix (qwen2 here), no ``output.weight``. :func:`truncate_file` writes a cut-off copy,
for tests of a damaged file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlkit.lm.gguf_export import PRE_TOKENIZER_SPLIT

ARCHITECTURES = ("llama", "qwen2")
QUANTIZATIONS = ("F32", "Q8_0")

# The ChatML template, on the GGUF (``tokenizer.chat_template``) and on the source tokenizer alike.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)

# Special tokens, ids 0..3 in this order.
BOS_TOKEN = "<|endoftext|>"  # also the unknown token (a byte-level BPE never needs one)
IM_START = "<|im_start|>"
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|pad|>"
SPECIAL_TOKENS = (BOS_TOKEN, IM_START, EOS_TOKEN, PAD_TOKEN)

# How each architecture's text is split before the merges (``tokenizer.ggml.pre``), as llama.cpp names it, and the
# split itself (rlkit.lm.gguf_export.PRE_TOKENIZER_SPLIT: the regexes transformers' GGUF tokenizer builder uses).
PRE_TOKENIZER = {"llama": "llama-bpe", "qwen2": "qwen2"}

# What the tokenizer's merges are learned from: plain ASCII, chat-like, with digits and arithmetic.
_CORPUS = (
    "What is 3 + 4? The answer is 7.",
    "What is 12 - 5? It is 7. What is 6 * 7? It is 42.",
    "The quick brown fox jumps over the lazy dog.",
    "Question: how many apples are there?\nAnswer: there are 3 apples.",
    "user\nPlease add the numbers 10 and 20.\nassistant\nThe sum is 30.",
    "Think step by step, then give the final answer.",
    "Is it true? Yes, it is true. No, it is not false!",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "0 1 2 3 4 5 6 7 8 9 (1 + 2) = 3; [4 / 2] = 2, {x: 5}",
)
_MERGE_TOKENS = 96  # learned tokens on top of the 256 bytes and the specials

# Shape of the model: 4 query heads over 2 key/value heads (so the key permutation is tested with grouped heads).
_HIDDEN, _INTERMEDIATE, _LAYERS, _HEADS, _KV_HEADS, _CONTEXT = 64, 128, 2, 4, 2, 256
_RMS_EPS = 1e-6
_ROPE_THETA = {"llama": 10000.0, "qwen2": 1000000.0}
# The output projection is its own matrix for llama and the embedding matrix for qwen2, so both layouts are written.
_TIED = {"llama": False, "qwen2": True}

# llama.cpp's file type (``general.file_type``) for each quantization: LlamaFileType.ALL_F32 and MOSTLY_Q8_0.
_FILE_TYPE = {"F32": 0, "Q8_0": 7}

# Hugging Face parameter names within layer N, and their GGUF names (``blk.N.<name>``).
_LAYER_TENSORS = {
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "self_attn.q_proj.bias": "attn_q.bias",
    "self_attn.k_proj.bias": "attn_k.bias",
    "self_attn.v_proj.bias": "attn_v.bias",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}


def write_tiny_gguf(path: str | Path, architecture: str = "llama", seed: int = 0, quantization: str = "F32") -> Path:
    """Write a tiny randomly initialised causal LM of `architecture` ("llama" or "qwen2") with a small
    byte-level BPE tokenizer (and a chat template) as one GGUF file at `path`, and save the same model and
    tokenizer in Hugging Face format in the folder `Path(path).with_suffix("")` + "-source" (returned), so a test
    can compare logits of the source model with what transformers loads from the GGUF file.

    `quantization` is "F32" (every tensor as float32: transformers loads back the very same weights) or "Q8_0"
    (the matrices in llama.cpp's 8-bit blocks, the norms and biases in float32, as llama.cpp writes them: the
    loaded logits are then only close to the source's). The weights depend on `seed` alone; the caller's torch
    random state is left as it was.
    """
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {ARCHITECTURES}, not {architecture!r}")
    if quantization not in QUANTIZATIONS:
        raise ValueError(f"quantization must be one of {QUANTIZATIONS}, not {quantization!r}")
    path = Path(path)
    source = path.parent / (path.with_suffix("").name + "-source")
    path.parent.mkdir(parents=True, exist_ok=True)

    backend = _train_tokenizer(PRE_TOKENIZER[architecture])
    tokenizer = _hf_tokenizer(backend)
    model = _random_model(architecture, tokenizer, seed)
    model.save_pretrained(source)
    tokenizer.save_pretrained(source)
    _write_gguf(path, architecture, model, backend, quantization)
    return source


def truncate_file(path: Path, keep_fraction: float = 0.5) -> Path:
    """Write the first `keep_fraction` of the file at `path` next to it, as ``<stem>.truncated.gguf``, for tests of
    a damaged or half-downloaded file; return the copy's path."""
    if not 0.0 <= keep_fraction < 1.0:
        raise ValueError(f"keep_fraction must be in [0, 1), not {keep_fraction}")
    path = Path(path)
    data = path.read_bytes()
    truncated = path.with_name(path.with_suffix("").name + ".truncated.gguf")
    truncated.write_bytes(data[: int(len(data) * keep_fraction)])
    return truncated


def _train_tokenizer(pre_tokenizer: str) -> Any:
    """A byte-level BPE (``tokenizers.Tokenizer``) learned on a fixed corpus, so it is the same on every call: the
    special tokens first, then the 256 bytes, then the merges."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(PRE_TOKENIZER_SPLIT[pre_tokenizer]), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=len(SPECIAL_TOKENS) + len(alphabet) + _MERGE_TOKENS,
        min_frequency=1,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    backend.train_from_iterator(list(_CORPUS), trainer=trainer)
    return backend


def _hf_tokenizer(backend: Any) -> Any:
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        unk_token=BOS_TOKEN,
        pad_token=PAD_TOKEN,
        additional_special_tokens=[IM_START],
        add_bos_token=False,
        add_eos_token=False,
        chat_template=CHAT_TEMPLATE,
    )


def _random_model(architecture: str, tokenizer: Any, seed: int) -> Any:
    """The model, with weights of a scale that gives logits of order one, so a misplaced weight shows in them
    (transformers' own initialisation, std 0.02, leaves every logit near zero)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    config_class, model_class = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}[
        architecture
    ]
    config = config_class(
        vocab_size=len(tokenizer),
        hidden_size=_HIDDEN,
        intermediate_size=_INTERMEDIATE,
        num_hidden_layers=_LAYERS,
        num_attention_heads=_HEADS,
        num_key_value_heads=_KV_HEADS,
        max_position_embeddings=_CONTEXT,
        rms_norm_eps=_RMS_EPS,
        rope_theta=_ROPE_THETA[architecture],
        tie_word_embeddings=_TIED[architecture],
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = model_class(config)
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if name.endswith("norm.weight"):
                    parameter.copy_(1.0 + 0.1 * torch.randn_like(parameter))
                elif name.endswith(".bias"):
                    parameter.copy_(0.1 * torch.randn_like(parameter))
                else:
                    parameter.copy_(torch.randn_like(parameter) / parameter.shape[-1] ** 0.5)
    return model.eval()


def _permute_rows(weight: Any, heads: int) -> Any:
    """llama.cpp's ``permute`` of a query or key projection: within each head, the rows of the first and second
    half of the head's dimensions are interleaved (row i of the first half, then row i of the second), because
    llama.cpp's rotary embedding turns adjacent pairs where transformers' turns the two halves. Transformers'
    ``LlamaTensorProcessor._reverse_permute_weights`` undoes it when loading."""
    return (
        weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)
    )


def _gguf_tensors(architecture: str, model: Any) -> dict[str, Any]:
    """``{gguf_name: float32 numpy array}`` in torch's (out, in) order: GGUFWriter reverses it to ggml's."""
    import numpy as np

    state = {name: tensor.detach().float().numpy() for name, tensor in model.state_dict().items()}
    tensors = {"token_embd.weight": state["model.embed_tokens.weight"]}
    for layer in range(model.config.num_hidden_layers):
        for hf_name, gguf_name in _LAYER_TENSORS.items():
            weight = state.get(f"model.layers.{layer}.{hf_name}")
            if weight is None:  # llama has no attention biases
                continue
            if architecture == "llama" and gguf_name == "attn_q.weight":
                weight = _permute_rows(weight, model.config.num_attention_heads)
            elif architecture == "llama" and gguf_name == "attn_k.weight":
                weight = _permute_rows(weight, model.config.num_key_value_heads)
            tensors[f"blk.{layer}.{gguf_name}"] = weight
    tensors["output_norm.weight"] = state["model.norm.weight"]
    if not model.config.tie_word_embeddings:
        tensors["output.weight"] = state["lm_head.weight"]
    return {name: np.ascontiguousarray(tensor, dtype=np.float32) for name, tensor in tensors.items()}


def _vocabulary(backend: Any) -> tuple[list[str], list[str]]:
    """The tokens in id order, spelled in the byte-level alphabet as llama.cpp stores them, and the merges as
    ``"left right"`` strings, best first."""
    import json

    model = json.loads(backend.to_str())["model"]
    by_id = {index: token for token, index in model["vocab"].items()}
    tokens = [by_id[index] for index in range(len(by_id))]
    merges = [merge if isinstance(merge, str) else " ".join(merge) for merge in model["merges"]]
    return tokens, merges


def _write_gguf(path: Path, architecture: str, model: Any, backend: Any, quantization: str) -> None:
    import gguf

    config = model.config
    tokens, merges = _vocabulary(backend)
    if len(tokens) != config.vocab_size:
        raise AssertionError(f"the tokenizer has {len(tokens)} tokens, the model {config.vocab_size}")
    special = {token: tokens.index(token) for token in SPECIAL_TOKENS}
    token_types = [gguf.TokenType.CONTROL if token in special else gguf.TokenType.NORMAL for token in tokens]

    writer = gguf.GGUFWriter(str(path), architecture)
    writer.add_name(f"rlkit-tiny-{architecture}")
    writer.add_file_type(_FILE_TYPE[quantization])
    writer.add_vocab_size(config.vocab_size)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    writer.add_rope_dimension_count(config.hidden_size // config.num_attention_heads)
    writer.add_rope_freq_base(_ROPE_THETA[architecture])
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)

    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(PRE_TOKENIZER[architecture])
    writer.add_token_list(tokens)
    writer.add_token_types(token_types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(special[BOS_TOKEN])
    writer.add_eos_token_id(special[EOS_TOKEN])
    writer.add_unk_token_id(special[BOS_TOKEN])
    writer.add_pad_token_id(special[PAD_TOKEN])
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)

    for name, tensor in _gguf_tensors(architecture, model).items():
        if quantization == "Q8_0" and tensor.ndim == 2:
            qtype = gguf.GGMLQuantizationType.Q8_0
            # (rows, bytes) of uint8 blocks: the writer works the element shape out from the byte shape
            writer.add_tensor(name, gguf.quants.quantize(tensor, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(name, tensor)

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
