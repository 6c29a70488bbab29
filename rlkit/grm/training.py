"""``rlkit train-grm``: train a generative reward model on preference data with Lightning.

Pairwise objective: every training pair is asked in both label orders (chosen as A, then as B) and the model learns
to answer the chosen one's label, so a preference for a position is trained away. Listwise objective: a whole ranked
group is shown in a fresh random label order each time, and the label-token logits are trained as Plackett-Luce
utilities of the ranks. Either way the held-out pairs are scored every epoch as the judge will score them: with the
trained objective's question (a listwise GRM sees each pair as a group of two), in both orders, averaged, overall,
per domain and controlled for length (:mod:`rlkit.grm.metrics`). Every question holds the prompt as
:func:`rlkit.data.prompts.reward_prompt` renders it, as the judge's do. The trained model is saved with
``save_pretrained`` under ``<run dir>/grm`` with a ``grm.json`` that tells ``judge=grm`` how it was asked (its
templates and objective).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import lightning as L
import pydantic
import torch
from omegaconf import DictConfig, OmegaConf

from rlkit.config import LoraConfig, check_block, resolve_path
from rlkit.config.checkpoints import read_checkpoint_metadata
from rlkit.core.errors import ConfigError, DataError, no_such
from rlkit.data.pairs import ListwiseRecord, PreferencePair, listwise_to_pairs, read_preference_records
from rlkit.data.prompts import heldout_share
from rlkit.grm.metrics import PairOutcome, pair_accuracy
from rlkit.grm.model import GRM_INFO, GenerativeRewardModel, GrmFormat
from rlkit.lm.models import make_adamw


class _Schema(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="forbid")


class TinyGrmConfig(_Schema):
    """The embedded tiny GRM's architecture (the tiny policy's code at this size), used when no model is named."""

    hidden_size: int = pydantic.Field(default=128, gt=0)
    intermediate_size: int = pydantic.Field(default=256, gt=0)
    num_hidden_layers: int = pydantic.Field(default=3, gt=0)
    num_attention_heads: int = pydantic.Field(default=4, gt=0)
    num_key_value_heads: int = pydantic.Field(default=2, gt=0)
    max_position_embeddings: int = pydantic.Field(default=256, gt=0)
    seed: int = 0


class GrmModelConfig(_Schema):
    name_or_path: str | None = None
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "float32"
    lora: LoraConfig = pydantic.Field(default_factory=LoraConfig)
    tiny: TinyGrmConfig = pydantic.Field(default_factory=TinyGrmConfig)


class RankedBy(_Schema):
    """The plugins that rank the synthetic preferences (by registry name; conf/train_grm.yaml names them)."""

    judge: str
    aggregator: str
    weights: str


class GrmDataConfig(_Schema):
    train: str | None = None  # null: the synthetic arithmetic preferences (rlkit.grm.data), ranked by ranked_by
    val: str | None = None  # null: hold out val_fraction of the training prompts
    val_fraction: float = pydantic.Field(default=0.1, gt=0, lt=1)
    pairs: Literal["all", "adjacent"] = "all"
    near_duplicate: float = pydantic.Field(default=0.9, gt=0, le=1)
    synthetic_records: int = pydantic.Field(default=3000, gt=0)
    ranked_by: RankedBy | None = None
    seed: int = 0


class PreferenceTrainConfig(_Schema):
    """What every model trained on preferences shares: ``train-grm``'s ``grm`` block and ``train-rm``'s ``rm``."""

    model: GrmModelConfig = pydantic.Field(default_factory=GrmModelConfig)
    data: GrmDataConfig = pydantic.Field(default_factory=GrmDataConfig)
    epochs: int = pydantic.Field(default=3, gt=0)
    batch_size: int = pydantic.Field(default=32, gt=0)
    eval_batch_size: int = pydantic.Field(default=128, gt=0)
    lr: float = pydantic.Field(default=2e-3, gt=0)
    weight_decay: float = pydantic.Field(default=0.0, ge=0)
    warmup_ratio: float = pydantic.Field(default=0.1, ge=0, lt=1)


class GrmTrainConfig(PreferenceTrainConfig):
    objective: Literal["pairwise", "listwise"] = "pairwise"
    max_response_chars: int = pydantic.Field(default=256, gt=0)
    pairwise_template: str = GrmFormat.pairwise_template
    listwise_template: str = GrmFormat.listwise_template


def grm_settings(cfg: DictConfig) -> GrmTrainConfig:
    """The ``grm`` node checked against its schema; the first problem names its field."""
    node = OmegaConf.to_container(cfg.get("grm") or {}, resolve=True)
    return check_block(GrmTrainConfig, node, "grm")


def check_grm_config(cfg: DictConfig, registry: Any) -> GrmTrainConfig:
    """Everything ``train-grm`` can check before it builds anything: the schema, the data files (or the plugins
    that rank synthetic ones), the model path and the templates."""
    from rlkit.core.templates import template_path

    settings = grm_settings(cfg)
    check_preference_config(cfg, settings, registry, "grm")
    template_path(settings.pairwise_template, "grm.pairwise_template")
    template_path(settings.listwise_template, "grm.listwise_template")
    return settings


def check_preference_config(cfg: DictConfig, settings: PreferenceTrainConfig, registry: Any,
                            block: str) -> dict[str, list[ListwiseRecord | PreferencePair]]:
    """The checks ``train-grm`` and ``train-rm`` share: threads, the checkpoint to resume, every data line (or the
    plugins that rank synthetic data) and the base model's path, each error naming ``<block>.<field>``. Returns the
    records of each data file named (``train``, ``val``)."""
    from rlkit.lm.models import locate_model

    threads = cfg.get("torch_threads")
    if threads is not None and (not isinstance(threads, int) or isinstance(threads, bool) or threads < 1):
        raise ConfigError(f"must be a positive number of threads or null (torch's default), got {threads!r}",
                          "torch_threads")
    if cfg.get("ckpt_path") is not None:
        read_checkpoint_metadata(resolve_path(str(cfg.ckpt_path)))  # exists and is a Lightning checkpoint
    read = {}
    for field_name in ("train", "val"):
        path = getattr(settings.data, field_name)
        if path is not None:  # every line, so a bad one stops the run before it starts
            read[field_name] = _read(path, f"{block}.data.{field_name}")
    if settings.data.train is None:
        synthetic_ranker(settings.data, registry, block)
    if settings.model.name_or_path is not None:
        try:
            locate_model(settings.model.name_or_path)
        except ConfigError as exc:
            raise ConfigError(exc.message, f"{block}.model.name_or_path") from None
    return read


# --- data -----------------------------------------------------------------------------------------------

def _read(path: str, where: str) -> list[ListwiseRecord | PreferencePair]:
    if not Path(path).is_file():
        raise DataError(no_such(path, "data file"), f"{where} ({path})")
    records, rejects = read_preference_records(path)
    if rejects:
        shown = "; ".join(f"line {r.line}: {r.reason}" for r in rejects[:5])
        raise DataError(f"{len(rejects)} bad lines ({shown}); `rlkit data pairs` lists them all in a rejects file",
                        f"{where} ({path})")
    if not records:
        raise DataError("the file holds no records", f"{where} ({path})")
    return records


def _held_out(record: ListwiseRecord | PreferencePair, fraction: float, seed: int) -> bool:
    # by prompt (`rlkit data from-labels`'s key), so one question's answers never sit on both sides of the split,
    # whether a line holds it as `user: q` or as `q`
    return heldout_share(record.prompt, seed) < fraction


def synthetic_ranker(data: GrmDataConfig, registry: Any, block: str = "grm") -> Any:
    """The judge, weights and aggregator of ``<block>.data.ranked_by``, built from the run's registry."""
    from rlkit.grm.data import SyntheticRanker

    where = f"{block}.data.ranked_by"
    if data.ranked_by is None:
        raise ConfigError(f"{block}.data.train is null, so the synthetic preferences need a ranking: set "
                          "{judge, aggregator, weights} (conf/train_grm.yaml: rule, weighted_sum, constant)", where)
    r = data.ranked_by
    return SyntheticRanker(registry.create("judge", r.judge, where=f"{where}.judge"),
                           registry.create("aggregator", r.aggregator, where=f"{where}.aggregator"),
                           registry.create("weight_scheduler", r.weights, where=f"{where}.weights"))


