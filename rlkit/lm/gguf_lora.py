"""A peft LoRA adapter written alone as a GGUF LoRA, which llama.cpp applies on top of its base model's GGUF
(``llama-server -m base.gguf --lora adapter.gguf``, ollama's ``ADAPTER`` line): a few MB that change where the base
stays, instead of the whole merged model again.

The layout is llama.cpp's own ``convert_lora_to_gguf.py``: ``general.type = adapter``, ``adapter.type = lora``,
``adapter.lora.alpha``; for each adapted weight two tensors ``<base tensor name>.lora_a`` (peft's ``lora_A``, rank ×
input) and ``.lora_b`` (``lora_B``, output × rank), untransposed, the rows of a llama query or key ``lora_b`` permuted
as the base weight's are (the script's ``LoraTorchTensor`` applies the model's ``permute`` to B alone); both matrices
in the chosen type, a row that is not whole 32-value blocks in f16 (the script's fallback). llama.cpp scales the
product by ``alpha / rank``, peft by ``lora_alpha / r`` (or ``/ sqrt(r)`` with rsLoRA, which the script ignores):
a different scale is folded into ``lora_b`` here, so the file computes what peft computed.

A base GGUF for the adapter is :func:`rlkit.lm.gguf_export.export_gguf` of the base folder, or the file the base was
imported from; :func:`check_base` says whether a given GGUF holds the weights the adapter was trained on.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError
from rlkit.lm.gguf_export import ARCHITECTURES, EXPORT_TYPES, _permute, check_architecture, read_json_config

_PEFT_PREFIX = "base_model.model."
# How far a GGUF tensor may lie from the base weight it stores, as ||stored - weight|| / ||weight||, by its type:
# f32 is the weight itself; f16 rounds each value by at most 2^-11 of it (bf16 2^-8); q8_0 by at most half its
# 32-block's step (max/127), a few tenths of a percent on average; 4- and 5-bit types (Q4_0's step is max/8) and the
# k-quants measure 3-15% on real weights. A different model, even one fine-tuned from the same base, is off by
# far more than f32's bound and usually by more than f16's; a quantized file can only be told from a model
# whose weights differ by more than its own rounding, so its bound is loose.
_TOLERANCE = {"F32": 1e-6, "F16": 2e-3, "BF16": 1e-2, "Q8_0": 2e-2}
_QUANTIZED_TOLERANCE = 0.35


@dataclass(frozen=True)
class ExportedLora:
    """What :func:`export_gguf_lora` wrote."""

    path: Path
    architecture: str
    type: str
    tensors: int
    rank: int
    alpha: float
    bytes: int


def _check_adapter(config: dict[str, Any], where: str) -> tuple[int, float, bool]:
    """(r, lora_alpha, rsLoRA) of a plain LoRA adapter; one ``ConfigError`` for what a GGUF LoRA cannot hold."""
    if config.get("peft_type", "LORA") != "LORA":
        raise ConfigError(f"the adapter is peft's {config.get('peft_type')!r}, not a LoRA; llama.cpp loads LoRA "
                          "adapters only (export the merged model: drop --adapter)", where)
    # what llama.cpp's adapter has no place for: a weight-decomposed magnitude, a bias on B, a rank or alpha per
    # module (the file has one alpha), whole modules trained beside the adapter
    for key, meaning in (("use_dora", "DoRA"), ("lora_bias", "a LoRA bias"), ("rank_pattern", "a rank per module"),
                         ("alpha_pattern", "an alpha per module"), ("modules_to_save", "whole trained modules")):
        if config.get(key):
            raise ConfigError(f"the adapter uses {meaning} ({key} in adapter_config.json), which a GGUF LoRA cannot "
                              "hold; export the merged model instead: drop --adapter", where)
    r, alpha = config.get("r"), config.get("lora_alpha")
    if not isinstance(r, int) or r <= 0 or not isinstance(alpha, (int, float)) or alpha == 0:
        raise ConfigError(f"adapter_config.json has r={r!r}, lora_alpha={alpha!r}; expected a positive rank and a "
                          "nonzero alpha (llama.cpp reads alpha 0 as no scaling)", where)
    return r, float(alpha), bool(config.get("use_rslora"))


def _adapter_weights(folder: Path, where: str) -> dict[str, Any]:
    safetensors_file, bin_file = folder / "adapter_model.safetensors", folder / "adapter_model.bin"
    if safetensors_file.is_file():
        from safetensors.torch import load_file

        return load_file(safetensors_file, device="cpu")
    if bin_file.is_file():
        import torch

        return torch.load(bin_file, map_location="cpu", weights_only=True)
    raise ConfigError("the adapter folder holds no adapter_model.safetensors (nor adapter_model.bin)", where)


def lora_pairs(weights: dict[str, Any], where: str) -> Iterator[tuple[str, Any, Any]]:
    """(base weight name, lora_A, lora_B) for each adapted weight of a saved peft adapter, as the conversion script's
    ``get_tensors`` pairs them; anything else in the adapter is one ``ConfigError``."""
    pairs: dict[str, dict[str, Any]] = {}
    for name, tensor in weights.items():
        if ".lora_embedding_" in name:
            raise ConfigError(f"the adapter adapts the token embedding ({name}); a GGUF LoRA is written here for "
                              "linear layers only (target_modules all-linear): export the merged model instead, "
                              "without --adapter", where)
        part = "A" if name.endswith(".lora_A.weight") else "B" if name.endswith(".lora_B.weight") else None
        if part is None:
            raise ConfigError(f"the adapter holds {name}, not a lora_A or lora_B matrix (a trained module saved "
                              "whole has no place in a GGUF LoRA); export the merged model instead, without "
                              "--adapter", where)
        base = name.removeprefix(_PEFT_PREFIX).rsplit(f".lora_{part}.weight", 1)[0] + ".weight"
        pairs.setdefault(base, {})[part] = tensor
    for base, pair in pairs.items():
        if set(pair) != {"A", "B"}:
            raise ConfigError(f"the adapter has lora_{''.join(pair)} for {base} but not its partner", where)
        yield base, pair["A"], pair["B"]


def export_gguf_lora(adapter: str | Path, base: str | Path, out: str | Path, type: str = "f32",
                     where: str | None = None) -> ExportedLora:
    """Write the peft LoRA adapter folder ``adapter``, trained on the Hugging Face model folder ``base``, as the GGUF
    LoRA ``out`` with its matrices as ``type``. Errors are one ``ConfigError`` naming ``where``."""
    adapter, base, out = (Path(p).expanduser() for p in (adapter, base, out))
    where = where or str(adapter)
    if type not in EXPORT_TYPES:
        raise ConfigError(f"unknown type {type!r}; a GGUF LoRA is written as one of {', '.join(EXPORT_TYPES)}", where)
    r, alpha, rslora = _check_adapter(read_json_config(adapter, where, "adapter_config.json"), where)
    architecture = check_architecture(base, where)
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(base, local_files_only=True)
    pairs = list(lora_pairs(_adapter_weights(adapter, where), where))
    if not pairs:
        raise ConfigError("the adapter holds no lora_A/lora_B matrices", where)
    import gguf
    import numpy as np

    arch = next(key for key, name in gguf.MODEL_ARCH_NAMES.items() if name == architecture)
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    permute = ARCHITECTURES[config.model_type][1]
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "f16": gguf.GGMLQuantizationType.F16,
             "q8_0": gguf.GGMLQuantizationType.Q8_0}[type]
    # llama.cpp multiplies B·A by alpha / rank, its rank read from lora_b; peft by lora_alpha / r, or / sqrt(r)
    fold = math.sqrt(r) if rslora else 1.0
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".part", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        writer = gguf.GGUFWriter(tmp, architecture)
        writer.add_type(gguf.GGUFType.ADAPTER)
        writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
        writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, alpha)
        writer.add_name(f"{adapter.name} (LoRA of {base.name})")
        writer.add_base_model_count(1)
        writer.add_base_model_name(0, str(getattr(config, "_name_or_path", "") or base.name))
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        count = 0
        for name, lora_a, lora_b in sorted(pairs, key=lambda pair: pair[0]):
            if name == "lm_head.weight" and getattr(config, "tie_word_embeddings", False):
                # llama.cpp's model has no output tensor of its own to adapt (convert_lora_to_gguf.py refuses too)
                raise ConfigError("the adapter adapts lm_head, which this model ties to its token embedding; "
                                  "llama.cpp cannot apply that: export the merged model instead, without --adapter",
                                  where)
            new_name = names.get_name(name, try_suffixes=(".weight",))
            if new_name is None:
                raise ConfigError(f"the adapter's {name} has no name in llama.cpp's {architecture} layout", where)
            b = lora_b.detach().float().cpu() * fold
            if permute and name.endswith("q_proj.weight"):
                b = _permute(b, config.num_attention_heads)
            elif permute and name.endswith("k_proj.weight"):
                b = _permute(b, config.num_key_value_heads or config.num_attention_heads)
            for suffix, tensor in ((".lora_a", lora_a.detach().float().cpu()), (".lora_b", b)):
                array = np.ascontiguousarray(tensor.numpy(), dtype=np.float32)
                kind = qtype
                try:
                    data = gguf.quants.quantize(array, kind)
                except gguf.QuantError:  # lora_b's rows are r values long: q8_0 needs whole 32-value blocks
                    kind = gguf.GGMLQuantizationType.F16
                    data = gguf.quants.quantize(array, kind)
                writer.add_tensor(new_name + suffix, data, raw_dtype=kind)
                count += 1
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportedLora(path=out, architecture=architecture, type=type, tensors=count, rank=r, alpha=alpha,
                        bytes=out.stat().st_size)


def check_base(gguf_file: str | Path, base: str | Path, where: str) -> str:
    """Whether the GGUF model ``gguf_file`` holds the weights of the Hugging Face folder ``base`` (what an adapter
    trained on ``base`` needs under it); a sentence saying how it was told, else one ``ConfigError`` naming
    ``where``. A base imported from a GGUF file (``rlkit model import``) is that file when the bytes hash alike;
    any other file is read tensor by tensor and compared with the folder's weights, within its type's rounding."""
    from rlkit.core.digest import file_sha256
    from rlkit.lm.gguf import check_file

    gguf_file, base = Path(gguf_file).expanduser(), Path(base).expanduser()
    check_file(gguf_file, where)
    marker = base / "rlkit_gguf_import.txt"  # rlkit.lm.gguf's import record: the source's name and sha256
    if marker.is_file():
        lines = marker.read_text(encoding="utf-8").splitlines()
        if len(lines) > 1 and file_sha256(gguf_file) == lines[1]:
            return f"the file the base {base} was imported from"
    import gguf
    import numpy as np

    try:
        reader = gguf.GGUFReader(gguf_file)
    except Exception as exc:  # numpy and struct errors of a cut-off file; the reader has no error type of its own
        raise ConfigError(f"the GGUF file is truncated or corrupt ({type(exc).__name__})", where) from None
    kind = _text(reader, "general.type")
    if kind not in (None, "model"):
        raise ConfigError(f"{gguf_file.name} is a GGUF {kind}, not a model: the base goes to llama.cpp's -m, the "
                          "adapter to --lora", where)
    architecture = check_architecture(base, where)
    if _text(reader, "general.architecture") != architecture:
        raise ConfigError(f"{gguf_file.name} holds a {_text(reader, 'general.architecture')!r} model; the adapter "
                          f"was trained on a {architecture!r} model ({base})", where)
    from safetensors import safe_open
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(base, local_files_only=True)
    arch = next(key for key, name in gguf.MODEL_ARCH_NAMES.items() if name == architecture)
    names = gguf.get_tensor_name_map(arch, config.num_hidden_layers)
    permute = ARCHITECTURES[config.model_type][1]
    stored = {tensor.name: tensor for tensor in reader.tensors}
    files = sorted(base.glob("*.safetensors"))
    if not files:
        raise ConfigError(f"the base {base} has no .safetensors weights to compare {gguf_file.name} with", where)
    compared = 0
    for file in files:
        with safe_open(file, framework="pt") as handle:
            for name in handle.keys():  # noqa: SIM118 (safe_open is not a mapping)
                new_name = names.get_name(name, try_suffixes=(".weight", ".bias"))
                if new_name is None or new_name not in stored:
                    continue  # rotary tables, a tied output: not stored by llama.cpp
                weight = handle.get_tensor(name).float()
                if permute and name.endswith(("q_proj.weight", "q_proj.bias")):
                    weight = _permute(weight, config.num_attention_heads)
                elif permute and name.endswith(("k_proj.weight", "k_proj.bias")):
                    weight = _permute(weight, config.num_key_value_heads or config.num_attention_heads)
                tensor = stored[new_name]
                if tuple(int(n) for n in reversed(tensor.shape)) != tuple(weight.shape):
                    raise ConfigError(f"{gguf_file.name} is not the base the adapter was trained on: its {new_name} "
                                      f"has shape {list(reversed(tensor.shape.tolist()))}, the base's "
                                      f"{list(weight.shape)} ({base})", where)
                try:
                    values = gguf.quants.dequantize(tensor.data, tensor.tensor_type).reshape(weight.shape)
                except NotImplementedError:
                    raise ConfigError(f"{gguf_file.name} stores {new_name} as {tensor.tensor_type.name}, which the "
                                      "gguf package cannot read back to compare with the base; pass a base GGUF in "
                                      "f32, f16, q8_0 or a k-quant", where) from None
                want = weight.numpy().astype(np.float64)
                error = float(np.linalg.norm(values - want) / max(np.linalg.norm(want), 1e-12))
                bound = _TOLERANCE.get(tensor.tensor_type.name, _QUANTIZED_TOLERANCE)
                if error > bound:
                    raise ConfigError(f"{gguf_file.name} is not the base the adapter was trained on: its {new_name} "
                                      f"({tensor.tensor_type.name}) differs from the base's weight by {error:.3g} "
                                      f"of its norm, past {tensor.tensor_type.name}'s rounding ({bound:g}); the "
                                      f"adapter's base is {base}", where)
                compared += 1
    if compared == 0:
        raise ConfigError(f"{gguf_file.name} has none of the base's tensors: it is not the base the adapter was "
                          f"trained on ({base})", where)
    return f"its {compared} tensors hold the base's weights (within each type's rounding)"


def _text(reader: Any, key: str) -> str | None:
    field = reader.fields.get(key)
    if field is None or not field.data:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")
