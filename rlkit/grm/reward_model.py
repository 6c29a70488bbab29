"""The scalar reward model: a causal LM with a linear head that reads one number, the reward, from the last token of
``prompt + completion`` (the standard RLHF reward model, trained by ``rlkit train-rm`` with the Bradley-Terry loss).

As TRL's ``RewardTrainer`` (``AutoModelForSequenceClassification`` with ``num_labels=1``), the head is a bias-free
linear map of the final hidden state at the sequence's last token; a bias would cancel in every Bradley-Terry
difference. The base stays an ordinary causal LM, so the tiny policy, SmolLM2 or an imported GGUF load, take LoRA and
save exactly as a policy does (:func:`rlkit.lm.models.load_policy`, ``apply_lora``, ``save_policy``); the head is
saved beside it as ``reward_head.safetensors`` and ``reward_model.json`` says how texts were read and where the
rewards of the held-out completions were centred.

The text scored is the prompt as :func:`rlkit.data.prompts.reward_prompt` renders it (in training and in judging
alike: one user message as its content alone, whether it came as chat messages or as a labelling file's text; no
chat template, so the labels a model is trained on need no policy) followed by the completion. It is cut from the
left to ``max_tokens``, so the end of the completion, where the reward is read, is always seen (TRL drops a pair
over its ``max_length`` instead; a judge cannot drop a completion).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from rlkit.core.errors import ConfigError
from rlkit.data.prompts import reward_prompt
from rlkit.grm.model import left_padded
from rlkit.lm.placement import input_device

HEAD_FILE = "reward_head.safetensors"
RM_INFO = "reward_model.json"
# TRL RewardConfig.max_length's default (trl/trainer/reward_config.py): the longest text, in tokens, a pair may have
DEFAULT_MAX_TOKENS = 1024
_CAUSAL_SUFFIXES = ("ForCausalLM", "LMHeadModel")


def check_causal_lm(folder: str | Path, where: str) -> None:
    """A ConfigError naming ``where`` unless the model folder holds a decoder-only causal LM: its ``config.json``
    names a ``...ForCausalLM`` (or ``...LMHeadModel``) architecture, or none and a model type transformers can load
    as one. A classifier or an encoder (``BertForMaskedLM``) has no next-token state to put a head on."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConfigError(f"unreadable config.json ({exc})", where) from None
    architectures = config.get("architectures") or []
    if config.get("is_encoder_decoder"):
        raise ConfigError("an encoder-decoder model, not a causal LM; a reward model needs a decoder-only base "
                          "(SmolLM2, Qwen2, Llama, the tiny policy)", where)
    if architectures and not any(str(a).endswith(_CAUSAL_SUFFIXES) for a in architectures):
        raise ConfigError(f"not a causal LM (config.json's architectures: {', '.join(map(str, architectures))}); a "
                          "reward model needs a decoder-only base (SmolLM2, Qwen2, Llama, the tiny policy)", where)
    if not architectures:
        from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

        if config.get("model_type") not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
            raise ConfigError(f"model type {config.get('model_type')!r} is not a causal LM transformers knows", where)


