"""``python -m bench.profiled_facade FILE``: the facade (``python -m dockyard_api``) under cProfile, the
profile written to FILE when it stops on SIGTERM or SIGINT (``python -m pstats FILE``). Used by
``bench.execute --profile``."""

from __future__ import annotations

import cProfile
import signal
import sys

from dockyard_api.__main__ import main


def run(path: str) -> None:
    # uvicorn restores the handlers it found and raises the signal again once it has shut down: this one
    # turns that into SystemExit, so the profile below is written
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: sys.exit(0))
    profile = cProfile.Profile()
    profile.enable()
    try:
        main()
    finally:
        profile.disable()
        profile.dump_stats(path)


if __name__ == "__main__":
    run(sys.argv[1])
