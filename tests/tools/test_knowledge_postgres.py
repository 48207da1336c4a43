"""The knowledge index on a REAL PostgreSQL server (the distribution's package on a loopback port,
tests/support/postgres.py): the contract every backend keeps (tests/support/knowledge.py), replicas that
start together, and a re-index switched while another replica searches."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from dockyard_core.knowledge.postgres import PostgresIndex, asyncpg_url
from tests.support.knowledge import HARBOUR, WEATHER, contract, index_document, started
from tests.support.postgres import Postgres, postgres_server


@pytest.fixture(scope="module")
def pg() -> Iterator[Postgres]:
    with postgres_server() as server:
        yield server


def test_the_postgres_index_keeps_the_contract(pg: Postgres) -> None:
    async def main() -> None:
        url = pg.url(await pg.create_database())
        async with started(PostgresIndex(url)) as index:
            await contract(index)

    asyncio.run(main())


def test_keyword_searches_can_use_the_gin_index_of_the_generated_tsvector(pg: Postgres) -> None:
    async def main() -> None:
        url = pg.url(await pg.create_database())
        async with started(PostgresIndex(url)) as index:
            g = await index.new_generation("kb")
            for n in range(50):
                await index_document(index, "kb", g.id, f"d{n}", f"Note {n} about berth {n}.".encode(), "n.txt")
            await index_document(index, "kb", g.id, "guide", HARBOUR, "guide.md")
            await index.activate("kb", g.id)
            assert index._engine is not None
            async with index._engine.connect() as conn:  # the search's own query, as the planner sees it
                await conn.execute(text("SET enable_seqscan = off"))  # a tiny table: would be scanned anyway
                query = (f"EXPLAIN SELECT id FROM kb_chunks_{g.id}, to_tsquery('english', 'anchorage | fee') AS q "
                         "WHERE tsv @@ q ORDER BY ts_rank(tsv, q) DESC, id LIMIT 5")  # fmt: skip
                plan = "\n".join(r[0] for r in await conn.execute(text(query)))
            assert f"kb_chunks_{g.id}_tsv" in plan
            assert (await index.keyword_search("kb", "anchorage"))[0].document_id == "guide"

    asyncio.run(main())


def test_replicas_start_together_and_see_one_switch(pg: Postgres) -> None:
    async def main() -> None:
        url = pg.url(await pg.create_database())
        replicas = [PostgresIndex(url) for _ in range(4)]
        await asyncio.gather(*(r.start() for r in replicas))  # the schema is created once, under a lock
        writer, readers = replicas[0], replicas[1:]
        first = await writer.new_generation("kb", dimensions=8)
        await index_document(writer, "kb", first.id, "guide", HARBOUR, "guide.md", vectors=True)
        await writer.activate("kb", first.id)
        second = await writer.new_generation("kb", dimensions=8)
        await index_document(writer, "kb", second.id, "weather", WEATHER, "weather.html", vectors=True)
        seen: set[str] = set()
        stop = asyncio.Event()

        async def search(reader: PostgresIndex) -> None:
            while not stop.is_set():
                hits = await reader.hybrid_search("kb", "harbour", [1.0] * 8, limit=1)
                seen.add(hits[0].document_id if hits else "")

        tasks = [asyncio.create_task(search(r)) for r in readers]
        await asyncio.sleep(0.2)
        await writer.activate("kb", second.id)
        await writer.drop_generation("kb", first.id)  # waits for searches still reading it
        await asyncio.sleep(0.2)
        stop.set()
        await asyncio.gather(*tasks)
        assert seen == {"guide", "weather"}  # the old index, then the new one; never none
        for reader in readers:
            assert (await reader.generation("kb")).id == second.id
        await asyncio.gather(*(r.close() for r in replicas))

    asyncio.run(main())


def test_urls_of_the_conversation_store_and_plain_ones_get_the_asyncpg_driver() -> None:
    assert asyncpg_url("postgresql+asyncpg://u@h/db") == "postgresql+asyncpg://u@h/db"
    assert asyncpg_url("postgresql://u@h/db") == "postgresql+asyncpg://u@h/db"
    assert asyncpg_url("postgres://u@h/db") == "postgresql+asyncpg://u@h/db"
