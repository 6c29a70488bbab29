"""The ``reward_model`` judge: a Bradley-Terry reward model trained with ``rlkit train-rm`` scores each completion.

The model reads the prompt, rendered as ``rlkit train-rm`` rendered it (one user message as its content alone,
whether it comes as chat messages or as a labelling file's text; ``rlkit.data.prompts``), followed by the completion,
and answers one number, r (``rlkit.plugin.ScalarRewardModel``). Its scores follow a derived one-dimension rubric,
``preference`` in [0, 1] (:meth:`RewardModelJudge.scored_rubric`): ``σ(r - c)``, where c is the mean reward of the
held-out completions the model was trained with (``reward_model.json``'s ``center``). Under the Bradley-Terry model
that is the probability the completion is preferred over a typical one of its training data, so 0.5 is "as good as
usual", and two completions' scores keep the order of their rewards. Unlike ``judge=grm`` each completion is scored
alone: a group of one is scored, and G completions cost G forward passes, not G·(G-1).

Only a sigmoid of the centred reward lands in a rubric dimension's range without a scale picked by hand; the raw
rewards' mean and spread are logged each step (``judge/rm_reward_mean``, ``judge/rm_reward_std``) so a drift of the
scale under a moving policy shows (the ranking note's scalar-reward drift). The rubric the model learnt lives in its
training pairs, not in this config.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.plugin import Anchor, ConfigError, Dimension, Judgement, ParamError, Rollout, Rubric, hookimpl

if TYPE_CHECKING:
    import torch


def preference_rubric(rubric: Rubric) -> Rubric:
    """The one-dimension rubric a reward model's scores follow: ``preference``, σ(reward - centre) in [0, 1]."""
    dim = Dimension(name="preference", description="sigmoid of a Bradley-Terry reward model's reward, centred on its "
                    "held-out completions: the chance it is preferred over a typical one", type="scale",
                    range=(0.0, 1.0), anchors={0.0: Anchor(text="far below a typical completion"),
                                               0.5: Anchor(text="as good as a typical completion"),
                                               1.0: Anchor(text="far above a typical completion")})
    return Rubric(name=f"{rubric.name}-rm", version=rubric.version,
                  description=f"reward model preferences, judged for {rubric.name} v{rubric.version}",
                  dimensions=[dim])


class RewardModelJudge:
    """Scores completions with a trained scalar reward model (see the module doc)."""

    @dataclass
    class Params:
        model: str | None = None  # the folder rlkit train-rm saved (<run dir>/reward_model)
        dtype: str = "float32"
        device: str = "cpu"  # cpu | cuda | cuda:N
        batch_size: int = 64  # completions per forward pass

    def __init__(self, params: RewardModelJudge.Params | None = None) -> None:
        from rlkit.plugin import check_model_directory, is_reward_model_folder

        p = params or RewardModelJudge.Params()
        if p.model is None:
            raise ParamError("name the trained reward model's folder (rlkit train-rm saves it as "
                             "<run dir>/reward_model)", "model")
        try:
            check_model_directory(p.model)
        except ConfigError as exc:
            raise ParamError(exc.message, "model") from None
        if not is_reward_model_folder(p.model):
            raise ParamError(f"{p.model} is a model folder without a reward head (reward_head.safetensors, "
                             "reward_model.json): train one with rlkit train-rm", "model")
        if p.batch_size < 1:
            raise ParamError(f"must be >= 1, got {p.batch_size}", "batch_size")
        self.params = p
        self._rm: Any = None  # loaded on the first call, so `rlkit validate` stays light

    def model_folders(self) -> list[Path]:
        """The reward model's folder (``rlkit validate`` compares it with the policy's)."""
        return [Path(str(self.params.model))]

    def _load(self) -> Any:
        if self._rm is None:
            from rlkit.plugin import ScalarRewardModel

            rm = ScalarRewardModel.load(self.params.model, self.params.dtype, where="judge.params.model")
            self._rm = rm.to(self.params.device)
        return self._rm

    def scored_rubric(self, rubric: Rubric) -> Rubric:
        return preference_rubric(rubric)

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        return self.assess(rollout, rubric).scores

    def assess(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        """σ(reward - centre) per completion ``[B, G, 1]``; the raw rewards' mean and spread and the seconds taken
        as metrics."""
        import torch

        rm = self._load()
        start = time.perf_counter()
        # rm.text renders the prompt as train-rm did when it trained the model (rlkit.data.prompts.reward_prompt)
        texts = [rm.text(record.get("prompt", ""), completion)
                 for record, group in zip(rollout.records, rollout.completions, strict=True) for completion in group]
        rewards = rm.rewards(texts, self.params.batch_size).view(rollout.num_prompts, rollout.group_size)
        scores = torch.sigmoid(rewards - rm.center).unsqueeze(-1)
        metrics = {"judge/rm_reward_mean": float(rewards.mean()),
                   "judge/rm_reward_std": float(rewards.std()) if rewards.numel() > 1 else 0.0,
                   "judge/rm_seconds": time.perf_counter() - start}
        return Judgement(scores, metrics=metrics)


@hookimpl
def rlkit_register_judges(register):
    register("reward_model", RewardModelJudge)
