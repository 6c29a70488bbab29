"""Generative reward models: the model wrapper, ranking data, metrics and training."""
