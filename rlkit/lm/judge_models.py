"""The real judge models pip can install, best first: what ``judge=llm`` asks when no model is named.

Each is a quantised GGUF shipped inside PyPI packages (no hub at run time), served by llama.cpp (the ``llama_cpp``
judge backend). :func:`installed_judge_model` gives the first one whose packages are installed; none installed is a
one-line :class:`~rlkit.core.errors.ConfigError` naming the pip command, never a silent fall back to the offline
tiny judge (which stays selectable by name: ``backend: tiny``). ``$RLKIT_JUDGE_MODEL`` names another file to use
instead (a machine's own judge; rlkit's tests point it at a tiny GGUF they write).

Order is by agreement with people measured here (``benchmarks/README.md``, "Real judges"): Qwen2.5-Coder-1.5B-Instruct
agreed with the shipped chat labels on correctness at κ 0.89 with structured outputs, SmolLM2-135M-Instruct gave
constant scores, so it is not offered as a judge.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from rlkit.core.errors import ConfigError
from rlkit.core.package_files import package_dir
from rlkit.lm.joined_files import QWEN_CODER_JUDGE, is_parts_ref, model_file, part_refs


@dataclass(frozen=True)
class JudgeModel:
    """One installable judge: its name, where its file comes from (a ``parts://`` reference or a path), how to
    install it, and its size on disk."""

    name: str
    ref: str
    install: str
    size: str

    def installed(self) -> bool:
        """Whether every package holding the file is installed (found without importing or joining anything)."""
        if not is_parts_ref(self.ref):
            return Path(self.ref).is_file()
        try:
            return all((package_dir(package, self.ref) / inside).is_file() for package, inside in part_refs(self.ref))
        except ConfigError:
            return False

    def file(self) -> Path:
        """The GGUF file (joined into rlkit's cache on first use: a copy of the parts, once)."""
        return model_file(self.ref)


JUDGE_MODELS: tuple[JudgeModel, ...] = (
    JudgeModel("qwen2.5-coder-1.5b-instruct", QWEN_CODER_JUDGE, "pip install 'rlkit[qwen-judge]'",
               "1.1 GB, Q4_K_M"),
)


JUDGE_MODEL_ENV = "RLKIT_JUDGE_MODEL"


def installed_judge_model(where: str) -> JudgeModel:
    """The judge model named by ``$RLKIT_JUDGE_MODEL`` (a GGUF file or ``parts://`` reference: a machine's own judge,
    set once), else the best installed one; none installed is a ``ConfigError`` at ``where`` naming the pip
    command."""
    named = os.environ.get(JUDGE_MODEL_ENV, "").strip()
    if named:
        chosen = JudgeModel(Path(named.partition("#")[2] or named).name, named, "", "")
        if not chosen.installed():
            raise ConfigError(f"${JUDGE_MODEL_ENV} names {named}, which is not there (a GGUF file or a parts:// "
                              "reference whose packages are installed)", where)
        return chosen
    for model in JUDGE_MODELS:
        if model.installed():
            return model
    best = JUDGE_MODELS[0]
    raise ConfigError(f"no judge model is installed: {best.install} ({best.name}, {best.size}), or name a GGUF file "
                      f"({where}.model=FILE.gguf); backend: tiny is the offline tiny judge, for tests and demos", where)
