"""Near-duplicate texts under a pluggable similarity: character 3-gram Jaccard or sentence-embedding cosine.

One implementation serves every data tool: ``rlkit data prepare`` drops near-duplicate records with
``near_duplicates``, and ``rlkit data pairs`` drops pairs whose two answers are near-duplicates with
``pair_similarities``. A similarity is any object with the three methods of ``TextSimilarity``; the built-in ones
are registered by name in ``SIMILARITIES``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Protocol

from rlkit.core.errors import ConfigError
from rlkit.text.similarity import char_ngram_jaccard, char_ngrams

if TYPE_CHECKING:
    import numpy as np
    import torch

DedupMethod = Literal["embedding", "ngram", "none"]
SimilarityMethod = Literal["embedding", "ngram"]
BLOCK_ROWS = 512  # texts compared at once; a block's similarity matrix is BLOCK_ROWS x KEPT_CHUNK floats
KEPT_CHUNK = 4096


class Duplicate(NamedTuple):
    """Text ``index`` is dropped: its similarity to the kept text ``kept_index`` is ``similarity``."""

    index: int
    kept_index: int
    similarity: float


class TextSimilarity(Protocol):
    """A similarity in [0, 1] (1 = the same text) that compares blocks of texts at once."""

    def features(self, texts: Sequence[str]) -> Any:
        """Whatever ``block`` needs for ``texts`` (embeddings, n-gram sets), computed once."""

    def block(self, features: Any, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """The ``[len(rows), len(cols)]`` similarities between the texts indexed by ``rows`` and ``cols``."""

    def pairs(self, a: Sequence[str], b: Sequence[str]) -> list[float]:
        """The similarity of ``a[i]`` and ``b[i]`` for each ``i``."""


class NgramSimilarity:
    """Jaccard similarity of character ``n``-gram sets (``rlkit.text.similarity``); blocks as sparse products."""

    def __init__(self, n: int = 3) -> None:
        self.n = n

    def features(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
        """Each text's distinct gram ids in CSR form (row pointers, gram ids) and its number of grams."""
        import numpy as np
        import torch
        vocab: dict[str, int] = {}
        ids = [[vocab.setdefault(gram, len(vocab)) for gram in char_ngrams(text, self.n)] for text in texts]
        sizes = np.fromiter((len(row) for row in ids), dtype=np.int64, count=len(ids))
        indptr = np.concatenate([[0], np.cumsum(sizes)])
        indices = np.fromiter((g for row in ids for g in row), dtype=np.int64, count=int(indptr[-1]))
        # float64: intersections and unions are integers, so a ratio such as 9/10 compares exactly with 0.9
        return indptr, indices, torch.from_numpy(sizes).to(torch.float64)

    @staticmethod
    def _rows(indptr: np.ndarray, indices: np.ndarray, rows: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``rows``, gram id) of every gram of the selected texts, in time linear in their grams."""
        import numpy as np
        idx = rows.numpy()
        starts, lengths = indptr[idx], indptr[idx + 1] - indptr[idx]
        row_ids = np.repeat(np.arange(len(idx)), lengths)
        # output k takes indices[start of its row + its offset within the row]
        offsets = np.arange(int(lengths.sum())) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        return row_ids, indices[np.repeat(starts, lengths) + offsets]

    def block(self, features: tuple[np.ndarray, np.ndarray, torch.Tensor], rows: torch.Tensor,
              cols: torch.Tensor) -> torch.Tensor:
        """|A ∩ B| / |A ∪ B| for every row text against every column text."""
        import numpy as np
        import torch
        indptr, indices, sizes = features
        row_of, row_gram = self._rows(indptr, indices, rows)
        col_of, col_gram = self._rows(indptr, indices, cols)
        # Only the rows' grams can be shared: the rows become a dense [their grams, rows] 0/1 matrix and the
        # columns a sparse one over the same grams, so one sparse x dense product counts every intersection
        # (5x faster than sparse x sparse, whose output is nearly dense anyway).
        grams, local = np.unique(row_gram, return_inverse=True)
        dense = torch.zeros(len(grams), len(rows), dtype=torch.float32)  # counts < 2**24 are exact in float32
        dense[torch.from_numpy(local), torch.from_numpy(row_of)] = 1
        at = np.minimum(np.searchsorted(grams, col_gram), len(grams) - 1)
        shared = grams[at] == col_gram
        col_of, at = col_of[shared], at[shared]
        order = np.lexsort((at, col_of))
        col_of, at = col_of[order], at[order]
        crow = np.concatenate([[0], np.cumsum(np.bincount(col_of, minlength=len(cols)))])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's note that sparse CSR support is beta
            sparse = torch.sparse_csr_tensor(torch.from_numpy(crow), torch.from_numpy(at),
                                             torch.ones(len(at), dtype=torch.float32), (len(cols), len(grams)))
            inter = (sparse @ dense).T.to(torch.float64)
        union = sizes[rows, None] + sizes[None, cols] - inter
        return inter / union  # every text has at least one gram (a short text is its own), so no union is 0

    def pairs(self, a: Sequence[str], b: Sequence[str]) -> list[float]:
        """Linear in the texts' length; exactly ``char_ngram_jaccard``."""
        return [char_ngram_jaccard(x, y, self.n) for x, y in zip(a, b, strict=True)]


