"""``python -m dockyard_operator``: run the operator (kopf) with Dockyard's handlers.

Runs cluster-wide by default; ``--namespace`` restricts it. ``--standalone`` disables kopf peering
(for a single local instance); the Helm chart runs with peering so only one replica is active.
"""

from __future__ import annotations

import argparse
import asyncio

import kopf

import dockyard_operator.handlers  # noqa: F401  (registers the handlers)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="dockyard-operator", description=__doc__)
    parser.add_argument("-n", "--namespace", action="append", default=[], help="watch only these")
    parser.add_argument("--standalone", action="store_true", help="no peering (one local instance)")
    parser.add_argument("--peering", default="dockyard", help="kopf peering name (default: dockyard)")
    args = parser.parse_args(argv)
    asyncio.run(
        kopf.operator(
            standalone=args.standalone,
            peering_name=args.peering,
            clusterwide=not args.namespace,
            namespaces=args.namespace,
        )
    )


if __name__ == "__main__":
    main()