class ScalarRewardModel(torch.nn.Module):
    """A causal LM and a scalar head: :meth:`rewards` of texts (see the module doc)."""

    def __init__(self, model: Any, tokenizer: Any, head: torch.nn.Linear | None = None, center: float = 0.0,
                 max_tokens: int = DEFAULT_MAX_TOKENS) -> None:
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        hidden = int(model.config.get_text_config().hidden_size)
        if head is None:
            # as transformers initialises a sequence classifier's `score`: normal(0, initializer_range), no bias
            head = torch.nn.Linear(hidden, 1, bias=False)
            torch.nn.init.normal_(head.weight, std=float(getattr(model.config, "initializer_range", 0.02)))
        self.head = head
        self.center = center
        limit = getattr(model.config, "max_position_embeddings", None)
        self.max_tokens = min(max_tokens, limit) if isinstance(limit, int) else max_tokens

    @staticmethod
    def text(prompt: str | Sequence[dict[str, str]], completion: str) -> str:
        """What the model reads: the prompt (text or chat messages) as :func:`~rlkit.data.prompts.reward_prompt`
        renders it, then the completion. ``train-rm`` and ``judge=reward_model`` both build their texts here."""
        return reward_prompt(prompt) + completion

    def encode(self, texts: Sequence[str]) -> dict[str, torch.Tensor]:
        """Left-padded ids (cut from the left to ``max_tokens``) with positions that skip the padding, so every
        row's last token sits in the last column."""
        tok = self.tokenizer
        rows = [ids[-self.max_tokens:] or [tok.pad_token_id]
                for ids in tok(list(texts), add_special_tokens=False)["input_ids"]]
        return left_padded(rows, tok.pad_token_id)

    def forward(self, texts: Sequence[str]) -> torch.Tensor:
        """``[N]`` rewards of ``texts`` (with gradients when the caller wants them)."""
        device = input_device(self.model)
        batch = {k: v.to(device) for k, v in self.encode(texts).items()}
        # one position of LM logits, not the whole vocabulary per token: only the hidden state is read
        out = self.model(**batch, output_hidden_states=True, logits_to_keep=1)
        last = out.hidden_states[-1][:, -1, :]
        return self.head(last.to(self.head.weight.dtype)).squeeze(-1).float()

    @torch.no_grad()
    def rewards(self, texts: Sequence[str], batch_size: int = 64) -> torch.Tensor:
        """``[N]`` rewards, in batches, on the CPU."""
        parts = [self(texts[i:i + batch_size]).cpu() for i in range(0, len(texts), batch_size)]
        return torch.cat(parts) if parts else torch.zeros(0)

    def save(self, folder: Path, info: dict[str, Any], lora_save: str = "merged") -> Path:
        """The base (LoRA merged) in Hugging Face format, the head, and ``reward_model.json`` (``info`` plus the
        centre and the token limit)."""
        from safetensors.torch import save_file

        from rlkit.lm.models import save_policy

        save_policy(self.model, self.tokenizer, folder, lora_save)
        save_file({"weight": self.head.weight.detach().float().cpu().contiguous()}, str(folder / HEAD_FILE))
        (folder / RM_INFO).write_text(json.dumps({**info, "center": self.center, "max_tokens": self.max_tokens},
                                                 indent=2, default=float), encoding="utf-8")
        return folder

    @classmethod
    def load(cls, folder: str | Path, dtype: str = "float32", where: str = "model") -> ScalarRewardModel:
        """A reward model ``rlkit train-rm`` saved, in eval mode; a folder without its head is a ConfigError naming
        ``where``."""
        from safetensors.torch import load_file

        from rlkit.lm.models import load_policy

        folder = Path(folder)
        if not (folder / HEAD_FILE).is_file() or not (folder / RM_INFO).is_file():
            raise ConfigError(f"not a reward model folder (no {HEAD_FILE} and {RM_INFO}: `rlkit train-rm` saves "
                              "them as <run dir>/reward_model)", f"{where} ({folder})")
        try:
            info = json.loads((folder / RM_INFO).read_text(encoding="utf-8"))
            center, max_tokens = float(info["center"]), int(info["max_tokens"])
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"unreadable {RM_INFO} ({exc})", f"{where} ({folder})") from None
        model, tokenizer = load_policy(folder, dtype)
        weight = load_file(str(folder / HEAD_FILE))["weight"]
        head = torch.nn.Linear(weight.shape[1], 1, bias=False)
        head.weight.data.copy_(weight)
        rm = cls(model, tokenizer, head, center, max_tokens)
        rm.eval()
        return rm


def is_reward_model_folder(folder: str | Path) -> bool:
    """True when ``folder`` holds what :meth:`ScalarRewardModel.save` writes."""
    return (Path(folder) / HEAD_FILE).is_file() and (Path(folder) / RM_INFO).is_file()
