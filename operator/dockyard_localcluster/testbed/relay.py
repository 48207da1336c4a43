"""A loopback relay into the test bed's network namespace: the host's only way in.

``python -m dockyard_localcluster.testbed.relay --netns /run/netns/X --port P --target HOST:PORT
--ready FILE`` binds 127.0.0.1:P in the namespace it starts in (the host's) FIRST, then moves itself
into the test bed's namespace with ``setns(2)``, checks that it got there, and only then writes
FILE (the port it listens on) and accepts. Every accepted connection is connected to HOST:PORT from
inside the namespace, so the host only ever sends packets to 127.0.0.1.

With ``--service NAMESPACE/NAME:PORT --api URL --pki DIR`` instead of ``--target``, the relay asks the
API server (from inside the namespace, with the admin certificate) for the Service's ClusterIP when a
connection arrives (cached for a few seconds): the forward can exist before the Service does and
follows it when it is re-created.

setns changes the calling thread only; it is called before asyncio (or anything else) starts a thread,
and threads started later inherit the namespace.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import ctypes.util
import json
import os
import socket
import ssl
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

CLONE_NEWNET = 0x40000000


def enter_netns(path: Path) -> None:
    """Move the calling thread into the network namespace at ``path``; raise unless it is there."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"setns({path}): {os.strerror(err)}")
    finally:
        os.close(fd)
    if os.stat("/proc/thread-self/ns/net").st_ino != os.stat(path).st_ino:
        raise OSError(f"setns({path}) returned but this thread is not in that namespace")


def listen_loopback(port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(OSError, RuntimeError):
            if writer.can_write_eof():
                writer.write_eof()


Resolver = Callable[[], Awaitable[tuple[str, int]]]


def fixed(target: tuple[str, int]) -> Resolver:
    async def resolve() -> tuple[str, int]:
        return target

    return resolve


class ServiceResolver:
    """The ClusterIP of a Service, asked of the API server (inside the namespace), cached briefly."""

    TTL = 5.0

    def __init__(self, service: str, api: str, pki: Path) -> None:
        ref, _, port = service.rpartition(":")
        self.namespace, _, self.name = ref.partition("/")
        if not (self.namespace and self.name and port.isdigit()):
            raise ValueError(f"service must be NAMESPACE/NAME:PORT, not {service!r}")
        self.port = int(port)
        self.url = f"{api}/api/v1/namespaces/{self.namespace}/services/{self.name}"
        self.context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.context.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.cached: tuple[float, str] | None = None

    def _lookup(self) -> str:
        with urllib.request.urlopen(self.url, context=self.context, timeout=5) as resp:
            spec = json.load(resp)["spec"]
        ip = spec.get("clusterIP")
        if not ip or ip == "None":
            raise OSError(f"service {self.namespace}/{self.name} has no ClusterIP")
        return str(ip)

    async def __call__(self) -> tuple[str, int]:
        now = time.monotonic()
        if self.cached is None or now - self.cached[0] > self.TTL:
            self.cached = (now, await asyncio.to_thread(self._lookup))
        return self.cached[1], self.port


async def _handle(resolve: Resolver, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
    try:
        target = await resolve()
        upstream_r, upstream_w = await asyncio.wait_for(asyncio.open_connection(*target), timeout=10)
    except (OSError, TimeoutError) as exc:
        print(f"relay: no upstream: {exc}", file=sys.stderr, flush=True)
        client_w.close()
        return
    try:
        await asyncio.gather(_pipe(client_r, upstream_w), _pipe(upstream_r, client_w))
    finally:
        for w in (client_w, upstream_w):
            with contextlib.suppress(OSError):
                w.close()


async def serve(sock: socket.socket, target: tuple[str, int] | Resolver) -> None:
    resolve = fixed(target) if isinstance(target, tuple) else target
    server = await asyncio.start_server(lambda r, w: _handle(resolve, r, w), sock=sock)
    async with server:
        await server.serve_forever()


def parse_target(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"target must be HOST:PORT, not {text!r}")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--netns", required=True, type=Path, help="the namespace's file, e.g. /run/netns/dockyard-tb")
    parser.add_argument("--port", type=int, default=0, help="the loopback port to listen on (0: any free one)")
    parser.add_argument("--target", help="HOST:PORT inside the namespace")
    parser.add_argument("--service", help="NAMESPACE/NAME:PORT, resolved by the API server (with --api, --pki)")
    parser.add_argument("--api", help="the API server's URL inside the namespace")
    parser.add_argument("--pki", type=Path, help="the test bed's PKI directory (ca.crt, admin.crt/key)")
    parser.add_argument("--ready", required=True, type=Path, help="written with the port once listening")
    args = parser.parse_args(argv)
    if bool(args.target) == bool(args.service) or (args.service and not (args.api and args.pki)):
        parser.error("give --target, or --service with --api and --pki")
    sock = listen_loopback(args.port)  # in the host's namespace, before setns
    enter_netns(args.netns)
    target: tuple[str, int] | Resolver
    if args.target:
        target = parse_target(args.target)
        shown = args.target
    else:
        target = ServiceResolver(args.service, args.api, args.pki)
        shown = f"service {args.service}"
    port = sock.getsockname()[1]
    tmp = args.ready.with_suffix(".tmp")
    tmp.write_text(f"{port}\n")
    tmp.replace(args.ready)
    print(f"relay: 127.0.0.1:{port} (host) -> {shown} (in {args.netns})", file=sys.stderr, flush=True)
    asyncio.run(serve(sock, target))
    return 0


if __name__ == "__main__":
    sys.exit(main())