def load_grm_data(settings: GrmTrainConfig, run_dir: Path, registry: Any) -> tuple[list[Any], list[PreferencePair]]:
    """Training examples (pairs, or ranked groups for the listwise objective) and held-out pairs."""
    return load_preference_data(settings.data, run_dir, registry, listwise=settings.objective == "listwise")


def load_preference_data(d: GrmDataConfig, run_dir: Path, registry: Any, listwise: bool = False,
                         block: str = "grm") -> tuple[list[Any], list[PreferencePair]]:
    """Training examples (pairs, or ranked groups when ``listwise``) and held-out pairs, split by prompt."""
    train_path = d.train
    if train_path is None:
        from rlkit.grm.data import synthetic_preferences

        # written out, so the run's data is inspectable and takes the same reading path as a user's file
        target = run_dir / "data" / "synthetic_preferences.jsonl"
        target.parent.mkdir(parents=True, exist_ok=True)
        rows = synthetic_preferences(d.synthetic_records, synthetic_ranker(d, registry, block), d.seed)
        target.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
        train_path = str(target)
    records = _read(train_path, f"{block}.data.train")
    if d.val is not None:
        train_records, val_records = records, _read(d.val, f"{block}.data.val")
    else:
        val_records = [r for r in records if _held_out(r, d.val_fraction, d.seed)]
        train_records = [r for r in records if not _held_out(r, d.val_fraction, d.seed)]
    val_pairs = listwise_to_pairs(val_records, "all", d.near_duplicate).pairs
    if not val_pairs:
        raise DataError(f"no held-out pair left (after ties and duplicates); give {block}.data.val or more data",
                        f"{block}.data.val")
    if listwise:
        train = [r if isinstance(r, ListwiseRecord) else _as_group(r) for r in train_records]
    else:
        train = listwise_to_pairs(train_records, d.pairs, d.near_duplicate).pairs
    if not train:
        raise DataError("no training example left (after ties and duplicates)", f"{block}.data.train")
    return train, val_pairs


