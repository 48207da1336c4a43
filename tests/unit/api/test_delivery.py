"""Weight delivery without a cluster: download tokens, the facade's download endpoint (a real uvicorn
server on loopback, the file-system model store) and the storage initializer's entry point against it
(ranges, resume after a broken connection, SHA-256 mismatch refused)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from dockyard_api.settings import ApiSettings
from dockyard_api.storage_initializer import DownloadFailed, Initializer
from dockyard_core import downloadtokens
from tests.support.modelfiles import StoredModel, import_model
from tests.support.runners import RunningFacade, run_facade

KEY = "k" * 48


# --- tokens -----------------------------------------------------------------------------------------------


def test_a_token_grants_its_model_until_it_expires() -> None:
    token = downloadtokens.mint(KEY.encode(), "team-a", "tiny", 2_000)
    grant = downloadtokens.verify(KEY.encode(), token, "team-a", "tiny", now=1_999)
    assert (grant.namespace, grant.model, grant.expires) == ("team-a", "tiny", 2_000)


@pytest.mark.parametrize(
    ("namespace", "model", "now", "key", "error"),
    [
        ("team-a", "tiny", 2_000, KEY, "expired"),
        ("team-b", "tiny", 0, KEY, "for model team-a/tiny"),
        ("team-a", "other", 0, KEY, "for model team-a/tiny"),
        ("team-a", "tiny", 0, "x" * 48, "signature"),
    ],
)
def test_a_token_is_refused_for_anything_else(namespace: str, model: str, now: int, key: str, error: str) -> None:
    token = downloadtokens.mint(KEY.encode(), "team-a", "tiny", 2_000)
    with pytest.raises(downloadtokens.InvalidToken, match=error):
        downloadtokens.verify(key.encode(), token, namespace, model, now=now)


def test_a_tampered_payload_is_refused() -> None:
    token = downloadtokens.mint(KEY.encode(), "team-a", "tiny", 2_000)
    other = downloadtokens.mint(KEY.encode(), "team-b", "tiny", 2_000)
    forged = ".".join([*other.split(".")[:2], token.split(".")[2]])
    with pytest.raises(downloadtokens.InvalidToken, match="signature"):
        downloadtokens.verify(KEY.encode(), forged, "team-b", "tiny", now=0)


def test_expiry_is_stable_within_half_a_lifetime_and_leaves_at_least_half() -> None:
    ttl = 3600
    for now in range(100_000, 100_000 + 3 * ttl, 97):
        expires = downloadtokens.expiry_for(now, ttl)
        assert ttl // 2 < expires - now <= ttl
    assert downloadtokens.expiry_for(100_800, ttl) == downloadtokens.expiry_for(100_801, ttl)


def test_the_key_file_is_created_once_and_private(tmp_path: Path) -> None:
    path = tmp_path / "state" / "download-token.key"
    first = downloadtokens.load_key(None, path)
    assert downloadtokens.load_key(None, path) == first
    assert len(first) >= 32
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    with pytest.raises(ValueError, match="32"):
        downloadtokens.load_key("short", path)


# --- the download endpoint and the storage initializer -------------------------------------------------------


@pytest.fixture
def settings(unreachable_kubeconfig: str, tmp_path: Path) -> ApiSettings:
    return ApiSettings(
        kubeconfig=unreachable_kubeconfig,
        model_store=tmp_path / "store",
        sweep_interval_seconds=0,
        watch_models=False,
        download_token_key=KEY,
    )


@pytest.fixture
def stored(settings: ApiSettings) -> StoredModel:
    store = settings.open_model_store()
    store.ensure()
    return import_model(store)


@pytest.fixture
def facade(settings: ApiSettings, stored: StoredModel) -> Iterator[RunningFacade]:
    with run_facade(settings) as running:
        yield running


def token_for(model: StoredModel, *, expires: float | None = None, model_name: str | None = None) -> str:
    return downloadtokens.mint(
        KEY.encode(), model.namespace, model_name or model.model, int(expires or time.time() + 600)
    )


def initializer(facade: RunningFacade, model: StoredModel, dest: Path, **kw: Any) -> Initializer:
    return Initializer(facade.url, model.namespace, model.model, token_for(model), dest, backoff=0.01, **kw)


def check_tree(dest: Path, model: StoredModel) -> None:
    found = {p.relative_to(dest).as_posix(): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert found == model.files


def test_the_manifest_lists_every_file_with_its_sha256(facade: RunningFacade, stored: StoredModel) -> None:
    resp = facade.client.get(
        f"/api/models/{stored.namespace}/{stored.model}/manifest",
        headers={"Authorization": f"Bearer {token_for(stored)}"},
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert [f["path"] for f in body["files"]] == sorted(stored.files)
    assert body["totalBytes"] == sum(len(b) for b in stored.files.values())


@pytest.mark.parametrize(
    ("header", "why"),
    [
        (None, "required"),
        ("Basic abc", "required"),
        ("Bearer not-a-token", "not a Dockyard download token"),
        ("expired", "expired"),
        ("other-model", "for model"),
    ],
)
def test_downloads_need_a_token_for_that_model(
    facade: RunningFacade, stored: StoredModel, header: str | None, why: str
) -> None:
    if header == "expired":
        header = f"Bearer {token_for(stored, expires=time.time() - 1)}"
    elif header == "other-model":
        header = f"Bearer {token_for(stored, model_name='someone-elses')}"
    headers = {"Authorization": header} if header else {}
    for path in ("manifest", "files/config.json"):
        resp = facade.client.get(f"/api/models/{stored.namespace}/{stored.model}/{path}", headers=headers)
        assert resp.status_code == 401, resp.text
        assert why in resp.json()["error"]["message"]


def test_ranges(facade: RunningFacade, stored: StoredModel) -> None:
    url = f"/api/models/{stored.namespace}/{stored.model}/files/model.safetensors"
    auth = {"Authorization": f"Bearer {token_for(stored)}"}
    weights = stored.files["model.safetensors"]
    whole = facade.client.get(url, headers=auth)
    assert (whole.status_code, whole.content, whole.headers["accept-ranges"]) == (200, weights, "bytes")
    part = facade.client.get(url, headers={**auth, "Range": "bytes=10-19"})
    assert (part.status_code, part.content) == (206, weights[10:20])
    assert part.headers["content-range"] == f"bytes 10-19/{len(weights)}"
    tail = facade.client.get(url, headers={**auth, "Range": "bytes=-5"})
    assert (tail.status_code, tail.content) == (206, weights[-5:])
    rest = facade.client.get(url, headers={**auth, "Range": f"bytes={len(weights) - 3}-"})
    assert rest.content == weights[-3:]
    past = facade.client.get(url, headers={**auth, "Range": f"bytes={len(weights)}-"})
    assert past.status_code == 416
    assert past.json()["error"]["code"] == "range_not_satisfiable"
    assert past.headers["content-range"] == f"bytes */{len(weights)}"
    missing = facade.client.get(f"/api/models/{stored.namespace}/{stored.model}/files/nope.bin", headers=auth)
    assert missing.status_code == 404


def test_initializer_fetches_and_verifies_every_file(
    facade: RunningFacade, stored: StoredModel, tmp_path: Path
) -> None:
    dest = tmp_path / "pod" / "models" / stored.model
    init = initializer(facade, stored, dest)
    stats = init.run()
    check_tree(dest, stored)
    assert (stats.files, stats.kept, stats.resumed) == (3, 0, 0)
    assert stats.bytes_downloaded == sum(len(b) for b in stored.files.values())
    again = initializer(facade, stored, dest).run()  # a restarted init container keeps verified files
    assert (again.kept, again.bytes_downloaded) == (3, 0)


def test_initializer_resumes_a_partial_file_with_a_range(
    facade: RunningFacade, stored: StoredModel, tmp_path: Path
) -> None:
    dest = tmp_path / "pod"
    dest.mkdir()
    weights = stored.files["model.safetensors"]
    (dest / "model.safetensors.part").write_bytes(weights[: 1024 * 1024])
    stats = initializer(facade, stored, dest).run()
    check_tree(dest, stored)
    assert stats.resumed == 1
    others = sum(len(b) for n, b in stored.files.items() if n != "model.safetensors")
    assert stats.bytes_downloaded == others + len(weights) - 1024 * 1024


class BreakOnce(httpx.HTTPTransport):
    """Drops the connection once, after ``after`` bytes of the first file download (a network failure)."""

    def __init__(self, after: int) -> None:
        super().__init__()
        self.after = after
        self.broken = False
        self.ranges: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        if "/files/model.safetensors" not in request.url.path:
            return response
        self.ranges.append(request.headers.get("range"))
        if self.broken:
            return response
        self.broken = True
        transport = self

        class Broken(httpx.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                sent = 0
                for block in response.stream:
                    if sent + len(block) > transport.after:
                        yield block[: transport.after - sent]
                        raise httpx.ReadError("connection reset by peer (test)")
                    sent += len(block)
                    yield block

            def close(self) -> None:
                response.close()

        return httpx.Response(response.status_code, headers=response.headers, stream=Broken())


def test_initializer_resumes_after_a_broken_connection(
    facade: RunningFacade, stored: StoredModel, tmp_path: Path
) -> None:
    transport = BreakOnce(after=1_000_000)
    stats = initializer(facade, stored, tmp_path / "pod", transport=transport).run()
    check_tree(tmp_path / "pod", stored)
    assert stats.retries == 1
    assert transport.ranges == [None, "bytes=1000000-"]


def test_initializer_refuses_a_file_whose_sha256_differs(
    facade: RunningFacade, stored: StoredModel, settings: ApiSettings, tmp_path: Path
) -> None:
    stored_file = settings.model_store / "models" / stored.namespace / stored.model / "model.safetensors"
    data = bytearray(stored_file.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: bit rot in the store
    stored_file.write_bytes(bytes(data))
    dest = tmp_path / "pod"
    with pytest.raises(DownloadFailed, match=r"model\.safetensors: SHA-256 mismatch"):
        initializer(facade, stored, dest).run()
    assert not (dest / "model.safetensors").exists()
    assert not (dest / "model.safetensors.part").exists()


def test_the_entry_point(facade: RunningFacade, stored: StoredModel, tmp_path: Path) -> None:
    dest = tmp_path / "pod"
    command = [sys.executable, "-m", "dockyard_api.storage_initializer", f"--url={facade.url}",
               f"--namespace={stored.namespace}", f"--model={stored.model}", f"--dest={dest}"]  # fmt: skip
    env = {**os.environ, "DOCKYARD_DOWNLOAD_TOKEN": token_for(stored)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "3 files" in done.stderr
    check_tree(dest, stored)
    env["DOCKYARD_DOWNLOAD_TOKEN"] = token_for(stored, model_name="other")
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 1
    assert "HTTP 401" in refused.stderr
    env.pop("DOCKYARD_DOWNLOAD_TOKEN")
    empty = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert (empty.returncode, "DOCKYARD_DOWNLOAD_TOKEN" in empty.stderr) == (1, True)


# --- backend selection -------------------------------------------------------------------------------------------


def test_settings_choose_the_backend(tmp_path: Path) -> None:
    from dockyard_core.modelstore import ModelStore
    from dockyard_core.s3store import S3ModelStore
    from dockyard_operator.settings import OperatorSettings

    fs = ApiSettings(model_store=tmp_path / "store").open_model_store()
    assert type(fs) is ModelStore
    s3 = OperatorSettings(
        model_store=tmp_path / "spool",
        model_store_backend="s3",
        s3_endpoint="https://s3.eu-west-1.amazonaws.com",
        s3_bucket="acme-models",
        s3_prefix="/dockyard/",
        s3_secret_key="x" * 20,  # type: ignore[arg-type]
    ).open_model_store()
    assert isinstance(s3, S3ModelStore)
    assert (s3.bucket, s3.prefix, s3.key("models", "ns", "m")) == ("acme-models", "dockyard/", "dockyard/models/ns/m")
    with pytest.raises(ValueError, match="endpoint and a bucket"):
        ApiSettings(model_store=tmp_path, model_store_backend="s3").open_model_store()
