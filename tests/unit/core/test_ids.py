"""dockyard_core.ids: ids from a pool of the operating system's random bytes, each byte handed out once."""

from __future__ import annotations

import os
import re
import threading

from dockyard_core import ids
from dockyard_core.ids import random_hex


def test_ids_are_32_hex_digits_and_never_repeat_across_threads_and_refills() -> None:
    made: list[list[str]] = [[] for _ in range(4)]

    def make(into: list[str]) -> None:
        into.extend(random_hex() for _ in range(1000))  # about four refills per thread

    threads = [threading.Thread(target=make, args=(into,)) for into in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [one for into in made for one in into] + [random_hex() for _ in range(1000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", one) for one in every)
    assert len(set(every)) == len(every) == 5000


def test_a_forked_child_does_not_hand_out_its_parents_next_ids() -> None:
    random_hex()  # the pool holds bytes not yet handed out
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.write(write, "".join(random_hex() for _ in range(10)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    child = os.read(read, 1000).decode()
    os.close(read)
    parent = "".join(random_hex() for _ in range(10))
    assert len(child) == len(parent) == 320
    assert child != parent
    assert ids._POOL_BYTES // 16 > 10  # the parent's ten came from the pool it had before the fork
