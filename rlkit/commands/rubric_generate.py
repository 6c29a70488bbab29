"""``rlkit rubric generate``: per-prompt rubrics from reference answers, written by the configured judge's backend."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from rlkit.commands.common import compose_and_check
from rlkit.core.errors import ConfigError

GENERATE_PREFIX = "generate."


def cmd_rubric_generate(args: Sequence[str]) -> int:
    from omegaconf import OmegaConf

    from rlkit.config import resolve_path
    from rlkit.evaluation.calibration import line_numbers
    from rlkit.evaluation.rubric_generation import generate_options, generate_rubrics

    # generate.* configures this command only; the rest composes the run's config (judge, data, ...)
    own = {a[len(GENERATE_PREFIX):].partition("=")[0]: a.partition("=")[2] for a in args
           if a.startswith(GENERATE_PREFIX)}
    options = generate_options(own)
    validated = compose_and_check([a for a in args if not a.startswith(GENERATE_PREFIX)])
    if validated.records is None or validated.data is None or not validated.data.path:
        raise ConfigError("rubric generate writes criteria from reference answers: give data.path=<records.jsonl> "
                          "(each line a prompt and its reference)", "data.path")
    backend = getattr(validated.plugins.get("judge"), "backend", None)
    if backend is None or not callable(getattr(backend, "get", None)):
        raise ConfigError(f"judge={validated.plugin_names.get('judge')} has no model backend to write rubrics; "
                          "use judge=llm with judge.params.backend=openai (or hf with a model)", "judge")
    if backend.offline:
        raise ConfigError("the offline tiny judge cannot write rubrics; point the llm judge at a real model "
                          "(judge.params.backend={name: openai, params: {base_url: ..., model: ...}})",
                          "judge.params.backend")
    backend.check_ready()
    data_path = resolve_path(validated.data.path)
    lines = line_numbers(data_path) if data_path.is_file() else list(range(len(validated.records)))
    served = backend.get()
    max_tokens = OmegaConf.select(validated.cfg, "judge.params.backend.params.max_tokens", default=None)
    result = generate_rubrics(validated.records, lines, data_path, served, options,
                              max_tokens=int(max_tokens) if max_tokens is not None else None)
    print(
        f"{len(result.files)} per-prompt rubrics in {options.output} ({result.new} new, {result.changed} changed: "
        f"version bumped, {result.unchanged} unchanged); records naming them: {result.records_path}\n"
        f"score with: rlkit score rubric=per_record data.path={Path(result.records_path)} judge=llm ...")
    return 0