def _as_group(pair: PreferencePair) -> ListwiseRecord:
    from rlkit.data.pairs import RankedResponse

    return ListwiseRecord(pair.prompt, (RankedResponse(pair.chosen, 1), RankedResponse(pair.rejected, 2)),
                          pair.domain, pair.line, reference=pair.reference)


# --- the Lightning module -------------------------------------------------------------------------------

def plackett_luce_loss(utilities: torch.Tensor, ranks: Sequence[int]) -> torch.Tensor:
    """Negative log-likelihood of the order ``ranks`` (1 = best) under Plackett-Luce with ``utilities`` [k]."""
    order = sorted(range(len(ranks)), key=lambda i: ranks[i])  # stable: ties keep their (shuffled) shown order
    u = utilities[order]
    # position t chooses its item among those still left: -u_t + logsumexp(u_t..u_k)
    tails = torch.logcumsumexp(u.flip(0), dim=0).flip(0)
    return (tails[:-1] - u[:-1]).sum()


class PreferenceModule(L.LightningModule):
    """What a model trained on preference pairs shares with every other (``train-grm``'s GRM, ``train-rm``'s scalar
    reward model): training mode, texts as batches, held-out :func:`pair_accuracy` per validation, and AdamW with
    linear warm-up then decay. A subclass adds ``training_step`` and a ``validation_step`` that calls
    :meth:`add_outcomes`."""

    def __init__(self, model: torch.nn.Module, settings: PreferenceTrainConfig, total_steps: int) -> None:
        super().__init__()
        self.model = model
        self.settings = settings
        self.total_steps = total_steps
        self._outcomes: list[PairOutcome] = []
        self.last_metrics: dict[str, float] = {}

    def on_train_start(self) -> None:
        # from_pretrained hands the model over in eval mode and Lightning keeps the mode it finds (see
        # RubricRLModule.on_train_start): without this the GRM trained with its dropout off.
        self.model.train()

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        return batch  # texts: they are tokenised, and moved, in the step

    def add_outcomes(self, p_chosen: Sequence[float], pairs: Sequence[PreferencePair]) -> None:
        """One held-out batch: P(chosen better) for each of ``pairs``."""
        self._outcomes += [PairOutcome(float(p), len(pair.chosen), len(pair.rejected), pair.domain)
                           for p, pair in zip(p_chosen, pairs, strict=True)]

    def on_validation_epoch_end(self) -> None:
        metrics = pair_accuracy(self._outcomes)
        self._outcomes = []
        self.last_metrics = metrics
        shown = {"accuracy", "length_controlled_accuracy"}
        for key, value in metrics.items():
            if not math.isnan(value):
                self.log(f"val/{key}", value, prog_bar=key in shown)

    def configure_optimizers(self) -> Any:
        s = self.settings
        params = [p for p in self.parameters() if p.requires_grad]
        opt = make_adamw(params, lr=s.lr, weight_decay=s.weight_decay, precision=str(self.trainer.precision),
                         clips_gradients=bool(self.trainer.gradient_clip_val))
        warmup = int(s.warmup_ratio * self.total_steps)

        def factor(step: int) -> float:  # linear warm-up, then linear decay to zero
            if step < warmup:
                return (step + 1) / warmup
            return max(0.0, (self.total_steps - step) / max(1, self.total_steps - warmup))

        sched = torch.optim.lr_scheduler.LambdaLR(opt, factor)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class GrmModule(PreferenceModule):
    """Trains a GRM; validation scores held-out pairs as the judge will and logs :func:`pair_accuracy`."""

    def __init__(self, grm: GenerativeRewardModel, settings: GrmTrainConfig, total_steps: int) -> None:
        super().__init__(grm.model, settings, total_steps)
        self.grm = grm
        self.settings: GrmTrainConfig = settings

    def _pairwise_loss(self, pairs: Sequence[PreferencePair]) -> torch.Tensor:
        questions, targets = [], []
        for p in pairs:
            questions += [self.grm.pairwise_question(p.prompt, p.chosen, p.rejected, p.reference),
                          self.grm.pairwise_question(p.prompt, p.rejected, p.chosen, p.reference)]
            targets += [self.grm.label_id(0), self.grm.label_id(1)]
        logits = self.grm.next_token_logits(questions)
        # over the whole vocabulary, so the model also *answers* with the label when asked to generate
        return torch.nn.functional.cross_entropy(logits, torch.tensor(targets, device=logits.device))

    def _listwise_loss(self, groups: Sequence[ListwiseRecord]) -> torch.Tensor:
        rng = random.Random(hash((self.settings.data.seed, self.global_step)))
        questions, shown_ranks = [], []
        for g in groups:
            order = list(range(len(g.responses)))
            rng.shuffle(order)
            questions.append(self.grm.listwise_question(g.prompt, [g.responses[i].text for i in order], g.reference))
            shown_ranks.append([g.responses[i].rank for i in order])
        logits = self.grm.next_token_logits(questions)
        losses = [plackett_luce_loss(logits[i, [self.grm.label_id(j) for j in range(len(r))]], r)
                  for i, r in enumerate(shown_ranks)]
        return torch.stack(losses).mean()

    def training_step(self, batch: list[Any], batch_idx: int) -> torch.Tensor:
        loss = self._listwise_loss(batch) if self.settings.objective == "listwise" else self._pairwise_loss(batch)
        self.log("train/loss", loss, batch_size=len(batch), prog_bar=True)
        return loss

    def validation_step(self, batch: list[PreferencePair], batch_idx: int) -> None:
        # the trained objective's question (self.grm.objective), as judge=grm asks it
        items = [(p.prompt, p.chosen, p.rejected, p.reference) for p in batch]
        self.add_outcomes(self.grm.prefer_first(items, self.settings.eval_batch_size).tolist(), batch)


