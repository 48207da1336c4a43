"""Per-object locks: one holder at a time per key, and no lock left behind once nobody uses it."""

from __future__ import annotations

import asyncio

from dockyard_operator.locks import KeyedLocks


def test_one_holder_per_key_and_the_lock_goes_with_its_last_user() -> None:
    async def scenario() -> tuple[list[str], int, int]:
        locks = KeyedLocks()
        order: list[str] = []
        inside = asyncio.Event()

        async def first() -> None:
            async with locks.hold("uid-1"):
                order.append("first in")
                inside.set()
                await asyncio.sleep(0.05)
                order.append("first out")

        async def second() -> None:
            await inside.wait()
            async with locks.hold("uid-1"):
                order.append("second in")

        async def other_key() -> None:
            await inside.wait()
            async with locks.hold("uid-2"):
                order.append("other in")

        tasks = [asyncio.create_task(c()) for c in (first, second, other_key)]
        await inside.wait()
        await asyncio.sleep(0.01)
        during = len(locks)
        await asyncio.gather(*tasks)
        return order, during, len(locks)

    order, during, after = asyncio.run(scenario())
    assert order.index("first out") < order.index("second in")  # the same key waits
    assert order.index("other in") < order.index("first out")  # another key does not
    assert during == 1
    assert after == 0


def test_a_holder_that_fails_releases_and_forgets_its_lock() -> None:
    async def scenario() -> int:
        locks = KeyedLocks()
        try:
            async with locks.hold("uid"):
                raise RuntimeError("reconcile failed")
        except RuntimeError:
            pass
        async with locks.hold("uid"):  # not left locked
            pass
        return len(locks)

    assert asyncio.run(scenario()) == 0
