"""The ``tiny`` judge backend: the offline tiny judge, a few-million-parameter model rlkit trains on CPU on first use
(cached) by distilling the rule judge's scores on the arithmetic task (``rlkit.judging.tiny_judge``).

It knows sums of small numbers and nothing the rules do not, so it is for tests and demos of the model-judge code
paths, chosen by name (``judge.params.backend=tiny``), never by default: ``judge=llm`` with no backend named asks the
best real judge installed (the ``llama_cpp`` backend). It answers in-process like the ``hf`` backend it extends (the
same batching, structured outputs and level probabilities) and takes the same params except ``model``.
"""

from __future__ import annotations

from collections.abc import Callable

from rlkit.plugin import ConfigError, hookimpl
from rlkit_plugins.backends.hf import WHERE, HFBackend


class TinyBackend(HFBackend):
    """The hf backend on the offline tiny judge, which the judge builds on its first request."""

    model_required = False

    def __init__(self, params: HFBackend.Params | None = None) -> None:
        params = params or HFBackend.Params()
        if params.model is not None:
            raise ConfigError(f"the tiny backend is the offline tiny judge and takes no model (got {params.model!r}); "
                              "a model of your own is backend: hf", f"{WHERE}.model")
        super().__init__(params)


@hookimpl
def rlkit_register_judge_backends(register: Callable[..., None]) -> None:
    """Register the ``tiny`` judge backend."""
    register("tiny", TinyBackend)
