"""The reward pipeline: judged scores -> normalised -> weights -> aggregate, plus diagnostics, debias, pairs."""
