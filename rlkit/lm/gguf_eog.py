"""The tokens llama.cpp ends a generation at (its "end-of-generation" set), read from a GGUF file's vocabulary.

llama.cpp stops at every EOG token, not only at the file's EOS: SmolLM2-Instruct's GGUF names ``<|im_end|>`` as its
EOS, and llama.cpp stops at ``<|endoftext|>`` too. rlkit's ``hf`` sampler stops at the generation config's
``eos_token_id``, so ``rlkit model import`` writes this set there, and both engines end the same completions.

The rule is llama.cpp's ``llama_vocab::impl::load`` (``src/llama-vocab.cpp``, the block "maintain a list of tokens
that cause end-of-generation", read at ggml-org/llama.cpp commit 00ad355e; the ``xllamacpp`` wheel rlkit runs carries
the same token texts): the FIM pad/repo/separator ids, every token spelled as one of :data:`EOG_TEXTS` (whatever its
token type: llama.cpp forces it to a control token), then the metadata's EOS, EOT and EOM ids; ``<|end|>`` is taken
out where the vocabulary has the harmony (``<|return|>`` + ``<|call|>``) or solar-open (``<|calls|>`` +
``<|flush|>``) endings, and ``</s>`` where ``<|tool_response>`` (gemma4) or ``<|plamo:eos|>`` (PLaMo: there it is an
HTML tag) is in the set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

# llama-vocab.cpp's EOG token texts, in its order.
EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~[",
})

# The FIM tokens llama.cpp detects by their text when the metadata names none, one per kind (llama-vocab.cpp's
# "find FIM_PAD/FIM_REP/FIM_SEP token"); each is an EOG token.
FIM_TEXTS = {
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}

# The metadata keys (``tokenizer.ggml.<kind>_token_id``) whose ids llama.cpp adds to the set.
METADATA_KINDS = ("eos", "eot", "eom", *FIM_TEXTS)


def end_of_generation_ids(tokens: Sequence[str], metadata_ids: Mapping[str, int]) -> list[int]:
    """llama.cpp's EOG ids for a vocabulary (``tokens`` in id order) and the ids its metadata names
    (``{"eos": 2, "eot": ...}``, any of :data:`METADATA_KINDS`): the EOS first (``generate`` pads with the first),
    then the rest in id order."""
    size = len(tokens)
    named = {kind: index for kind, index in metadata_ids.items()
             if kind in METADATA_KINDS and 0 <= index < size}  # llama.cpp drops an id past the vocabulary
    for kind, texts in FIM_TEXTS.items():
        if kind not in named:
            # llama.cpp takes the first match of its hash map's order; a vocabulary with two spellings of one
            # kind is not known to exist, so the lowest id stands in for it
            found = [index for index, text in enumerate(tokens) if text in texts]
            if found:
                named[kind] = found[0]
    eog = {index for index, text in enumerate(tokens) if text in EOG_TEXTS} | set(named.values())
    texts = {tokens[index]: index for index in eog}
    if ({"<|return|>", "<|call|>"} <= texts.keys() or {"<|calls|>", "<|flush|>"} <= texts.keys()) \
            and "<|end|>" in texts:
        eog.discard(texts["<|end|>"])
    if ("<|tool_response>" in texts or "<|plamo:eos|>" in texts) and "</s>" in texts:
        eog.discard(texts["</s>"])
    eos = named.get("eos")
    return ([eos] if eos in eog else []) + sorted(eog - {eos})


def read_end_of_generation(reader: object) -> list[int]:
    """:func:`end_of_generation_ids` of an open ``gguf.GGUFReader``'s vocabulary; ``[]`` for a file with none."""
    fields = reader.fields  # type: ignore[attr-defined]
    listed = fields.get("tokenizer.ggml.tokens")
    if listed is None:
        return []
    tokens = [bytes(listed.parts[index]).decode("utf-8", errors="replace") for index in listed.data]
    named = {}
    for kind in METADATA_KINDS:
        field = fields.get(f"tokenizer.ggml.{kind}_token_id")
        if field is not None and field.data:
            named[kind] = int(field.parts[field.data[0]][0])
    return end_of_generation_ids(tokens, named)