class EmbeddingSimilarity:
    """Cosine similarity of sentence embeddings from ``rlkit.text.embeddings`` (L2-normalised; the bundled MiniLM by
    default, or ``model``: a local folder). A missing model raises a ``ConfigError`` saying what to install."""

    def __init__(self, model: str | None = None) -> None:
        from rlkit.text.embeddings import shared_embedder

        self.embedder = shared_embedder(model)  # loaded once per process and model

    def features(self, texts: Sequence[str]) -> torch.Tensor:
        """The ``[texts, dim]`` unit-length embeddings."""
        import torch
        if not texts:
            return torch.zeros(0, 1)
        return self.embedder.encode(list(texts)).float()

    def block(self, features: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
        """Dot products of unit vectors, i.e. cosines."""
        return features[rows] @ features[cols].T

    def pairs(self, a: Sequence[str], b: Sequence[str]) -> list[float]:
        """Each distinct text is embedded once."""
        import torch
        if not a:
            return []
        unique = list(dict.fromkeys([*a, *b]))
        position = {text: i for i, text in enumerate(unique)}
        emb = self.features(unique)
        ia = torch.tensor([position[t] for t in a])
        ib = torch.tensor([position[t] for t in b])
        return (emb[ia] * emb[ib]).sum(1).tolist()


SIMILARITIES: dict[str, Callable[..., TextSimilarity]] = {"ngram": NgramSimilarity, "embedding": EmbeddingSimilarity}


def make_similarity(method: str, **params: Any) -> TextSimilarity:
    """The registered similarity called ``method``; an unknown name raises with the available ones."""
    if method not in SIMILARITIES:
        raise ConfigError(f"unknown similarity {method!r}; available: {', '.join(SIMILARITIES)}")
    return SIMILARITIES[method](**params)


def near_duplicates(texts: Sequence[str], method: DedupMethod | TextSimilarity = "ngram",
                    threshold: float = 0.92) -> list[Duplicate]:
    """Greedy de-duplication: each text is kept unless its similarity to an earlier *kept* text is >= ``threshold``.

    Returns the dropped texts in order, each with the kept text it is most similar to (a text dropped inside
    its own block names the first kept text that matched). ``method`` is a registered name, ``"none"`` (nothing
    is dropped) or a ``TextSimilarity``. Work is matrix products over blocks of texts against the kept ones.
    """
    import torch
    if method == "none" or len(texts) < 2:
        return []
    similarity = make_similarity(method) if isinstance(method, str) else method
    features = similarity.features(texts)
    kept = torch.empty(0, dtype=torch.long)
    dropped: list[Duplicate] = []
    for start in range(0, len(texts), BLOCK_ROWS):
        rows = torch.arange(start, min(start + BLOCK_ROWS, len(texts)))
        best = torch.full((len(rows),), -torch.inf, dtype=torch.float64)
        best_at = torch.full((len(rows),), -1, dtype=torch.long)
        for c in range(0, len(kept), KEPT_CHUNK):
            cols = kept[c:c + KEPT_CHUNK]
            sim, arg = similarity.block(features, rows, cols).to(torch.float64).max(dim=1)
            better = sim > best
            best = torch.where(better, sim, best)
            best_at = torch.where(better, cols[arg], best_at)
        alive = best < threshold
        for i in torch.nonzero(~alive).flatten().tolist():
            dropped.append(Duplicate(start + i, int(best_at[i]), float(best[i])))
        # Within the block the greedy order matters: one pass over its texts, each kept one dropping later matches.
        inner = similarity.block(features, rows, rows).to(torch.float64)
        later = torch.ones_like(inner, dtype=torch.bool).triu(diagonal=1)
        hits = (inner >= threshold) & later
        block_kept = []
        for i in range(len(rows)):
            if not alive[i]:
                continue
            block_kept.append(start + i)
            matches = hits[i] & alive
            for j in torch.nonzero(matches).flatten().tolist():
                dropped.append(Duplicate(start + j, start + i, float(inner[i, j])))
            alive &= ~matches
        kept = torch.cat([kept, torch.tensor(block_kept, dtype=torch.long)])
    return sorted(dropped)


def pair_similarities(a: Sequence[str], b: Sequence[str], method: SimilarityMethod | TextSimilarity = "ngram"
                      ) -> list[float]:
    """The similarity of ``a[i]`` and ``b[i]`` for each ``i``, under a registered similarity or a given one."""
    similarity = make_similarity(method) if isinstance(method, str) else method
    return similarity.pairs(a, b)