# --- the run --------------------------------------------------------------------------------------------

def _collate(batch: list[Any]) -> list[Any]:
    return batch


def load_base_model(model_cfg: GrmModelConfig) -> tuple[Any, Any]:
    """The named model, or the tiny GRM built from ``grm.model.tiny`` and saved to the cache, loaded by path."""
    from rlkit.lm.models import TinyPolicySpec, build_tiny_policy, load_policy, locate_model

    if model_cfg.name_or_path is not None:
        path = locate_model(model_cfg.name_or_path)
    else:
        path = build_tiny_policy(TinyPolicySpec(**model_cfg.tiny.model_dump()))
    return load_policy(path, model_cfg.dtype)


def grm_format(settings: GrmTrainConfig) -> GrmFormat:
    return GrmFormat(settings.pairwise_template, settings.listwise_template, settings.max_response_chars)


def fit_preference_model(cfg: DictConfig, run_dir: Path, module: PreferenceModule, train: list[Any],
                         val: list[PreferencePair], job_type: str) -> dict[str, Any]:
    """The loop ``train-grm`` and ``train-rm`` share: held-out metrics before training (the data's chance level),
    then ``module.settings.epochs`` of Lightning on ``cfg.trainer`` with the run's logger, ``last.ckpt`` checkpoints
    (``ckpt_path`` resumes) and ``torch_threads``. Returns ``start``, ``end`` and ``history`` (held-out metrics)
    and ``steps``; the caller saves what it trained."""
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader

    from rlkit.runs.loggers import finish_logger, make_logger

    settings = module.settings
    generator = torch.Generator().manual_seed(int(cfg.seed))
    train_loader = DataLoader(train, batch_size=settings.batch_size, shuffle=True, collate_fn=_collate,
                              generator=generator)
    val_loader = DataLoader(val, batch_size=settings.eval_batch_size, shuffle=False, collate_fn=_collate)
    module.total_steps = settings.epochs * len(train_loader)
    logger = make_logger(cfg, run_dir, job_type=job_type)
    trainer_kwargs = OmegaConf.to_container(cfg.trainer, resolve=True)
    assert isinstance(trainer_kwargs, dict)
    trainer_kwargs.setdefault("max_epochs", settings.epochs)
    checkpoints = ModelCheckpoint(dirpath=str(run_dir / "checkpoints"), save_last=True, save_top_k=0)
    history: list[dict[str, float]] = []

    class _History(L.Callback):
        def on_validation_end(self, trainer: L.Trainer, pl_module: PreferenceModule) -> None:
            if not trainer.sanity_checking:
                history.append(dict(pl_module.last_metrics))

    try:
        trainer = L.Trainer(default_root_dir=str(run_dir), logger=logger, callbacks=[checkpoints, _History()],
                            num_sanity_val_steps=0, enable_model_summary=False, **trainer_kwargs)
    except (TypeError, ValueError) as exc:
        finish_logger(logger)
        raise ConfigError(str(exc).split("\n")[0], "trainer (passed to lightning.Trainer)") from None
    threads = torch.get_num_threads()
    if cfg.get("torch_threads"):
        torch.set_num_threads(int(cfg.torch_threads))
    try:
        trainer.validate(module, val_loader, verbose=False)  # before training: the chance level of this data
        start = dict(module.last_metrics)
        trainer.fit(module, train_loader, val_loader, ckpt_path=cfg.get("ckpt_path"))
    finally:
        torch.set_num_threads(threads)
        finish_logger(logger)
    module.model.eval()
    return {"start": start, "end": history[-1] if history else start, "history": history,
            "steps": trainer.global_step}


