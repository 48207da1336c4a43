"""Hybrid retrieval's fusion: Reciprocal Rank Fusion (Cormack, Clarke and Büttcher, SIGIR 2009).

Each ranking (the keyword search's, the vector search's) gives an item at 1-based rank ``r`` the score
``1 / (k + r)``; an item's fused score is the sum over the rankings it appears in, so an item both
searches found beats one only one of them ranked a little higher. ``k = 60``, the paper's constant,
damps the difference between the first ranks. Only ranks count, never the raw scores, which is why
BM25 (unbounded) and cosine similarity (-1..1) fuse without any normalisation.

Ties (equal fused scores) go to the item with the better single rank, then to the earlier ranking
(keywords first), so the order is deterministic.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import TypeVar

RRF_K = 60
K = TypeVar("K", bound=Hashable)


def reciprocal_rank_fusion(
    rankings: Sequence[Sequence[K]], *, k: int = RRF_K, limit: int | None = None
) -> list[tuple[K, float]]:
    """The items of ``rankings`` (each best first, without duplicates) by fused score, best first."""
    if k < 1:
        raise ValueError("k must be at least 1")
    scores: dict[K, float] = {}
    best: dict[K, tuple[int, int]] = {}
    for which, ranking in enumerate(rankings):
        for rank, item in enumerate(ranking, start=1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
            best[item] = min(best.get(item, (rank, which)), (rank, which))
    ordered = sorted(scores, key=lambda item: (-scores[item], best[item]))
    if limit is not None:
        ordered = ordered[:limit]
    return [(item, scores[item]) for item in ordered]
