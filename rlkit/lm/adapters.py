"""A LoRA run's ``policy/`` folder holding only its adapter (``model.lora.save=adapter``, the default under LoRA):
every command that loads a model by path loads it as the merged model, built once into the rlkit cache.

The adapter is a few MB where the merged model is the whole base again (517 MB for SmolLM2-135M in float32), so a run
folder keeps the adapter and the merge is made where it is used: ``model.name_or_path=<run>/policy``,
``rlkit eval eval.checkpoint=<run>/policy``, an inference backend. The base is the one the run trained on, which
peft records in ``adapter_config.json`` (``base_model_name_or_path``, made absolute when the run saves it)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path
from typing import Any

from rlkit.core.errors import ConfigError

ADAPTER_CONFIG = "adapter_config.json"
_MERGED_FORMAT = 1  # bump when the merge recipe changes, so old cache folders are not reused
_DONE = ".rlkit-merged"


def is_adapter_folder(path: str | Path) -> bool:
    """Whether ``path`` is a peft adapter folder rather than a whole model (an adapter config, no model config)."""
    folder = Path(path).expanduser()
    return (folder / ADAPTER_CONFIG).is_file() and not (folder / "config.json").is_file()


def adapter_base(folder: Path, where: str) -> str:
    """The base model the adapter in ``folder`` was trained on, as its ``adapter_config.json`` names it."""
    try:
        config = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{ADAPTER_CONFIG} cannot be read: {exc}", where) from None
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{ADAPTER_CONFIG} names no base model (base_model_name_or_path)", where)
    return base


def pin_adapter_base(folder: Path) -> None:
    """Rewrite the saved adapter's base as an absolute path where it is a local folder, so the adapter loads from
    any working directory (peft writes the path the base was loaded from, which may be relative)."""
    path = folder / ADAPTER_CONFIG
    config = json.loads(path.read_text(encoding="utf-8"))
    base = Path(str(config.get("base_model_name_or_path") or "")).expanduser()
    if str(base) and base.is_dir():
        config["base_model_name_or_path"] = str(base.resolve())
        path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def _merge_key(folder: Path, base: Path) -> str:
    digest = hashlib.sha256(f"{base.resolve()}\n{_MERGED_FORMAT}\n".encode())
    for name in sorted(p.name for p in folder.iterdir() if p.is_file()):
        if name.startswith("adapter_"):
            digest.update(name.encode() + (folder / name).read_bytes())
    return digest.hexdigest()


def merged_adapter(folder: str | Path, base: Path, cache_dir: str | Path | None = None) -> Path:
    """The Hugging Face folder of adapter ``folder`` merged into ``base`` (its base model's local folder, located by
    the caller: :func:`rlkit.lm.locate.locate_model`): a folder in the rlkit cache keyed by the adapter's files and
    the base's path (built once, ~a second per 100M parameters; reused after)."""
    from rlkit.lm.model_cache import build_cached, default_cache_dir

    source = Path(folder).expanduser().resolve()
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    target = root / f"merged-{_merge_key(source, base)[:16]}"
    if (target / _DONE).is_file():
        return target
    print(f"rlkit: merging the LoRA adapter {source} into its base {base} (once; cached in {target})",
          file=sys.stderr)

    def write(out: Path) -> None:
        merged, tokenizer = merge(source, base)
        merged.save_pretrained(out)
        tokenizer.save_pretrained(out)  # the run's tokenizer: its chat template and padding as trained
        (out / _DONE).write_text(f"{source}\n{base}\n", encoding="utf-8")

    return build_cached(target, write, is_complete=lambda f: (f / _DONE).is_file())


def merge(folder: Path, base: Path) -> tuple[Any, Any]:
    """(the base with the adapter merged in, the adapter folder's tokenizer), in the base's stored dtype."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(base, dtype="auto", local_files_only=True)
    merged = PeftModel.from_pretrained(model, folder).merge_and_unload()
    tokenizer_source = folder if (folder / "tokenizer_config.json").is_file() else base
    return merged, AutoTokenizer.from_pretrained(tokenizer_source, local_files_only=True)


def frozen_weights(model: Any, prefix: str = "") -> dict[str, Any]:
    """``model``'s frozen parameters by state-dict key (``prefix`` + name, every name of a tied weight): under LoRA,
    the base weights, which the model file the run names holds already and a checkpoint need not hold again."""
    return {prefix + name: p for name, p in model.named_parameters(remove_duplicate=False) if not p.requires_grad}


def load_weights(model: Any, weights: dict[str, Any]) -> None:
    """Load ``weights`` into ``model``, strictly except that frozen parameters absent from them keep their values
    (a LoRA checkpoint holds the adapter only); a ``RuntimeError`` names what does not fit."""
    frozen = frozen_weights(model)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    missing = [k for k in missing if k not in frozen]
    if missing or unexpected:
        shown = "; ".join(part for part in (f"missing {', '.join(missing[:3])}" if missing else "",
                                            f"unexpected {', '.join(unexpected[:3])}" if unexpected else "") if part)
        raise RuntimeError(f"weights do not fit the model: {shown}")
