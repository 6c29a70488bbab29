"""``rlkit train-rm``: a Bradley-Terry reward model, a scalar head on a causal LM (:mod:`rlkit.grm.reward_model`),
trained on preference pairs with ``-log σ(r_chosen - r_rejected)``, as TRL's ``RewardTrainer``.

Everything but the model and its loss is ``train-grm``'s (:mod:`rlkit.grm.training`): the data (pairs or ranked
groups, read by ``read_preference_records``, ranked groups turned into pairs, split by prompt, or synthetic arithmetic
ranked by the rule judge when no file is named), the base model (named, or the tiny one built locally), LoRA, the
Lightning loop, checkpoints, logger and the held-out pairwise accuracy before and after. The model and its head are
saved under ``<run dir>/reward_model``, the folder ``judge=reward_model`` loads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pydantic
import torch
from omegaconf import DictConfig, OmegaConf

from rlkit.config import check_block
from rlkit.core.errors import ConfigError, DataError
from rlkit.data.pairs import PreferencePair, listwise_to_pairs
from rlkit.grm.reward_model import DEFAULT_MAX_TOKENS, ScalarRewardModel, check_causal_lm
from rlkit.grm.training import PreferenceModule, PreferenceTrainConfig, check_preference_config

REWARD_MODEL_DIR = "reward_model"


class RmTrainConfig(PreferenceTrainConfig):
    # TRL RewardConfig.center_rewards_coefficient: default None (off); its docs recommend 0.01 (Eisenstein et al.
    # 2023, arXiv:2312.09244, eq. 2). The judge centres the rewards itself (reward_model.json's `center`), so the
    # penalty only keeps the raw scale from drifting while training.
    center_rewards_coefficient: float | None = pydantic.Field(default=None, ge=0)
    max_tokens: int = pydantic.Field(default=DEFAULT_MAX_TOKENS, gt=0)


def rm_settings(cfg: DictConfig) -> RmTrainConfig:
    """The ``rm`` node checked against its schema; the first problem names its field."""
    node = OmegaConf.to_container(cfg.get("rm") or {}, resolve=True)
    return check_block(RmTrainConfig, node, "rm")


def check_rm_config(cfg: DictConfig, registry: Any) -> RmTrainConfig:
    """Everything ``train-rm`` can check before it builds anything: the schema, the data, and that the base model
    is a causal LM."""
    from rlkit.lm.models import locate_model

    settings = rm_settings(cfg)
    for field_name, records in check_preference_config(cfg, settings, registry, "rm").items():
        # a file of tied or duplicated answers only: no pair to train or measure on, said before the run starts
        if not listwise_to_pairs(records, settings.data.pairs, settings.data.near_duplicate).pairs:
            path = getattr(settings.data, field_name)
            raise DataError("no preference pair in the file (every group's answers tie or are near duplicates)",
                            f"rm.data.{field_name} ({path})")
    if settings.model.name_or_path is not None:
        check_causal_lm(locate_model(settings.model.name_or_path), "rm.model.name_or_path")
    return settings


def bradley_terry_loss(chosen: torch.Tensor, rejected: torch.Tensor,
                       center_coefficient: float | None = None) -> torch.Tensor:
    """``mean(-log σ(r_c - r_r))``, plus ``coefficient · mean((r_c + r_r)²)`` when set (TRL ``RewardTrainer``'s
    ``compute_loss``: the rewards' pair sums pulled towards 0)."""
    loss = -torch.nn.functional.logsigmoid(chosen - rejected).mean()
    if center_coefficient:
        loss = loss + center_coefficient * ((chosen + rejected) ** 2).mean()
    return loss


class RewardModelModule(PreferenceModule):
    """Trains the scalar head and the base (or its LoRA adapters) on pairs; validation logs P(chosen better) =
    σ(r_c - r_r), the Bradley-Terry probability, as :func:`rlkit.grm.metrics.pair_accuracy`."""

    def __init__(self, rm: ScalarRewardModel, settings: RmTrainConfig, total_steps: int) -> None:
        # the base and the head as one `model`: trained, checkpointed and put in train mode together
        super().__init__(rm, settings, total_steps)
        self.settings: RmTrainConfig = settings

    def _rewards(self, pairs: list[PreferencePair]) -> tuple[torch.Tensor, torch.Tensor]:
        texts = [ScalarRewardModel.text(p.prompt, p.chosen) for p in pairs]
        texts += [ScalarRewardModel.text(p.prompt, p.rejected) for p in pairs]
        r = self.model(texts)  # chosen and rejected in one pass, as TRL's collator stacks them
        return r[:len(pairs)], r[len(pairs):]

    def training_step(self, batch: list[PreferencePair], batch_idx: int) -> torch.Tensor:
        chosen, rejected = self._rewards(batch)
        loss = bradley_terry_loss(chosen, rejected, self.settings.center_rewards_coefficient)
        self.log("train/loss", loss, batch_size=len(batch), prog_bar=True)
        self.log("train/accuracy", (chosen > rejected).float().mean(), batch_size=len(batch))
        self.log("train/margin", (chosen - rejected).mean(), batch_size=len(batch))
        return loss

    def validation_step(self, batch: list[PreferencePair], batch_idx: int) -> None:
        chosen, rejected = self._rewards(batch)
        self.add_outcomes(torch.sigmoid(chosen - rejected).tolist(), batch)


def completion_center(rm: ScalarRewardModel, pairs: list[PreferencePair], batch_size: int) -> float:
    """The mean reward over the distinct completions of ``pairs``: where the judge's σ(r - centre) is one half."""
    texts = sorted({ScalarRewardModel.text(p.prompt, t) for p in pairs for t in (p.chosen, p.rejected)})
    return float(rm.rewards(texts, batch_size).mean()) if texts else 0.0


def train_rm(cfg: DictConfig, run_dir: Path, registry: Any) -> dict[str, Any]:
    """Train the reward model of ``cfg.rm``; save it to ``run_dir/reward_model``; return the summary."""
    import lightning as L

    from rlkit.grm.training import fit_preference_model, load_base_model, load_preference_data
    from rlkit.lm.models import apply_lora
    from rlkit.runs.lightning import quiet_lightning

    settings = check_rm_config(cfg, registry)
    quiet_lightning()
    L.seed_everything(int(cfg.seed), workers=True, verbose=False)
    train, val = load_preference_data(settings.data, run_dir, registry, block="rm")
    model, tokenizer = load_base_model(settings.model)
    if model.config.get_text_config().is_encoder_decoder:  # a GGUF or hub id the folder check could not read
        raise ConfigError("an encoder-decoder model, not a causal LM", "rm.model.name_or_path")
    if settings.model.lora.enabled:
        model = apply_lora(model, settings.model.lora)
    rm = ScalarRewardModel(model, tokenizer, max_tokens=settings.max_tokens)
    module = RewardModelModule(rm, settings, total_steps=1)
    run = fit_preference_model(cfg, run_dir, module, train, val, "train-rm")
    rm.eval()
    rm.center = completion_center(rm, val, settings.eval_batch_size)
    out = run_dir / REWARD_MODEL_DIR
    info = {"train_pairs": len(train), "val_pairs": len(val), "steps": run["steps"], "metrics": run["end"],
            "center_rewards_coefficient": settings.center_rewards_coefficient}
    rm.save(out, info, "merged")
    return {**run, "rm_dir": str(out), "train_examples": len(train), "val_pairs": len(val), "center": rm.center}


def print_rm_summary(summary: dict[str, Any]) -> None:
    from rlkit.grm.training import print_preference_summary

    folder = summary["rm_dir"]
    print_preference_summary(summary, f"reward model saved to {folder} (centre {summary['center']:.3f}; use it with "
                                      f"judge=reward_model judge.params.model={folder})")

