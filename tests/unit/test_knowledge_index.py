"""The knowledge index's pure parts (query words, Reciprocal Rank Fusion) and the embedded SQLite index
(Python's sqlite3, a file in a temporary directory) through the contract every backend keeps
(tests/support/knowledge.py; the same contract runs on a real PostgreSQL server in tests/tools)."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from dockyard_core.knowledge import RRF_K, Generation, reciprocal_rank_fusion
from dockyard_core.knowledge.index import query_terms
from dockyard_core.knowledge.sqlite import SqliteIndex
from tests.support.knowledge import HARBOUR, contract, index_document, started


def test_rrf_sums_one_over_k_plus_rank_and_prefers_items_both_rankings_found() -> None:
    fused = reciprocal_rank_fusion([["a", "b", "c"], ["c", "d"]])
    assert RRF_K == 60
    scores = dict(fused)
    assert scores["c"] == pytest.approx(1 / 63 + 1 / 61)
    assert scores["a"] == pytest.approx(1 / 61)
    assert scores["d"] == pytest.approx(1 / 62)
    assert [item for item, _ in fused] == ["c", "a", "b", "d"]  # c: in both; b and d tie at rank 2: keywords first


def test_rrf_ties_go_to_the_better_single_rank_then_to_the_keyword_ranking() -> None:
    # x: ranks 2 and 2; y: 1 and 3 -> 2/62 vs 1/61 + 1/63: y wins by a hair, not by a tie-break
    assert [i for i, _ in reciprocal_rank_fusion([["y", "x"], ["z", "x", "y"]])][:2] == ["y", "x"]
    # an exact tie: p is first of the keyword ranking, q first of the vector ranking
    assert [i for i, _ in reciprocal_rank_fusion([["p"], ["q"]])] == ["p", "q"]
    assert [i for i, _ in reciprocal_rank_fusion([["q"], ["p"]])] == ["q", "p"]


def test_rrf_k_and_limit() -> None:
    assert reciprocal_rank_fusion([["a", "b", "c"]], limit=2) == [("a", 1 / 61), ("b", 1 / 62)]
    assert reciprocal_rank_fusion([["a"]], k=1) == [("a", 0.5)]
    assert reciprocal_rank_fusion([[], []]) == []
    with pytest.raises(ValueError, match="k must be"):
        reciprocal_rank_fusion([["a"]], k=0)


def test_query_terms_are_words_only_without_common_words_nor_duplicates() -> None:
    assert query_terms('Who pays the "anchorage" fee? fee* OR NEAR(x)') == ["pays", "anchorage", "fee", "near", "x"]
    assert query_terms("what is it") == ["what", "is", "it"]  # only common words: kept
    assert query_terms("snake_case ümlaut 42") == ["snake", "case", "ümlaut", "42"]
    assert query_terms("!!! ???") == []
    assert len(query_terms(" ".join(f"w{i}" for i in range(100)))) == 32


def test_the_sqlite_index_keeps_the_contract(tmp_path: Path) -> None:
    async def main() -> None:
        async with started(SqliteIndex(tmp_path / "kb.sqlite")) as index:
            await contract(index)

    asyncio.run(main())


def test_two_processes_share_the_sqlite_file_and_a_switch_is_seen_by_the_reader(tmp_path: Path) -> None:
    """The indexing job and the facade are two processes on one file: the reader's next search reads the
    generation the writer activated, and its cached vectors follow the writer's changes."""

    async def main() -> None:
        path = tmp_path / "kb.sqlite"
        async with started(SqliteIndex(path)) as writer, started(SqliteIndex(path)) as reader:
            first = await writer.new_generation("kb", dimensions=8)
            await index_document(writer, "kb", first.id, "guide", HARBOUR, "guide.md", vectors=True)
            await writer.activate("kb", first.id)
            assert (await reader.keyword_search("kb", "berth tankers"))[0].document_id == "guide"
            assert len(await reader.vector_search("kb", [1.0] * 8, limit=50)) == (await reader.stats("kb")).chunks
            await index_document(writer, "kb", None, "more", b"Tankers moor at berth nine too.", "more.txt", True)
            assert {h.document_id for h in await reader.vector_search("kb", [1.0] * 8, limit=50)} == {"guide", "more"}
            second = await writer.new_generation("kb")
            await index_document(writer, "kb", second.id, "only", b"A new index of one note.", "only.txt")
            await writer.activate("kb", second.id)
            assert [h.document_id for h in await reader.keyword_search("kb", "note")] == ["only"]
            assert await reader.vector_search("kb", [1.0] * 8) == []  # built without vectors

    asyncio.run(main())


def test_a_generation_dropped_under_a_search_is_searched_again_on_the_active_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def main() -> None:
        async with started(SqliteIndex(tmp_path / "kb.sqlite")) as index:
            old = await index.new_generation("kb")
            await index_document(index, "kb", old.id, "guide", HARBOUR, "guide.md")
            await index.activate("kb", old.id)
            new = await index.new_generation("kb")
            await index_document(index, "kb", new.id, "guide", b"Pilots are on strike.", "guide.txt")
            resolved = await index.generation("kb")
            await index.activate("kb", new.id)
            await index.drop_generation("kb", old.id)
            calls: list[int] = []
            original = index.generation

            async def stale_then_fresh(kb: str, generation: int | None = None) -> Generation:
                calls.append(1)
                return resolved if len(calls) == 1 else await original(kb, generation)

            monkeypatch.setattr(index, "generation", stale_then_fresh)  # resolved before the switch
            hits = await index.keyword_search("kb", "pilots")
            assert [h.text for h in hits] == ["Pilots are on strike."]
            assert len(calls) == 2

    asyncio.run(main())


def test_python_sqlite_has_fts5() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(x)")  # the embedded index's keyword search needs it