def train_grm(cfg: DictConfig, run_dir: Path, registry: Any) -> dict[str, Any]:
    """Train the GRM of ``cfg.grm`` on the trainer of ``cfg.trainer``; save it to ``run_dir/grm``; return the
    summary (held-out metrics after every epoch, the saved folder)."""
    from rlkit.lm.models import apply_lora, save_policy
    from rlkit.runs.lightning import quiet_lightning

    settings = check_grm_config(cfg, registry)
    quiet_lightning()
    L.seed_everything(int(cfg.seed), workers=True, verbose=False)
    train, val = load_grm_data(settings, run_dir, registry)
    model, tokenizer = load_base_model(settings.model)
    if settings.model.lora.enabled:
        model = apply_lora(model, settings.model.lora)
    grm = GenerativeRewardModel(model, tokenizer, grm_format(settings), settings.objective)
    run = fit_preference_model(cfg, run_dir, GrmModule(grm, settings, total_steps=1), train, val, "train-grm")
    out = run_dir / "grm"
    save_policy(model, tokenizer, out, "merged")
    info = {"objective": settings.objective, "format": {"pairwise_template": settings.pairwise_template,
                                                        "listwise_template": settings.listwise_template,
                                                        "max_response_chars": settings.max_response_chars},
            "train_examples": len(train), "val_pairs": len(val), "steps": run["steps"], "metrics": run["end"]}
    (out / GRM_INFO).write_text(json.dumps(info, indent=2, default=float), encoding="utf-8")
    return {**run, "grm_dir": str(out), "train_examples": len(train), "val_pairs": len(val)}


def print_grm_summary(summary: dict[str, Any]) -> None:
    print_preference_summary(summary, f"GRM saved to {summary['grm_dir']} (use it with judge=grm "
                                      f"judge.params.model={summary['grm_dir']})")


def print_preference_summary(summary: dict[str, Any], saved: str) -> None:
    """The held-out metrics before and after training as a table, then ``saved`` (where the model went)."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"held-out pairs ({summary['val_pairs']}), {summary['steps']} steps on "
                        f"{summary['train_examples']} examples")
    for column in ("metric", "before", "after"):
        table.add_column(column, justify="left" if column == "metric" else "right")
    keys = ["accuracy", "length_controlled_accuracy", "accuracy/chosen_shorter", "accuracy/chosen_longer"]
    keys += sorted(k for k in summary["end"] if k.startswith("accuracy/domain/"))
    for key in keys:
        a, b = summary["start"].get(key, float("nan")), summary["end"].get(key, float("nan"))
        table.add_row(key, f"{a:.3f}", f"{b:.3f}")
    console = Console(highlight=False, width=None if __import__("sys").stdout.isatty() else 120)
    console.print(table)
    console.print(saved, markup=False)
