"""What ``rlkit validate`` checks of the machine a config will run on, so a run that cannot start here fails in one
line before anything loads instead of in Lightning's traceback minutes later: the accelerator and the number of
devices ``trainer.*`` asks for, and whether the policy fits the memory it will train in (estimated from its
``config.json``, no weights read).

Validating on a machine other than the one that runs (a login node before a SLURM job) refuses a GPU config: the
message says to validate where it will run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError

__all__ = ["available_memory", "check_accelerator", "check_model_memory", "estimate_parameters"]

_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
# Full fine-tuning with AdamW holds the weights, their gradients and two moments, 4 copies of the weights' bytes
# (ZeRO, Rajbhandari et al. 2020, arXiv 1910.02054, §3.1: 16 bytes a parameter in mixed precision; 4 + 4 + 8 in fp32).
# Activations come on top, so the estimate is a floor: a model it says does not fit cannot.
_TRAINING_COPIES = 4


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _wanted_devices(devices: Any, count: int) -> int | None:
    """How many GPUs ``trainer.devices`` asks for (None: whatever there is, ``auto`` or -1)."""
    if isinstance(devices, bool):
        return None
    if isinstance(devices, int):
        return None if devices == -1 else devices
    if isinstance(devices, list | tuple):
        indices = [int(d) for d in devices if str(d).lstrip("-").isdigit()]
        return max(indices) + 1 if indices else None  # device indices: the highest must exist
    text = str(devices).strip()
    if text in ("auto", "-1", ""):
        return None
    if "," in text:
        return _wanted_devices([part.strip() for part in text.split(",") if part.strip()], count)
    return int(text) if text.isdigit() else None


def check_accelerator(trainer: dict[str, Any]) -> None:
    """``trainer.accelerator`` must exist on this machine, and a GPU run's ``trainer.devices`` at most the GPUs it has
    (on the CPU ``devices`` is a number of processes: any number runs)."""
    accelerator = str(trainer.get("accelerator") or "auto").lower()
    if accelerator in ("gpu", "cuda"):
        count = _gpu_count()
        if count == 0:
            raise ConfigError(f"{accelerator}, but this machine has no CUDA GPU (torch.cuda.is_available() is false): "
                              "use trainer.accelerator=cpu, or validate on the machine that will run it",
                              "trainer.accelerator")
        wanted = _wanted_devices(trainer.get("devices", "auto"), count)
        if wanted is not None and wanted > count:
            raise ConfigError(f"asks for {wanted} GPUs; this machine has {count}", "trainer.devices")
    elif accelerator == "mps":
        import torch

        if not torch.backends.mps.is_available():
            raise ConfigError("mps, but this machine has no Apple GPU (torch.backends.mps.is_available() is false)",
                              "trainer.accelerator")


def estimate_parameters(config: dict[str, Any]) -> int | None:
    """A decoder's parameter count from its ``config.json`` (embeddings, attention, MLP and the output head), or None
    when the config lacks the sizes."""
    text = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    try:
        hidden, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
        vocab, inner = int(text["vocab_size"]), int(text.get("intermediate_size") or 4 * hidden)
        heads = int(text.get("num_attention_heads") or 1)
        kv_heads = int(text.get("num_key_value_heads") or heads)
        head_dim = int(text.get("head_dim") or hidden // heads)
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim  # q and o, k and v
    mlp = 3 * hidden * inner  # gated (gate, up, down), as Llama, Qwen and SmolLM2
    experts = int(text.get("num_local_experts") or text.get("num_experts") or 1)
    head = 0 if text.get("tie_word_embeddings", config.get("tie_word_embeddings", True)) else vocab * hidden
    return vocab * hidden + layers * (attention + experts * mlp) + head


def available_memory() -> int | None:
    """Bytes of RAM available to a new process: psutil's ``available`` where installed, else ``MemAvailable`` from
    ``/proc/meminfo``; None where neither can be read."""
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except ImportError:
        pass
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.1f} GiB"


def check_model_memory(model: Any, trainer: dict[str, Any], folder: Path | None,
                       available: int | None = None) -> None:
    """The policy in ``folder`` must fit the memory it trains in: parameters × bytes per dtype × 4 for AdamW's
    state (1 with LoRA) plus a frozen or EMA reference copy, against available RAM on the CPU (or, on GPUs, the free
    memory of the devices it is spread over under FSDP/DeepSpeed, else of one)."""
    if folder is None or not (folder / "config.json").is_file():
        return  # the embedded tiny policy, a GGUF file or a hub id: nothing to read the size from here
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(config, dict) or (params := estimate_parameters(config)) is None:
        return
    dtype = model.dtype if model.dtype != "auto" else str(config.get("torch_dtype") or config.get("dtype") or "float32")
    per = _DTYPE_BYTES.get(dtype, 4)
    copies = (1 if model.lora.enabled else _TRAINING_COPIES) + (model.reference in ("frozen", "ema"))
    needed = params * per * copies
    where = "machine's RAM"
    if available is None:
        accelerator = str(trainer.get("accelerator") or "auto").lower()
        if accelerator in ("gpu", "cuda") and _gpu_count() > 0:
            import torch

            free = torch.cuda.mem_get_info(0)[0]
            shards = _wanted_devices(trainer.get("devices", "auto"), _gpu_count()) or _gpu_count()
            sharded = any(s in str(trainer.get("strategy") or "") for s in ("fsdp", "deepspeed"))
            available = free * shards if sharded else free
            where = f"{shards} GPUs' free memory" if sharded else "GPU's free memory"
        else:
            available = available_memory()
    if available is not None and needed > available:
        how = "LoRA: weights" if model.lora.enabled else "weights, gradients and AdamW's two moments"
        reference = " + a reference copy" if model.reference in ("frozen", "ema") else ""
        raise ConfigError(f"{model.name_or_path}: about {params / 1e9:.2f}B parameters × {per} bytes ({dtype}) × "
                          f"{copies} ({how}{reference}) = {_gib(needed)} to train, more than this {where} "
                          f"({_gib(available)} available): use model.lora.r=16, a smaller dtype, or a bigger machine",
                          "model.name_or_path")


def check_machine(cfg: Any, model: Any) -> None:
    """:func:`check_accelerator` on ``cfg.trainer``, then :func:`check_model_memory` for a policy given as a local
    folder (a hub id, a GGUF file or an adapter folder is sized when it loads)."""
    from omegaconf import OmegaConf

    from rlkit.core.package_files import resolve_path

    node = cfg.get("trainer")
    trainer = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    trainer = trainer if isinstance(trainer, dict) else {}
    check_accelerator(trainer)
    if model is None or model.name_or_path is None:
        return
    try:
        folder = Path(resolve_path(model.name_or_path))
    except ConfigError:
        return  # check_model_path has said what is wrong with it
    check_model_memory(model, trainer, folder if folder.is_dir() else None)
