"""Built-in judge backends: where a model-based judge sends its prompts (``hf`` in-process, ``openai`` over HTTP)."""
