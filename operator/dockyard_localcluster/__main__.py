"""``python -m dockyard_localcluster``: the local control plane and the embedded Dockyard.

up       build the binaries (cached), start the cluster, stages and GPU node pools (idempotent)
down     delete the cluster
status   print whether the cluster serves, and its kubeconfig
run      up + CRDs + operator + facade on 127.0.0.1:8080 + local engines + the demo, until interrupted
run --in-cluster  the same with Dockyard installed from its chart into the real-node test bed (pods on a
            real kubelet node, its own images), the facade relayed to 127.0.0.1:8080 (root; docs/real-node.md)
engines  the local engine runner alone (real engines for model pods; see dockyard_localcluster.engines)
toolserver  the demo's HTTP tool (--port, --host)
tinymodel   write the tiny random-weight GGUF model to --output
tinylora    write the tiny model's LoRA adapter (adapter_config.json + a GGUF LoRA) as a tar to --output
images      build the container images with podman, no registry (cached; NAME... for some; --archive, --refs)
testbed up|down|status  the real-node test bed: a real kubelet node beside kwok's GPU pools in its own
            network namespace, reached through loopback only (root; docs/real-node.md)
"""

from __future__ import annotations

import argparse
import sys

from dockyard_localcluster.cluster import ClusterError, LocalCluster


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="dockyard-localcluster", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "command",
        choices=["up", "down", "status", "run", "engines", "toolserver", "tinymodel", "tinylora", "images", "testbed"],
    )
    parser.add_argument("names", nargs="*", metavar="NAME", help="images: the images to build (default: all)")
    parser.add_argument("--port", type=int, default=18090, help="toolserver: the port")
    parser.add_argument("--host", default="127.0.0.1", help="toolserver: the address to listen on")
    parser.add_argument("--output", help="tinymodel, tinylora: the file to write (tiny.gguf, tiny-lora.tar)")
    parser.add_argument("--archive", action="store_true", help="images: also write (cached) oci-archives")
    parser.add_argument("--refs", action="store_true", help="images: print only the references, one a line")
    parser.add_argument("--in-cluster", action="store_true", help="run: install the chart into the test bed")
    args = parser.parse_args(argv)
    if args.names and args.command not in ("images", "testbed"):
        parser.error(f"{args.command} takes no positional arguments")
    if args.in_cluster and args.command != "run":
        parser.error("--in-cluster goes with run")
    if args.command == "run" and args.in_cluster:
        from dockyard_localcluster.incluster import run as run_incluster

        return run_incluster()
    if args.command == "testbed":
        if len(args.names) != 1 or args.names[0] not in ("up", "down", "status"):
            parser.error("testbed takes one of: up, down, status")
        from dockyard_localcluster.testbed.cli import main as testbed_main

        return testbed_main(args.names[0])
    if args.command == "images":
        from dockyard_localcluster.images import main as images_main

        return images_main(args.names, archives=args.archive, refs_only=args.refs)
    if args.command == "engines":
        from dockyard_localcluster.engines import main as engines_main

        return engines_main()
    if args.command == "toolserver":
        import signal

        from dockyard_localcluster.toolserver import serve

        # as a container's PID 1 (the tool image), SIGTERM would otherwise be ignored
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        serve(args.port, args.host)
        return 0
    if args.command == "tinymodel":
        from pathlib import Path

        from dockyard_localcluster.tinymodel import write_tiny_gguf

        print(write_tiny_gguf(Path(args.output or "tiny.gguf")))
        return 0
    if args.command == "tinylora":
        import tempfile
        from pathlib import Path

        from dockyard_localcluster.tinymodel import tiny_lora_tar

        out = Path(args.output or "tiny-lora.tar")
        with tempfile.TemporaryDirectory() as work:
            out.write_bytes(tiny_lora_tar(Path(work)))
        print(out)
        return 0
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
