"""Language-model helpers: building and loading policies, sampling batches, log-probs, the KL reference."""
