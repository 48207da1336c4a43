"""``python -m dockyard_localcluster``: the local control plane and the embedded Dockyard.

up       build the binaries (cached), start the cluster, stages and GPU node pools (idempotent)
down     delete the cluster
status   print whether the cluster serves, and its kubeconfig
run      up + CRDs + operator + facade on 127.0.0.1:8080, until interrupted
"""

from __future__ import annotations

import argparse
import sys

from dockyard_localcluster.cluster import ClusterError, LocalCluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dockyard-localcluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["up", "down", "status", "run"])
    args = parser.parse_args(argv)
    cluster = LocalCluster()
    try:
        if args.command == "up":
            cluster.up()
            print(f"export KUBECONFIG={cluster.settings.kubeconfig}")
        elif args.command == "down":
            cluster.down()
        elif args.command == "status":
            ready = cluster.is_ready()
            print(f"cluster {cluster.settings.cluster_name!r}: {'ready' if ready else 'not running'}")
            print(f"KUBECONFIG={cluster.settings.kubeconfig}")
            return 0 if ready else 1
        else:
            from dockyard_localcluster.run import run

            return run(cluster)
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
