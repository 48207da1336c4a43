"""The storage initializer: the init container of model pods (the KServe pattern) that fetches a model's
files from the model store, through the facade, into the pod's volume before the engine starts.

    python -m dockyard_api.storage_initializer --url http://dockyard-facade.dockyard-system.svc:8080 \\
        --namespace team-a --model llama-3f9a1c2e --dest /models/llama-3f9a1c2e

The download token is read from the environment variable ``DOCKYARD_DOWNLOAD_TOKEN`` (the operator puts
it there from a Secret it owns; never on the command line). For every file of the model's manifest:

- a file already in place with the manifest's size and SHA-256 is kept (a restarted init container, or
  an emptyDir that survived a container restart, costs nothing);
- otherwise it is downloaded into ``<file>.part``; an existing ``.part`` is resumed with an HTTP
  ``Range`` request from its current size; network errors and 5xx answers are retried with backoff,
  each retry resuming where the last one stopped;
- the finished file's SHA-256 must equal the manifest's: a mismatch deletes the part file and fails
  (exit code 1, the reason on stderr), so the pod never serves corrupted weights.

Exit codes: 0 done, 1 the download failed (the pod's init container then restarts and resumes).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import quote

import httpx

TOKEN_ENV = "DOCKYARD_DOWNLOAD_TOKEN"
BLOCK = 1024 * 1024
PART_SUFFIX = ".part"


class DownloadFailed(Exception):
    """A download that retrying cannot fix (refused token, checksum mismatch, missing model)."""


@dataclass(frozen=True)
class Entry:
    path: str
    size: int
    sha256: str


@dataclass
class Stats:
    files: int = 0
    kept: int = 0
    bytes_downloaded: int = 0
    resumed: int = 0
    retries: int = 0


def _safe_target(dest: Path, rel: str) -> Path:
    """``dest/rel`` for a manifest path that cannot leave ``dest`` (no absolute path, no ``..``)."""
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts or "\\" in rel:
        raise DownloadFailed(f"the manifest names an unsafe path {rel!r}")
    return dest.joinpath(*pure.parts)


def _sha256_of(path: Path, upto: int | None = None) -> hashlib._Hash:
    sha = hashlib.sha256()
    left = upto
    with path.open("rb") as f:
        while left is None or left > 0:
            block = f.read(BLOCK if left is None else min(BLOCK, left))
            if not block:
                break
            sha.update(block)
            if left is not None:
                left -= len(block)
    return sha


class Initializer:
    def __init__(
        self,
        base_url: str,
        namespace: str,
        model: str,
        token: str,
        dest: Path,
        *,
        retries: int = 8,
        backoff: float = 0.5,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        verify: bool | str = True,
        log: Any = None,
    ) -> None:
        self.base = f"{base_url.rstrip('/')}/api/models/{quote(namespace, safe='')}/{quote(model, safe='')}"
        self.dest = dest
        self.retries = retries
        self.backoff = backoff
        self.stats = Stats()
        self.log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.http = httpx.Client(
            headers={"Authorization": f"Bearer {token}", "User-Agent": "dockyard-storage-initializer"},
            timeout=httpx.Timeout(timeout, connect=10.0),
            transport=transport,
            verify=verify,
            follow_redirects=False,
        )

    def close(self) -> None:
        self.http.close()

    def _check(self, response: httpx.Response, what: str) -> None:
        if response.status_code in (401, 403, 404, 416):
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:300]
            raise DownloadFailed(f"{what}: HTTP {response.status_code}: {message}")
        response.raise_for_status()  # 5xx and others: retried

    def _retrying(self, what: str, fn: Any) -> Any:
        delay = self.backoff
        for attempt in range(self.retries + 1):
            try:
                return fn()
            except DownloadFailed:
                raise
            except (httpx.HTTPError, OSError) as exc:
                if attempt == self.retries:
                    raise DownloadFailed(f"{what}: gave up after {self.retries + 1} attempts: {exc}") from exc
                self.stats.retries += 1
                self.log(f"{what}: {exc.__class__.__name__}: {exc}; retrying in {delay:.1f}s")
                time.sleep(delay)
                delay = min(delay * 2, 30.0)
        raise AssertionError("unreachable")

    def manifest(self) -> list[Entry]:
        def fetch() -> list[Entry]:
            response = self.http.get(f"{self.base}/manifest")
            self._check(response, "the manifest")
            data = response.json()
            return [Entry(str(f["path"]), int(f["size"]), str(f["sha256"])) for f in data["files"]]

        entries: list[Entry] = self._retrying("the manifest", fetch)
        return entries

    def run(self) -> Stats:
        entries = self.manifest()
        self.dest.mkdir(parents=True, exist_ok=True)
        total = sum(e.size for e in entries)
        self.log(f"{len(entries)} files, {total} bytes to {self.dest}")
        for entry in entries:
            self.fetch(entry)
        return self.stats

    def fetch(self, entry: Entry) -> None:
        target = _safe_target(self.dest, entry.path)
        self.stats.files += 1
        if target.is_file() and target.stat().st_size == entry.size and _sha256_of(target).hexdigest() == entry.sha256:
            self.stats.kept += 1
            return
        target.parent.mkdir(parents=True, exist_ok=True)
        part = target.with_name(target.name + PART_SUFFIX)
        if part.exists() and part.stat().st_size > entry.size:
            part.unlink()
        if part.exists() and part.stat().st_size:
            self.stats.resumed += 1
        sha = self._retrying(entry.path, lambda: self._download(entry, part))
        size = part.stat().st_size
        digest = sha.hexdigest()
        if size != entry.size or digest != entry.sha256:
            part.unlink()
            raise DownloadFailed(
                f"{entry.path}: SHA-256 mismatch: got {digest} ({size} bytes), the manifest says {entry.sha256} "
                f"({entry.size} bytes); the file was deleted"
            )
        os.replace(part, target)
        self.log(f"{entry.path}: {entry.size} bytes, sha256 {entry.sha256[:16]}… verified")

    def _download(self, entry: Entry, part: Path) -> Any:
        """Fetch the rest of ``entry`` into ``part``; the SHA-256 of the whole part file, computed while
        writing (the bytes already there are hashed first: no second read of the file)."""
        have = part.stat().st_size if part.exists() else 0
        if have >= entry.size:
            return _sha256_of(part)
        headers = {"Range": f"bytes={have}-"} if have else {}
        url = f"{self.base}/files/{quote(entry.path)}"
        with self.http.stream("GET", url, headers=headers) as response:
            self._check(response, entry.path)
            if have and response.status_code != 206:
                have = 0  # the server sent the whole file: start over
            sha = _sha256_of(part, have) if have else hashlib.sha256()
            mode = "r+b" if have else "wb"
            with part.open(mode) as out:
                out.seek(have)
                out.truncate()
                try:
                    for block in response.iter_bytes():  # as received: a broken stream keeps what came
                        out.write(block)
                        sha.update(block)
                        self.stats.bytes_downloaded += len(block)
                finally:
                    out.flush()
                    os.fsync(out.fileno())
        if part.stat().st_size < entry.size:
            raise httpx.RemoteProtocolError(f"the download of {entry.path} ended early")
        return sha


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dockyard-storage-initializer", description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the facade's base URL")
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--model", required=True, help="the Model's name (modelId)")
    parser.add_argument("--dest", required=True, type=Path, help="directory to fill")
    parser.add_argument("--retries", type=int, default=8)
    parser.add_argument("--ca-file", default=None, help="PEM CA bundle of the facade's certificate")
    args = parser.parse_args(argv)
    token = os.environ.get(TOKEN_ENV, "")
    if not token:
        print(f"storage-initializer: the environment variable {TOKEN_ENV} is empty", file=sys.stderr)
        return 1
    init = Initializer(
        args.url, args.namespace, args.model, token, args.dest, retries=args.retries, verify=args.ca_file or True
    )
    started = time.monotonic()
    try:
        stats = init.run()
    except DownloadFailed as exc:
        print(f"storage-initializer: {exc}", file=sys.stderr)
        return 1
    finally:
        init.close()
    print(
        f"storage-initializer: {args.namespace}/{args.model}: {stats.files} files ({stats.kept} already in place), "
        f"{stats.bytes_downloaded} bytes downloaded, {stats.resumed} resumed, {stats.retries} retries, "
        f"{time.monotonic() - started:.1f}s",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
