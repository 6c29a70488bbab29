"""Capture and restore every random-number generator a training step draws from, for exact resume."""

from __future__ import annotations

import random
from typing import Any


def capture_rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's and torch's global generators (CUDA too when present)."""
    # NumPy's key array travels as a tensor so checkpoints still load with torch.load(weights_only=True).
    import numpy as np
    import torch
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    state: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state(),
                             "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), int(pos), int(has_gauss),
                                       float(cached)]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back what :func:`capture_rng_state` returned; generators it did not capture stay as they are."""
    import numpy as np
    import torch
    random.setstate(state["python"])
    kind, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
