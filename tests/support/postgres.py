"""A real PostgreSQL server for tests: the distribution's package (``apt-get install postgresql``),
initdb'd into a temporary directory and run on a free loopback port. Never a mock.

As root (CI, containers) the server runs as the ``postgres`` user the package creates: PostgreSQL
refuses to run as root.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg

USER = "dockyard"
OPTIONS = ("listen_addresses=127.0.0.1", "fsync=off", "synchronous_commit=off", "full_page_writes=off")
OPTIONS = ("listen_addresses=127.0.0.1", "fsync=off", "synchronous_commit=off", "full_page_writes=off",
           "max_connections=200")  # fmt: skip


def bin_dir() -> Path:
    """The newest installed server's bin directory (Debian: /usr/lib/postgresql/<major>/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda p: int(Path(p).parent.parent.name))
    if found:
        return Path(found[-1]).parent
    pg_config = shutil.which("pg_config")
    if pg_config:
        return Path(subprocess.check_output([pg_config, "--bindir"], text=True).strip())
    raise RuntimeError("PostgreSQL is not installed: apt-get install postgresql (.ci/run does)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Postgres:
    """One server: ``start()``, ``stop()`` (fast shutdown: clients are disconnected), ``start()`` again on
    the same port and data, ``close()``."""

    def __init__(self) -> None:
        self.bin = bin_dir()
        self.root = Path(tempfile.mkdtemp(prefix="dockyard-pg-"))
        self.data = self.root / "data"
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = self.root / "postgres.log"
        self._user = None
        if os.geteuid() == 0:
            self._user = "postgres"
            entry = pwd.getpwnam(self._user)
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        subprocess.run(
            [str(self.bin / "initdb"), "-D", str(self.data), "-U", USER, "--auth=trust", "-E", "UTF8", "--no-sync"],
            check=True,
            capture_output=True,
            user=self._user,
        )

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+asyncpg://{USER}@127.0.0.1:{self.port}/{database}"

    def start(self, timeout: float = 30.0) -> None:
        assert self.proc is None or self.proc.poll() is not None
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(self.bin / "postgres"), "-D", str(self.data), "-p", str(self.port), "-k", str(self.root)]
                + [f"-c{o}" for o in OPTIONS],
                stdout=log,
                stderr=subprocess.STDOUT,
                user=self._user,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited ({self.proc.returncode}): {self.log.read_text()[-2000:]}")
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER, "-q"],
                check=False,
            )
            if ready.returncode == 0:
                return
            time.sleep(0.1)
        raise RuntimeError(f"postgres did not accept connections within {timeout}s: {self.log.read_text()[-2000:]}")

    def stop(self) -> None:
        """Fast shutdown (SIGINT): open connections are cut, like a database failing over or going away."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            self.proc.wait(timeout=30)

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    async def create_database(self, prefix: str = "t") -> str:
        """A new empty database; its name."""
        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        conn = await asyncpg.connect(host="127.0.0.1", port=self.port, user=USER, database="postgres")
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
        return name


@contextlib.contextmanager
def postgres_server() -> Iterator[Postgres]:
    server = Postgres()
    try:
        server.start()
        yield server
    finally:
        server.close()
