"""llama.cpp's end-of-generation tokens, as ``rlkit model import`` reads them from a GGUF vocabulary: the rules, and
the engine itself (xllamacpp) stopping at exactly those ids of a tiny GGUF the test writes."""

from __future__ import annotations

import json
import urllib.request

import pytest

from rlkit.lm.gguf import read_header
from rlkit.lm.gguf_eog import end_of_generation_ids
from rlkit.testing.gguf_files import write_tiny_gguf


def _vocab(*specials: str) -> list[str]:
    return [*specials, "a", "b", "c"]


def test_the_eos_comes_first_then_every_eog_text_whatever_its_metadata():
    tokens = _vocab("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|eot_id|>", "<|eom_id|>")
    assert end_of_generation_ids(tokens, {"eos": 2}) == [2, 0, 3, 4]
    # a metadata id past the vocabulary is dropped (llama.cpp disables it)
    assert end_of_generation_ids(tokens, {"eos": 99}) == [0, 2, 3, 4]
    # an EOT or EOM id the metadata names is one, whatever its text
    assert end_of_generation_ids(_vocab("<s>", "</done>"), {"eos": 0, "eot": 1, "bos": 2}) == [0, 1]


def test_fim_tokens_end_a_generation_by_metadata_or_by_their_text():
    tokens = _vocab("<|endoftext|>", "<|fim_prefix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<reponame>")
    # by text: pad, the lowest-id repo spelling, file_sep; FIM prefix is not an end
    assert end_of_generation_ids(tokens, {"eos": 0}) == [0, 2, 3, 4]
    assert end_of_generation_ids(tokens, {"eos": 0, "fim_rep": 5}) == [0, 2, 4, 5]


def test_harmony_endings_drop_end_and_a_tool_response_or_plamo_eos_drops_the_closing_s_tag():
    harmony = _vocab("<|end|>", "<|return|>", "<|call|>")
    assert end_of_generation_ids(harmony, {}) == [1, 2]
    assert end_of_generation_ids(_vocab("<|end|>", "<|return|>"), {}) == [0, 1]
    assert end_of_generation_ids(_vocab("</s>", "<eos>", "<|tool_response>"), {"eos": 1}) == [1, 2]
    assert end_of_generation_ids(_vocab("</s>", "<|plamo:eos|>"), {"eos": 1}) == [1]
    assert end_of_generation_ids(_vocab("</s>", "<|plamo:eos|>"), {}) == [0], "<|plamo:eos|> counts as the EOS only"


def test_the_engine_stops_at_exactly_the_ids_the_import_writes(tmp_path):
    pytest.importorskip("xllamacpp", reason="llama.cpp's engine is the judge-server extra (xllamacpp)")
    from rlkit.lm.llama_server import LlamaServer, LlamaServerSettings

    file = tmp_path / "tiny.gguf"
    write_tiny_gguf(file)
    eog = read_header(file).end_of_generation
    assert eog == (2, 0)
    server = LlamaServer(LlamaServerSettings(model=str(file), slots=1, context=64, threads=1, prompt_cache=False),
                         "test")
    url = server.ensure_running()
    stopped = set()
    try:
        for token in range(8):  # the four special tokens and four bytes, each forced as the first token
            body = {"prompt": "Hi", "n_predict": 2, "temperature": 0, "logit_bias": [[token, 100.0]],
                    "return_tokens": True, "cache_prompt": False}
            request = urllib.request.Request(f"{url}/completion", data=json.dumps(body).encode(),
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=60) as response:
                answer = json.loads(response.read())
            assert answer["tokens"][0] == token
            if answer["stop_type"] == "eos":
                stopped.add(token)
    finally:
        server.stop()
    assert stopped == set(eog)
