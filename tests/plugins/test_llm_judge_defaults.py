"""What ``judge=llm``'s defaults (``scoring: auto``, ``show_reference: auto``) resolve to on each backend: on
``llama_cpp`` (the default, rlkit's own engine) scores by the levels' probabilities (G-Eval), elsewhere by the level
written; the record's reference shown whenever it has one (reference-guided grading), hidden only when asked.

No engine is started: the backend is only built, on the tiny GGUF that ``tests/conftest.py`` installs as the judge
model (``$RLKIT_JUDGE_MODEL``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from rlkit.core.errors import ConfigError

LLM_YAML = Path(__file__).resolve().parents[2] / "conf" / "judge" / "llm.yaml"
RECORD = {"prompt": "3+4=", "reference": "7"}


def _shipped_params(**changes) -> dict:
    """``conf/judge/llm.yaml``'s params: what ``judge=llm`` composes to, before any override."""
    params = OmegaConf.to_container(OmegaConf.load(LLM_YAML).params, resolve=True)
    return {**params, **changes}


def test_the_shipped_defaults_on_llama_cpp_score_by_probability_and_show_the_reference(registry):
    judge = registry.create("judge", "llm", _shipped_params())
    assert type(judge.backend.configured).__name__ == "LlamaCppBackend"
    assert judge.scoring == "expected"
    assert judge.backend.shown_reference(RECORD, judge.show_reference) == "7"
    assert judge.backend.shown_reference({"prompt": "3+4="}, judge.show_reference) is None, "no reference, none shown"
    # the Params defaults say the same as the YAML
    bare = registry.create("judge", "llm", {})
    assert (bare.scoring, bare.show_reference) == ("expected", True)


@pytest.mark.parametrize("changes", [
    {"scoring": "sampled"},  # asked for
    {"structured": False},  # no schema: no field whose token carries the probabilities
    {"backend": {"name": "llama_cpp", "params": {"response_format": "none"}}},
    {"backend": {"name": "openai", "params": {"base_url": "http://127.0.0.1:9/v1"}}},  # a server of the user's
    {"backend": "tiny"},  # the offline tiny judge, calibrated on the levels it writes
])
def test_auto_scores_by_the_written_level_where_probabilities_are_not_assured(registry, changes):
    assert registry.create("judge", "llm", _shipped_params(**changes)).scoring == "sampled"


def test_the_reference_is_hidden_when_asked_and_expected_is_still_refused_where_it_cannot_work(registry):
    judge = registry.create("judge", "llm", _shipped_params(show_reference=False))
    assert judge.backend.shown_reference(RECORD, judge.show_reference) is None
    with pytest.raises(ConfigError, match="judge.params.scoring"):
        registry.create("judge", "llm", _shipped_params(scoring="expected", structured=False))
