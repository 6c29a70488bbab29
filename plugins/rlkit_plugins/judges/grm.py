"""The ``grm`` judge: a generative reward model trained with ``rlkit train-grm`` scores each group.

The model is asked the question it was trained on (``objective: auto``, read from the folder's ``grm.json``; a folder
without one is pairwise), or the one ``objective`` names. Pairwise: every two completions of a group are put to the
model in both label orders. Listwise: the whole group is shown labelled A, B, C..., in its order and reversed, and
the label logits are read as Plackett-Luce utilities, P(i before j) = σ(u_i - u_j) (``rlkit.grm.model``). Either way
a completion's score is its mean preference over the others of its group, a soft win rate in [0, 1]. The scores
follow a derived one-dimension rubric, ``preference`` (:meth:`GrmJudge.scored_rubric`); the rubric the GRM was
trained to apply lives in the model, not in this config. The judgement's ``confidence`` is the model's order
consistency per group: 1 when the two orders' answers always agree, lower as position decides more of its answer.
The prompt in every question is rendered as in training: the model's question builders render it
(``rlkit.data.prompts.reward_prompt``), for ``train-grm`` and for this judge alike.

The model is loaded on the first ``score`` call, so ``rlkit validate`` stays light; its folder is checked at
once.

A GRM too big for one device: ``device_map: auto`` (or ``balanced``, ``sequential``, a ``{module: device}``
mapping) has accelerate spread its modules over the GPUs, then the CPU, then ``offload_folder`` on disk, each
device holding at most its ``max_memory`` (``{0: 20GiB, cpu: 60GiB}``; a device left out holds nothing). The map is
planned from the model's config when the judge is built (:func:`rlkit.plugin.plan_placement`), so a malformed
``max_memory`` or a GRM that does not fit without an ``offload_folder`` fails ``rlkit validate`` naming
``judge.params.max_memory``; it is planned again when the weights load. ``device`` then stays ``cpu`` (the map
places the model). ``device_map: null`` (the default) loads it whole and moves it to ``device``, as before.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.plugin import (
    Anchor,
    ConfigError,
    Dimension,
    JudgeError,
    Judgement,
    ParamError,
    Placement,
    Rollout,
    Rubric,
    hookimpl,
)

if TYPE_CHECKING:
    import torch

OBJECTIVES = ("auto", "pairwise", "listwise")
MAX_LISTWISE = 26  # one label letter per completion, A to Z


def preference_rubric(rubric: Rubric) -> Rubric:
    """The one-dimension rubric a GRM's scores follow: ``preference`` in [0, 1], a win rate within the group."""
    dim = Dimension(name="preference", description="mean preference of a generative reward model over the "
                    "other completions of its group", type="scale", range=(0.0, 1.0),
                    anchors={0.0: Anchor(text="every other completion preferred"),
                             1.0: Anchor(text="preferred over every other completion")})
    return Rubric(name=f"{rubric.name}-grm", version=rubric.version,
                  description=f"GRM win rates, judged for {rubric.name} v{rubric.version}", dimensions=[dim])


class GrmJudge:
    """Scores groups with a trained GRM (see the module doc)."""

    @dataclass
    class Params:
        model: str | None = None  # the folder rlkit train-grm saved (<run dir>/grm) or any GRM in HF format
        dtype: str = "float32"
        device: str = "cpu"  # cpu | cuda | cuda:N
        batch_size: int = 64  # questions per forward pass
        # auto: the question the GRM was trained on (its grm.json; pairwise without one) | pairwise | listwise
        objective: str = "auto"
        # null: the whole model on `device`; auto | balanced | balanced_low_0 | sequential: planned by accelerate;
        # a device (cpu, cuda, cuda:N); or {module name: device} with devices GPU index, cpu or disk
        device_map: str | int | dict[str, int | str] | None = None
        max_memory: dict[int | str, int | str] | None = None  # {0: 20GiB, cpu: 60GiB}: the most each device holds
        offload_folder: str | None = None  # where the weights that fit on no device go

    def __init__(self, params: GrmJudge.Params | None = None) -> None:
        from rlkit.plugin import check_model_directory

        p = params or GrmJudge.Params()
        if p.model is None:
            raise ParamError("name the trained GRM's folder (rlkit train-grm saves it as <run dir>/grm)", "model")
        try:
            check_model_directory(p.model)
        except ConfigError as exc:
            raise ParamError(exc.message, "model") from None
        if p.batch_size < 1:
            raise ParamError(f"must be >= 1, got {p.batch_size}", "batch_size")
        if p.objective not in OBJECTIVES:
            raise ParamError(f"one of {', '.join(OBJECTIVES)}, got {p.objective!r}", "objective")
        if p.device_map is not None and p.device != "cpu":
            raise ParamError(f"device_map places the model; leave device at cpu (got {p.device!r}) or set "
                              "device_map: null", "device")
        self.params = p
        # Planned from the config alone (no weights), so a placement that cannot work fails at validate time.
        self._placement()
        self._grm: Any = None

    def model_folders(self) -> list[Path]:
        """The GRM's folder (``rlkit validate`` compares it with the policy's)."""
        from rlkit.plugin import locate_model

        return [locate_model(str(self.params.model))]

    def _load(self) -> Any:
        if self._grm is None:
            from rlkit.plugin import GenerativeRewardModel, read_grm_format

            placement = self._placement()  # again: free memory has changed since the judge was built
            grm = GenerativeRewardModel.load(self.params.model, self.params.dtype, read_grm_format(self.params.model),
                                             placement)
            if placement is None:
                grm.model.to(self.params.device)
            self._grm = grm
        return self._grm

    def _placement(self) -> Placement | None:
        from rlkit.plugin import plan_placement

        p = self.params
        return plan_placement(p.model, device_map=p.device_map, max_memory=p.max_memory,
                              offload_folder=p.offload_folder, dtype=p.dtype, where="judge.params")

    def scored_rubric(self, rubric: Rubric) -> Rubric:
        return preference_rubric(rubric)

    def score(self, rollout: Rollout, rubric: Rubric) -> torch.Tensor:
        return self.assess(rollout, rubric).scores

    def assess(self, rollout: Rollout, rubric: Rubric) -> Judgement:
        """Each completion's win rate ``[B, G, 1]``, each group's swap consistency as its confidence, and the questions
        asked and seconds taken as metrics."""
        b, g = rollout.num_prompts, rollout.group_size
        if g < 2:
            raise JudgeError(f"compares the completions of a group and needs at least 2 per prompt, got {g}",
                             "judge 'grm'")
        grm = self._load()
        # auto: the objective GenerativeRewardModel.load read from the folder's grm.json
        objective = grm.objective if self.params.objective == "auto" else self.params.objective
        if objective == "listwise" and g > MAX_LISTWISE:
            raise JudgeError(f"a listwise question labels at most {MAX_LISTWISE} completions (A to Z), got groups of "
                             f"{g}; set judge.params.objective=pairwise", "judge 'grm'")
        start = time.perf_counter()
        wins, consistency = grm.group_rewards(rollout.records, rollout.completions, self.params.batch_size,
                                              with_consistency=True, objective=objective)
        metrics = {"judge/grm_questions": float(b * grm.questions_per_group(g, objective)),
                   "judge/grm_seconds": time.perf_counter() - start,
                   "judge/swap_consistency": float(consistency.mean())}
        return Judgement(wins.unsqueeze(-1), confidence=consistency, metrics=metrics)


@hookimpl
def rlkit_register_judges(register):
    register("grm", GrmJudge)
