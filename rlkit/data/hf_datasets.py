"""Rows of a local Hugging Face ``datasets`` directory (``save_to_disk``), read without any hub access."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlkit.core.errors import DataError


def load_dataset_dir(path: Path) -> Any:
    """The one ``Dataset`` saved at ``path``: a ``DatasetDict`` of one split is that split; of several, the user
    points at one (each split is a ``save_to_disk`` directory of its own)."""
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
        if len(splits) != 1:
            raise DataError(f"the dataset has splits {', '.join(splits)}; point at one, e.g. {path / splits[0]}",
                            str(path))
        data = data[splits[0]]
    return data


def dataset_rows(path: Path) -> Iterator[tuple[int, Any]]:
    """(row number from 0, row as a dict) for every row of the dataset saved at ``path``."""
    yield from enumerate(load_dataset_dir(path))
