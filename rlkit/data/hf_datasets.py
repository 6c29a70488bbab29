"""Rows of a local Hugging Face ``datasets`` directory (``save_to_disk``), read without any hub access."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlkit.core.errors import DataError


def load_dataset_dir(path: Path, split: str | None = None, *, split_hint: str = "") -> Any:
    """The ``Dataset`` saved at ``path``: a ``DatasetDict`` of one split is that split; of several, ``split``
    names one (``split_hint`` says how the user names it; by default, point at its own directory)."""
    try:
        import datasets
    except ImportError:
        raise DataError("reading a datasets directory needs the `datasets` package: pip install datasets",
                        str(path)) from None
    try:
        data = datasets.load_from_disk(str(path))
    except (FileNotFoundError, ValueError, OSError) as exc:
        raise DataError(f"not a dataset saved with save_to_disk ({str(exc).splitlines()[0]})", str(path)) from None
    if isinstance(data, datasets.DatasetDict):
        splits = list(data)
        if split is None and len(splits) != 1:
            hint = split_hint or f"point at one, e.g. {path / splits[0]}"
            raise DataError(f"the dataset has splits {', '.join(splits)}; {hint}", str(path))
        split = split or splits[0]
        if split not in data:
            raise DataError(f"no split {split!r}; splits: {', '.join(splits)}", str(path))
        data = data[split]
    elif split is not None:
        raise DataError(f"split={split} given, but the dataset has no splits", str(path))
    return data


def dataset_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number from 0, row as a dict) for every row of the dataset saved at ``path``."""
    yield from enumerate(load_dataset_dir(path))
