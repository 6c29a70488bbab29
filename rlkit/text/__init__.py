"""Text utilities: similarity, PII scrubbing, de-duplication and sentence embeddings."""
